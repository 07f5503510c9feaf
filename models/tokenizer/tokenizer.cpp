// Tokenizer: encode (added tokens, normalizer, pre-tokenizer, BPE, template) and the accessors.
// Decoding is decoder.cpp, loading tokenizer_load.cpp and load_pipeline.cpp.
#include "models/tokenizer/tokenizer.h"

#include <fmt/format.h>

#include "core/error.h"
#include "models/tokenizer/tokenizer_impl.h"

namespace strata::models {
namespace {

using tok::is_space;
using tok::is_word;

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

void Tokenizer::Impl::encode_plain(std::string_view text, bool at_start,
                                   std::vector<std::int32_t>& out) const {
  if (text.empty()) return;
  std::vector<std::string> pieces{std::string(text)};
  for (const auto& step : pre_tokenizer) tok::apply_step(step, pieces, at_start);
  for (const auto& piece : pieces) encode_word(piece, out);
}

template <typename Plain>
void Tokenizer::Impl::split_added(const tok::AddedMatcher& matcher, std::string_view text,
                                  Plain&& plain, std::vector<std::int32_t>& out) const {
  std::size_t plain_begin = 0;  // start of the text not yet encoded
  std::size_t pos = 0;
  while (!matcher.empty() && pos < text.size()) {
    // Leftmost-longest: at the first position where an added token matches, the longest one.
    const AddedToken* found = nullptr;
    std::size_t length = 0;
    for (const std::size_t i : matcher.by_first_byte[static_cast<unsigned char>(text[pos])]) {
      if (text.substr(pos).starts_with(matcher.patterns[i])) {
        found = &added[i];
        length = matcher.patterns[i].size();
        break;
      }
    }
    if (found == nullptr) {
      ++pos;
      continue;
    }
    std::size_t end = pos + length;
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
    if (plain_end > plain_begin) plain(plain_begin, plain_end);
    out.push_back(found->id);
    pos = plain_begin = end;
  }
  if (plain_begin < text.size()) plain(plain_begin, text.size());
}

void Tokenizer::Impl::encode_text(std::string_view text, std::vector<std::int32_t>& out) const {
  // As HF's AddedVocabulary::extract_and_normalize: the normalized: false tokens are found in
  // the raw text; each part between them is normalized on its own, and the normalized: true
  // tokens are found (by their normalized form) in that.
  split_added(raw_added, text, [&](std::size_t begin, std::size_t end) {
    const std::string normalized =
        tok::apply_normalizers(normalizers, std::string(text.substr(begin, end - begin)));
    split_added(normalized_added, normalized, [&](std::size_t b, std::size_t e) {
      encode_plain(std::string_view(normalized).substr(b, e - b), begin == 0 && b == 0, out);
    }, out);
  }, out);
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
  return id >= 0 && id < impl_->vocab_size && impl_->id_skippable[id];
}

std::optional<std::int32_t> Tokenizer::bos_id() const { return impl_->bos; }
std::optional<std::int32_t> Tokenizer::eos_id() const { return impl_->eos; }
const std::string& Tokenizer::source() const { return impl_->source; }

}  // namespace strata::models
