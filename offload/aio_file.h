#pragma once
// A file opened for the I/O engine: an owned descriptor, its path (for error messages) and
// whether it is open with O_DIRECT.
//
// O_DIRECT is asked for with DirectIo::kAuto or kRequire. Where the file system refuses it
// (tmpfs, some FUSE and network file systems: open() fails with EINVAL), kAuto falls back to
// buffered I/O and says so once in the log; kRequire throws an error naming the path, the file
// system and what to do. On a buffered file, sync() (fdatasync) is what makes writes durable.
#include <sys/types.h>

#include <cstdint>
#include <string>

namespace strata::offload {

enum class DirectIo {
  kAuto,     // O_DIRECT where the file system allows it, buffered I/O (announced once) elsewhere
  kRequire,  // O_DIRECT or an error
  kOff,      // buffered I/O
};

class AioFile {
 public:
  AioFile() = default;
  // flags: O_RDONLY / O_WRONLY / O_RDWR, optionally O_CREAT, O_EXCL, O_TRUNC (O_CLOEXEC is
  // always added; O_DIRECT is decided by `direct`). mode applies when the file is created.
  // Throws strata::Error with the path and errno text (missing folder, permission, ...).
  static AioFile open(const std::string& path, int flags, DirectIo direct, mode_t mode = 0600);

  ~AioFile();
  AioFile(AioFile&& other) noexcept;
  AioFile& operator=(AioFile&& other) noexcept;
  AioFile(const AioFile&) = delete;
  AioFile& operator=(const AioFile&) = delete;

  int fd() const { return fd_; }
  const std::string& path() const { return path_; }
  bool direct() const { return direct_; }
  explicit operator bool() const { return fd_ >= 0; }

  // fdatasync; throws strata::Error naming the path.
  void sync() const;
  // Size in bytes (fstat); throws strata::Error naming the path.
  std::uint64_t size_bytes() const;

 private:
  int fd_ = -1;
  std::string path_;
  bool direct_ = false;
};

}  // namespace strata::offload
