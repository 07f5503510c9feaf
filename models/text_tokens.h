#pragma once
// Text into training tokens with a model's tokenizer (models/tokenizer/tokenizer.h), in
// parallel: `strata train --text FILE` (one document) and `strata tokenize` (one document per
// file).
//
// Parallel, and the same ids. A document is cut into pieces of about `piece_bytes`, threads
// tokenize the pieces independently, and the ids are the pieces' ids in order. A cut goes only
//   1. just after a '\n' and before an ASCII letter or digit (never inside a UTF-8 character),
//      and
//   2. where the line before the cut and the line after it, tokenized separately, give the ids
//      they give tokenized together (checked at each cut, at most 16 KiB a side; a cut that
//      fails moves to the next candidate, and after 16 failures the rest of the document is one
//      piece).
// With the pre-tokenizers strata supports (GPT-2's, Llama 3's and Qwen2's regexes, Digits,
// ByteLevel without add_prefix_space) a '\n' followed by a letter or digit is always a
// pre-token boundary, BPE never merges across one, and the normalizers (NFC, NFKC, ...) never
// join a '\n' with what follows: the pieces' ids are exactly the whole text's
// (tests/models/test_text_tokens checks it against Tokenizer::encode of the whole text on the
// fixtures). Rule 2 catches tokenizers where a piece's start does matter — a prefix space added
// to every text (add_prefix_space, SentencePiece's Metaspace), an added token that spans the
// cut — as far as one line of context shows it. A document with no acceptable cut is tokenized
// whole, on one thread.
//
// Documents. Each document is tokenized on its own, without special tokens (no BOS: the
// post-processor's template is not applied); with `separator` (strata tokenize --eos-between:
// the tokenizer's eos id) that id goes between consecutive documents, not after the last, as
// llm.c's data scripts put GPT-2's <|endoftext|> between documents. Special tokens written in
// the text ("<|endoftext|>") become their ids, as in Hugging Face's tokenizers.
//
// Memory: files are read in batches of about 256 MiB of text (a larger file is a batch of its
// own), so the text in memory is about one batch; the ids of everything are kept (2 or 4 bytes
// a token in the result, 4 for the batch in flight).
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "models/io/token_file.h"
#include "models/tokenizer/tokenizer.h"

namespace strata::models {

// Where tokenizing stands, for a progress line.
struct TextTokensProgress {
  std::uint64_t bytes_done = 0;   // of the documents' text, tokenized
  std::uint64_t bytes_total = 0;  // of every document (their file sizes when tokenizing began)
  std::uint64_t tokens = 0;       // made so far (separators included)
  std::size_t documents = 0;
  std::size_t pieces = 0;  // pieces cut so far (documents read so far)
  int threads = 1;
  double seconds = 0;
  bool finished = false;
};

struct TextTokensOptions {
  int threads = 0;                         // 0: std::thread::hardware_concurrency()
  std::size_t piece_bytes = 1u << 20;      // the pieces' target size
  std::optional<std::int32_t> separator;   // an id between documents (eos)
  // Called on the calling thread about once a second while tokenizing, and once at the end
  // (finished = true). May be empty.
  std::function<void(const TextTokensProgress&)> progress;
};

// The cut points of `text` by the rules above: ascending positions in (0, text.size()), each
// starting a piece of about piece_bytes (> 0) or more.
std::vector<std::size_t> cut_points(const Tokenizer& tokenizer, std::string_view text,
                                    std::size_t piece_bytes);

// The files' text tokenized (each file one document; see above), as TokenData of format
// kTokenized: uint16 tokens for a vocabulary of at most 65,536 ids, uint32 above; path = the
// file names, joined by ", ". Throws strata::Error naming the file (and the bytes of the piece)
// for a missing or unreadable file and for text that is not UTF-8. The tokenizer is borrowed.
TokenData tokenize_files(const Tokenizer& tokenizer, const std::vector<std::string>& paths,
                         const TextTokensOptions& options = {});

// The tokenizer of a model path for training text: the folder's (models/tokenizer_files.h,
// has_tokenizer), loaded; nullopt when `model_path` is not a folder or holds no tokenizer (the
// text's bytes are then the tokens). A tokenizer that fails to load is a strata::Error saying
// so, with the loader's own message; one whose vocabulary (vocab_size()) is larger than
// `model_vocab_size` is a strata::Error naming both sizes.
std::optional<Tokenizer> training_tokenizer(const std::string& model_path, std::int64_t model_vocab_size);

}  // namespace strata::models
