#pragma once
// Hugging Face byte-level BPE tokenizers (GPT-2, Llama 3, Qwen2) for `strata infer`: text to
// token ids and back, matching the `tokenizers` library id for id (tests/models/test_tokenizer
// checks golden ids that `tokenizers` produced).
//
// What loads: a model folder holding tokenizer.json (preferred) or GPT-2's vocab.json +
// merges.txt, or a tokenizer.json path. Supported, and checked at load:
//   model          BPE with vocab, merges ("a b" strings or [a, b] pairs), ignore_merges,
//                  unk_token/fuse_unk; byte_fallback false, no dropout, no subword prefix or
//                  end-of-word suffix
//   normalizer     null, NFC (Qwen2), NFD, NFKC, NFKD, or a Sequence of those
//   pre_tokenizer  ByteLevel (add_prefix_space, use_regex with GPT-2's regex), Split (Regex or
//                  String pattern, any behavior, invert false), Digits, and a Sequence of them
//                  ending with ByteLevel (Llama 3, Qwen2: Split + ByteLevel(use_regex=false))
//   post_processor null, ByteLevel, TemplateProcessing (its special tokens around "A"), or a
//                  Sequence of those
//   decoder        null or ByteLevel
//   added_tokens   split out of the raw text first, leftmost-longest literal match (as HF's
//                  AddedVocabulary), honouring lstrip, rstrip and single_word
//   ids            integers in [0, 2^22) (16 times the largest released vocabulary)
// Refused with a strata::Error naming the file and key: WordPiece, Unigram, WordLevel, and
// SentencePiece-style BPE (byte_fallback, Metaspace: Llama 2, Mistral), any other normalizer,
// pre-tokenizer, post-processor or decoder type. Only byte-level BPE is supported.
//
// Differences from `tokenizers`, by design: every added token is matched on the raw text
// (HF matches "normalized": true ones after normalization; they differ only when the text
// around or inside such a token changes under the normalizer); encode() refuses text that is
// not valid UTF-8 (a Rust &str always is); tokenizer.json's "truncation" and "padding" are
// ignored (strata asks for neither).
//
// Unicode normalization uses ICU (libicu-dev; the same Unicode data as the rest of the system):
// NFC needs the canonical composition tables of the Unicode Character Database and the Hangul
// algorithm, too much to carry and keep correct here, and refusing Qwen2's non-ASCII text was
// the only other honest choice. ASCII text skips it (ASCII is already in every normal form).
// Regexes use PCRE2 (libpcre2-dev) with UTF and UCP, so \p{L}, \p{N}, \s and (?i:...) are
// Unicode-aware as in HF's Oniguruma.
//
// Thread safety: a loaded Tokenizer is immutable except for its word cache, which a mutex
// guards; encode() and decode() may be called from several threads at once.
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace strata::models {

// One entry of tokenizer.json's "added_tokens".
struct AddedToken {
  std::int32_t id = 0;
  std::string content;
  bool special = false;      // skipped by decode(ids, skip_special = true)
  bool lstrip = false;       // swallows the whitespace before it
  bool rstrip = false;       // swallows the whitespace after it
  bool single_word = false;  // matches only with no word character on either side
  bool normalized = false;
};

class Tokenizer {
 public:
  // `path`: a folder (tokenizer.json, else vocab.json + merges.txt) or a tokenizer.json file.
  // A tokenizer_config.json beside it, when present, names bos_token and eos_token. Throws
  // strata::Error (what, where = file and key, hint) for a missing file, malformed JSON, a
  // missing or mistyped key, and anything unsupported (see above).
  static Tokenizer load(const std::string& path);

  ~Tokenizer();
  Tokenizer(Tokenizer&& other) noexcept;
  Tokenizer& operator=(Tokenizer&& other) noexcept;
  Tokenizer(const Tokenizer&) = delete;
  Tokenizer& operator=(const Tokenizer&) = delete;

  // Token ids of `text` (UTF-8). add_special = false adds nothing; true adds what the
  // post_processor's TemplateProcessing puts around the text (Llama 3: <|begin_of_text|>
  // first). Special tokens written in the text ("<|endoftext|>") become their ids either way,
  // as in HF. Throws Error for text that is not valid UTF-8. Linear in the text's length
  // (n log n in the length of one pre-tokenized word).
  std::vector<std::int32_t> encode(std::string_view text, bool add_special = false) const;

  // The text of `ids`: the tokens' bytes (byte-level tokens mapped back through GPT-2's
  // bytes_to_unicode table) joined, then made valid UTF-8 as HF does (String::from_utf8_lossy:
  // one U+FFFD per maximal invalid subsequence). skip_special drops special added tokens.
  // Throws Error naming an id that is not in the vocabulary.
  std::string decode(std::span<const std::int32_t> ids, bool skip_special = false) const;

  // The raw bytes of one token (no UTF-8 repair: may be part of a character). Throws Error
  // for an unknown id.
  std::string token_bytes(std::int32_t id) const;

  // One more than the largest id of the vocabulary and the added tokens (HF's
  // get_vocab_size(with_added_tokens=True) for a vocabulary without holes).
  int vocab_size() const;
  // The id of a token written as in the vocabulary ("Ġthe", "<|endoftext|>"); nullopt if none.
  std::optional<std::int32_t> token_id(std::string_view token) const;
  // The vocabulary string of `id`; nullopt for an unknown id.
  std::optional<std::string> id_to_token(std::int32_t id) const;
  const std::vector<AddedToken>& added_tokens() const;
  bool is_special(std::int32_t id) const;
  // bos: tokenizer_config.json's bos_token, else the TemplateProcessing's leading special
  // token. eos: tokenizer_config.json's eos_token, else the first of <|end_of_text|>,
  // <|endoftext|>, </s> that is an added token. nullopt when neither gives one.
  std::optional<std::int32_t> bos_id() const;
  std::optional<std::int32_t> eos_id() const;
  // The file the tokenizer came from (tokenizer.json, or the vocab.json of a GPT-2 folder).
  const std::string& source() const;

  struct Impl;

 private:
  friend class TokenStreamDecoder;
  explicit Tokenizer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;  // owned
};

// Streaming decode for a progress printer: push ids as they are generated and print what comes
// back, which is only whole UTF-8 characters (a character split across tokens, as byte-level
// BPE splits emoji and CJK, waits for its last byte). The concatenation of every push() and
// finish() equals Tokenizer::decode of all the ids. The tokenizer is BORROWED and must outlive
// the decoder.
class TokenStreamDecoder {
 public:
  explicit TokenStreamDecoder(const Tokenizer& tokenizer, bool skip_special = false);
  // The complete characters now available (may be empty). Throws Error for an unknown id.
  std::string push(std::int32_t id);
  // The rest: a trailing incomplete character becomes U+FFFD. The decoder can then be reused.
  std::string finish();

 private:
  const Tokenizer* tokenizer_;  // borrowed
  bool skip_special_;
  std::string pending_;  // byte-level: bytes of an incomplete UTF-8 character (at most 3)
  // SentencePiece-style decoders: the ids printed last (the first context_ids_ of ids_, whose
  // text is context_text_), then those not printed yet.
  std::vector<std::int32_t> ids_;
  std::size_t context_ids_ = 0;
  std::string context_text_;
};

// UTF-8 repair as Rust's String::from_utf8_lossy: `bytes` with each maximal invalid
// subsequence replaced by U+FFFD. With final = false, a valid but incomplete character at the
// end is left in `bytes` (for the next call) instead of being replaced; the rest is consumed.
std::string utf8_take_valid(std::string& bytes, bool final);

}  // namespace strata::models
