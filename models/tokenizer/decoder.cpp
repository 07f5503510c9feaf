// Decoding: token ids to text through the tokenizer.json's decoder (ByteLevel: the tokens'
// bytes joined and made valid UTF-8; SentencePiece-style chains: Replace, ByteFallback, Fuse,
// Strip, Metaspace with HF's decode_chain semantics), and the streaming decoder.
#include <fmt/format.h>

#include "core/error.h"
#include "models/tokenizer/tokenizer.h"
#include "models/tokenizer/tokenizer_impl.h"

namespace strata::models {
namespace tok {
namespace {

std::uint32_t first_code_point(std::string_view s) {
  std::size_t i = 0;
  return utf8_next(s, i);
}

int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// HF's ByteFallback decoder: each run of "<0xXX>" tokens becomes its bytes when they are valid
// UTF-8, else one U+FFFD per byte (not from_utf8_lossy's one per invalid sequence).
std::vector<std::string> byte_fallback(std::vector<std::string> tokens) {
  std::vector<std::string> out;
  std::string run;
  auto flush = [&] {
    if (run.empty()) return;
    if (!utf8_invalid_at(run)) {
      out.push_back(run);
    } else {
      for (std::size_t k = 0; k < run.size(); ++k) out.emplace_back("\xEF\xBF\xBD");
    }
    run.clear();
  };
  for (auto& token : tokens) {
    std::uint8_t byte = 0;
    if (byte_fallback_token(token, &byte)) {
      run += static_cast<char>(byte);
    } else {
      flush();
      out.push_back(std::move(token));
    }
  }
  flush();
  return out;
}

}  // namespace

bool byte_fallback_token(std::string_view token, std::uint8_t* byte) {
  // HF: 6 bytes, "<0x" .. ">", and u8::from_str_radix(token[3..5], 16), which takes a '+' sign.
  if (token.size() != 6 || !token.starts_with("<0x") || token[5] != '>') return false;
  int value = -1;
  if (token[3] == '+') {
    value = hex_digit(token[4]);
  } else if (hex_digit(token[3]) >= 0 && hex_digit(token[4]) >= 0) {
    value = hex_digit(token[3]) * 16 + hex_digit(token[4]);
  }
  if (value < 0) return false;
  if (byte != nullptr) *byte = static_cast<std::uint8_t>(value);
  return true;
}

std::string run_decoders(const std::vector<DecoderStep>& steps, std::vector<std::string> tokens) {
  for (const auto& step : steps) {
    switch (step.kind) {
      case DecoderStep::Kind::replace:
        for (auto& t : tokens) t = replace_all(*step.pattern, t, step.content);
        break;
      case DecoderStep::Kind::byte_fallback:
        tokens = byte_fallback(std::move(tokens));
        break;
      case DecoderStep::Kind::fuse: {
        std::string all;
        for (const auto& t : tokens) all += t;
        tokens.assign(1, std::move(all));
        break;
      }
      case DecoderStep::Kind::strip: {  // up to strip_start leading `content` characters
        const std::uint32_t c = first_code_point(step.content);
        for (auto& t : tokens) {
          std::size_t cut = 0;
          for (std::size_t n = 0, i = 0; n < step.strip_start && i < t.size(); ++n) {
            if (utf8_next(t, i) != c) break;
            cut = i;
          }
          t.erase(0, cut);
        }
        break;
      }
      case DecoderStep::Kind::metaspace: {  // the replacement is ' ', dropped in the first token
        const std::uint32_t c = first_code_point(step.content);
        for (std::size_t index = 0; index < tokens.size(); ++index) {
          const std::string& t = tokens[index];
          const bool drop = index == 0 && step.prepend_scheme != PrependScheme::never;
          std::string out;
          out.reserve(t.size());
          for (std::size_t i = 0; i < t.size();) {
            const std::size_t b = i;
            if (utf8_next(t, i) != c) out.append(t, b, i - b);
            else if (!drop) out += ' ';
          }
          tokens[index] = std::move(out);
        }
        break;
      }
    }
  }
  std::string text;
  for (const auto& t : tokens) text += t;
  return text;
}

std::string decode_token_alone(const std::vector<DecoderStep>& steps, bool byte_fallback_step,
                               std::string_view token) {
  std::uint8_t byte = 0;
  if (byte_fallback_step && byte_fallback_token(token, &byte)) return std::string(1, static_cast<char>(byte));
  // As a token after the first: the steps that act on each token alone.
  std::vector<DecoderStep> each;
  for (const auto& step : steps) {
    if (step.kind == DecoderStep::Kind::replace) each.push_back(step);
    if (step.kind == DecoderStep::Kind::metaspace) {
      each.push_back(step);
      each.back().prepend_scheme = PrependScheme::never;  // never drops: ' ' as in later tokens
    }
  }
  return run_decoders(each, {std::string(token)});
}

}  // namespace tok

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

const std::string& Tokenizer::Impl::bytes_of(std::int32_t id) const {
  if (id < 0 || id >= vocab_size || bpe.id_to_token[id].empty())
    throw Error(fmt::format("the token id {} is not in the vocabulary (ids 0..{})", id,
                            vocab_size - 1),
                source, "the ids must come from this tokenizer's model");
  return id_bytes[id];
}

std::string Tokenizer::Impl::decode_checked(std::span<const std::int32_t> ids) const {
  if (byte_level_decoder) {
    std::string bytes;
    for (const std::int32_t id : ids) bytes += id_bytes[id];
    return utf8_take_valid(bytes, true);
  }
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (const std::int32_t id : ids) tokens.push_back(id_text[id]);
  return tok::run_decoders(decoders, std::move(tokens));
}

std::string Tokenizer::decode(std::span<const std::int32_t> ids, bool skip_special) const {
  std::vector<std::int32_t> kept;
  kept.reserve(ids.size());
  for (const std::int32_t id : ids) {
    (void)impl_->bytes_of(id);  // throws for an unknown id
    if (!(skip_special && impl_->id_skippable[id])) kept.push_back(id);
  }
  return impl_->decode_checked(kept);
}

// ---- streaming ------------------------------------------------------------------------------

TokenStreamDecoder::TokenStreamDecoder(const Tokenizer& tokenizer, bool skip_special)
    : tokenizer_(&tokenizer), skip_special_(skip_special) {}

std::string TokenStreamDecoder::push(std::int32_t id) {
  const Tokenizer::Impl& impl = *tokenizer_->impl_;
  const std::string& bytes = impl.bytes_of(id);  // throws for an unknown id
  if (skip_special_ && impl.id_skippable[id]) return {};
  if (impl.byte_level_decoder) {
    pending_ += bytes;
    return utf8_take_valid(pending_, false);
  }
  // A SentencePiece-style chain is not a concatenation of per-token bytes (the first token's
  // leading space, runs of byte tokens), so, as HF's DecodeStream, the new ids are decoded
  // after the ids printed last (the context) and what extends the context's text comes out.
  // A run of byte tokens waits for the token after it: a later byte can turn the whole run
  // into U+FFFDs.
  ids_.push_back(id);
  if (impl.decoder_byte_fallback && tok::byte_fallback_token(impl.id_text[id])) return {};
  std::string text = impl.decode_checked(ids_);
  if (text.size() <= context_text_.size() || !text.starts_with(context_text_)) return {};
  text.erase(0, context_text_.size());
  ids_.erase(ids_.begin(), ids_.begin() + static_cast<std::ptrdiff_t>(context_ids_));
  context_ids_ = ids_.size();
  context_text_ = impl.decode_checked(ids_);
  return text;
}

std::string TokenStreamDecoder::finish() {
  if (tokenizer_->impl_->byte_level_decoder) return utf8_take_valid(pending_, true);
  std::string out;
  if (ids_.size() > context_ids_) {
    out = tokenizer_->impl_->decode_checked(ids_);
    out = out.starts_with(context_text_) ? out.substr(context_text_.size()) : std::string();
  }
  ids_.clear();
  context_ids_ = 0;
  context_text_.clear();
  return out;
}

}  // namespace strata::models
