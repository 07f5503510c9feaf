// The pipeline sections of tokenizer.json: normalizer, pre_tokenizer, post_processor and
// decoder, each read into its steps with every key checked and anything unsupported refused by
// file and key.
#include <memory>

#include "models/tokenizer/load_util.h"

namespace strata::models::tok {
namespace {

constexpr const char* kPipelineHint =
    "strata reads the normalizers, pre-tokenizers and decoders of byte-level BPE (GPT-2, Llama 3, "
    "Qwen2) and SentencePiece-style BPE (Llama 2, Mistral) tokenizers; tokenize elsewhere and "
    "pass token ids (`strata infer --prompts` with \"ids\")";

// A Replace's "pattern": {"String": ...} (literal) or {"Regex": ...}.
std::shared_ptr<const Regex> read_pattern(const Src& src, const Json& obj, std::string_view key) {
  const std::string pkey = fmt::format("{}.pattern", key);
  const Json& pattern = need(src, obj, "pattern", pkey);
  if (pattern.is_object() && pattern.contains("Regex"))
    return std::make_shared<Regex>(need_string(src, pattern["Regex"], pkey + ".Regex"), false,
                                   src.at(pkey + ".Regex"));
  if (pattern.is_object() && pattern.contains("String")) {
    const std::string text = need_string(src, pattern["String"], pkey + ".String");
    if (text.empty()) src.fail(pkey + ".String", "an empty pattern matches nothing to replace");
    return std::make_shared<Regex>(text, true, src.at(pkey + ".String"));
  }
  src.fail(pkey, "expected {\"Regex\": ...} or {\"String\": ...}");
}

// One character (Metaspace's replacement, Strip's content), as UTF-8.
std::string need_char(const Src& src, const Json& obj, const char* name, std::string_view key) {
  const std::string k = fmt::format("{}.{}", key, name);
  const std::string c = need_string(src, need(src, obj, name, k), k);
  std::size_t i = 0;
  if (c.empty() || utf8_invalid_at(c) || (utf8_next(c, i), i != c.size()))
    src.fail(k, fmt::format("expected one character, found \"{}\"", clip(c)));
  return c;
}

// Metaspace's prepend_scheme, with the older add_prefix_space read as HF 0.23 does: false
// means "never", and contradicting a prepend_scheme (or its default, "always") is an error.
PrependScheme read_prepend_scheme(const Src& src, const Json& m, std::string_view key) {
  PrependScheme scheme = PrependScheme::always;
  const std::string skey = fmt::format("{}.prepend_scheme", key);
  if (const auto it = m.find("prepend_scheme"); it != m.end() && !it->is_null()) {
    const std::string s = need_string(src, *it, skey);
    if (s == "first") scheme = PrependScheme::first;
    else if (s == "never") scheme = PrependScheme::never;
    else if (s == "always") scheme = PrependScheme::always;
    else src.fail(skey, fmt::format("unknown prepend_scheme \"{}\" (first, never or always)", clip(s)));
  }
  const std::string akey = fmt::format("{}.add_prefix_space", key);
  if (!opt_bool(src, m, "add_prefix_space", akey, true)) {
    if (scheme != PrependScheme::never)
      src.fail(akey, "add_prefix_space false contradicts the prepend_scheme (\"always\" when "
                     "absent), as `tokenizers` says too", "set \"prepend_scheme\": \"never\"");
  }
  return scheme;
}

SplitBehavior read_behavior(const Src& src, const Json& j, std::string_view key) {
  const std::string b = need_string(src, j, key);
  if (b == "Isolated") return SplitBehavior::isolated;
  if (b == "Removed") return SplitBehavior::removed;
  if (b == "MergedWithPrevious") return SplitBehavior::merged_with_previous;
  if (b == "MergedWithNext") return SplitBehavior::merged_with_next;
  if (b == "Contiguous") return SplitBehavior::contiguous;
  src.fail(key, fmt::format("unknown split behavior \"{}\"", clip(b)));
}

std::size_t need_count(const Src& src, const Json& obj, const char* name, std::string_view key) {
  const std::string k = fmt::format("{}.{}", key, name);
  const Json& v = need(src, obj, name, k);
  if (!v.is_number_unsigned() || v.get<std::uint64_t>() > 1'000'000)
    src.fail(k, fmt::format("expected a count (0 to 10^6), found {}", clip(v.dump())));
  return static_cast<std::size_t>(v.get<std::uint64_t>());
}

// The "Sequence" list under `list_name`, each element read by `read`.
template <typename Read>
bool read_sequence(const Src& src, const Json& j, const std::string& type, const char* list_name,
                   std::string_view key, Read&& read) {
  if (type != "Sequence") return false;
  const std::string lkey = fmt::format("{}.{}", key, list_name);
  const Json& list = need(src, j, list_name, lkey);
  if (!list.is_array()) src.fail(lkey, "expected an array");
  for (std::size_t i = 0; i < list.size(); ++i) read(list[i], fmt::format("{}[{}]", lkey, i));
  return true;
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

}  // namespace

void read_normalizer(const Src& src, const Json& n, std::string_view key,
                     std::vector<NormalizerStep>& steps) {
  if (n.is_null()) return;
  const std::string type = type_of(src, n, key);
  if (read_sequence(src, n, type, "normalizers", key, [&](const Json& e, const std::string& k) {
        read_normalizer(src, e, k, steps);
      }))
    return;
  NormalizerStep step;
  if (type == "NFC" || type == "NFD" || type == "NFKC" || type == "NFKD") {
    step.form = type == "NFC" ? NormalForm::nfc : type == "NFD" ? NormalForm::nfd
              : type == "NFKC" ? NormalForm::nfkc : NormalForm::nfkd;
  } else if (type == "Prepend") {  // Llama 2: "▁" before the text
    step.kind = NormalizerStep::Kind::prepend;
    const std::string k = fmt::format("{}.prepend", key);
    step.text = need_string(src, need(src, n, "prepend", k), k);
  } else if (type == "Replace") {  // Llama 2: ' ' -> "▁"
    step.kind = NormalizerStep::Kind::replace;
    step.pattern = read_pattern(src, n, key);
    const std::string k = fmt::format("{}.content", key);
    step.text = need_string(src, need(src, n, "content", k), k);
  } else {
    src.fail(fmt::format("{}.type", key),
             fmt::format("the normalizer {} is not supported (strata applies NFC, NFD, NFKC, NFKD, "
                         "Prepend and Replace)", clip(type)),
             kPipelineHint);
  }
  steps.push_back(std::move(step));
}

void read_pre_tokenizer(const Src& src, const Json& p, std::string_view key,
                        std::vector<PreTokenizerStep>& steps) {
  const std::string type = type_of(src, p, key);
  const std::string tkey = fmt::format("{}.type", key);
  if (read_sequence(src, p, type, "pretokenizers", key, [&](const Json& e, const std::string& k) {
        read_pre_tokenizer(src, e, k, steps);
      }))
    return;
  PreTokenizerStep step;
  if (type == "ByteLevel") {
    step.kind = PreTokenizerStep::Kind::byte_level;
    step.add_prefix_space = opt_bool(src, p, "add_prefix_space", fmt::format("{}.add_prefix_space", key), true);
    if (opt_bool(src, p, "use_regex", fmt::format("{}.use_regex", key), true))
      step.regex = std::make_shared<Regex>(kGpt2Regex, false, src.at(key));
  } else if (type == "Split") {
    const std::string pkey = fmt::format("{}.pattern", key);
    const Json& pattern = need(src, p, "pattern", pkey);
    if (pattern.is_object() && pattern.contains("Regex")) {
      step.regex = std::make_shared<Regex>(
          need_string(src, pattern["Regex"], pkey + ".Regex"), false, src.at(pkey + ".Regex"));
    } else if (pattern.is_object() && pattern.contains("String")) {
      step.regex = std::make_shared<Regex>(
          need_string(src, pattern["String"], pkey + ".String"), true, src.at(pkey + ".String"));
    } else {
      src.fail(pkey, "expected {\"Regex\": ...} or {\"String\": ...}");
    }
    step.behavior = read_behavior(src, need(src, p, "behavior", fmt::format("{}.behavior", key)),
                                  fmt::format("{}.behavior", key));
    if (opt_bool(src, p, "invert", fmt::format("{}.invert", key), false))
      src.fail(fmt::format("{}.invert", key), "Split with invert: true is not supported",
               kPipelineHint);
  } else if (type == "Digits") {
    step.kind = PreTokenizerStep::Kind::digits;
    step.individual_digits =
        opt_bool(src, p, "individual_digits", fmt::format("{}.individual_digits", key), false);
  } else if (type == "Metaspace") {  // Mistral v0.3 and `tokenizers` >= 0.14 conversions
    step.kind = PreTokenizerStep::Kind::metaspace;
    step.replacement = need_char(src, p, "replacement", key);
    step.prepend_scheme = read_prepend_scheme(src, p, key);
    step.split = opt_bool(src, p, "split", fmt::format("{}.split", key), true);
  } else {
    src.fail(tkey, fmt::format("the pre-tokenizer {} is not supported (strata applies ByteLevel, "
                               "Split, Digits and Metaspace)", clip(type)),
             kPipelineHint);
  }
  if (!steps.empty() && steps.back().kind == PreTokenizerStep::Kind::byte_level)
    src.fail(tkey, "a pre-tokenizer after ByteLevel is not supported (ByteLevel must come last)",
             kPipelineHint);
  steps.push_back(std::move(step));
}

void read_post_processor(const Src& src, const Json& p, std::string_view key,
                         Tokenizer::Impl& impl, int& templates) {
  if (p.is_null()) return;
  const std::string type = type_of(src, p, key);
  if (read_sequence(src, p, type, "processors", key, [&](const Json& e, const std::string& k) {
        read_post_processor(src, e, k, impl, templates);
      }))
    return;
  if (type == "ByteLevel") {
    // Only adjusts offsets, which strata does not report.
  } else if (type == "TemplateProcessing") {
    if (++templates > 1)
      src.fail(fmt::format("{}.type", key), "more than one TemplateProcessing is not supported");
    read_template(src, p, key, impl);
  } else {
    src.fail(fmt::format("{}.type", key),
             fmt::format("the post-processor {} is not supported (strata reads ByteLevel and "
                         "TemplateProcessing)", clip(type)),
             kPipelineHint);
  }
}

void read_decoder(const Src& src, const Json& d, std::string_view key, Tokenizer::Impl& impl,
                  int& seen) {
  const std::string type = type_of(src, d, key);
  const std::string tkey = fmt::format("{}.type", key);
  if (read_sequence(src, d, type, "decoders", key, [&](const Json& e, const std::string& k) {
        read_decoder(src, e, k, impl, seen);
      }))
    return;
  // ByteLevel decodes bytes, the others text: a chain is one kind or the other.
  const bool byte_level = type == "ByteLevel";
  if (seen++ > 0 && byte_level != impl.byte_level_decoder)
    src.fail(tkey, "a decoder chain that mixes ByteLevel with SentencePiece-style decoders is not "
                   "supported", kPipelineHint);
  impl.byte_level_decoder = byte_level;
  if (byte_level) return;
  DecoderStep step;
  if (type == "Replace") {
    step.kind = DecoderStep::Kind::replace;
    step.pattern = read_pattern(src, d, key);
    const std::string k = fmt::format("{}.content", key);
    step.content = need_string(src, need(src, d, "content", k), k);
  } else if (type == "ByteFallback") {
    step.kind = DecoderStep::Kind::byte_fallback;
    impl.decoder_byte_fallback = true;
  } else if (type == "Fuse") {
    step.kind = DecoderStep::Kind::fuse;
  } else if (type == "Strip") {
    step.kind = DecoderStep::Kind::strip;
    step.content = need_char(src, d, "content", key);
    step.strip_start = need_count(src, d, "start", key);
    if (need_count(src, d, "stop", key) != 0)
      src.fail(fmt::format("{}.stop", key),
               "Strip with stop > 0 (characters cut from the end) is not supported: no released "
               "tokenizer uses it, and strata's streaming decoder could not print as it goes",
               kPipelineHint);
  } else if (type == "Metaspace") {
    step.kind = DecoderStep::Kind::metaspace;
    step.content = need_char(src, d, "replacement", key);
    step.prepend_scheme = read_prepend_scheme(src, d, key);
  } else {
    src.fail(tkey, fmt::format("the decoder {} is not supported (strata decodes ByteLevel, "
                               "Replace, ByteFallback, Fuse, Strip and Metaspace)", clip(type)),
             kPipelineHint);
  }
  impl.decoders.push_back(std::move(step));
}

}  // namespace strata::models::tok
