#pragma once
// Probes of what the offload engine needs from the kernel and the file system: a working
// io_uring and O_DIRECT in the swap folder. They really try (set up a ring and run I/O on it;
// write and read a file with O_DIRECT) rather than guess from version numbers, because
// seccomp filters, sysctls and file systems decide as much as the kernel does.
//
// A probe never throws for a failure of the world: "it does not work here, because ..." is
// its answer. `strata info` prints them; the io_uring engine uses them to pick a fallback and
// to say why once (log::warn_once).
#include <cstdint>
#include <string>

#include "core/error.h"

namespace strata::offload {

struct IoUringProbe {
  bool works = false;   // a ring was set up, a NOP and a read of a small file completed
  std::string reason;   // why not, when !works: the failing step and errno ("... EPERM ...")
  std::string kernel;   // uname release, e.g. "6.8.0-45-generic"
  bool nop_ok = false;
  bool read_ok = false;
  std::string read_note;  // why the read test was skipped or failed (empty when it passed)
  // Setup flags this kernel accepted, each tried on its own ring. DEFER_TASKRUN is tried
  // together with SINGLE_ISSUER, which it requires.
  bool single_issuer = false;  // IORING_SETUP_SINGLE_ISSUER (Linux 6.0+)
  bool defer_taskrun = false;  // IORING_SETUP_DEFER_TASKRUN (Linux 6.1+)
  bool coop_taskrun = false;   // IORING_SETUP_COOP_TASKRUN (Linux 5.19+)
};

// Sets up small rings and runs a NOP and a 4 KiB read of a temporary file (in $TMPDIR or
// /tmp) through them. Never throws.
IoUringProbe probe_io_uring();

struct ODirectProbe {
  std::string dir;       // the folder probed, as given
  bool works = false;    // a 4 KiB aligned O_DIRECT write and read-back matched
  std::string reason;    // why not, when !works ("open(O_DIRECT): Invalid argument (EINVAL) ...")
  std::string fs_type;   // "ext4", "xfs", "tmpfs", "overlay", "btrfs", ...; empty if unknown
  std::uint64_t free_bytes = 0;   // available to this user (statfs f_bavail * f_bsize)
  std::uint64_t total_bytes = 0;  // size of the file system
};

// Creates a temporary file in `dir` with O_DIRECT|O_CREAT|O_EXCL, writes 4 KiB from an aligned
// buffer, reads it back, compares, and unlinks it. A missing or unwritable folder is reported
// as not working, with the reason. Never throws.
ODirectProbe probe_o_direct(const std::string& dir);

// The file system type of the folder or file at `path` ("ext4", "tmpfs", ...), as
// ODirectProbe::fs_type names it; "unknown" when it cannot be inspected. Never throws.
std::string file_system_type(const std::string& path);


}  // namespace strata::offload
