#include "offload/swap_dir.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <random>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "core/error.h"
#include "core/log.h"
#include "core/units.h"

namespace strata::offload::swap_dir {
namespace {

namespace fs = std::filesystem;

// A hidden folder younger than this may still be in the making (see the header).
constexpr std::time_t kHiddenGraceSeconds = 60;
// The name a reclaim gives a stale folder before removing it.
constexpr const char* kRemovingSuffix = ".removing";

class Fd {
 public:
  explicit Fd(int fd = -1) : fd_(fd) {}
  ~Fd() { reset(); }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }
  int release() { return std::exchange(fd_, -1); }
  void reset(int fd = -1) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = fd;
  }

 private:
  int fd_;
};

// The host name with anything but [A-Za-z0-9._] replaced, so that it is safe in a file name
// and "-" keeps separating the fields.
std::string host_tag() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof buf - 1) != 0 || buf[0] == '\0') return "host";
  std::string out;
  for (const char* p = buf; *p != '\0'; ++p) {
    const char c = *p;
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '.' || c == '_';
    out += ok ? c : '_';
  }
  return out;
}

std::string random_tag() {
  static thread_local std::mt19937 rng(std::random_device{}());
  return fmt::format("{:08x}", static_cast<std::uint32_t>(rng()));
}

bool starts_with(std::string_view s, std::string_view prefix) { return s.rfind(prefix, 0) == 0; }

// Disk space held by a folder tree (allocated blocks, which is what removing it gives back).
std::uint64_t allocated_bytes(const std::string& dir) {
  std::uint64_t bytes = 0;
  std::error_code ec;
  for (fs::recursive_directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    struct stat st{};
    if (::lstat(it->path().c_str(), &st) == 0 && !S_ISDIR(st.st_mode)) {
      bytes += static_cast<std::uint64_t>(st.st_blocks) * 512u;
    }
  }
  return bytes;
}

// Removes the run folder `dir`: everything in it but its lock file, then the lock file, then the
// folder. The caller holds the lock, so that until the very end anyone who looks sees a held
// lock (a live run or a reclaim at work), and a reclaim killed half-way leaves a folder whose
// lock is free (see the header).
std::error_code remove_lock_last(const std::string& dir) {
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator(dir, ec)) {
    if (e.path().filename() == kLockName) continue;
    fs::remove_all(e.path(), ec);
    if (ec) return ec;
  }
  if (ec) return ec;
  fs::remove(fs::path(dir) / kLockName, ec);
  if (ec) return ec;
  fs::remove(dir, ec);
  return ec;
}

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

enum class LockState { kHeld, kFree, kMissing, kUnknown };

// Tries to take the lock of the run folder `dir`. kFree: taken, `held` keeps it.
LockState try_lock(const std::string& dir, Fd& held, std::string& why) {
  const std::string lock = dir + "/" + kLockName;
  Fd fd(::open(lock.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
  if (fd.get() < 0) {
    const int e = errno;
    if (e == ENOENT) return LockState::kMissing;
    why = "open(" + lock + "): " + errno_text(e);
    return LockState::kUnknown;
  }
  if (::flock(fd.get(), LOCK_EX | LOCK_NB) != 0) {
    const int e = errno;
    if (e == EWOULDBLOCK) return LockState::kHeld;
    why = "flock(" + lock + "): " + errno_text(e);
    return LockState::kUnknown;
  }
  held.reset(fd.release());
  return LockState::kFree;
}

}  // namespace

void check_parent(const std::string& parent) {
  const char* hint_missing = "create the folder (mkdir -p) or point the swap path (nvme_path) at an "
                             "existing folder on a fast local disk";
  if (parent.empty()) {
    throw Error("the swap path is empty", "SwapOptions::paths", hint_missing);
  }
  struct stat st{};
  if (::stat(parent.c_str(), &st) != 0 && errno == ENOENT) {
    // As DeepSpeed does: a missing nvme_path whose own parent folder exists is made (and left for
    // the user, as a folder they named); a typo deeper up is still refused below.
    std::filesystem::path folder = std::filesystem::path(parent).lexically_normal();
    if (!folder.has_filename()) folder = folder.parent_path();  // "/a/b/" names /a/b
    const std::string above = folder.parent_path().string();
    struct stat up{};
    if (::stat(above.empty() ? "." : above.c_str(), &up) == 0 && S_ISDIR(up.st_mode) &&
        (::mkdir(parent.c_str(), 0755) == 0 || errno == EEXIST)) {
      log::info("swap: made the swap folder {} (nvme_path; its parent folder existed)", parent);
    }
  }
  if (::stat(parent.c_str(), &st) != 0) {
    const int e = errno;
    if (e == ENOENT) throw Error("the swap folder does not exist, nor does the folder above it", parent, hint_missing);
    if (e == ENOTDIR) {
      throw Error("the swap path is not a folder (a part of it is a file)", parent, hint_missing);
    }
    throw Error("cannot inspect the swap folder: " + errno_text(e), parent,
                "check the path and its permissions");
  }
  if (!S_ISDIR(st.st_mode)) {
    throw Error("the swap path is not a folder", parent,
                "give a folder (the swap space makes its own files inside it)");
  }
  // Writability is what making the run folder proves (access(W_OK) is wrong for root and for
  // read-only mounts); RunDir::create reports it.
}

Reclaimed reclaim_stale(const std::string& parent) {
  Reclaimed total;
  std::vector<std::string> names;
  {
    DIR* d = ::opendir(parent.c_str());
    if (d == nullptr) {
      log::warn("swap: cannot list {} to look for stale swap folders: {}", parent,
                errno_text(errno));
      return total;
    }
    while (const dirent* e = ::readdir(d)) {
      std::string_view name(e->d_name);
      if (starts_with(name, kPrefix) || starts_with(name, std::string(".") + kPrefix)) {
        names.emplace_back(name);
      }
    }
    ::closedir(d);
  }

  for (const std::string& name : names) {
    const std::string dir = parent + "/" + name;
    struct stat st{};
    if (::lstat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) continue;  // not ours
    const bool hidden = name[0] == '.';
    const bool young = hidden && std::time(nullptr) - st.st_mtime < kHiddenGraceSeconds;
    // A reclaim's folder is not being made: its lock alone tells (see the header).
    const bool removing = hidden && ends_with(name, kRemovingSuffix);
    if (young && !removing) continue;

    Fd lock;
    std::string why;
    const LockState state = try_lock(dir, lock, why);
    if (state == LockState::kHeld) continue;  // a live run, or a reclaim at work
    if (state == LockState::kUnknown) {
      log::warn("swap: cannot tell whether {} belongs to a live run, leaving it: {}", dir, why);
      continue;
    }
    if (state == LockState::kMissing && young) continue;  // the grace of hidden folders

    // Ours to remove: move it out of sight first, so a concurrent reclaimer skips it.
    std::string doomed = dir;
    if (!hidden) {
      doomed = parent + "/." + name + "." + random_tag() + kRemovingSuffix;
      if (::rename(dir.c_str(), doomed.c_str()) != 0) {
        if (errno != ENOENT) {
          log::warn("swap: cannot remove the stale swap folder {}: rename: {}", dir,
                    errno_text(errno));
        }
        continue;  // ENOENT: another process is reclaiming it
      }
    }
    const std::uint64_t bytes = allocated_bytes(doomed);
    // Without a lock file (kMissing) there is nothing to keep for last.
    std::error_code ec;
    if (state == LockState::kFree) {
      ec = remove_lock_last(doomed);
    } else {
      fs::remove_all(doomed, ec);
    }
    if (ec) {
      log::warn("swap: cannot remove the stale swap folder {}: {}", doomed, ec.message());
      continue;
    }
    log::warn("swap: removed {} ({}), left by a strata run that did not exit cleanly", dir,
              format_bytes(bytes));
    total.bytes += bytes;
    ++total.folders;
  }
  return total;
}

RunDir RunDir::create(const std::string& parent) {
  check_parent(parent);
  const std::string base =
      fmt::format("{}{}-{}-", kPrefix, host_tag(), static_cast<long>(::getpid()));
  const char* hint_unwritable =
      "make the folder writable for this user, or choose a swap path on a writable file system";

  for (int attempt = 0;; ++attempt) {
    const std::string name = base + random_tag();
    const std::string tmp = parent + "/." + name + ".tmp";
    const std::string final_path = parent + "/" + name;

    if (::mkdir(tmp.c_str(), 0700) != 0) {
      const int e = errno;
      if (e == EEXIST && attempt < 8) continue;
      if (e == EACCES || e == EPERM || e == EROFS) {
        throw Error("the swap folder is not writable: mkdir: " + errno_text(e), parent,
                    hint_unwritable);
      }
      if (e == ENOSPC || e == EDQUOT) {
        throw Error("no space left to make the swap run folder: " + errno_text(e), parent,
                    "free space on that file system or choose another swap path");
      }
      throw Error("cannot make the swap run folder: mkdir: " + errno_text(e), tmp,
                  hint_unwritable);
    }
    // From here on a failure removes what was made.
    struct Cleanup {
      std::string dir;
      ~Cleanup() {
        std::error_code ec;
        if (!dir.empty()) fs::remove_all(dir, ec);
      }
    } cleanup{tmp};

    SYS_CHECK(::chmod(tmp.c_str(), 0700), tmp);  // exact, whatever the umask
    const std::string lock_path = tmp + "/" + kLockName;
    Fd lock(::open(lock_path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600));
    if (lock.get() < 0) {
      const int e = errno;
      throw Error("cannot create the swap lock file: " + errno_text(e), lock_path,
                  hint_unwritable);
    }
    SYS_CHECK(::fchmod(lock.get(), 0600), lock_path);
    SYS_CHECK(::flock(lock.get(), LOCK_EX | LOCK_NB), lock_path,
              "another process took the lock of a folder it did not make; check for "
              "tools that lock files under the swap path");

    if (::renameat2(AT_FDCWD, tmp.c_str(), AT_FDCWD, final_path.c_str(), RENAME_NOREPLACE) != 0) {
      const int e = errno;
      if (e == EEXIST && attempt < 8) continue;  // cleanup removes tmp
      throw Error("cannot rename the swap run folder into place: " + errno_text(e),
                  tmp + " -> " + final_path, hint_unwritable);
    }
    cleanup.dir.clear();

    RunDir out;
    out.path_ = final_path;
    out.lock_fd_ = lock.release();
    return out;
  }
}

RunDir::RunDir(RunDir&& other) noexcept
    : path_(std::exchange(other.path_, {})), lock_fd_(std::exchange(other.lock_fd_, -1)) {}

RunDir& RunDir::operator=(RunDir&& other) noexcept {
  if (this != &other) {
    remove();
    path_ = std::exchange(other.path_, {});
    lock_fd_ = std::exchange(other.lock_fd_, -1);
  }
  return *this;
}

void RunDir::remove() noexcept {
  if (!path_.empty()) {
    // Removed while the lock is still held, the lock file last: nobody may take it for a
    // stale folder meanwhile.
    const std::error_code ec = remove_lock_last(path_);
    if (ec) {
      try {
        log::warn("swap: cannot remove the swap run folder {}: {}", path_, ec.message());
      } catch (...) {
      }
    }
    path_.clear();
  }
  if (lock_fd_ >= 0) {
    ::close(lock_fd_);
    lock_fd_ = -1;
  }
}

}  // namespace strata::offload::swap_dir
