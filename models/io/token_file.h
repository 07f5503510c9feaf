#pragma once
// Training tokens: llm.c token files, and any file read as bytes.
//
// llm.c token file (dev/data/data_common.py write_datafile; train_gpt2.c reads it), in one of
// the two kinds llm.c writes:
//   header: 256 little-endian int32 (1024 bytes)
//     [0] magic   20240520 (GPT-2 kind)   or 20240801 (Llama 3 kind)
//     [1] version 1 = uint16 tokens       or 7 = uint32 tokens
//     [2] number of tokens N
//     [3..255] zero
//   body:   N tokens, little-endian: uint16 (2*N bytes) or uint32 (4*N bytes); nothing after.
// llm.c's HEADERS_INFO pairs the magic with the version ("gpt-2": 20240520, 1, uint16;
// "llama-3": 20240801, 7, uint32); any other pair is refused. strata writes uint16 (version 1)
// for a vocabulary of at most 65,536 ids and uint32 (version 7) above (Llama 3: 128,256), as
// llm.c's scripts do for those tokenizers.
//
// Byte-level fallback: any file (text or binary) read as bytes, one token per byte, so a
// model with vocab_size >= 256 trains on text that every machine has, without a tokenizer.
//
// TokenData holds uint16 tokens (version 1 files, bytes, text tokenized with a vocabulary of
// at most 65,536) or uint32 ones (version 7 files, larger vocabularies) — never both, so that
// GPT-2-sized data takes 2 bytes a token in memory; the loader widens them to int32 when it
// fills a batch.
//
// Every failure of the world (missing file, malformed header, wrong size, token outside the
// vocabulary) throws strata::Error with where = the path and a hint of what to do.
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace strata::models {

inline constexpr std::int32_t kTokenFileMagic = 20240520;    // llm.c "gpt-2": uint16 tokens
inline constexpr std::int32_t kTokenFileVersion = 1;
inline constexpr std::int32_t kTokenFileMagicU32 = 20240801;  // llm.c "llama-3": uint32 tokens
inline constexpr std::int32_t kTokenFileVersionU32 = 7;
// The largest vocabulary whose ids fit uint16 tokens (ids 0 .. 65,535).
inline constexpr std::int64_t kTokenFileMaxU16Vocab = 65536;
inline constexpr std::size_t kTokenFileHeaderInts = 256;
inline constexpr std::size_t kTokenFileHeaderBytes = kTokenFileHeaderInts * sizeof(std::int32_t);
// The header counts tokens in an int32.
inline constexpr std::uint64_t kTokenFileMaxTokens = 0x7fffffffu;
inline constexpr std::int64_t kByteVocabSize = 256;

enum class TokenFormat {
  kLlmc,       // an llm.c token file (read_token_file)
  kBytes,      // any file read as bytes (read_bytes_as_tokens); values < 256
  kTokenized,  // text tokenized with a model's tokenizer (models/text_tokens.h)
};

// "llm.c token file", "bytes", "tokenized text"
const char* token_format_name(TokenFormat format);

// Tokens in memory, with where they came from. Owns its tokens: `tokens` when !wide,
// `wide_tokens` when wide (the other one is empty).
struct TokenData {
  std::vector<std::uint16_t> tokens;
  std::vector<std::uint32_t> wide_tokens;
  bool wide = false;
  std::string path;  // the file they were read from (for messages)
  TokenFormat format = TokenFormat::kLlmc;

  std::size_t size() const { return wide ? wide_tokens.size() : tokens.size(); }
  std::size_t token_bytes() const { return wide ? 4 : 2; }  // in a token file
  std::uint32_t at(std::size_t i) const { return wide ? wide_tokens[i] : tokens[i]; }
  // out[0, n) = tokens [begin, begin + n) as int32 (begin + n <= size(), asserted; wide tokens
  // must be < 2^31, which validate() against any int32 vocabulary guarantees).
  void copy_to(std::size_t begin, std::size_t n, std::int32_t* out) const;

  // The smallest vocab_size that holds every token (max token + 1; 0 when empty).
  std::int64_t min_vocab_size() const;

  // Throws strata::Error naming the first token >= vocab_size and its position, with a hint
  // to use a model with vocab_size >= min_vocab_size() (>= 256 for bytes, since any byte may
  // occur in text). vocab_size must be > 0.
  void validate(std::int64_t vocab_size) const;
};

// Reads a whole llm.c token file (uint16 or uint32 kind) and validates it strictly: the file
// exists and is a regular file, is at least the 1024-byte header, carries one of the two magics
// (else: probably a plain text file, use --text) with its version, a token count in [1, 2^31)
// and exactly 1024 + 2*N (uint16) or 1024 + 4*N (uint32) bytes (neither truncated nor trailing
// bytes). Whether there are enough tokens for a batch is the loader's check (BatchLoader).
TokenData read_token_file(const std::string& path);

// Reads any file as bytes: token i = byte i (vocabulary 256). An empty file is an error.
TokenData read_bytes_as_tokens(const std::string& path);

// Writes tokens as an llm.c token file, atomically: into a temporary file in the same folder,
// flushed to disk, then renamed over `path`; on failure `path` is left as it was and the
// temporary file is removed. At most kTokenFileMaxTokens tokens. uint16 tokens make a version 1
// file (magic 20240520), uint32 tokens a version 7 file (magic 20240801).
void write_token_file(const std::string& path, std::span<const std::uint16_t> tokens);
void write_token_file(const std::string& path, std::span<const std::uint32_t> tokens);
// `data`'s tokens in its width.
void write_token_file(const std::string& path, const TokenData& data);

}  // namespace strata::models
