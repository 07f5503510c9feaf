#include "models/io/token_file.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cerrno>
#include <cstring>
#include <utility>

#include "core/error.h"

namespace strata::models {
namespace {

constexpr std::size_t kChunkBytes = std::size_t{1} << 20;  // staging buffer for byte work

// An owned file descriptor, closed on destruction (close errors on the read path do not
// matter; the write path closes explicitly and checks).
class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;

  int get() const { return fd_; }
  int release() { return std::exchange(fd_, -1); }

 private:
  int fd_;
};

std::uint32_t load_le32(const unsigned char* p) {
  return static_cast<std::uint32_t>(p[0]) | (static_cast<std::uint32_t>(p[1]) << 8) |
         (static_cast<std::uint32_t>(p[2]) << 16) | (static_cast<std::uint32_t>(p[3]) << 24);
}

void store_le32(unsigned char* p, std::int32_t value) {
  const auto v = static_cast<std::uint32_t>(value);
  p[0] = static_cast<unsigned char>(v);
  p[1] = static_cast<unsigned char>(v >> 8);
  p[2] = static_cast<unsigned char>(v >> 16);
  p[3] = static_cast<unsigned char>(v >> 24);
}

// Throws the Error for a failed system call; errno is read first, before any string is built.
[[noreturn]] void throw_errno(const char* call, const std::string& where, const char* hint = "") {
  const int e = errno;
  throw system_error(e, call, where, hint);
}

[[maybe_unused]] std::uint16_t swap16(std::uint16_t v) { return static_cast<std::uint16_t>((v >> 8) | (v << 8)); }
[[maybe_unused]] std::uint32_t swap32(std::uint32_t v) {
  return (v >> 24) | ((v >> 8) & 0xff00u) | ((v << 8) & 0xff0000u) | (v << 24);
}

Fd open_for_reading(const std::string& path, const char* what) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int e = errno;
    if (e == ENOENT)
      throw Error(fmt::format("{} not found", what), path,
                  "check the path (a relative path starts at the current folder)");
    if (e == EACCES) throw system_error(e, "open", path, "check the file's permissions");
    throw system_error(e, "open", path);
  }
  return Fd(fd);
}

// Size of the regular file behind fd; anything else (a folder, a device) is an error.
std::uint64_t regular_file_bytes(const Fd& fd, const std::string& path, const char* what) {
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) throw_errno("fstat", path);
  if (!S_ISREG(st.st_mode))
    throw Error(fmt::format("{} is not a regular file", what), path,
                S_ISDIR(st.st_mode) ? "give the path of a file inside this folder"
                                    : "give the path of a regular file");
  return static_cast<std::uint64_t>(st.st_size);
}

// Reads exactly `bytes` at `offset`; retries short reads and EINTR.
void read_exact(const Fd& fd, void* buf, std::size_t bytes, std::uint64_t offset,
                const std::string& path) {
  auto* p = static_cast<unsigned char*>(buf);
  while (bytes > 0) {
    const ssize_t n = ::pread(fd.get(), p, bytes, static_cast<off_t>(offset));
    if (n < 0) {
      if (errno == EINTR) continue;
      throw_errno("pread", path);
    }
    if (n == 0)
      throw Error("the file ended early: it shrank while it was read", path,
                  "is another process writing it? read it again once it is complete");
    p += n;
    bytes -= static_cast<std::size_t>(n);
    offset += static_cast<std::uint64_t>(n);
  }
}

void write_all(int fd, const unsigned char* p, std::size_t bytes, const std::string& path) {
  while (bytes > 0) {
    const ssize_t n = ::write(fd, p, bytes);
    if (n < 0) {
      if (errno == EINTR) continue;
      const int e = errno;
      throw system_error(e, "write", path,
                         e == ENOSPC ? "free space on the disk that holds this file" : "");
    }
    p += n;
    bytes -= static_cast<std::size_t>(n);
  }
}

template <typename Token>
void write_tokens(const std::string& path, std::span<const Token> tokens, std::int32_t magic,
                  std::int32_t version) {
  if (tokens.size() > kTokenFileMaxTokens)
    throw Error(fmt::format("too many tokens for one llm.c token file: {} (its header counts "
                            "at most {})",
                            tokens.size(), kTokenFileMaxTokens),
                path, "split the data into several files");

  // Same folder as the target, so that the rename stays on one file system.
  const std::string tmp = fmt::format("{}.tmp.{}", path, ::getpid());
  Fd fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
  if (fd.get() < 0) {
    const int e = errno;
    throw system_error(e, "open", tmp,
                       e == ENOENT ? "create the folder first" : "check the folder's permissions");
  }
  try {
    std::array<unsigned char, kTokenFileHeaderBytes> header{};
    store_le32(&header[0], magic);
    store_le32(&header[4], version);
    store_le32(&header[8], static_cast<std::int32_t>(tokens.size()));
    write_all(fd.get(), header.data(), header.size(), tmp);

    // Tokens as little-endian bytes, a chunk at a time.
    std::vector<unsigned char> chunk(kChunkBytes);
    const std::size_t per_chunk = chunk.size() / sizeof(Token);
    for (std::size_t begin = 0; begin < tokens.size(); begin += per_chunk) {
      const std::size_t n = std::min(per_chunk, tokens.size() - begin);
      for (std::size_t i = 0; i < n; ++i) {
        const Token t = tokens[begin + i];
        for (std::size_t b = 0; b < sizeof(Token); ++b)
          chunk[sizeof(Token) * i + b] = static_cast<unsigned char>(t >> (8 * b));
      }
      write_all(fd.get(), chunk.data(), sizeof(Token) * n, tmp);
    }

    // On disk before the rename: a crash leaves the old file or the whole new one.
    if (::fsync(fd.get()) != 0) throw_errno("fsync", tmp);
    if (::close(fd.release()) != 0) throw_errno("close", tmp);
    if (::rename(tmp.c_str(), path.c_str()) != 0)
      throw_errno("rename", path, "check the folder's permissions");
  } catch (...) {
    ::unlink(tmp.c_str());  // best effort: the error that got us here is the one to report
    throw;
  }
}

}  // namespace

const char* token_format_name(TokenFormat format) {
  switch (format) {
    case TokenFormat::kLlmc: return "llm.c token file";
    case TokenFormat::kBytes: return "bytes";
    case TokenFormat::kTokenized: return "tokenized text";
  }
  return "unknown";
}

void TokenData::copy_to(std::size_t begin, std::size_t n, std::int32_t* out) const {
  STRATA_ASSERT(begin <= size() && n <= size() - begin);
  if (wide) {
    const std::uint32_t* src = wide_tokens.data() + begin;
    for (std::size_t i = 0; i < n; ++i) out[i] = static_cast<std::int32_t>(src[i]);
  } else {
    const std::uint16_t* src = tokens.data() + begin;
    for (std::size_t i = 0; i < n; ++i) out[i] = src[i];
  }
}

std::int64_t TokenData::min_vocab_size() const {
  if (size() == 0) return 0;
  if (wide) return std::int64_t{*std::max_element(wide_tokens.begin(), wide_tokens.end())} + 1;
  return std::int64_t{*std::max_element(tokens.begin(), tokens.end())} + 1;
}

void TokenData::validate(std::int64_t vocab_size) const {
  STRATA_ASSERT(vocab_size > 0);
  std::size_t bad = size();
  for (std::size_t i = 0; i < size(); ++i) {
    if (std::int64_t{at(i)} >= vocab_size) {
      bad = i;
      break;
    }
  }
  if (bad == size()) return;
  const std::int64_t needed = min_vocab_size();
  throw Error(
      fmt::format("token {} at position {} is outside the model's vocabulary (vocab_size {})", at(bad),
                  bad, vocab_size),
      path,
      format == TokenFormat::kBytes
          ? fmt::format("byte-level text needs a vocabulary of {} (any byte may occur; this "
                        "file's largest is {}); use a model with vocab_size >= {}",
                        kByteVocabSize, needed - 1, kByteVocabSize)
          : fmt::format("the file was made for a bigger vocabulary; use a model with "
                        "vocab_size >= {}",
                        needed));
}

TokenData read_token_file(const std::string& path) {
  const Fd fd = open_for_reading(path, "token file");
  const std::uint64_t file_bytes = regular_file_bytes(fd, path, "the token file");

  // The header, or as much of it as there is.
  std::array<unsigned char, kTokenFileHeaderBytes> header{};
  read_exact(fd, header.data(),
             static_cast<std::size_t>(std::min<std::uint64_t>(file_bytes, kTokenFileHeaderBytes)),
             0, path);

  // The magic first, even in a short file: a short text file is better told "this is text"
  // than "this is short".
  const auto magic = file_bytes >= 4 ? static_cast<std::int32_t>(load_le32(&header[0])) : 0;
  if (file_bytes >= 4) {
    if (magic != kTokenFileMagic && magic != kTokenFileMagicU32)
      throw Error(fmt::format("not an llm.c token file: it starts with {} (0x{:08x}) where the "
                              "magic number {} (uint16 tokens) or {} (uint32 tokens) should be; "
                              "it may be a plain text file",
                              magic, static_cast<std::uint32_t>(magic), kTokenFileMagic,
                              kTokenFileMagicU32),
                  path,
                  "to train on a text file's bytes (vocabulary 256), pass --text; token files "
                  "come from llm.c's dev/data scripts (write_datafile)");
  }
  if (file_bytes < kTokenFileHeaderBytes)
    throw Error(fmt::format("the token file is {} bytes, shorter than the {}-byte header of an "
                            "llm.c token file",
                            file_bytes, kTokenFileHeaderBytes),
                path,
                "the file was cut off: make or download it again (for plain text, pass --text)");

  // llm.c pairs each magic with one version (its HEADERS_INFO).
  const bool wide = magic == kTokenFileMagicU32;
  const std::int32_t want_version = wide ? kTokenFileVersionU32 : kTokenFileVersion;
  const auto version = static_cast<std::int32_t>(load_le32(&header[4]));
  if (version != want_version)
    throw Error(fmt::format("unsupported token file version {} with magic {} (strata reads "
                            "version {} with magic {}: uint16 tokens, and version {} with "
                            "magic {}: uint32 tokens)",
                            version, magic, kTokenFileVersion, kTokenFileMagic,
                            kTokenFileVersionU32, kTokenFileMagicU32),
                path,
                "make the file with strata tokenize, or with llm.c's write_datafile "
                "(model_desc \"gpt-2\" for uint16 tokens, \"llama-3\" for uint32)");
  const std::size_t token_bytes = wide ? sizeof(std::uint32_t) : sizeof(std::uint16_t);

  const auto count = static_cast<std::int32_t>(load_le32(&header[8]));
  if (count <= 0)
    throw Error(count == 0 ? std::string("the token file holds no tokens")
                           : fmt::format("the token file's header gives a negative token count "
                                         "({})",
                                         count),
                path, "make the file again from a non-empty dataset");

  const auto ntokens = static_cast<std::uint64_t>(count);
  const std::uint64_t expected_bytes = kTokenFileHeaderBytes + ntokens * token_bytes;
  if (file_bytes < expected_bytes)
    throw Error(fmt::format("the token file is truncated: its header says {} tokens ({} bytes "
                            "in all) but the file has {} bytes",
                            ntokens, expected_bytes, file_bytes),
                path, "the copy or download was cut off; fetch or write the file again");
  if (file_bytes > expected_bytes)
    throw Error(fmt::format("the token file has {} trailing bytes: its header says {} tokens ({} "
                            "bytes in all) but the file has {} bytes",
                            file_bytes - expected_bytes, ntokens, expected_bytes, file_bytes),
                path,
                "the header's token count does not match the data (was the file appended "
                "to?); write the file again");

  TokenData data;
  data.path = path;
  data.format = TokenFormat::kLlmc;
  data.wide = wide;
  // Straight into the token array; the file is little-endian.
  if (wide) {
    data.wide_tokens.resize(ntokens);
    read_exact(fd, data.wide_tokens.data(), ntokens * token_bytes, kTokenFileHeaderBytes, path);
    if constexpr (std::endian::native == std::endian::big)
      for (auto& t : data.wide_tokens) t = swap32(t);
  } else {
    data.tokens.resize(ntokens);
    read_exact(fd, data.tokens.data(), ntokens * token_bytes, kTokenFileHeaderBytes, path);
    if constexpr (std::endian::native == std::endian::big)
      for (auto& t : data.tokens) t = swap16(t);
  }
  return data;
}

TokenData read_bytes_as_tokens(const std::string& path) {
  const Fd fd = open_for_reading(path, "text file");
  const std::uint64_t file_bytes = regular_file_bytes(fd, path, "the text file");

  TokenData data;
  data.path = path;
  data.format = TokenFormat::kBytes;
  data.tokens.reserve(file_bytes);
  // To the end of the file (not to the size fstat saw), widening a chunk at a time.
  std::vector<unsigned char> chunk(kChunkBytes);
  for (;;) {
    const ssize_t n = ::read(fd.get(), chunk.data(), chunk.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      throw_errno("read", path);
    }
    if (n == 0) break;
    data.tokens.insert(data.tokens.end(), chunk.begin(), chunk.begin() + n);
  }
  if (data.tokens.empty())
    throw Error("the text file is empty", path,
                "train on a file with at least batch_size * seq_len + 1 bytes");
  return data;
}

void write_token_file(const std::string& path, std::span<const std::uint16_t> tokens) {
  write_tokens(path, tokens, kTokenFileMagic, kTokenFileVersion);
}

void write_token_file(const std::string& path, std::span<const std::uint32_t> tokens) {
  write_tokens(path, tokens, kTokenFileMagicU32, kTokenFileVersionU32);
}

void write_token_file(const std::string& path, const TokenData& data) {
  if (data.wide) {
    write_token_file(path, std::span<const std::uint32_t>(data.wide_tokens));
  } else {
    write_token_file(path, std::span<const std::uint16_t>(data.tokens));
  }
}

}  // namespace strata::models
