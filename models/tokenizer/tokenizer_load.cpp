// Loading a tokenizer: tokenizer.json (every section checked, anything unsupported refused by
// name) or GPT-2's vocab.json + merges.txt, plus tokenizer_config.json's bos/eos tokens.
#include <sys/stat.h>

#include <algorithm>
#include <filesystem>
#include <limits>
#include <unordered_set>

#include "models/tokenizer/load_util.h"

namespace strata::models {
namespace {

using namespace tok;  // NOLINT: the loader's helpers (load_util.h)
namespace fs = std::filesystem;

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
    src.fail("model.type", fmt::format("the tokenizer's model is {}: only BPE tokenizers are "
                                       "supported", clip(type)),
             kOtherModelHint);
  bpe.byte_fallback = opt_bool(src, model, "byte_fallback", "model.byte_fallback", false);
  if (const auto it = model.find("dropout");
      it != model.end() && !it->is_null() && !(it->is_number() && it->get<double>() == 0.0))
    src.fail("model.dropout", "BPE dropout is random and strata encodes deterministically",
             "set \"dropout\" to null");
  for (const char* name : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    const auto it = model.find(name);
    if (it != model.end() && !it->is_null() && !(it->is_string() && it->get<std::string>().empty()))
      src.fail(fmt::format("model.{}", name),
               fmt::format("BPE with a {} is not supported", name), "set it to null");
  }

  read_vocab(src, need(src, model, "vocab", "model.vocab"), "model.vocab", bpe);
  for (int b = 0; b < 256; ++b) {  // byte_fallback's "<0x00>".."<0xFF>" (HF: format!("<{b:#04X}>"))
    const auto it = bpe.vocab.find(fmt::format("<0x{:02X}>", b));
    bpe.byte_ids[b] = it == bpe.vocab.end() ? -1 : it->second;
  }
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

std::int32_t id_of(const Tokenizer::Impl& impl, std::string_view token) {
  for (const auto& a : impl.added)
    if (a.content == token) return a.id;
  const auto it = impl.bpe.vocab.find(token);
  return it == impl.bpe.vocab.end() ? -1 : it->second;
}

void load_tokenizer_json(const std::string& path, Tokenizer::Impl& impl) {
  const Src src{path};
  const Json j = parse_json(src, read_file(path));
  if (!j.is_object()) src.fail("", fmt::format("expected a JSON object, found a JSON {}", j.type_name()));
  read_model(src, need(src, j, "model", "model"), impl.bpe);
  read_normalizer(src, j.value("normalizer", Json()), "normalizer", impl.normalizers);
  // null: each part between added tokens is one word for the model (Llama 2).
  const Json& pre = need(src, j, "pre_tokenizer", "pre_tokenizer");
  if (!pre.is_null()) read_pre_tokenizer(src, pre, "pre_tokenizer", impl.pre_tokenizer);
  const Json& dec = need(src, j, "decoder", "decoder");
  if (dec.is_null())
    src.fail("decoder", "no decoder: strata decodes through ByteLevel or SentencePiece-style "
                        "decoders (Metaspace, or Replace, ByteFallback, Fuse, Strip)", kFileHint);
  int decoders = 0;
  read_decoder(src, dec, "decoder", impl, decoders);
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

// The id tables and the added-token matchers, once the file is read. Ids: the vocabulary's,
// then the added tokens' (which may reuse or extend it).
void index_tokens(Tokenizer::Impl& impl) {
  auto& names = impl.bpe.id_to_token;
  for (std::size_t i = 0; i < impl.added.size(); ++i) {
    const AddedToken& a = impl.added[i];
    if (static_cast<std::size_t>(a.id) >= names.size()) names.resize(a.id + 1);
    names[a.id] = a.content;
    impl.added_by_id[a.id] = i;
  }
  impl.vocab_size = static_cast<int>(names.size());
  impl.id_text = names;
  std::unordered_set<std::string> specials;
  for (auto* m : {&impl.raw_added, &impl.normalized_added}) m->patterns.assign(impl.added.size(), "");
  for (std::size_t i = 0; i < impl.added.size(); ++i) {
    const AddedToken& a = impl.added[i];
    if (a.special) specials.insert(a.content);
    if (!a.normalized) {
      impl.raw_added.patterns[i] = a.content;
      continue;
    }
    // HF matches a normalized: true token by its normalized form, in normalized text, and
    // hands that form to the decoder.
    std::string form = apply_normalizers(impl.normalizers, a.content);
    impl.id_text[a.id] = form;
    impl.normalized_added.patterns[i] = std::move(form);
  }
  for (auto* m : {&impl.raw_added, &impl.normalized_added}) {
    for (std::size_t i = 0; i < m->patterns.size(); ++i) {
      if (m->patterns[i].empty()) continue;
      m->by_first_byte[static_cast<unsigned char>(m->patterns[i][0])].push_back(i);
      ++m->count;
    }
    for (auto& list : m->by_first_byte)  // longest first: leftmost-longest matching
      std::stable_sort(list.begin(), list.end(), [&](std::size_t x, std::size_t y) {
        return m->patterns[x].size() > m->patterns[y].size();
      });
  }
  impl.id_skippable.resize(names.size());
  impl.id_bytes.resize(names.size());
  for (std::size_t id = 0; id < names.size(); ++id) {
    const std::string& t = impl.id_text[id];
    impl.id_skippable[id] = specials.count(t) > 0;  // HF's is_special_token on the decoded text
    if (impl.byte_level_decoder) {
      auto bytes = byte_level_decode(t);
      impl.id_bytes[id] = bytes ? std::move(*bytes) : t;
    } else {
      impl.id_bytes[id] = decode_token_alone(impl.decoders, impl.decoder_byte_fallback, t);
    }
  }
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

  index_tokens(*impl);

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
