#pragma once
// The parts of a Tokenizer (internal to models/tokenizer/): the BPE model, the regex, the
// normalizer and pre-tokenizer steps, and Tokenizer::Impl, which load() fills and encode() and
// decode() run. Each piece mirrors the `tokenizers` component of the same name.
#include <array>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

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
void utf8_append(std::string& out, std::uint32_t cp);

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

// ---- normalizer -----------------------------------------------------------------------------
enum class NormalForm { nfc, nfd, nfkc, nfkd };
// `text` (valid UTF-8) in the normal form, by ICU.
std::string normalize(std::string_view text, NormalForm form);

// ---- pre-tokenizer --------------------------------------------------------------------------
// SplitDelimiterBehavior of `tokenizers`.
enum class SplitBehavior { removed, isolated, merged_with_previous, merged_with_next, contiguous };

struct PreTokenizerStep {
  enum class Kind { split, digits, byte_level } kind = Kind::split;
  std::shared_ptr<const Regex> regex;  // split; byte_level with use_regex (GPT-2's pattern)
  SplitBehavior behavior = SplitBehavior::isolated;
  bool individual_digits = false;  // digits
  bool add_prefix_space = false;   // byte_level
};

// Applies `step` to every piece in place (pieces never become empty). A byte_level step
// rewrites the pieces in the byte-level alphabet, so it comes last.
void apply_step(const PreTokenizerStep& step, std::vector<std::string>& pieces);

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

  // Appends the ids of one pre-tokenized word (byte-level text) to `out`: its code points
  // mapped to ids, then merged lowest rank first (leftmost among equal ranks) with a heap.
  void tokenize(std::string_view word, std::vector<std::int32_t>& out) const;
};

}  // namespace strata::models::tok

namespace strata::models {

struct Tokenizer::Impl {
  std::string source;
  tok::BpeModel bpe;
  std::vector<AddedToken> added;              // in file order
  std::unordered_map<std::int32_t, std::size_t> added_by_id;  // id -> index in `added`
  // Added tokens by first byte, longest first: leftmost-longest matching.
  std::array<std::vector<std::size_t>, 256> added_by_first_byte;
  std::vector<tok::NormalForm> normalizers;   // applied in order
  std::vector<tok::PreTokenizerStep> pre_tokenizer;
  std::vector<std::int32_t> template_prefix;  // TemplateProcessing's ids before "A"
  std::vector<std::int32_t> template_suffix;  // and after it
  std::optional<std::int32_t> bos;
  std::optional<std::int32_t> eos;
  int vocab_size = 0;
  // Each id's bytes: the token mapped back through the byte-level table, or (HF's ByteLevel
  // decoder fallback, for added tokens with other characters) its own UTF-8.
  std::vector<std::string> id_bytes;

  // Word -> ids cache: bounded, filled until full (as HF's BPE cache).
  static constexpr std::size_t kCacheWords = 1 << 16;
  static constexpr std::size_t kCacheMaxWordBytes = 256;
  mutable std::mutex cache_mutex;
  mutable std::unordered_map<std::string, std::vector<std::int32_t>, tok::StringHash,
                             std::equal_to<>>
      cache;

  // Appends the ids of plain text (no added tokens in it): normalize, pre-tokenize, BPE.
  void encode_plain(std::string_view text, std::vector<std::int32_t>& out) const;
  void encode_word(std::string_view word, std::vector<std::int32_t>& out) const;
  // Splits `text` at added tokens and encodes each part (HF's AddedVocabulary).
  void encode_text(std::string_view text, std::vector<std::int32_t>& out) const;
  // The bytes of `id`; throws Error for an id outside the vocabulary.
  const std::string& bytes_of(std::int32_t id) const;
};

// Parses a tokenizer.json / a GPT-2 folder into `impl` (models/tokenizer/tokenizer_load.cpp).
std::unique_ptr<Tokenizer::Impl> load_tokenizer_impl(const std::string& path);

}  // namespace strata::models
