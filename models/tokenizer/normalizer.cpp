// The normalizers of tokenizer.json: Unicode normal forms (ICU), Prepend and Replace (Llama 2's
// "▁" handling), with HF's semantics.
#include <unicode/bytestream.h>
#include <unicode/normalizer2.h>
#include <unicode/stringpiece.h>

#include <fmt/format.h>

#include "core/error.h"
#include "models/tokenizer/tokenizer_impl.h"

namespace strata::models::tok {
namespace {

void icu_normalize(std::string_view text, NormalForm form, std::string& out) {
  if (text.empty()) return;
  UErrorCode status = U_ZERO_ERROR;
  const icu::Normalizer2* n = nullptr;
  switch (form) {
    case NormalForm::nfc: n = icu::Normalizer2::getNFCInstance(status); break;
    case NormalForm::nfd: n = icu::Normalizer2::getNFDInstance(status); break;
    case NormalForm::nfkc: n = icu::Normalizer2::getNFKCInstance(status); break;
    case NormalForm::nfkd: n = icu::Normalizer2::getNFKDInstance(status); break;
  }
  if (U_SUCCESS(status)) {
    icu::StringByteSink<std::string> sink(&out);
    n->normalizeUTF8(0, icu::StringPiece(text.data(), static_cast<std::int32_t>(text.size())), sink,
                     nullptr, status);
  }
  if (U_FAILURE(status))
    throw Error(fmt::format("ICU normalization failed: {}", u_errorName(status)),
                "tokenizer normalizer", "check that ICU's data library (libicu72) is installed");
}

}  // namespace

std::string normalize(std::string_view text, NormalForm form) {
  bool ascii = true;
  for (const char c : text) ascii = ascii && static_cast<unsigned char>(c) < 0x80;
  if (ascii) return std::string(text);  // ASCII is in every normal form
  // The code points `tokenizers` does not normalize are, to it, starters that decompose and
  // compose with nothing: nothing reorders or composes across them, so the parts between them
  // are normalized apart and they are copied as they are.
  std::string out;
  out.reserve(text.size());
  std::size_t part = 0;
  for (std::size_t i = 0; i < text.size();) {
    const std::size_t b = i;
    if (!normalize_verbatim(utf8_next(text, i))) continue;
    icu_normalize(text.substr(part, b - part), form, out);
    out.append(text.substr(b, i - b));
    part = i;
  }
  icu_normalize(text.substr(part), form, out);
  return out;
}

std::string replace_all(const Regex& pattern, std::string_view text, std::string_view content) {
  std::string out;
  std::size_t prev = 0;
  for (const auto& [b, e] : pattern.find_all(text)) {
    out.append(text.substr(prev, b - prev));
    out.append(content);
    prev = e;
  }
  out.append(text.substr(prev));
  return out;
}

std::string apply_normalizers(const std::vector<NormalizerStep>& steps, std::string text) {
  for (const auto& step : steps) {
    switch (step.kind) {
      case NormalizerStep::Kind::unicode:
        text = normalize(text, step.form);
        break;
      case NormalizerStep::Kind::prepend:  // HF: only to a non-empty string
        if (!text.empty()) text.insert(0, step.text);
        break;
      case NormalizerStep::Kind::replace:
        text = replace_all(*step.pattern, text, step.text);
        break;
    }
  }
  return text;
}

}  // namespace strata::models::tok
