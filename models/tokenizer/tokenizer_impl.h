#pragma once
// The parts of a Tokenizer (internal to models/tokenizer/): the BPE model, the regex, the
// normalizer and pre-tokenizer steps, and Tokenizer::Impl, which load() fills and encode() and
// decode() run. Each piece mirrors the `tokenizers` component of the same name.
#include <array>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/utf8.h"
#include "models/tokenizer/tokenizer.h"

namespace strata::models::tok {

// Transparent hashing, so that maps keyed by std::string are searched with a string_view.
struct StringHash {
  using is_transparent = void;
  std::size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
using Vocab = std::unordered_map<std::string, std::int32_t, StringHash, std::equal_to<>>;

// ---- byte level ---------------------------------------------------------------------------
// GPT-2's bytes_to_unicode: each byte is shown as one printable code point (printable Latin-1
// bytes as themselves, the other 68 as U+0100..U+0143), so that every token is printable text.
struct ByteLevelTable {
  std::array<std::string, 256> byte_to_utf8;        // byte -> its code point, UTF-8 encoded
  std::unordered_map<std::uint32_t, std::uint8_t> cp_to_byte;  // the inverse
  static const ByteLevelTable& get();
};
// `bytes` written in the byte-level alphabet ("Ġthe" for " the").
std::string byte_level_encode(std::string_view bytes);
// The bytes behind a token string; nullopt if it holds a code point outside the table (HF's
// ByteLevel decoder then keeps the token's own UTF-8, which the caller does).
std::optional<std::string> byte_level_decode(std::string_view token);

// ---- UTF-8 ----------------------------------------------------------------------------------
// The byte offset of the first invalid UTF-8 sequence in `s`; nullopt when `s` is valid.
std::optional<std::size_t> utf8_invalid_at(std::string_view s);
// Decodes the code point at s[i] (s valid UTF-8) and advances i.
std::uint32_t utf8_next(std::string_view s, std::size_t& i);
// utf8_append: core/utf8.h.

// ---- regex (PCRE2, UTF + UCP) -------------------------------------------------------------
class Regex {
 public:
  // `literal`: match `pattern` as plain text (Split's {"String": ...}). Throws Error (where =
  // `where`) when PCRE2 refuses the pattern.
  Regex(const std::string& pattern, bool literal, const std::string& where);
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;
  // Every non-overlapping match of valid UTF-8 `text`, left to right, as [begin, end) byte
  // offsets; empty matches are skipped.
  std::vector<std::pair<std::size_t, std::size_t>> find_all(std::string_view text) const;

 private:
  void* code_ = nullptr;  // owned pcre2_code_8
};

// ---- Unicode as `tokenizers` sees it (unicode_compat.cpp, tables in unicode_tables.inc) ---------
// `tokenizers` 0.23.3 carries newer Unicode tables than PCRE2 10.42 (14.0) and ICU 72 (15.0) in
// some places and older ones in others; these answer as it does.
// Rust's char::is_whitespace (White_Space), as the regex crate's \s of lstrip/rstrip.
bool is_space(std::uint32_t cp);
// The regex crate's \w (Alphabetic, M, Nd, Pc, Join_Control; Unicode 16.0): single_word.
bool is_word(std::uint32_t cp);
// Rust's char::is_numeric (Nd, Nl, No; Unicode 17.0): the Digits pre-tokenizer.
bool is_numeric(std::uint32_t cp);
// `pattern` rewritten so that PCRE2 (UTF + UCP) matches what Oniguruma (Unicode 16.0) does:
// \p{L}, \p{N} and their subcategories and \p{M} gain the code points Unicode 15-16 added,
// and \s no longer matches U+180E (Oniguruma's does not).
std::string pcre2_pattern(std::string_view pattern);
// A code point that ICU 72 normalizes and `tokenizers` leaves alone (see normalize()).
bool normalize_verbatim(std::uint32_t cp);

// ---- normalizer -----------------------------------------------------------------------------
enum class NormalForm { nfc, nfd, nfkc, nfkd };
// `text` (valid UTF-8) in the normal form, by ICU, except for the few code points that ICU 72
// decomposes, reorders or composes and `tokenizers`' older tables leave alone: those stay as
// they are and split the text into parts normalized apart (as a starter that composes with
// nothing does).
std::string normalize(std::string_view text, NormalForm form);

// One normalizer of tokenizer.json's "normalizer" (a Sequence is flattened into its steps).
struct NormalizerStep {
  enum class Kind { unicode, prepend, replace } kind = Kind::unicode;
  NormalForm form = NormalForm::nfc;    // unicode
  std::string text;                     // prepend: what to put first; replace: the content
  std::shared_ptr<const Regex> pattern; // replace
};
// `text` through the steps in order (HF's Normalizer::normalize on one split).
std::string apply_normalizers(const std::vector<NormalizerStep>& steps, std::string text);
// Every match of `pattern` in `text` replaced by `content` (HF's NormalizedString::replace).
std::string replace_all(const Regex& pattern, std::string_view text, std::string_view content);

// ---- pre-tokenizer --------------------------------------------------------------------------
// SplitDelimiterBehavior of `tokenizers`.
enum class SplitBehavior { removed, isolated, merged_with_previous, merged_with_next, contiguous };

// Metaspace's prepend_scheme: when the replacement is put before a piece that lacks one.
enum class PrependScheme { always, first, never };

struct PreTokenizerStep {
  enum class Kind { split, digits, byte_level, metaspace } kind = Kind::split;
  std::shared_ptr<const Regex> regex;  // split; byte_level with use_regex (GPT-2's pattern)
  SplitBehavior behavior = SplitBehavior::isolated;
  bool individual_digits = false;  // digits
  bool add_prefix_space = false;   // byte_level
  std::string replacement;         // metaspace: the character for ' ' ("▁"), UTF-8
  PrependScheme prepend_scheme = PrependScheme::always;  // metaspace
  bool split = true;               // metaspace: split before each replacement
};

// Applies `step` to every piece in place (pieces never become empty). A byte_level step
// rewrites the pieces in the byte-level alphabet, so it comes last. `first_at_start`: whether
// pieces[0] begins at offset 0 of the text given to encode() (Metaspace's "first" scheme
// prepends only there); updated when the step moves that beginning.
void apply_step(const PreTokenizerStep& step, std::vector<std::string>& pieces,
                bool& first_at_start);

// ---- BPE ------------------------------------------------------------------------------------
class BpeModel {
 public:
  Vocab vocab;
  std::vector<std::string> id_to_token;  // "" for an id the vocabulary skips
  // (left id << 32 | right id) -> (rank, merged id)
  std::unordered_map<std::uint64_t, std::pair<std::int32_t, std::int32_t>> merges;
  bool ignore_merges = false;
  std::optional<std::int32_t> unk_id;
  bool fuse_unk = false;
  // byte_fallback: a character missing from the vocabulary becomes the "<0xXX>" tokens of its
  // bytes when all of them are in the vocabulary (-1: not there); else the unk token.
  bool byte_fallback = false;
  std::array<std::int32_t, 256> byte_ids{};

  // Appends the ids of one pre-tokenized word (byte-level text) to `out`: its code points
  // mapped to ids, then merged lowest rank first (leftmost among equal ranks) with a heap.
  void tokenize(std::string_view word, std::vector<std::int32_t>& out) const;
};

// ---- decoder (decoder.cpp) ------------------------------------------------------------------
// One decoder of tokenizer.json's "decoder" other than ByteLevel (SentencePiece-style chains:
// Llama 2's Replace, ByteFallback, Fuse, Strip; Metaspace).
struct DecoderStep {
  enum class Kind { replace, byte_fallback, fuse, strip, metaspace } kind = Kind::replace;
  std::shared_ptr<const Regex> pattern;  // replace
  std::string content;                   // replace: the new text; strip, metaspace: the character
  std::size_t strip_start = 0;           // strip: at most this many leading `content` characters
  PrependScheme prepend_scheme = PrependScheme::always;  // metaspace
};
// HF's decode_chain of each step in turn over the token strings; the result joined.
std::string run_decoders(const std::vector<DecoderStep>& steps, std::vector<std::string> tokens);
// `token` decoded as one that is not the first (token_bytes()): a "<0xXX>" token's byte when
// the chain has ByteFallback, else the token through its Replace and Metaspace steps.
std::string decode_token_alone(const std::vector<DecoderStep>& steps, bool byte_fallback_step,
                               std::string_view token);
// Whether `token` is one of ByteFallback's "<0xXX>" tokens; its byte in `byte`.
bool byte_fallback_token(std::string_view token, std::uint8_t* byte = nullptr);

// Added tokens matched in one text (the raw text, or a normalized part of it), as HF's
// AddedVocabulary: leftmost-longest, honouring lstrip, rstrip and single_word.
struct AddedMatcher {
  std::vector<std::string> patterns;  // per added token (index into Impl::added); "" = not here
  std::array<std::vector<std::size_t>, 256> by_first_byte;  // longest first
  bool empty() const { return count == 0; }
  std::size_t count = 0;
};

}  // namespace strata::models::tok

namespace strata::models {

struct Tokenizer::Impl {
  std::string source;
  tok::BpeModel bpe;
  std::vector<AddedToken> added;              // in file order
  std::unordered_map<std::int32_t, std::size_t> added_by_id;  // id -> index in `added`
  // normalized: false tokens, matched in the raw text; normalized: true ones, matched by their
  // normalized form in each normalized part of it.
  tok::AddedMatcher raw_added, normalized_added;
  std::vector<tok::NormalizerStep> normalizers;  // applied in order
  std::vector<tok::PreTokenizerStep> pre_tokenizer;
  // The decoder: ByteLevel (bytes of each token joined, then made valid UTF-8), or the steps of
  // a SentencePiece-style chain.
  bool byte_level_decoder = true;
  std::vector<tok::DecoderStep> decoders;
  bool decoder_byte_fallback = false;  // `decoders` holds a ByteFallback
  std::vector<std::int32_t> template_prefix;  // TemplateProcessing's ids before "A"
  std::vector<std::int32_t> template_suffix;  // and after it
  std::optional<std::int32_t> bos;
  std::optional<std::int32_t> eos;
  int vocab_size = 0;
  // What the decoder gets for each id: its token, or for a normalized: true added token its
  // normalized form (HF's simple_id_to_token); "" for an id outside the vocabulary.
  std::vector<std::string> id_text;
  // Whether decode(skip_special) drops the id: HF drops a token whose text (above) is the
  // content of a special added token.
  std::vector<bool> id_skippable;
  // Byte-level decoder: each id's bytes, its text mapped back through the byte-level table, or
  // (HF's ByteLevel decoder fallback, for added tokens with other characters) its own UTF-8.
  // SentencePiece-style: the token as it reads after the first one (token_bytes()).
  std::vector<std::string> id_bytes;

  // Word -> ids cache: bounded, filled until full (as HF's BPE cache).
  static constexpr std::size_t kCacheWords = 1 << 16;
  static constexpr std::size_t kCacheMaxWordBytes = 256;
  mutable std::mutex cache_mutex;
  mutable std::unordered_map<std::string, std::vector<std::int32_t>, tok::StringHash,
                             std::equal_to<>>
      cache;

  // Appends the ids of normalized text with no added tokens in it: pre-tokenize, BPE.
  // `at_start`: the text begins at offset 0 of encode()'s text.
  void encode_plain(std::string_view text, bool at_start, std::vector<std::int32_t>& out) const;
  void encode_word(std::string_view word, std::vector<std::int32_t>& out) const;
  // Splits `text` at added tokens and encodes each part (HF's AddedVocabulary): the raw text at
  // normalized: false tokens, then each part, normalized, at normalized: true ones.
  void encode_text(std::string_view text, std::vector<std::int32_t>& out) const;
  // Splits `text` at the tokens of `matcher`; `plain(begin, end)` gets each part between.
  template <typename Plain>
  void split_added(const tok::AddedMatcher& matcher, std::string_view text, Plain&& plain,
                   std::vector<std::int32_t>& out) const;
  // The bytes of `id`; throws Error for an id outside the vocabulary.
  const std::string& bytes_of(std::int32_t id) const;
  // The text of `ids` (already checked, skipped ones removed) through the decoder.
  std::string decode_checked(std::span<const std::int32_t> ids) const;
};

// Parses a tokenizer.json / a GPT-2 folder into `impl` (models/tokenizer/tokenizer_load.cpp).
std::unique_ptr<Tokenizer::Impl> load_tokenizer_impl(const std::string& path);

}  // namespace strata::models
