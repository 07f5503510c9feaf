// Text in and out of a model folder (text_io.h).
#include "infer/text_io.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/error.h"

namespace strata::infer {
namespace {

namespace fs = std::filesystem;

// "eos_token_id" of a JSON file in the folder (an int or a list), if the file exists.
void add_eos_ids(const fs::path& file, std::vector<std::int32_t>& ids) {
  std::error_code ec;
  if (!fs::exists(file, ec)) return;
  std::ifstream in(file);
  std::stringstream text;
  text << in.rdbuf();
  nlohmann::json j = nlohmann::json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || !j.contains("eos_token_id")) return;
  auto add = [&](const nlohmann::json& v) {
    if (!v.is_number_integer()) {
      throw Error("\"eos_token_id\" must be an integer or a list of integers", file.string());
    }
    const auto id = v.get<std::int32_t>();
    if (std::find(ids.begin(), ids.end(), id) == ids.end()) ids.push_back(id);
  };
  const nlohmann::json& e = j["eos_token_id"];
  if (e.is_array()) {
    for (const nlohmann::json& v : e) add(v);
  } else if (!e.is_null()) {
    add(e);
  }
}

}  // namespace

TextCodec::TextCodec(models::Tokenizer tokenizer, std::vector<std::int32_t> stop_ids)
    : tokenizer_(std::move(tokenizer)), stop_ids_(std::move(stop_ids)) {}

std::unique_ptr<TextCodec> TextCodec::bytes() { return std::unique_ptr<TextCodec>(new TextCodec()); }

std::vector<std::int32_t> TextCodec::encode(const std::string& text, bool add_special) const {
  if (tokenizer_) return tokenizer_->encode(text, add_special);
  std::vector<std::int32_t> ids(text.size());
  for (std::size_t i = 0; i < text.size(); ++i) ids[i] = static_cast<unsigned char>(text[i]);
  return ids;
}

std::string TextCodec::decode(const std::vector<std::int32_t>& ids) const {
  if (tokenizer_) {
    // A model's vocabulary is often padded past its tokenizer's (Qwen2: 151,936 rows for 151,665
    // ids); a sampled id the tokenizer does not have is skipped, as transformers' decode does.
    std::vector<std::int32_t> known;
    known.reserve(ids.size());
    for (std::int32_t id : ids) {
      if (id >= 0 && id < tokenizer_->vocab_size() && tokenizer_->id_to_token(id)) known.push_back(id);
    }
    return tokenizer_->decode(known, /*skip_special=*/true);
  }
  std::string raw;
  for (std::int32_t id : ids) {
    if (id >= 0 && id < 256) raw.push_back(static_cast<char>(id));
  }
  return models::utf8_take_valid(raw, /*final=*/true);
}

std::unique_ptr<TextCodec> load_text_codec(const std::string& model_path) {
  std::error_code ec;
  const fs::path dir(model_path);
  if (!fs::is_directory(dir, ec)) return nullptr;
  const bool has = fs::exists(dir / "tokenizer.json", ec) ||
                   (fs::exists(dir / "vocab.json", ec) && fs::exists(dir / "merges.txt", ec));
  if (!has) return nullptr;
  models::Tokenizer tokenizer = models::Tokenizer::load(model_path);
  std::vector<std::int32_t> stop;
  if (const auto eos = tokenizer.eos_id()) stop.push_back(*eos);
  add_eos_ids(dir / "generation_config.json", stop);
  return std::make_unique<TextCodec>(std::move(tokenizer), std::move(stop));
}

std::vector<std::int32_t> generation_stop_ids(const TextCodec* codec, const std::vector<int>& model_stop_ids) {
  std::vector<std::int32_t> ids;
  if (codec != nullptr) ids = codec->stop_ids();
  for (int id : model_stop_ids) {
    if (std::find(ids.begin(), ids.end(), id) == ids.end()) ids.push_back(id);
  }
  return ids;
}

}  // namespace strata::infer
