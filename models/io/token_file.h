#pragma once
// Training tokens: llm.c token files, and any file read as bytes.
//
// llm.c token file (dev/data/data_common.py write_datafile; train_gpt2.c reads it):
//   header: 256 little-endian int32 (1024 bytes)
//     [0] magic   20240520
//     [1] version 1 = tokens are uint16 (version 2, uint32 tokens, is not supported)
//     [2] number of tokens N
//     [3..255] zero
//   body:   N tokens, uint16 little-endian (2*N bytes); nothing after them.
//
// Byte-level fallback: any file (text or binary) read as bytes, one token per byte, so a
// model with vocab_size >= 256 trains on text that every machine has, without a tokenizer.
//
// Both sources fit in uint16 (llm.c version 1 tokens are uint16; bytes are < 256), so
// TokenData holds uint16 values; the loader widens them to int32 when it fills a batch.
//
// Every failure of the world (missing file, malformed header, wrong size, token outside the
// vocabulary) throws strata::Error with where = the path and a hint of what to do.
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace strata::models {

inline constexpr std::int32_t kTokenFileMagic = 20240520;
inline constexpr std::int32_t kTokenFileVersion = 1;  // uint16 tokens
inline constexpr std::size_t kTokenFileHeaderInts = 256;
inline constexpr std::size_t kTokenFileHeaderBytes = kTokenFileHeaderInts * sizeof(std::int32_t);
// The header counts tokens in an int32.
inline constexpr std::uint64_t kTokenFileMaxTokens = 0x7fffffffu;
inline constexpr std::int64_t kByteVocabSize = 256;

enum class TokenFormat {
  kLlmc,   // an llm.c token file (read_token_file)
  kBytes,  // any file read as bytes (read_bytes_as_tokens); values < 256
};

const char* token_format_name(TokenFormat format);  // "llm.c token file", "bytes"

// Tokens in memory, with where they came from. Owns its tokens.
struct TokenData {
  std::vector<std::uint16_t> tokens;
  std::string path;  // the file they were read from (for messages)
  TokenFormat format = TokenFormat::kLlmc;

  std::size_t size() const { return tokens.size(); }

  // The smallest vocab_size that holds every token (max token + 1; 0 when empty).
  std::int64_t min_vocab_size() const;

  // Throws strata::Error naming the first token >= vocab_size and its position, with a hint
  // to use a model with vocab_size >= min_vocab_size() (>= 256 for bytes, since any byte may
  // occur in text). vocab_size must be > 0.
  void validate(std::int64_t vocab_size) const;
};

// Reads a whole llm.c token file (version 1) and validates it strictly: the file exists and
// is a regular file, is at least the 1024-byte header, carries the magic (else: probably a
// plain text file, use --text), version 1, a token count in [1, 2^31) and exactly
// 1024 + 2*N bytes (neither truncated nor trailing bytes). Whether there are enough tokens
// for a batch is the loader's check (BatchLoader).
TokenData read_token_file(const std::string& path);

// Reads any file as bytes: token i = byte i (vocabulary 256). An empty file is an error.
TokenData read_bytes_as_tokens(const std::string& path);

// Writes tokens as an llm.c token file (version 1), atomically: into a temporary file in
// the same folder, flushed to disk, then renamed over `path`; on failure `path` is left as
// it was and the temporary file is removed. At most kTokenFileMaxTokens tokens.
void write_token_file(const std::string& path, std::span<const std::uint16_t> tokens);

}  // namespace strata::models
