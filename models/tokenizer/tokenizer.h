#pragma once
// Hugging Face BPE tokenizers for `strata infer`, byte-level (GPT-2, Llama 3, Qwen2) and
// SentencePiece-style (Llama 2, TinyLlama, Mistral): text to token ids and back, matching the
// `tokenizers` library (0.23.3) id for id (tests/models/test_tokenizer checks golden ids that
// `tokenizers` produced).
//
// What loads: a model folder holding tokenizer.json (preferred) or GPT-2's vocab.json +
// merges.txt, or a tokenizer.json path. Supported, and checked at load:
//   model          BPE with vocab, merges ("a b" strings or [a, b] pairs), ignore_merges,
//                  unk_token/fuse_unk, byte_fallback ("<0x00>".."<0xFF>" tokens); no dropout,
//                  no subword prefix or end-of-word suffix
//   normalizer     null, NFC (Qwen2), NFD, NFKC, NFKD, Prepend, Replace (Llama 2's "▁"), or a
//                  Sequence of those
//   pre_tokenizer  null (Llama 2), ByteLevel (add_prefix_space, use_regex with GPT-2's regex),
//                  Split (Regex or String pattern, any behavior, invert false), Digits,
//                  Metaspace (prepend_scheme first/always/never or the older add_prefix_space,
//                  split; Mistral v0.3), and a Sequence of them (ByteLevel last)
//   post_processor null, ByteLevel, TemplateProcessing (its special tokens around "A"), or a
//                  Sequence of those
//   decoder        ByteLevel, or a chain of Replace, ByteFallback, Fuse, Strip (stop 0) and
//                  Metaspace (not both kinds in one chain)
//   added_tokens   normalized: false ones split out of the raw text first, normalized: true
//                  ones out of each normalized part by their normalized form (as HF's
//                  AddedVocabulary), leftmost-longest, honouring lstrip, rstrip and single_word
//   ids            integers in [0, 2^22) (16 times the largest released vocabulary)
// Refused with a strata::Error naming the file and key: WordPiece, Unigram, WordLevel, any
// other normalizer, pre-tokenizer, post-processor or decoder type.
//
// Differences from `tokenizers`, by design: encode() refuses text that is not valid UTF-8 (a
// Rust &str always is); decode() refuses an id outside the vocabulary (HF skips it);
// tokenizer.json's "truncation" and "padding" are ignored (strata asks for neither).
//
// Unicode normalization uses ICU (libicu-dev; the same Unicode data as the rest of the system):
// NFC needs the canonical composition tables of the Unicode Character Database and the Hangul
// algorithm, too much to carry and keep correct here. ASCII text skips it (ASCII is already in
// every normal form). Regexes use PCRE2 (libpcre2-dev) with UTF and UCP, so \p{L}, \p{N}, \s
// and (?i:...) are Unicode-aware as in HF's Oniguruma. Where the Unicode versions differ (PCRE2
// 10.42: 14.0, ICU 72: 15.0; `tokenizers`: 16.0 in regexes, 17.0 in Digits, older than 12.1 in
// normalization) strata follows `tokenizers` (unicode_compat.cpp).
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
  bool special = false;      // skipped by decode(ids, skip_special = true) (see is_special())
  bool lstrip = false;       // swallows the whitespace before it
  bool rstrip = false;       // swallows the whitespace after it
  bool single_word = false;  // matches only with no word character on either side
  bool normalized = false;   // matched, and decoded, by its normalized form
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
  // first; Llama 2: <s>). Special tokens written in the text ("<|endoftext|>") become their ids either way,
  // as in HF. Throws Error for text that is not valid UTF-8. Linear in the text's length
  // (n log n in the length of one pre-tokenized word).
  std::vector<std::int32_t> encode(std::string_view text, bool add_special = false) const;

  // The text of `ids` through the decoder. ByteLevel: the tokens' bytes (mapped back through
  // GPT-2's bytes_to_unicode table) joined, then made valid UTF-8 as HF does
  // (String::from_utf8_lossy: one U+FFFD per maximal invalid subsequence). SentencePiece-style:
  // HF's decoder chain (Llama 2: "▁" is a space, byte tokens their bytes, the first space
  // stripped). skip_special drops the ids is_special() names. Throws Error naming an id that
  // is not in the vocabulary.
  std::string decode(std::span<const std::int32_t> ids, bool skip_special = false) const;

  // The raw bytes of one token (no UTF-8 repair: may be part of a character). SentencePiece-
  // style: a "<0xXX>" token's byte, else the token as it reads after the first one ("▁the" is
  // " the"). Throws Error for an unknown id.
  std::string token_bytes(std::int32_t id) const;

  // One more than the largest id of the vocabulary and the added tokens (HF's
  // get_vocab_size(with_added_tokens=True) for a vocabulary without holes).
  int vocab_size() const;
  // The id of a token written as in the vocabulary ("Ġthe", "<|endoftext|>"); nullopt if none.
  std::optional<std::int32_t> token_id(std::string_view token) const;
  // The vocabulary string of `id`; nullopt for an unknown id.
  std::optional<std::string> id_to_token(std::int32_t id) const;
  const std::vector<AddedToken>& added_tokens() const;
  // Whether decode(ids, skip_special = true) drops `id`: HF drops a token whose text is the
  // content of a special added token (for a normalized: true one, its normalized form's).
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
// BPE splits emoji and CJK, waits for its last byte; with a SentencePiece-style decoder a run of
// byte tokens waits for the token after it). The concatenation of every push() and finish()
// equals Tokenizer::decode of all the ids. The tokenizer is BORROWED and must outlive the
// decoder.
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
