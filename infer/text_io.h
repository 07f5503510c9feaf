#pragma once
// Text in and out of a model folder: its tokenizer (models/tokenizer/tokenizer.h) and the tokens
// that end a completion (the tokenizer's eos, config.json's and generation_config.json's
// "eos_token_id").
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "models/tokenizer/tokenizer.h"

namespace strata::infer {

class TextCodec {
 public:
  TextCodec(models::Tokenizer tokenizer, std::vector<std::int32_t> stop_ids);
  // The prompt's ids with the special tokens the tokenizer's template adds (Llama 3's
  // <|begin_of_text|>).
  std::vector<std::int32_t> encode(const std::string& text) const;
  // Generated ids as text, special tokens dropped.
  std::string decode(const std::vector<std::int32_t>& ids) const;
  const std::vector<std::int32_t>& stop_ids() const { return stop_ids_; }
  const models::Tokenizer& tokenizer() const { return tokenizer_; }

 private:
  models::Tokenizer tokenizer_;
  std::vector<std::int32_t> stop_ids_;
};

// The folder's tokenizer, or nullptr when `model_path` is not a folder or holds no tokenizer
// files (tokenizer.json, or vocab.json and merges.txt). Throws strata::Error for a tokenizer it
// cannot read.
std::unique_ptr<TextCodec> load_text_codec(const std::string& model_path);

}  // namespace strata::infer
