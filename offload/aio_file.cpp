#include "offload/aio_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <utility>

#include <fmt/format.h>

#include "core/error.h"
#include "core/log.h"
#include "offload/probe.h"

namespace strata::offload {
namespace {

std::string folder_of(const std::string& path) {
  std::string parent = std::filesystem::path(path).parent_path().string();
  return parent.empty() ? "." : parent;
}

std::string open_hint(int errnum) {
  switch (errnum) {
    case ENOENT: return "create the folder first, or check the path in the config";
    case EACCES:
    case EPERM: return "make the folder writable by this user, or choose another folder";
    case EROFS: return "the file system is read-only: choose a writable folder";
    case EMFILE:
    case ENFILE: return "too many open files: raise ulimit -n";
    case ENOSPC: return "the file system is full: free space or choose another folder";
    default: return {};
  }
}

}  // namespace

AioFile AioFile::open(const std::string& path, int flags, DirectIo direct, mode_t mode) {
  // The engine decides O_DIRECT; a caller's O_DIRECT would bypass the fallback logic.
  flags = (flags & ~O_DIRECT) | O_CLOEXEC;
  AioFile f;
  f.path_ = path;

  if (direct != DirectIo::kOff) {
    int fd = ::open(path.c_str(), flags | O_DIRECT, mode);
    if (fd >= 0) {
      f.fd_ = fd;
      f.direct_ = true;
      return f;
    }
    const int e = errno;
    if (e != EINVAL) {
      throw Error(fmt::format("cannot open for I/O: {}", errno_text(e)), path, open_hint(e));
    }
    // EINVAL: the file system refuses O_DIRECT. Linux checks that after the file is created,
    // so with O_CREAT|O_EXCL the file now exists and is ours: drop O_EXCL for the retry, and
    // remove the file if no retry follows.
    const std::string fs = file_system_type(folder_of(path));
    if (flags & O_EXCL) {
      if (direct == DirectIo::kRequire) ::unlink(path.c_str());
      flags &= ~O_EXCL;
    }
    if (direct == DirectIo::kRequire) {
      throw Error(fmt::format("cannot open with O_DIRECT: the file system ({}) refuses it "
                              "(open: {})", fs, errno_text(e)),
                  path,
                  "put the swap folder on a local file system with O_DIRECT (ext4, xfs, "
                  "btrfs on NVMe), or allow buffered I/O (direct I/O 'auto' or 'off')");
    }
    log::warn_once("aio_file.no_o_direct:" + folder_of(path),
                   fmt::format("O_DIRECT is refused in {} ({}): files there use buffered I/O "
                               "(page cache; slower, and durable only after sync)",
                               folder_of(path), fs));
  }

  int fd = ::open(path.c_str(), flags, mode);
  if (fd < 0) {
    const int e = errno;
    throw Error(fmt::format("cannot open for I/O: {}", errno_text(e)), path, open_hint(e));
  }
  f.fd_ = fd;
  f.direct_ = false;
  return f;
}

AioFile::~AioFile() {
  if (fd_ >= 0) ::close(fd_);
}

AioFile::AioFile(AioFile&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)),
      path_(std::move(other.path_)),
      direct_(std::exchange(other.direct_, false)) {}

AioFile& AioFile::operator=(AioFile&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = std::exchange(other.fd_, -1);
    path_ = std::move(other.path_);
    direct_ = std::exchange(other.direct_, false);
  }
  return *this;
}

void AioFile::sync() const {
  STRATA_ASSERT(fd_ >= 0, "sync() on a closed AioFile");
  if (::fdatasync(fd_) != 0) {
    const int e = errno;
    throw Error(fmt::format("fdatasync failed: {}", errno_text(e)), path_,
                e == EIO ? "the device reported an I/O error: check dmesg and the drive's health"
                         : std::string());
  }
}

std::uint64_t AioFile::size_bytes() const {
  STRATA_ASSERT(fd_ >= 0, "size_bytes() on a closed AioFile");
  struct stat st{};
  if (::fstat(fd_, &st) != 0) {
    const int e = errno;
    throw Error(fmt::format("fstat failed: {}", errno_text(e)), path_);
  }
  return static_cast<std::uint64_t>(st.st_size);
}

}  // namespace strata::offload
