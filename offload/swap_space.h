#pragma once
// Swap space for model states on NVMe: named extents in preallocated files, read and written
// through the AioEngine. DeepSpeed's nvme_path; several paths stripe each extent across them.
//
// On disk. Each path gets a per-run folder `strata-swap-<host>-<pid>-<random>/` holding a
// `lock` file (flock'ed for the run's lifetime) and one data file `swap.bin`; every file and
// folder is created with mode 0600 / 0700. The folder is created under a hidden temporary name
// and renamed once locked, so a half-made folder is never mistaken for a live one. At start,
// folders whose lock nobody holds (a run that crashed or was killed) are reported with their
// size and removed; at clean exit (the destructor) this run's folders are removed. Swap files
// are scratch: nothing in them survives a run.
//
// Extents. allocate(key, bytes) reserves space named by (module, state kind, rank). An extent
// of n bytes is split into k = min(paths, ceil(n / block_size)) parts of equal size rounded
// up to block_size, part i in path (first + i) % paths, where `first` rotates from extent to
// extent so small extents spread over the paths too. Space comes from a per-path free list
// (first fit, neighbours coalesced) and the files grow with fallocate when it runs out;
// reserve() preallocates up front, so running out of disk is found before training starts.
//
// I/O. read() / write() move a byte range [offset, offset + bytes) of an extent to or from a
// caller's buffer, which must be aligned to kDirectIoAlignment (a HostBuffer is) and stay
// valid until the handle completes. offset must be a multiple of block_size; bytes must be a
// multiple of block_size too unless the range ends at the extent's end. The tail of an
// extent that is not a multiple of 4 KiB is moved through an internal bounce block, so
// callers never need padding. A range past the extent's end is an error naming the extent.
//
// Checksums (strata.checksum). With options.checksum, every block_size block written gets an
// xxh3-64 checksum, and every block read is verified before its handle completes: a mismatch
// (or a read of a block never written) fails the wait with an error naming the extent, the
// block, the path and the file offset. Without, nothing is computed.
//
// Thread safety: every method may be called from any thread.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "offload/aio_engine.h"
#include "offload/aio_file.h"

namespace strata::offload {

enum class StateKind { kParam, kGrad, kMaster, kExpAvg, kExpAvgSq, kOther };
std::string_view to_string(StateKind kind);  // "param" | "grad" | "master" | "exp_avg" | ...

struct ExtentKey {
  std::string module;  // "wte", "h.3", "ln_f", or any caller's name
  StateKind kind = StateKind::kOther;
  int rank = 0;
  std::string name() const;  // "h.3/exp_avg/rank0", as errors print it
  bool operator==(const ExtentKey&) const = default;
};

using ExtentId = std::uint64_t;

struct SwapOptions {
  std::vector<std::string> paths;    // folders on the NVMe devices; at least one
  std::size_t block_size = kDefaultBlockBytes;  // extent alignment and checksum block: aio.block_size
  bool checksum = false;             // strata.checksum
  DirectIo direct = DirectIo::kAuto;
  std::uint64_t reserve_bytes = 0;   // preallocated at construction (see reserve())
};

struct SwapPathStats {
  std::string path;              // the folder given in options.paths
  std::string run_dir;           // this run's folder inside it
  bool direct = false;           // its file is open with O_DIRECT
  std::uint64_t file_bytes = 0;  // size of swap.bin (preallocated)
  std::uint64_t used_bytes = 0;  // allocated to extents
  std::uint64_t free_bytes = 0;  // left on the file system (statvfs, for this user)
};

struct SwapStats {
  std::vector<SwapPathStats> paths;
  std::uint64_t extents = 0;
  std::uint64_t used_bytes = 0;   // sum over paths (aligned sizes)
  std::uint64_t peak_bytes = 0;
  std::uint64_t file_bytes = 0;   // sum over paths
  std::uint64_t stale_reclaimed_bytes = 0;  // removed at start from crashed runs
};

class SwapSpace {
 public:
  // Creates the run folders and files and preallocates options.reserve_bytes. Throws
  // strata::Error for: no paths; a path that is missing, not a folder or not writable; a file
  // system without O_DIRECT when options.direct is kRequire; not enough free space (bytes
  // needed vs free, and which path). The engine is borrowed and must outlive the swap space.
  SwapSpace(SwapOptions options, AioEngine& engine);
  // Waits for the I/O it started, unregisters and removes its files and folders.
  ~SwapSpace();
  SwapSpace(const SwapSpace&) = delete;
  SwapSpace& operator=(const SwapSpace&) = delete;

  // Grows the files so that `bytes` more (spread over the paths as extents would be) can be
  // allocated without growing them again. ENOSPC is an error naming the path, the bytes
  // needed and the bytes free; the files are left as they were.
  void reserve(std::uint64_t bytes);

  // A new extent of `bytes` (> 0) named by key. Throws if the key already has one, or if the
  // disk is full (as reserve()).
  ExtentId allocate(const ExtentKey& key, std::uint64_t bytes);
  std::optional<ExtentId> find(const ExtentKey& key) const;
  // Returns the extent's space to the free list. Its I/O must be complete (asserted).
  void release(ExtentId extent);
  std::uint64_t extent_bytes(ExtentId extent) const;
  const ExtentKey& extent_key(ExtentId extent) const;

  // Asynchronous transfers of [offset, offset + bytes) of an extent; see the header comment
  // for alignment. Wait on the handle with engine().wait() (errors surface there).
  AioHandle write(ExtentId extent, const void* buffer, std::size_t bytes,
                  std::uint64_t offset = 0);
  AioHandle read(ExtentId extent, void* buffer, std::size_t bytes, std::uint64_t offset = 0);

  AioEngine& engine() const;
  SwapStats stats() const;
  const SwapOptions& options() const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace strata::offload
