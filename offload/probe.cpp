#include "offload/probe.h"

#include <fcntl.h>
#include <liburing.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/sysmacros.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <sstream>
#include <string_view>

namespace strata::offload {
namespace {

constexpr std::size_t kProbeBytes = 4096;  // one page: the alignment O_DIRECT asks on most devices
constexpr unsigned kRingEntries = 8;

// --- small RAII handles ------------------------------------------------------------------

class Fd {
 public:
  explicit Fd(int fd = -1) : fd_(fd) {}
  ~Fd() { if (fd_ >= 0) ::close(fd_); }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

// Unlinks a path when it goes out of scope, so that every exit path cleans up the probe file.
class UnlinkGuard {
 public:
  explicit UnlinkGuard(std::string path) : path_(std::move(path)) {}
  ~UnlinkGuard() { if (!path_.empty()) ::unlink(path_.c_str()); }
  UnlinkGuard(const UnlinkGuard&) = delete;
  UnlinkGuard& operator=(const UnlinkGuard&) = delete;

 private:
  std::string path_;
};

class Ring {
 public:
  Ring() = default;
  ~Ring() { if (ok_) io_uring_queue_exit(&ring_); }
  Ring(const Ring&) = delete;
  Ring& operator=(const Ring&) = delete;

  // Returns 0 or -errno, as io_uring_queue_init_params does.
  int init(unsigned flags) {
    io_uring_params params{};
    params.flags = flags;
    int rc = io_uring_queue_init_params(kRingEntries, &ring_, &params);
    ok_ = rc == 0;
    return rc;
  }
  io_uring* get() { return &ring_; }

 private:
  io_uring ring_{};
  bool ok_ = false;
};

struct FreeDeleter {
  void operator()(void* p) const { std::free(p); }
};
using AlignedBuffer = std::unique_ptr<unsigned char, FreeDeleter>;

AlignedBuffer aligned_buffer(std::size_t bytes) {
  void* p = nullptr;
  if (::posix_memalign(&p, kProbeBytes, bytes) != 0) return AlignedBuffer(nullptr);
  return AlignedBuffer(static_cast<unsigned char*>(p));
}

void fill_pattern(unsigned char* p, std::size_t bytes) {
  for (std::size_t i = 0; i < bytes; ++i) p[i] = static_cast<unsigned char>((i * 131 + 7) & 0xff);
}

// Submits the prepared SQE and waits for its completion. Returns the CQE's res, or -errno of
// submit/wait. Waits are retried on EINTR (a signal is not a failure of io_uring).
int submit_and_wait(io_uring* ring) {
  int rc = io_uring_submit(ring);
  if (rc < 0) return rc;
  if (rc != 1) return -EIO;
  io_uring_cqe* cqe = nullptr;
  do {
    rc = io_uring_wait_cqe(ring, &cqe);
  } while (rc == -EINTR);
  if (rc < 0) return rc;
  int res = cqe->res;
  io_uring_cqe_seen(ring, cqe);
  return res;
}

std::string setup_hint(int errnum) {
  switch (errnum) {
    case ENOSYS: return "the kernel has no io_uring, or a seccomp filter (container runtime) hides it";
    case EPERM:
      return "blocked: a seccomp filter (Docker/Podman default profile), or sysctl "
             "kernel.io_uring_disabled=2";
    case EACCES: return "blocked by an LSM policy or kernel.io_uring_disabled=1 for this group";
    case ENOMEM: return "locked-memory limit too low (ulimit -l) for the ring";
    default: return {};
  }
}

// Reads a temporary file through the ring; fills p.read_ok / p.read_note. Returns false when
// the ring failed the read (a real io_uring problem), true when it passed or could not be tried.
bool probe_ring_read(io_uring* ring, IoUringProbe& p) {
  const char* tmpdir = std::getenv("TMPDIR");
  std::string templ = std::string(tmpdir && *tmpdir ? tmpdir : "/tmp") + "/strata-uring-probe-XXXXXX";
  Fd fd(::mkstemp(templ.data()));
  if (fd.get() < 0) {
    p.read_note = "read not tried: cannot create a temporary file " + templ + ": " + errno_text(errno);
    return true;
  }
  ::unlink(templ.c_str());  // the open fd keeps the file alive; nothing is left behind
  AlignedBuffer expect = aligned_buffer(kProbeBytes);
  AlignedBuffer got = aligned_buffer(kProbeBytes);
  if (!expect || !got) {
    p.read_note = "read not tried: out of memory";
    return true;
  }
  fill_pattern(expect.get(), kProbeBytes);
  if (::pwrite(fd.get(), expect.get(), kProbeBytes, 0) != static_cast<ssize_t>(kProbeBytes)) {
    p.read_note = "read not tried: cannot write the temporary file: " + errno_text(errno);
    return true;
  }
  std::memset(got.get(), 0, kProbeBytes);
  io_uring_sqe* sqe = io_uring_get_sqe(ring);
  io_uring_prep_read(sqe, fd.get(), got.get(), kProbeBytes, 0);
  int res = submit_and_wait(ring);
  if (res < 0) {
    // EINVAL here usually means IORING_OP_READ is unknown (kernel older than 5.6).
    p.read_note = "IORING_OP_READ failed: " + errno_text(-res);
    return false;
  }
  if (static_cast<std::size_t>(res) != kProbeBytes) {
    p.read_note = "IORING_OP_READ returned " + std::to_string(res) + " of " +
                  std::to_string(kProbeBytes) + " bytes from a regular file";
    return false;
  }
  if (std::memcmp(got.get(), expect.get(), kProbeBytes) != 0) {
    p.read_note = "IORING_OP_READ returned different bytes than were written";
    return false;
  }
  p.read_ok = true;
  return true;
}

// --- file system names -------------------------------------------------------------------

std::string fs_name_from_magic(unsigned long magic) {
  switch (magic) {
    case 0xEF53: return "ext4";  // ext2/3/4 share a magic; refined from mountinfo when possible
    case 0x58465342: return "xfs";
    case 0x9123683E: return "btrfs";
    case 0x01021994: return "tmpfs";
    case 0x858458F6: return "ramfs";
    case 0x794C7630: return "overlay";
    case 0x2FC12FC1: return "zfs";
    case 0xF2F52010: return "f2fs";
    case 0x6969: return "nfs";
    case 0x65735546: return "fuse";
    case 0xFF534D42: return "cifs";
    case 0xFE534D42: return "smb2";
    case 0x00C36400: return "ceph";
    case 0x0BD00BD0: return "lustre";
    case 0x47504653: return "gpfs";
    case 0x01021997: return "9p";
    case 0x73717368: return "squashfs";
    case 0x6A656A63: return "fakeowner";
    default: break;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, "unknown (0x%lx)", magic);
  return buf;
}

// The file system type of the mount whose device is `dev`, from /proc/self/mountinfo
// ("36 35 98:0 /root /mnt rw,noatime shared:1 - ext4 /dev/sda1 rw"); empty when not found.
std::string fs_name_from_mountinfo(dev_t dev) {
  std::ifstream in("/proc/self/mountinfo");
  std::string line;
  const std::string want = std::to_string(major(dev)) + ":" + std::to_string(minor(dev));
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::string id, parent, devno;
    fields >> id >> parent >> devno;
    if (devno != want) continue;
    std::size_t sep = line.find(" - ");
    if (sep == std::string::npos) continue;
    std::istringstream tail(line.substr(sep + 3));
    std::string fstype;
    tail >> fstype;
    return fstype;
  }
  return {};
}

std::string fs_type_of(const std::string& dir, unsigned long magic) {
  std::string name = fs_name_from_magic(magic);
  // Only the ext family and unknown magics need the mount table to be named exactly; for the
  // others (overlay in particular) st_dev may name an underlying device, not the mount.
  if (name != "ext4" && name.rfind("unknown", 0) != 0) return name;
  struct stat st{};
  if (::stat(dir.c_str(), &st) != 0) return name;
  std::string from_mounts = fs_name_from_mountinfo(st.st_dev);
  return from_mounts.empty() ? name : from_mounts;
}

}  // namespace

std::string file_system_type(const std::string& path) {
  struct statfs sfs{};
  if (::statfs(path.c_str(), &sfs) != 0) return "unknown";
  return fs_type_of(path, static_cast<unsigned long>(sfs.f_type));
}

IoUringProbe probe_io_uring() {
  IoUringProbe p;
  utsname u{};
  if (::uname(&u) == 0) p.kernel = u.release;

  {
    Ring ring;
    int rc = ring.init(0);
    if (rc < 0) {
      p.reason = "io_uring_setup: " + errno_text(-rc);
      std::string hint = setup_hint(-rc);
      if (!hint.empty()) p.reason += "; " + hint;
      return p;  // no ring at all: the setup flags cannot be tried either
    }
    io_uring_sqe* sqe = io_uring_get_sqe(ring.get());
    io_uring_prep_nop(sqe);
    int res = submit_and_wait(ring.get());
    if (res < 0) {
      p.reason = "IORING_OP_NOP: " + errno_text(-res);
      return p;
    }
    p.nop_ok = true;
    if (!probe_ring_read(ring.get(), p)) {
      p.reason = p.read_note;
      return p;
    }
  }
  p.works = true;

  // Each flag on a fresh ring: the kernel answers EINVAL to flags it does not know, and the
  // engine drops them one by one in the same order.
  auto accepted = [](unsigned flags) {
    Ring ring;
    return ring.init(flags) == 0;
  };
  p.single_issuer = accepted(IORING_SETUP_SINGLE_ISSUER);
  p.defer_taskrun = accepted(IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN);
  p.coop_taskrun = accepted(IORING_SETUP_COOP_TASKRUN);
  return p;
}

ODirectProbe probe_o_direct(const std::string& dir) {
  ODirectProbe p;
  p.dir = dir;
  struct statfs sfs{};
  if (::statfs(dir.c_str(), &sfs) != 0) {
    p.reason = "cannot inspect the folder: " + errno_text(errno);
    return p;
  }
  p.fs_type = fs_type_of(dir, static_cast<unsigned long>(sfs.f_type));
  p.free_bytes = static_cast<std::uint64_t>(sfs.f_bavail) * static_cast<std::uint64_t>(sfs.f_bsize);
  p.total_bytes = static_cast<std::uint64_t>(sfs.f_blocks) * static_cast<std::uint64_t>(sfs.f_bsize);

  // A name no other process uses: pid plus this probe's own address on the stack.
  char name[96];
  std::snprintf(name, sizeof name, "/.strata-odirect-probe-%d-%lx", static_cast<int>(::getpid()),
                static_cast<unsigned long>(reinterpret_cast<std::uintptr_t>(&p)));
  const std::string path = dir + name;
  Fd fd(::open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_DIRECT | O_CLOEXEC, 0600));
  if (fd.get() < 0) {
    int e = errno;
    // Some file systems (ramfs) create the file and then refuse O_DIRECT: remove it.
    if (e != EEXIST) ::unlink(path.c_str());
    p.reason = "open(O_DIRECT|O_CREAT): " + errno_text(e);
    if (e == EINVAL) p.reason += "; " + p.fs_type + " does not support O_DIRECT";
    if (e == EACCES || e == EROFS || e == EPERM) p.reason += "; the folder is not writable";
    return p;
  }
  UnlinkGuard unlink_guard(path);

  AlignedBuffer expect = aligned_buffer(kProbeBytes);
  AlignedBuffer got = aligned_buffer(kProbeBytes);
  if (!expect || !got) {
    p.reason = "out of memory for a 4 KiB buffer";
    return p;
  }
  fill_pattern(expect.get(), kProbeBytes);
  std::memset(got.get(), 0, kProbeBytes);
  ssize_t w = ::pwrite(fd.get(), expect.get(), kProbeBytes, 0);
  if (w != static_cast<ssize_t>(kProbeBytes)) {
    int e = errno;
    p.reason = w < 0 ? "O_DIRECT write of 4 KiB: " + errno_text(e)
                     : "O_DIRECT write of 4 KiB wrote " + std::to_string(w) + " bytes";
    if (w < 0 && e == EINVAL) {
      p.reason += "; " + p.fs_type + " refuses O_DIRECT, or its block size exceeds 4 KiB";
    }
    return p;
  }
  ssize_t r = ::pread(fd.get(), got.get(), kProbeBytes, 0);
  if (r != static_cast<ssize_t>(kProbeBytes)) {
    p.reason = r < 0 ? "O_DIRECT read of 4 KiB: " + errno_text(errno)
                     : "O_DIRECT read of 4 KiB read " + std::to_string(r) + " bytes";
    return p;
  }
  if (std::memcmp(got.get(), expect.get(), kProbeBytes) != 0) {
    p.reason = "O_DIRECT read returned different bytes than were written";
    return p;
  }
  p.works = true;
  return p;
}

}  // namespace strata::offload
