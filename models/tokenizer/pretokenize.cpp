// Text handling below the BPE model: UTF-8, GPT-2's byte-level alphabet, PCRE2 regexes and the
// pre-tokenizer steps (Split, Digits, ByteLevel, Metaspace) with HF's semantics.
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <algorithm>

#include <fmt/format.h>

#include "core/error.h"
#include "models/tokenizer/tokenizer_impl.h"

namespace strata::models::tok {

// ---- UTF-8 ----------------------------------------------------------------------------------

std::optional<std::size_t> utf8_invalid_at(std::string_view s) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const std::size_t n = s.size();
  std::size_t i = 0;
  while (i < n) {
    const unsigned c = p[i];
    if (c < 0x80) {
      ++i;
      continue;
    }
    std::size_t len;
    unsigned lo = 0x80, hi = 0xBF;  // the allowed range of the second byte (Unicode table 3-7)
    if (c >= 0xC2 && c <= 0xDF) {
      len = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
      len = 3;
      if (c == 0xE0) lo = 0xA0;
      if (c == 0xED) hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
      len = 4;
      if (c == 0xF0) lo = 0x90;
      if (c == 0xF4) hi = 0x8F;
    } else {
      return i;
    }
    if (i + len > n) return i;
    if (p[i + 1] < lo || p[i + 1] > hi) return i;
    for (std::size_t k = 2; k < len; ++k)
      if (p[i + k] < 0x80 || p[i + k] > 0xBF) return i;
    i += len;
  }
  return std::nullopt;
}

std::uint32_t utf8_next(std::string_view s, std::size_t& i) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const unsigned c = p[i];
  if (c < 0x80) {
    ++i;
    return c;
  }
  const std::size_t len = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : 2;
  std::uint32_t cp = c & (0x7F >> len);
  for (std::size_t k = 1; k < len; ++k) cp = (cp << 6) | (p[i + k] & 0x3F);
  i += len;
  return cp;
}

// ---- byte level -----------------------------------------------------------------------------

const ByteLevelTable& ByteLevelTable::get() {
  static const ByteLevelTable table = [] {
    ByteLevelTable t;
    // Bytes that are printable Latin-1 keep their code point: '!'..'~', '¡'..'¬', '®'..'ÿ'.
    auto printable = [](unsigned b) {
      return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    };
    std::uint32_t next = 256;  // the others, in byte order, take U+0100, U+0101, ...
    for (unsigned b = 0; b < 256; ++b) {
      const std::uint32_t cp = printable(b) ? b : next++;
      utf8_append(t.byte_to_utf8[b], cp);
      t.cp_to_byte.emplace(cp, static_cast<std::uint8_t>(b));
    }
    return t;
  }();
  return table;
}

std::string byte_level_encode(std::string_view bytes) {
  const auto& table = ByteLevelTable::get();
  std::string out;
  out.reserve(bytes.size() * 2);
  for (const char c : bytes) out += table.byte_to_utf8[static_cast<unsigned char>(c)];
  return out;
}

std::optional<std::string> byte_level_decode(std::string_view token) {
  const auto& table = ByteLevelTable::get();
  std::string out;
  out.reserve(token.size());
  std::size_t i = 0;
  while (i < token.size()) {
    const auto it = table.cp_to_byte.find(utf8_next(token, i));
    if (it == table.cp_to_byte.end()) return std::nullopt;
    out += static_cast<char>(it->second);
  }
  return out;
}

// ---- regex ----------------------------------------------------------------------------------

Regex::Regex(const std::string& pattern, bool literal, const std::string& where) {
  int error_code = 0;
  PCRE2_SIZE error_offset = 0;
  // PCRE2_LITERAL admits no other option but UTF (UCP only matters to classes anyway).
  const std::uint32_t options = literal ? PCRE2_UTF | PCRE2_LITERAL : PCRE2_UTF | PCRE2_UCP;
  // Oniguruma's Unicode classes, as far as they differ (unicode_compat.cpp).
  const std::string compiled = literal ? pattern : pcre2_pattern(pattern);
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(compiled.data()), compiled.size(),
                                   options, &error_code, &error_offset, nullptr);
  if (code == nullptr) {
    PCRE2_UCHAR message[256];
    pcre2_get_error_message(error_code, message, sizeof(message));
    throw Error(fmt::format("PCRE2 cannot compile the regex at offset {} (of the pattern as "
                            "rewritten for PCRE2, {} bytes): {}", error_offset, compiled.size(),
                            reinterpret_cast<const char*>(message)),
                where, "only regexes that PCRE2 and Oniguruma read alike are supported");
  }
  // The JIT makes matching several times faster; where it is unavailable the interpreter
  // gives the same matches.
  (void)pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);
  code_ = code;
}

Regex::~Regex() { pcre2_code_free(static_cast<pcre2_code*>(code_)); }

std::vector<std::pair<std::size_t, std::size_t>> Regex::find_all(std::string_view text) const {
  auto* code = static_cast<pcre2_code*>(code_);
  pcre2_match_data* md = pcre2_match_data_create_from_pattern(code, nullptr);
  STRATA_ASSERT(md != nullptr, "pcre2_match_data_create_from_pattern: out of memory");
  std::vector<std::pair<std::size_t, std::size_t>> out;
  std::size_t start = 0;
  while (start <= text.size()) {
    // The text was checked as UTF-8 once, by the caller.
    const int rc = pcre2_match(code, reinterpret_cast<PCRE2_SPTR>(text.data()), text.size(), start,
                               PCRE2_NO_UTF_CHECK, md, nullptr);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      pcre2_match_data_free(md);
      PCRE2_UCHAR message[256];
      pcre2_get_error_message(rc, message, sizeof(message));
      throw Error(fmt::format("PCRE2 matching failed: {}", reinterpret_cast<const char*>(message)),
                  "tokenizer pre-tokenizer regex", "report this with the text that caused it");
    }
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
    const std::size_t b = ov[0], e = ov[1];
    if (e > b) {
      out.emplace_back(b, e);
      start = e;
    } else {  // an empty match: step over one character
      if (b >= text.size()) break;
      std::size_t i = b;
      utf8_next(text, i);
      start = i;
    }
  }
  pcre2_match_data_free(md);
  return out;
}

// ---- pre-tokenizer --------------------------------------------------------------------------
namespace {

struct Segment {
  std::size_t begin, end;
  bool is_match;
};

// Every byte of `text` in order, as matches and the gaps between them (HF's find_matches).
std::vector<Segment> segments_of(std::string_view text,
                                 const std::vector<std::pair<std::size_t, std::size_t>>& matches) {
  std::vector<Segment> segs;
  std::size_t prev = 0;
  for (const auto& [b, e] : matches) {
    if (b != prev) segs.push_back({prev, b, false});
    segs.push_back({b, e, true});
    prev = e;
  }
  if (prev != text.size()) segs.push_back({prev, text.size(), false});
  return segs;
}

// HF's NormalizedString::split: combines segments by `behavior`; appends the non-empty pieces.
// Returns the offset in `text` where the first appended piece begins (npos: none).
std::size_t split_by(std::string_view text, std::vector<Segment> segs, SplitBehavior behavior,
                     std::vector<std::string>& out) {
  std::vector<Segment> kept;
  bool previous_match = false;
  switch (behavior) {
    case SplitBehavior::isolated:
      kept = std::move(segs);
      break;
    case SplitBehavior::removed:
      for (const auto& s : segs)
        if (!s.is_match) kept.push_back(s);
      break;
    case SplitBehavior::contiguous:
      for (const auto& s : segs) {
        if (s.is_match == previous_match && !kept.empty()) kept.back().end = s.end;
        else kept.push_back(s);
        previous_match = s.is_match;
      }
      break;
    case SplitBehavior::merged_with_previous:
      for (const auto& s : segs) {
        if (s.is_match && !previous_match && !kept.empty()) kept.back().end = s.end;
        else kept.push_back(s);
        previous_match = s.is_match;
      }
      break;
    case SplitBehavior::merged_with_next:
      for (auto it = segs.rbegin(); it != segs.rend(); ++it) {
        if (it->is_match && !previous_match && !kept.empty()) kept.back().begin = it->begin;
        else kept.push_back(*it);
        previous_match = it->is_match;
      }
      std::reverse(kept.begin(), kept.end());
      break;
  }
  std::size_t first = std::string_view::npos;
  for (const auto& s : kept) {
    if (s.end <= s.begin) continue;
    if (first == std::string_view::npos) first = s.begin;
    out.emplace_back(text.substr(s.begin, s.end - s.begin));
  }
  return first;
}

// HF's Metaspace pre-tokenizer on one piece: ' ' becomes the replacement, which is put first
// as the scheme says (unless the piece already begins with it), then the piece is split before
// each replacement (MergedWithNext). The first piece keeps the beginning (a prepended
// replacement counts as offset 0).
void metaspace(const PreTokenizerStep& step, std::string_view piece, bool at_start,
                      std::vector<std::string>& out) {
  std::string text;
  text.reserve(piece.size() + step.replacement.size());
  for (const char c : piece) {
    if (c == ' ') text += step.replacement;
    else text += c;
  }
  const bool prepend = !text.starts_with(step.replacement) &&
                       (step.prepend_scheme == PrependScheme::always ||
                        (step.prepend_scheme == PrependScheme::first && at_start));
  if (prepend) text.insert(0, step.replacement);
  if (!step.split) {
    out.push_back(std::move(text));
    return;
  }
  std::vector<std::pair<std::size_t, std::size_t>> matches;
  for (std::size_t at = text.find(step.replacement); at != std::string::npos;
       at = text.find(step.replacement, at + step.replacement.size()))
    matches.emplace_back(at, at + step.replacement.size());
  split_by(text, segments_of(text, matches), SplitBehavior::merged_with_next, out);
}

}  // namespace

void apply_step(const PreTokenizerStep& step, std::vector<std::string>& pieces,
                bool& first_at_start) {
  std::vector<std::string> out;
  out.reserve(pieces.size());
  for (std::size_t index = 0; index < pieces.size(); ++index) {
    std::string& piece = pieces[index];
    const std::size_t before = out.size();
    std::size_t begin = 0;  // where out[before] begins in `piece`
    switch (step.kind) {
      case PreTokenizerStep::Kind::split:
        begin = split_by(piece, segments_of(piece, step.regex->find_all(piece)), step.behavior, out);
        break;
      case PreTokenizerStep::Kind::metaspace:
        metaspace(step, piece, index == 0 && first_at_start, out);
        break;
      case PreTokenizerStep::Kind::digits: {
        // Each numeric character is one match; Isolated keeps them apart, Contiguous joins runs.
        std::vector<std::pair<std::size_t, std::size_t>> matches;
        for (std::size_t i = 0; i < piece.size();) {
          const std::size_t b = i;
          if (is_numeric(utf8_next(piece, i))) matches.emplace_back(b, i);
        }
        begin = split_by(piece, segments_of(piece, matches),
                         step.individual_digits ? SplitBehavior::isolated : SplitBehavior::contiguous,
                         out);
        break;
      }
      case PreTokenizerStep::Kind::byte_level: {
        std::string text = std::move(piece);
        if (step.add_prefix_space && text.front() != ' ') text.insert(text.begin(), ' ');
        std::vector<std::string> parts;
        if (step.regex) {
          split_by(text, segments_of(text, step.regex->find_all(text)), SplitBehavior::isolated,
                   parts);
        } else {
          parts.push_back(std::move(text));
        }
        for (const auto& p : parts) out.push_back(byte_level_encode(p));
        break;
      }
    }
    // Only the first output piece can still begin at offset 0 of encode()'s text.
    if (index == 0) first_at_start = first_at_start && out.size() > before && begin == 0;
  }
  pieces = std::move(out);
}

}  // namespace strata::models::tok
