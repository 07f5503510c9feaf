#pragma once
// Text in and out of a model folder: its tokenizer (models/tokenizer/tokenizer.h) and the tokens
// that end a completion (the tokenizer's eos, config.json's and generation_config.json's
// "eos_token_id").
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "models/tokenizer/tokenizer.h"

namespace strata::infer {

class TextCodec {
 public:
  TextCodec(models::Tokenizer tokenizer, std::vector<std::int32_t> stop_ids);
  // A model with no tokenizer, trained on text's bytes (`strata train --text` with a preset or a
  // folder without one): a byte is its token, ids 0..255.
  static std::unique_ptr<TextCodec> bytes();

  // The prompt's ids with the special tokens the tokenizer's template adds (Llama 3's
  // <|begin_of_text|>) unless add_special is false (a chat template's text already holds them);
  // the bytes themselves without a tokenizer.
  std::vector<std::int32_t> encode(const std::string& text, bool add_special = true) const;
  const models::Tokenizer* tokenizer() const { return tokenizer_ ? &*tokenizer_ : nullptr; }
  // Generated ids as text, special tokens dropped, ids the tokenizer does not have (a padded
  // vocabulary's) skipped (without a tokenizer: ids 0..255 as bytes, the others dropped, each
  // invalid UTF-8 sequence replaced by U+FFFD, as Rust's from_utf8_lossy).
  std::string decode(const std::vector<std::int32_t>& ids) const;
  const std::vector<std::int32_t>& stop_ids() const { return stop_ids_; }

 private:
  TextCodec() = default;
  std::optional<models::Tokenizer> tokenizer_;  // nullopt: bytes
  std::vector<std::int32_t> stop_ids_;
};

// The folder's tokenizer, or nullptr when `model_path` is not a folder or holds no tokenizer
// files (tokenizer.json, or vocab.json and merges.txt). Throws strata::Error for a tokenizer it
// cannot read.
std::unique_ptr<TextCodec> load_text_codec(const std::string& model_path);

// The tokens that end a completion: the codec's (tokenizer and generation_config.json), then the
// model config's that it lacks. `codec` may be null.
std::vector<std::int32_t> generation_stop_ids(const TextCodec* codec, const std::vector<int>& model_stop_ids);

}  // namespace strata::infer
