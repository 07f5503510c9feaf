// Loading a tokenizer: tokenizer.json (every section checked, anything unsupported refused by
// name) or GPT-2's vocab.json + merges.txt, plus tokenizer_config.json's bos/eos tokens.
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "models/tokenizer/tokenizer_impl.h"

namespace strata::models {
namespace {

using Json = nlohmann::json;
namespace fs = std::filesystem;

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
constexpr const char* kByteLevelOnly = "only byte-level BPE tokenizers are supported";
constexpr const char* kSentencePieceHint =
    "this is a SentencePiece-style tokenizer (Llama 2, Mistral including v0.3), which strata does "
    "not implement: tokenize elsewhere and pass token ids (`strata infer --prompts` with \"ids\")";

std::string clip(std::string_view text, std::size_t max_chars = 60) {
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

std::string read_file(const std::string& path) {
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

Json parse_json(const Src& src, const std::string& text) {
  try {
    return Json::parse(text);
  } catch (const Json::exception& e) {  // parse_error, or out_of_range for a number like 1e999
    src.fail("", fmt::format("not valid JSON: {}", e.what()));
  }
}

// j[key] with its type checked; `key` names it in errors (a dotted path from the root).
const Json& need(const Src& src, const Json& j, const char* name, std::string_view key) {
  const auto it = j.find(name);
  if (it == j.end()) src.fail(key, "the key is missing");
  return *it;
}

std::string need_string(const Src& src, const Json& j, std::string_view key) {
  if (!j.is_string()) src.fail(key, fmt::format("expected a string, found a JSON {}", j.type_name()));
  return j.get<std::string>();
}

bool opt_bool(const Src& src, const Json& obj, const char* name, std::string_view key,
              bool fallback) {
  const auto it = obj.find(name);
  if (it == obj.end() || it->is_null()) return fallback;
  if (!it->is_boolean())
    src.fail(key, fmt::format("expected true or false, found a JSON {}", it->type_name()));
  return it->get<bool>();
}

std::int32_t need_id(const Src& src, const Json& j, std::string_view key) {
  if (!j.is_number_integer() || j.get<std::int64_t>() < 0 || j.get<std::int64_t>() >= kMaxTokenIds)
    src.fail(key, fmt::format("expected a token id (an integer in [0, 2^22)), found {}",
                              clip(j.dump())));
  return static_cast<std::int32_t>(j.get<std::int64_t>());
}

std::string type_of(const Src& src, const Json& j, std::string_view key) {
  if (!j.is_object()) src.fail(key, fmt::format("expected an object, found a JSON {}", j.type_name()));
  return need_string(src, need(src, j, "type", fmt::format("{}.type", key)),
                     fmt::format("{}.type", key));
}

// ---- model ----------------------------------------------------------------------------------

void add_merge(const Src& src, tok::BpeModel& bpe, std::string_view a, std::string_view b,
               std::int32_t rank, std::string_view key) {
  const auto ia = bpe.vocab.find(a), ib = bpe.vocab.find(b);
  const auto iab = bpe.vocab.find(std::string(a) + std::string(b));
  if (ia == bpe.vocab.end() || ib == bpe.vocab.end() || iab == bpe.vocab.end())
    src.fail(key, fmt::format("the merge \"{} {}\" uses or makes a token missing from the "
                              "vocabulary", clip(a), clip(b)));
  const std::uint64_t k = (static_cast<std::uint64_t>(ia->second) << 32) |
                          static_cast<std::uint32_t>(ib->second);
  bpe.merges.insert_or_assign(k, std::make_pair(rank, iab->second));  // HF: a later one wins
}

void read_vocab(const Src& src, const Json& vocab, std::string_view key, tok::BpeModel& bpe) {
  if (!vocab.is_object())
    src.fail(key, fmt::format("expected an object of token -> id, found a JSON {}", vocab.type_name()));
  bpe.vocab.reserve(vocab.size());
  for (const auto& [token, id_json] : vocab.items()) {
    const std::string k = key.empty() ? clip(token) : fmt::format("{}.{}", key, clip(token));
    const std::int32_t id = need_id(src, id_json, k);
    bpe.vocab.emplace(token, id);
    if (static_cast<std::size_t>(id) >= bpe.id_to_token.size()) bpe.id_to_token.resize(id + 1);
    if (!bpe.id_to_token[id].empty())
      src.fail(k, fmt::format("the id {} is given to two tokens, \"{}\" and \"{}\"", id,
                              clip(bpe.id_to_token[id]), clip(token)));
    bpe.id_to_token[id] = token;
  }
}

void read_model(const Src& src, const Json& model, tok::BpeModel& bpe) {
  std::string type;
  if (model.is_object() && !model.contains("type") && model.contains("merges")) {
    type = "BPE";  // files of older `tokenizers` leave the type out
  } else {
    type = type_of(src, model, "model");
  }
  if (type != "BPE")
    src.fail("model.type", fmt::format("the tokenizer's model is {}: {}", clip(type), kByteLevelOnly),
             type == "Unigram" ? kSentencePieceHint
                               : "use a model whose tokenizer.json has \"model\": {\"type\": \"BPE\"}");
  if (opt_bool(src, model, "byte_fallback", "model.byte_fallback", false))
    src.fail("model.byte_fallback", fmt::format("BPE with byte_fallback: {}", kByteLevelOnly),
             kSentencePieceHint);
  if (const auto it = model.find("dropout");
      it != model.end() && !it->is_null() && !(it->is_number() && it->get<double>() == 0.0))
    src.fail("model.dropout", "BPE dropout is random and strata encodes deterministically",
             "set \"dropout\" to null");
  for (const char* name : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    const auto it = model.find(name);
    if (it != model.end() && !it->is_null() && !(it->is_string() && it->get<std::string>().empty()))
      src.fail(fmt::format("model.{}", name),
               fmt::format("BPE with a {}: {}", name, kByteLevelOnly), "set it to null");
  }

  read_vocab(src, need(src, model, "vocab", "model.vocab"), "model.vocab", bpe);
  const Json& merges = need(src, model, "merges", "model.merges");
  if (!merges.is_array()) src.fail("model.merges", "expected an array of merges");
  bpe.merges.reserve(merges.size());
  for (std::size_t i = 0; i < merges.size(); ++i) {
    const std::string key = fmt::format("model.merges[{}]", i);
    const Json& m = merges[i];
    const auto rank = static_cast<std::int32_t>(i);
    if (m.is_string()) {  // "a b"
      const std::string& s = m.get_ref<const std::string&>();
      const auto space = s.find(' ');
      if (space == std::string::npos || s.find(' ', space + 1) != std::string::npos)
        src.fail(key, fmt::format("the merge \"{}\" is not two tokens split by one space", clip(s)));
      add_merge(src, bpe, std::string_view(s).substr(0, space),
                std::string_view(s).substr(space + 1), rank, key);
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {  // [a, b]
      add_merge(src, bpe, m[0].get_ref<const std::string&>(), m[1].get_ref<const std::string&>(),
                rank, key);
    } else {
      src.fail(key, fmt::format("a merge is \"a b\" or [\"a\", \"b\"], found {}", clip(m.dump())));
    }
  }
  bpe.ignore_merges = opt_bool(src, model, "ignore_merges", "model.ignore_merges", false);
  bpe.fuse_unk = opt_bool(src, model, "fuse_unk", "model.fuse_unk", false);
  if (const auto it = model.find("unk_token"); it != model.end() && !it->is_null()) {
    const std::string unk = need_string(src, *it, "model.unk_token");
    const auto v = bpe.vocab.find(unk);
    if (v == bpe.vocab.end())
      src.fail("model.unk_token", fmt::format("the unk_token \"{}\" is not in the vocabulary", clip(unk)));
    bpe.unk_id = v->second;
  }
}

// ---- added tokens ---------------------------------------------------------------------------

void read_added_tokens(const Src& src, const Json& list, Tokenizer::Impl& impl) {
  if (list.is_null()) return;
  if (!list.is_array()) src.fail("added_tokens", "expected an array");
  for (std::size_t i = 0; i < list.size(); ++i) {
    const std::string key = fmt::format("added_tokens[{}]", i);
    const Json& t = list[i];
    if (!t.is_object()) src.fail(key, "expected an object");
    AddedToken a;
    a.id = need_id(src, need(src, t, "id", key + ".id"), key + ".id");
    a.content = need_string(src, need(src, t, "content", key + ".content"), key + ".content");
    if (a.content.empty()) src.fail(key + ".content", "an added token cannot be empty");
    if (tok::utf8_invalid_at(a.content)) src.fail(key + ".content", "not valid UTF-8");
    a.special = opt_bool(src, t, "special", key + ".special", false);
    a.lstrip = opt_bool(src, t, "lstrip", key + ".lstrip", false);
    a.rstrip = opt_bool(src, t, "rstrip", key + ".rstrip", false);
    a.single_word = opt_bool(src, t, "single_word", key + ".single_word", false);
    a.normalized = opt_bool(src, t, "normalized", key + ".normalized", !a.special);
    for (const auto& other : impl.added)
      if (other.content == a.content || other.id == a.id)
        src.fail(key, fmt::format("the added token \"{}\" (id {}) repeats the content or id of "
                                  "\"{}\" (id {})", clip(a.content), a.id, clip(other.content),
                                  other.id));
    impl.added.push_back(std::move(a));
  }
}

// ---- normalizer, pre-tokenizer, post-processor, decoder -------------------------------------

void read_normalizer(const Src& src, const Json& n, std::string_view key, Tokenizer::Impl& impl) {
  if (n.is_null()) return;
  const std::string type = type_of(src, n, key);
  const std::string tkey = fmt::format("{}.type", key);
  if (type == "Sequence") {
    const Json& list = need(src, n, "normalizers", fmt::format("{}.normalizers", key));
    if (!list.is_array()) src.fail(fmt::format("{}.normalizers", key), "expected an array");
    for (std::size_t i = 0; i < list.size(); ++i)
      read_normalizer(src, list[i], fmt::format("{}.normalizers[{}]", key, i), impl);
  } else if (type == "NFC") {
    impl.normalizers.push_back(tok::NormalForm::nfc);
  } else if (type == "NFD") {
    impl.normalizers.push_back(tok::NormalForm::nfd);
  } else if (type == "NFKC") {
    impl.normalizers.push_back(tok::NormalForm::nfkc);
  } else if (type == "NFKD") {
    impl.normalizers.push_back(tok::NormalForm::nfkd);
  } else {
    const bool sp = type == "Prepend" || type == "Replace";  // Llama 2's "▁" handling
    src.fail(tkey, fmt::format("the normalizer {} is not supported (strata applies NFC, NFD, NFKC "
                               "and NFKD): {}", clip(type), kByteLevelOnly),
             sp ? kSentencePieceHint : "use a byte-level BPE tokenizer (GPT-2, Llama 3, Qwen2)");
  }
}

tok::SplitBehavior read_behavior(const Src& src, const Json& j, std::string_view key) {
  const std::string b = need_string(src, j, key);
  if (b == "Isolated") return tok::SplitBehavior::isolated;
  if (b == "Removed") return tok::SplitBehavior::removed;
  if (b == "MergedWithPrevious") return tok::SplitBehavior::merged_with_previous;
  if (b == "MergedWithNext") return tok::SplitBehavior::merged_with_next;
  if (b == "Contiguous") return tok::SplitBehavior::contiguous;
  src.fail(key, fmt::format("unknown split behavior \"{}\"", clip(b)));
}

void read_pre_tokenizer(const Src& src, const Json& p, std::string_view key, Tokenizer::Impl& impl) {
  const std::string type = type_of(src, p, key);
  const std::string tkey = fmt::format("{}.type", key);
  tok::PreTokenizerStep step;
  if (type == "Sequence") {
    const std::string lkey = fmt::format("{}.pretokenizers", key);
    const Json& list = need(src, p, "pretokenizers", lkey);
    if (!list.is_array()) src.fail(lkey, "expected an array");
    for (std::size_t i = 0; i < list.size(); ++i)
      read_pre_tokenizer(src, list[i], fmt::format("{}[{}]", lkey, i), impl);
    return;
  } else if (type == "ByteLevel") {
    step.kind = tok::PreTokenizerStep::Kind::byte_level;
    step.add_prefix_space = opt_bool(src, p, "add_prefix_space", fmt::format("{}.add_prefix_space", key), true);
    if (opt_bool(src, p, "use_regex", fmt::format("{}.use_regex", key), true))
      step.regex = std::make_shared<tok::Regex>(kGpt2Regex, false, src.at(key));
  } else if (type == "Split") {
    const std::string pkey = fmt::format("{}.pattern", key);
    const Json& pattern = need(src, p, "pattern", pkey);
    if (pattern.is_object() && pattern.contains("Regex")) {
      step.regex = std::make_shared<tok::Regex>(
          need_string(src, pattern["Regex"], pkey + ".Regex"), false, src.at(pkey + ".Regex"));
    } else if (pattern.is_object() && pattern.contains("String")) {
      step.regex = std::make_shared<tok::Regex>(
          need_string(src, pattern["String"], pkey + ".String"), true, src.at(pkey + ".String"));
    } else {
      src.fail(pkey, "expected {\"Regex\": ...} or {\"String\": ...}");
    }
    step.behavior = read_behavior(src, need(src, p, "behavior", fmt::format("{}.behavior", key)),
                                  fmt::format("{}.behavior", key));
    if (opt_bool(src, p, "invert", fmt::format("{}.invert", key), false))
      src.fail(fmt::format("{}.invert", key), "Split with invert: true is not supported",
               "use a byte-level BPE tokenizer (GPT-2, Llama 3, Qwen2)");
  } else if (type == "Digits") {
    step.kind = tok::PreTokenizerStep::Kind::digits;
    step.individual_digits =
        opt_bool(src, p, "individual_digits", fmt::format("{}.individual_digits", key), false);
  } else {
    src.fail(tkey, fmt::format("the pre-tokenizer {} is not supported: {}", clip(type), kByteLevelOnly),
             type == "Metaspace" ? kSentencePieceHint
                                 : "use a byte-level BPE tokenizer (GPT-2, Llama 3, Qwen2)");
  }
  if (!impl.pre_tokenizer.empty() &&
      impl.pre_tokenizer.back().kind == tok::PreTokenizerStep::Kind::byte_level)
    src.fail(tkey, "a pre-tokenizer after ByteLevel is not supported (ByteLevel must come last)",
             "use a byte-level BPE tokenizer (GPT-2, Llama 3, Qwen2)");
  impl.pre_tokenizer.push_back(std::move(step));
}

std::int32_t id_of(const Tokenizer::Impl& impl, std::string_view token) {
  for (const auto& a : impl.added)
    if (a.content == token) return a.id;
  const auto it = impl.bpe.vocab.find(token);
  return it == impl.bpe.vocab.end() ? -1 : it->second;
}

void read_template(const Src& src, const Json& p, std::string_view key, Tokenizer::Impl& impl) {
  const std::string skey = fmt::format("{}.single", key);
  const Json& single = need(src, p, "single", skey);
  if (!single.is_array()) src.fail(skey, "expected an array");
  const std::string stkey = fmt::format("{}.special_tokens", key);
  const auto st = p.find("special_tokens");
  bool seen_a = false;
  for (std::size_t i = 0; i < single.size(); ++i) {
    const std::string ikey = fmt::format("{}[{}]", skey, i);
    const Json& item = single[i];
    if (item.is_object() && item.contains("Sequence")) {
      if (seen_a) src.fail(ikey, "the template holds the sequence twice");
      seen_a = true;
    } else if (item.is_object() && item.contains("SpecialToken")) {
      const std::string name =
          need_string(src, need(src, item["SpecialToken"], "id", ikey + ".SpecialToken.id"),
                      ikey + ".SpecialToken.id");
      std::vector<std::int32_t> ids;
      if (st != p.end() && st->is_object() && st->contains(name)) {
        const std::string nkey = fmt::format("{}.{}.ids", stkey, clip(name));
        const Json& list = need(src, (*st)[name], "ids", nkey);
        if (!list.is_array()) src.fail(nkey, "expected an array of ids");
        for (const auto& id : list) ids.push_back(need_id(src, id, nkey));
      } else {
        src.fail(stkey, fmt::format("the template's special token \"{}\" is not listed here",
                                    clip(name)));
      }
      auto& dest = seen_a ? impl.template_suffix : impl.template_prefix;
      dest.insert(dest.end(), ids.begin(), ids.end());
    } else {
      src.fail(ikey, "expected {\"SpecialToken\": ...} or {\"Sequence\": ...}");
    }
  }
  if (!seen_a) src.fail(skey, "the template does not hold the sequence (\"A\")");
}

void read_post_processor(const Src& src, const Json& p, std::string_view key, Tokenizer::Impl& impl,
                         int& templates) {
  if (p.is_null()) return;
  const std::string type = type_of(src, p, key);
  if (type == "Sequence") {
    const std::string lkey = fmt::format("{}.processors", key);
    const Json& list = need(src, p, "processors", lkey);
    if (!list.is_array()) src.fail(lkey, "expected an array");
    for (std::size_t i = 0; i < list.size(); ++i)
      read_post_processor(src, list[i], fmt::format("{}[{}]", lkey, i), impl, templates);
  } else if (type == "ByteLevel") {
    // Only adjusts offsets, which strata does not report.
  } else if (type == "TemplateProcessing") {
    if (++templates > 1)
      src.fail(fmt::format("{}.type", key), "more than one TemplateProcessing is not supported");
    read_template(src, p, key, impl);
  } else {
    src.fail(fmt::format("{}.type", key),
             fmt::format("the post-processor {} is not supported (strata reads ByteLevel and "
                         "TemplateProcessing)", clip(type)),
             "use a byte-level BPE tokenizer (GPT-2, Llama 3, Qwen2)");
  }
}

void read_decoder(const Src& src, const Json& d, std::string_view key) {
  const std::string type = type_of(src, d, key);
  if (type == "ByteLevel") return;
  if (type == "Sequence") {
    const std::string lkey = fmt::format("{}.decoders", key);
    const Json& list = need(src, d, "decoders", lkey);
    if (!list.is_array()) src.fail(lkey, "expected an array");
    for (std::size_t i = 0; i < list.size(); ++i)
      read_decoder(src, list[i], fmt::format("{}[{}]", lkey, i));
    return;
  }
  const bool sp = type == "ByteFallback" || type == "Metaspace" || type == "Fuse" ||
                  type == "Strip" || type == "Replace";
  src.fail(fmt::format("{}.type", key),
           fmt::format("the decoder {} is not supported (strata decodes ByteLevel): {}", clip(type),
                       kByteLevelOnly),
           sp ? kSentencePieceHint : "use a byte-level BPE tokenizer (GPT-2, Llama 3, Qwen2)");
}

void load_tokenizer_json(const std::string& path, Tokenizer::Impl& impl) {
  const Src src{path};
  const Json j = parse_json(src, read_file(path));
  if (!j.is_object()) src.fail("", fmt::format("expected a JSON object, found a JSON {}", j.type_name()));
  read_model(src, need(src, j, "model", "model"), impl.bpe);
  // SentencePiece signs anywhere refuse the file first, with the hint that says so.
  read_normalizer(src, j.value("normalizer", Json()), "normalizer", impl);
  const Json& pre = need(src, j, "pre_tokenizer", "pre_tokenizer");
  if (pre.is_null())
    src.fail("pre_tokenizer", fmt::format("no pre-tokenizer, so no ByteLevel: {}", kByteLevelOnly),
             "use a byte-level BPE tokenizer (GPT-2, Llama 3, Qwen2)");
  read_pre_tokenizer(src, pre, "pre_tokenizer", impl);
  if (impl.pre_tokenizer.back().kind != tok::PreTokenizerStep::Kind::byte_level)
    src.fail("pre_tokenizer", fmt::format("the pre-tokenizer has no ByteLevel step: {}", kByteLevelOnly),
             "use a byte-level BPE tokenizer (GPT-2, Llama 3, Qwen2)");
  const Json& dec = need(src, j, "decoder", "decoder");
  if (dec.is_null())
    src.fail("decoder", "no decoder: strata decodes byte-level tokens only (decoder ByteLevel)",
             kFileHint);
  read_decoder(src, dec, "decoder");
  read_added_tokens(src, j.value("added_tokens", Json()), impl);
  int templates = 0;
  read_post_processor(src, j.value("post_processor", Json()), "post_processor", impl, templates);
}

// GPT-2's files: vocab.json and merges.txt ("#version: 0.2", then "a b" per line), read as a
// ByteLevel(add_prefix_space=false) tokenizer with <|endoftext|> special, as GPT-2 ships it.
void load_gpt2_files(const std::string& vocab_path, const std::string& merges_path,
                     Tokenizer::Impl& impl) {
  const Src vsrc{vocab_path};
  read_vocab(vsrc, parse_json(vsrc, read_file(vocab_path)), "", impl.bpe);
  const Src msrc{merges_path};
  std::istringstream lines(read_file(merges_path));
  std::string line;
  std::int32_t rank = 0;
  for (int number = 1; std::getline(lines, line); ++number) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty() || line.starts_with("#version")) continue;
    const std::string key = fmt::format("line {}", number);
    const auto space = line.find(' ');
    if (space == std::string::npos || line.find(' ', space + 1) != std::string::npos)
      throw Error(fmt::format("the merge \"{}\" is not two tokens split by one space", clip(line)),
                  fmt::format("{}, {}", merges_path, key), kFileHint);
    add_merge(msrc, impl.bpe, std::string_view(line).substr(0, space),
              std::string_view(line).substr(space + 1), rank++, key);
  }
  tok::PreTokenizerStep step;
  step.kind = tok::PreTokenizerStep::Kind::byte_level;
  step.regex = std::make_shared<tok::Regex>(kGpt2Regex, false, vocab_path);
  impl.pre_tokenizer.push_back(std::move(step));
  if (const auto it = impl.bpe.vocab.find("<|endoftext|>"); it != impl.bpe.vocab.end())
    impl.added.push_back({it->second, "<|endoftext|>", true, false, false, false, false});
}

// tokenizer_config.json's "bos_token" / "eos_token": a string, {"content": ...} or null.
std::optional<std::int32_t> config_token(const Src& src, const Json& cfg, const char* name,
                                         const Tokenizer::Impl& impl) {
  const auto it = cfg.find(name);
  if (it == cfg.end() || it->is_null()) return std::nullopt;
  const Json& v = it->is_object() ? need(src, *it, "content", fmt::format("{}.content", name)) : *it;
  const std::string token = need_string(src, v, name);
  const std::int32_t id = id_of(impl, token);
  if (id < 0) src.fail(name, fmt::format("the token \"{}\" is not in the tokenizer", clip(token)));
  return id;
}

bool is_file(const fs::path& p) {
  std::error_code ec;
  return fs::is_regular_file(p, ec);
}

}  // namespace

std::unique_ptr<Tokenizer::Impl> load_tokenizer_impl(const std::string& path) {
  auto impl = std::make_unique<Tokenizer::Impl>();
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);
  fs::path dir;
  if (fs::is_directory(st)) {
    dir = path;
    if (is_file(dir / "tokenizer.json")) {
      impl->source = (dir / "tokenizer.json").string();
      load_tokenizer_json(impl->source, *impl);
    } else if (is_file(dir / "vocab.json") && is_file(dir / "merges.txt")) {
      impl->source = (dir / "vocab.json").string();
      load_gpt2_files(impl->source, (dir / "merges.txt").string(), *impl);
    } else {
      throw Error("the folder holds no tokenizer: neither tokenizer.json nor vocab.json + merges.txt",
                  path, "download the model's tokenizer.json into the folder, or give its path");
    }
  } else if (fs::is_regular_file(st)) {
    dir = fs::path(path).parent_path();
    impl->source = path;
    load_tokenizer_json(path, *impl);
  } else {
    throw Error(fs::exists(st) ? "not a file or folder" : "no such file or folder", path,
                "give a model folder or the path of its tokenizer.json");
  }

  // Ids: the vocabulary's, then the added tokens' (which may reuse or extend it).
  for (std::size_t i = 0; i < impl->added.size(); ++i) {
    const AddedToken& a = impl->added[i];
    auto& names = impl->bpe.id_to_token;
    if (static_cast<std::size_t>(a.id) >= names.size()) names.resize(a.id + 1);
    names[a.id] = a.content;
    impl->added_by_id[a.id] = i;
    impl->added_by_first_byte[static_cast<unsigned char>(a.content[0])].push_back(i);
  }
  for (auto& list : impl->added_by_first_byte)
    std::stable_sort(list.begin(), list.end(), [&](std::size_t x, std::size_t y) {
      return impl->added[x].content.size() > impl->added[y].content.size();
    });
  impl->vocab_size = static_cast<int>(impl->bpe.id_to_token.size());
  impl->id_bytes.resize(impl->bpe.id_to_token.size());
  for (std::size_t id = 0; id < impl->id_bytes.size(); ++id) {
    const std::string& t = impl->bpe.id_to_token[id];
    auto bytes = tok::byte_level_decode(t);
    impl->id_bytes[id] = bytes ? std::move(*bytes) : t;
  }

  for (const auto* ids : {&impl->template_prefix, &impl->template_suffix})
    for (const std::int32_t id : *ids)
      if (id >= impl->vocab_size || impl->bpe.id_to_token[id].empty())
        throw Error(fmt::format("the TemplateProcessing's special token id {} is not in the "
                                "vocabulary", id),
                    fmt::format("{}, key \"post_processor\"", impl->source), kFileHint);

  const fs::path cfg_path = dir / "tokenizer_config.json";
  if (is_file(cfg_path)) {
    const Src src{cfg_path.string()};
    const Json cfg = parse_json(src, read_file(src.path));
    if (cfg.is_object()) {
      impl->bos = config_token(src, cfg, "bos_token", *impl);
      impl->eos = config_token(src, cfg, "eos_token", *impl);
    }
  }
  if (!impl->bos && !impl->template_prefix.empty() && impl->added_by_id.count(impl->template_prefix[0]))
    impl->bos = impl->template_prefix[0];
  if (!impl->eos)
    for (const char* name : {"<|end_of_text|>", "<|endoftext|>", "</s>"})
      for (const auto& a : impl->added)
        if (!impl->eos && a.content == name) impl->eos = a.id;
  return impl;
}

}  // namespace strata::models
