// Unicode as `tokenizers` 0.23.3 sees it, where it differs from PCRE2 10.42 (Unicode 14.0) and
// ICU 72 (Unicode 15.0): the character predicates of AddedVocabulary and Digits, and the regex
// classes of Split and ByteLevel. The ranges (unicode_tables.inc) are generated from the
// Unicode Character Database of each version and checked against `tokenizers` on every code
// point by tests/models/tokenizer_fixtures/make_unicode_tables.py.
#include <unicode/uchar.h>

#include <algorithm>
#include <array>
#include <span>

#include <fmt/format.h>

#include "models/tokenizer/tokenizer_impl.h"

namespace strata::models::tok {
namespace {

struct CodePointRange {
  std::uint32_t first, last;
};

#include "models/tokenizer/unicode_tables.inc"

bool in(std::span<const CodePointRange> table, std::uint32_t cp) {
  const auto it = std::upper_bound(table.begin(), table.end(), cp,
                                   [](std::uint32_t c, const CodePointRange& r) { return c < r.first; });
  return it != table.begin() && cp <= std::prev(it)->last;
}

// U+180E MONGOLIAN VOWEL SEPARATOR: White_Space until Unicode 6.3; PCRE2's \s still matches
// it, Oniguruma's does not.
constexpr const char* kMvs = "\\x{180E}";

std::string ranges_text(std::span<const CodePointRange> table) {
  std::string out;
  for (const auto& r : table)
    out += r.first == r.last ? fmt::format("\\x{{{:X}}}", r.first)
                             : fmt::format("\\x{{{:X}}}-\\x{{{:X}}}", r.first, r.last);
  return out;
}

// The supplement of the property named in \p{...} (long and short names that Oniguruma
// reads alike); nullptr for a property left as PCRE2 has it.
const std::string* extra_for(std::string_view name) {
  static const auto table = [] {
    std::vector<std::pair<std::vector<std::string_view>, std::string>> t;
    auto add = [&](std::vector<std::string_view> names, std::span<const CodePointRange> r) {
      t.emplace_back(std::move(names), ranges_text(r));
    };
    add({"L", "Letter"}, kRegexExtraL);
    add({"Lu", "Uppercase_Letter"}, kRegexExtraLu);
    add({"Ll", "Lowercase_Letter"}, kRegexExtraLl);
    add({"Lt", "Titlecase_Letter"}, kRegexExtraLt);
    add({"Lm", "Modifier_Letter"}, kRegexExtraLm);
    add({"Lo", "Other_Letter"}, kRegexExtraLo);
    add({"N", "Number"}, kRegexExtraN);
    add({"Nd", "Decimal_Number"}, kRegexExtraNd);
    add({"Nl", "Letter_Number"}, kRegexExtraNl);
    add({"No", "Other_Number"}, kRegexExtraNo);
    add({"M", "Mark"}, kRegexExtraM);
    return t;
  }();
  for (const auto& [names, text] : table)
    for (const auto n : names)
      if (n == name) return text.empty() ? nullptr : &text;
  return nullptr;
}

}  // namespace

bool is_space(std::uint32_t cp) { return u_isUWhiteSpace(static_cast<UChar32>(cp)); }

bool is_word(std::uint32_t cp) {
  const auto c = static_cast<UChar32>(cp);
  const auto mask = U_GET_GC_MASK(c);
  return u_isUAlphabetic(c) || (mask & (U_GC_M_MASK | U_GC_ND_MASK | U_GC_PC_MASK)) != 0 ||
         u_hasBinaryProperty(c, UCHAR_JOIN_CONTROL) || in(kWordExtra, cp);
}

bool is_numeric(std::uint32_t cp) {
  const auto mask = U_GET_GC_MASK(static_cast<UChar32>(cp));
  return (mask & (U_GC_ND_MASK | U_GC_NL_MASK | U_GC_NO_MASK)) != 0 || in(kNumericExtra, cp);
}

bool normalize_verbatim(std::uint32_t cp) { return in(kNormalizeVerbatim, cp); }

// A scan of the pattern that knows escapes, \Q...\E and character classes ([...], with ']'
// first taken literally), so that only \s, \S, \p{..} and \P{..} written as such are changed:
//   outside a class  \s -> [^\S\x{180E}]   \S -> [\S\x{180E}]
//                    \p{L} -> [\p{L}<extra>]   \P{L} -> [^\p{L}<extra>]
//   in a class       \p{L} -> \p{L}<extra> and \S -> \S\x{180E} (members added); a class
//                    holding \s loses U+180E: [..] -> (?:(?!\x{180E})[..]) and
//                    [^..] -> (?:[^..]|\x{180E}). \P{..} in a class is left as it is.
std::string pcre2_pattern(std::string_view p) {
  std::string out;
  out.reserve(p.size());
  std::size_t i = 0;
  // At p[j] == '\\' and p[j + 1] in "pP": the name in \p{Name} or \pX, with j moved past it;
  // "" (j unchanged) when malformed.
  auto property = [&](std::size_t& j) -> std::string_view {
    if (j + 2 >= p.size()) return {};
    if (p[j + 2] == '{') {
      const auto close = p.find('}', j + 3);
      if (close == std::string_view::npos) return {};
      const std::string_view name = p.substr(j + 3, close - j - 3);
      j = close + 1;
      return name;
    }
    const std::string_view name = p.substr(j + 2, 1);
    j += 3;
    return name;
  };
  while (i < p.size()) {
    const char c = p[i];
    if (c == '\\' && i + 1 < p.size() && p[i + 1] == 'Q') {  // \Q...\E: literal
      const auto end = p.find("\\E", i + 2);
      const std::size_t stop = end == std::string_view::npos ? p.size() : end + 2;
      out.append(p.substr(i, stop - i));
      i = stop;
    } else if (c == '\\' && i + 1 < p.size()) {
      const char e = p[i + 1];
      if (e == 's') {
        out += fmt::format("[^\\S{}]", kMvs);
        i += 2;
      } else if (e == 'S') {
        out += fmt::format("[\\S{}]", kMvs);
        i += 2;
      } else if (e == 'p' || e == 'P') {
        std::size_t j = i;
        const std::string_view name = property(j);
        const std::string* extra = name.empty() ? nullptr : extra_for(name);
        if (extra == nullptr || j == i) {
          out += p[i];
          out += e;
          i += 2;
        } else {
          out += fmt::format("[{}\\p{{{}}}{}]", e == 'P' ? "^" : "", name, *extra);
          i = j;
        }
      } else {
        out.append(p.substr(i, 2));
        i += 2;
      }
    } else if (c == '[') {
      // A class: copy it with members added; remember whether it holds \s.
      std::size_t j = i + 1;
      const bool negated = j < p.size() && p[j] == '^';
      if (negated) ++j;
      std::string body;
      bool has_s = false;
      bool first = true;
      while (j < p.size() && (p[j] != ']' || first)) {
        first = false;
        if (p[j] == '[' && j + 1 < p.size() && p[j + 1] == ':') {  // [:alpha:]
          const auto end = p.find(":]", j + 2);
          const std::size_t stop = end == std::string_view::npos ? p.size() : end + 2;
          body.append(p.substr(j, stop - j));
          j = stop;
        } else if (p[j] == '\\' && j + 1 < p.size()) {
          const char e = p[j + 1];
          if (e == 's') {
            has_s = true;
            body += "\\s";
            j += 2;
          } else if (e == 'S') {
            body += fmt::format("\\S{}", kMvs);
            j += 2;
          } else if (e == 'p') {
            std::size_t k = j;
            const std::string_view name = property(k);
            const std::string* extra = name.empty() ? nullptr : extra_for(name);
            if (extra == nullptr || k == j) {
              body.append(p.substr(j, 2));
              j += 2;
            } else {
              body += fmt::format("\\p{{{}}}{}", name, *extra);
              j = k;
            }
          } else {
            body.append(p.substr(j, 2));
            j += 2;
          }
        } else {
          body += p[j++];
        }
      }
      if (j >= p.size()) {  // unclosed: let PCRE2 report it on the original text
        out.append(p.substr(i));
        break;
      }
      const std::string cls = fmt::format("[{}{}]", negated ? "^" : "", body);
      if (!has_s) {
        out += cls;
      } else if (negated) {
        out += fmt::format("(?:{}|{})", cls, kMvs);
      } else {
        out += fmt::format("(?:(?!{}){})", kMvs, cls);
      }
      i = j + 1;
    } else {
      out += c;
      ++i;
    }
  }
  return out;
}

}  // namespace strata::models::tok
