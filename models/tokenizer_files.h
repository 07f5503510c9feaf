#pragma once
// The files that go with a model's weights so that the saved model can be served: the
// tokenizer's, and generation_config.json (its eos ids stop generation in `strata infer`). A
// Hugging Face model folder holds them beside config.json and the safetensors; `strata train
// --save` and `strata convert` write them beside the weights they write, byte for byte, when
// the --model folder had them. A training checkpoint keeps a copy of each (read once, when the
// run starts), listed in its manifest, so that `strata convert` needs nothing but the
// checkpoint.
//
// Which files: kTokenizerFileNames, those present. Only plain files directly in the folder.
#include <array>
#include <string>
#include <string_view>
#include <vector>

namespace strata::models {

inline constexpr std::array<const char*, 8> kTokenizerFileNames = {
    "tokenizer.json",          // HF tokenizers' one file (what strata loads first)
    "vocab.json",              // GPT-2's older pair, with merges.txt
    "merges.txt",
    "tokenizer.model",         // SentencePiece's model (transformers' slow tokenizers)
    "tokenizer_config.json",   // bos_token, eos_token, chat template
    "chat_template.jinja",     // the chat template, where transformers 4.50+ saves it (strata serve)
    "special_tokens_map.json",
    "generation_config.json",  // eos_token_id(s), sampling defaults
};

// One file: its name (no folder) and its bytes.
struct ModelFile {
  std::string name;
  std::string bytes;
};

bool is_tokenizer_file_name(std::string_view name);

// Whether `model_path` is a folder holding a tokenizer strata's models::Tokenizer loads:
// tokenizer.json, or GPT-2's vocab.json + merges.txt. False for a config.json path or anything
// that is not a folder.
bool has_tokenizer(const std::string& model_path);

// The files of kTokenizerFileNames present in the folder `model_path`, read whole, in that
// order; none when `model_path` is not a folder. Throws strata::Error naming a file that is
// there but cannot be read (or is not a regular file).
std::vector<ModelFile> read_tokenizer_files(const std::string& model_path);

// Writes each file into the folder `dir` (which must exist), atomically (a temporary file,
// fsynced, renamed). Throws strata::Error naming the file (ENOSPC included). A name that is not
// one of kTokenizerFileNames is a programming mistake (asserted).
void write_tokenizer_files(const std::string& dir, const std::vector<ModelFile>& files);

// For a weights path as models::write_hf_model takes it, before the weights are written: a
// folder gets the files (created if absent), so that config.json, which write_hf_model writes
// last, still marks a complete folder; a path ending in ".safetensors" (one file, no folder)
// gets none. Returns whether the files were written (false too when `files` is empty).
bool write_tokenizer_files_for_weights(const std::string& weights_path, const std::vector<ModelFile>& files);

// The names of `files`, joined by ", " (for messages); "none" when empty.
std::string file_names_text(const std::vector<ModelFile>& files);

}  // namespace strata::models
