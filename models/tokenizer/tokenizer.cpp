// Tokenizer: encode (added tokens, normalizer, pre-tokenizer, BPE, template) and decode
// (byte-level bytes, UTF-8 repair), and the streaming decoder. Loading is tokenizer_load.cpp.
#include "models/tokenizer/tokenizer.h"

#include <unicode/uchar.h>

#include <fmt/format.h>

#include "core/error.h"
#include "models/tokenizer/tokenizer_impl.h"

namespace strata::models {
namespace {

// Rust's char::is_whitespace (White_Space) and HF's word characters (alphanumeric or '_').
bool is_space(std::uint32_t cp) { return u_isUWhiteSpace(static_cast<UChar32>(cp)); }
bool is_word(std::uint32_t cp) {
  return cp == '_' || u_isUAlphabetic(static_cast<UChar32>(cp)) ||
         u_charType(static_cast<UChar32>(cp)) == U_DECIMAL_DIGIT_NUMBER ||
         u_charType(static_cast<UChar32>(cp)) == U_LETTER_NUMBER ||
         u_charType(static_cast<UChar32>(cp)) == U_OTHER_NUMBER;
}

// The code point that ends just before byte `end` of valid UTF-8 `s` (end > 0).
std::uint32_t code_point_before(std::string_view s, std::size_t end, std::size_t* begin = nullptr) {
  std::size_t b = end - 1;
  while (b > 0 && (static_cast<unsigned char>(s[b]) & 0xC0) == 0x80) --b;
  if (begin != nullptr) *begin = b;
  std::size_t i = b;
  return tok::utf8_next(s, i);
}

}  // namespace

// ---- encode ---------------------------------------------------------------------------------

void Tokenizer::Impl::encode_word(std::string_view word, std::vector<std::int32_t>& out) const {
  if (word.size() <= kCacheMaxWordBytes) {
    std::lock_guard lock(cache_mutex);
    if (const auto it = cache.find(word); it != cache.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  const std::size_t first = out.size();
  bpe.tokenize(word, out);
  if (word.size() <= kCacheMaxWordBytes) {
    std::lock_guard lock(cache_mutex);
    if (cache.size() < kCacheWords)
      cache.emplace(std::string(word), std::vector<std::int32_t>(out.begin() + first, out.end()));
  }
}

void Tokenizer::Impl::encode_plain(std::string_view text, std::vector<std::int32_t>& out) const {
  if (text.empty()) return;
  std::string normalized(text);
  for (const auto form : normalizers) normalized = tok::normalize(normalized, form);
  std::vector<std::string> pieces;
  if (!normalized.empty()) pieces.push_back(std::move(normalized));
  for (const auto& step : pre_tokenizer) tok::apply_step(step, pieces);
  for (const auto& piece : pieces) encode_word(piece, out);
}

void Tokenizer::Impl::encode_text(std::string_view text, std::vector<std::int32_t>& out) const {
  std::size_t plain_begin = 0;  // start of the text not yet encoded
  std::size_t pos = 0;
  while (pos < text.size()) {
    // Leftmost-longest: at the first position where an added token matches, the longest one.
    const AddedToken* found = nullptr;
    for (const std::size_t i : added_by_first_byte[static_cast<unsigned char>(text[pos])]) {
      if (text.substr(pos).starts_with(added[i].content)) {
        found = &added[i];
        break;
      }
    }
    if (found == nullptr) {
      ++pos;
      continue;
    }
    std::size_t end = pos + found->content.size();
    if (found->single_word &&
        ((pos > 0 && is_word(code_point_before(text, pos))) ||
         (end < text.size() && [&] {
           std::size_t i = end;
           return is_word(tok::utf8_next(text, i));
         }()))) {
      pos = end;  // inside a word: no match, and (as HF's matcher) the search goes on after it
      continue;
    }
    std::size_t plain_end = pos;
    if (found->lstrip) {
      std::size_t b = 0;
      while (plain_end > plain_begin && is_space(code_point_before(text, plain_end, &b)))
        plain_end = b;
    }
    if (found->rstrip) {
      while (end < text.size()) {
        std::size_t i = end;
        if (!is_space(tok::utf8_next(text, i))) break;
        end = i;
      }
    }
    encode_plain(text.substr(plain_begin, plain_end - plain_begin), out);
    out.push_back(found->id);
    pos = plain_begin = end;
  }
  encode_plain(text.substr(plain_begin), out);
}

const std::string& Tokenizer::Impl::bytes_of(std::int32_t id) const {
  if (id < 0 || id >= vocab_size || bpe.id_to_token[id].empty())
    throw Error(fmt::format("the token id {} is not in the vocabulary (ids 0..{})", id,
                            vocab_size - 1),
                source, "the ids must come from this tokenizer's model");
  return id_bytes[id];
}

Tokenizer::Tokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Tokenizer::~Tokenizer() = default;
Tokenizer::Tokenizer(Tokenizer&& other) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&& other) noexcept = default;

Tokenizer Tokenizer::load(const std::string& path) { return Tokenizer(load_tokenizer_impl(path)); }

std::vector<std::int32_t> Tokenizer::encode(std::string_view text, bool add_special) const {
  if (const auto bad = tok::utf8_invalid_at(text))
    throw Error(fmt::format("the text is not valid UTF-8 (byte {} of {})", *bad, text.size()),
                "Tokenizer::encode", "give UTF-8 text");
  std::vector<std::int32_t> out;
  out.reserve(text.size() / 3 + 4);
  if (add_special) out = impl_->template_prefix;
  impl_->encode_text(text, out);
  if (add_special) out.insert(out.end(), impl_->template_suffix.begin(), impl_->template_suffix.end());
  return out;
}

// ---- decode ---------------------------------------------------------------------------------

std::string utf8_take_valid(std::string& bytes, bool final) {
  static constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD
  const auto* p = reinterpret_cast<const unsigned char*>(bytes.data());
  const std::size_t n = bytes.size();
  std::string out;
  out.reserve(n);
  std::size_t i = 0;
  while (i < n) {
    const unsigned c = p[i];
    if (c < 0x80) {
      out += static_cast<char>(c);
      ++i;
      continue;
    }
    std::size_t len = 0;
    unsigned lo = 0x80, hi = 0xBF;  // the second byte's range (Unicode table 3-7)
    if (c >= 0xC2 && c <= 0xDF) {
      len = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
      len = 3;
      lo = c == 0xE0 ? 0xA0 : 0x80;
      hi = c == 0xED ? 0x9F : 0xBF;
    } else if (c >= 0xF0 && c <= 0xF4) {
      len = 4;
      lo = c == 0xF0 ? 0x90 : 0x80;
      hi = c == 0xF4 ? 0x8F : 0xBF;
    }
    if (len == 0) {  // not a lead byte
      out += kReplacement;
      ++i;
      continue;
    }
    // k: how many bytes of the sequence are valid so far (its maximal subpart).
    std::size_t k = 1;
    while (k < len && i + k < n) {
      const unsigned b = p[i + k];
      const bool ok = k == 1 ? (b >= lo && b <= hi) : (b >= 0x80 && b <= 0xBF);
      if (!ok) break;
      ++k;
    }
    if (k == len) {
      out.append(bytes, i, len);
      i += len;
    } else if (i + k == n && !final) {
      break;  // incomplete at the end: wait for more bytes
    } else {
      out += kReplacement;
      i += k;
    }
  }
  bytes.erase(0, i);
  return out;
}

std::string Tokenizer::decode(std::span<const std::int32_t> ids, bool skip_special) const {
  std::string bytes;
  for (const std::int32_t id : ids) {
    const std::string& b = impl_->bytes_of(id);
    if (skip_special && is_special(id)) continue;
    bytes += b;
  }
  return utf8_take_valid(bytes, true);
}

std::string Tokenizer::token_bytes(std::int32_t id) const { return impl_->bytes_of(id); }

int Tokenizer::vocab_size() const { return impl_->vocab_size; }

std::optional<std::int32_t> Tokenizer::token_id(std::string_view token) const {
  for (const auto& a : impl_->added)
    if (a.content == token) return a.id;
  const auto it = impl_->bpe.vocab.find(token);
  if (it == impl_->bpe.vocab.end()) return std::nullopt;
  return it->second;
}

std::optional<std::string> Tokenizer::id_to_token(std::int32_t id) const {
  if (id < 0 || id >= impl_->vocab_size || impl_->bpe.id_to_token[id].empty()) return std::nullopt;
  return impl_->bpe.id_to_token[id];
}

const std::vector<AddedToken>& Tokenizer::added_tokens() const { return impl_->added; }

bool Tokenizer::is_special(std::int32_t id) const {
  const auto it = impl_->added_by_id.find(id);
  return it != impl_->added_by_id.end() && impl_->added[it->second].special;
}

std::optional<std::int32_t> Tokenizer::bos_id() const { return impl_->bos; }
std::optional<std::int32_t> Tokenizer::eos_id() const { return impl_->eos; }
const std::string& Tokenizer::source() const { return impl_->source; }

// ---- streaming ------------------------------------------------------------------------------

TokenStreamDecoder::TokenStreamDecoder(const Tokenizer& tokenizer, bool skip_special)
    : tokenizer_(&tokenizer), skip_special_(skip_special) {}

std::string TokenStreamDecoder::push(std::int32_t id) {
  const std::string bytes = tokenizer_->token_bytes(id);  // throws for an unknown id
  if (skip_special_ && tokenizer_->is_special(id)) return {};
  pending_ += bytes;
  return utf8_take_valid(pending_, false);
}

std::string TokenStreamDecoder::finish() { return utf8_take_valid(pending_, true); }

}  // namespace strata::models
