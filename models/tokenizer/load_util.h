#pragma once
// Helpers of the tokenizer.json loader (tokenizer_load.cpp, load_pipeline.cpp): errors that
// name the file and key, typed access to JSON values. Internal to models/tokenizer/.
#include <cerrno>
#include <cstdint>
#include <fstream>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "models/tokenizer/tokenizer_impl.h"

namespace strata::models::tok {

using Json = nlohmann::json;

// GPT-2's pre-tokenizer regex, which ByteLevel(use_regex=true) applies.
constexpr const char* kGpt2Regex =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

// Token ids index arrays sized by the largest id (id_to_token, id_bytes), so an id is bounded:
// 2^22 is 16 times the largest vocabulary of a released model (Gemma 3's 262,144), and keeps a
// file's worst case to a few hundred MB instead of 2^31 strings (and id + 1 from overflowing).
constexpr std::int64_t kMaxTokenIds = std::int64_t{1} << 22;

constexpr const char* kFileHint =
    "the file is not a tokenizer that Hugging Face `tokenizers` wrote; download the model's "
    "tokenizer.json again";
constexpr const char* kOtherModelHint =
    "strata reads BPE tokenizers (byte-level: GPT-2, Llama 3, Qwen2; SentencePiece-style: Llama 2, "
    "Mistral); for another, tokenize elsewhere and pass token ids (`strata infer --prompts` with "
    "\"ids\")";

inline std::string clip(std::string_view text, std::size_t max_chars = 60) {
  if (text.size() <= max_chars) return std::string(text);
  return fmt::format("{}... ({} bytes)", text.substr(0, max_chars), text.size());
}

// Where an error points: the file and the JSON key inside it.
struct Src {
  std::string path;
  std::string at(std::string_view key) const { return fmt::format("{}, key \"{}\"", path, key); }
  [[noreturn]] void fail(std::string_view key, std::string what,
                         std::string hint = kFileHint) const {
    throw Error(std::move(what), key.empty() ? path : at(key), std::move(hint));
  }
};

inline std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    const int e = errno;
    throw Error(fmt::format("cannot open the file: {}", errno_text(e)), path,
                "check the path and its permissions");
  }
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) throw Error("reading the file failed", path, "check the disk");
  return std::move(ss).str();
}

inline Json parse_json(const Src& src, const std::string& text) {
  try {
    return Json::parse(text);
  } catch (const Json::exception& e) {  // parse_error, or out_of_range for a number like 1e999
    src.fail("", fmt::format("not valid JSON: {}", e.what()));
  }
}

// j[key] with its type checked; `key` names it in errors (a dotted path from the root).
inline const Json& need(const Src& src, const Json& j, const char* name, std::string_view key) {
  const auto it = j.find(name);
  if (it == j.end()) src.fail(key, "the key is missing");
  return *it;
}

inline std::string need_string(const Src& src, const Json& j, std::string_view key) {
  if (!j.is_string()) src.fail(key, fmt::format("expected a string, found a JSON {}", j.type_name()));
  return j.get<std::string>();
}

inline bool opt_bool(const Src& src, const Json& obj, const char* name, std::string_view key,
              bool fallback) {
  const auto it = obj.find(name);
  if (it == obj.end() || it->is_null()) return fallback;
  if (!it->is_boolean())
    src.fail(key, fmt::format("expected true or false, found a JSON {}", it->type_name()));
  return it->get<bool>();
}

inline std::int32_t need_id(const Src& src, const Json& j, std::string_view key) {
  if (!j.is_number_integer() || j.get<std::int64_t>() < 0 || j.get<std::int64_t>() >= kMaxTokenIds)
    src.fail(key, fmt::format("expected a token id (an integer in [0, 2^22)), found {}",
                              clip(j.dump())));
  return static_cast<std::int32_t>(j.get<std::int64_t>());
}

inline std::string type_of(const Src& src, const Json& j, std::string_view key) {
  if (!j.is_object()) src.fail(key, fmt::format("expected an object, found a JSON {}", j.type_name()));
  return need_string(src, need(src, j, "type", fmt::format("{}.type", key)),
                     fmt::format("{}.type", key));
}

// The sections of tokenizer.json other than the model and the added tokens (load_pipeline.cpp).
void read_normalizer(const Src& src, const Json& n, std::string_view key,
                     std::vector<NormalizerStep>& steps);
void read_pre_tokenizer(const Src& src, const Json& p, std::string_view key,
                        std::vector<PreTokenizerStep>& steps);
// `templates` counts the TemplateProcessings seen (at most one is supported).
void read_post_processor(const Src& src, const Json& p, std::string_view key,
                         Tokenizer::Impl& impl, int& templates);
// `seen` counts the decoders read (a chain is ByteLevel or SentencePiece-style, not both).
void read_decoder(const Src& src, const Json& d, std::string_view key, Tokenizer::Impl& impl,
                  int& seen);

}  // namespace strata::models::tok
