#pragma once
// The folder, the disk and the scratch file of `strata bench nvme` (bench_nvme.cpp).
#include <climits>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <string>

#include <nlohmann/json.hpp>

#include "models/model_spec.h"
#include "offload/aio_engine.h"
#include "offload/aio_file.h"
#include "offload/probe.h"

namespace strata::tools {

// --dir as given, else $TMPDIR, else /var/tmp (a disk; /tmp is often tmpfs).
std::string resolve_bench_dir(const std::string& given);

// Throws strata::Error, saying what to do, when `dir` is missing, not a folder, not writable,
// or refuses O_DIRECT (tmpfs, some FUSE and network file systems). Returns the probe.
offload::ODirectProbe check_bench_dir(const std::string& dir);

// "ext4 on /dev/vda (254:0, mounted at /; rotational 0, scheduler [mq-deadline])": the mount
// that holds `dir`, from /proc/self/mountinfo, and its block device's queue from /sys.
std::string describe_mount(const std::string& dir);

// Bytes per cell: `size_text` (empty: 1 GiB), shrunk to a quarter of the free space in `dir`
// when the disk is nearly full (said on `text`), but never below 64 MiB: then an error.
std::uint64_t resolve_bench_size(const std::string& size_text, const std::string& dir,
                                 std::FILE* text);

// DIR/strata-bench-nvme-PID.bin, created with O_DIRECT (DirectIo::kRequire), unlinked when
// destroyed and when SIGINT / SIGTERM / SIGHUP arrive (the handler unlinks, then dies of the
// signal as it would have). At most one per process.
class ScratchFile {
 public:
  explicit ScratchFile(const std::string& dir);
  ~ScratchFile();
  ScratchFile(const ScratchFile&) = delete;
  ScratchFile& operator=(const ScratchFile&) = delete;

  const offload::AioFile& file() const { return file_; }
  const std::string& path() const { return path_; }

  // Allocates the file's blocks up front (posix_fallocate), so that a full disk is found here
  // and said plainly.
  void reserve(std::uint64_t bytes) const;

 private:
  static constexpr int kSignals[3] = {SIGINT, SIGTERM, SIGHUP};
  std::string path_;
  offload::AioFile file_;
  struct sigaction previous_[3] {};
};

// The I/O engine options of a bench child's config (a JSON object): aio.* of the resolved
// config (the cell configs set none, so DeepSpeed's defaults).
offload::AioOptions run_aio_options(const nlohmann::json& config, const models::ModelSpec& model);

// The disk's sequential rates as strata's engine reaches them. Writes `bytes` (rounded up to the
// O_DIRECT alignment) into a new file at `path` with the engine's options: the bytes as requests
// of 64 MiB submitted at once (the engine keeps aio.queue_depth pieces of aio.block_size in
// flight), then fdatasync; the timer runs from the first submit to the end of the fdatasync. The
// buffer holds random bytes: a virtual disk may store zeros without writing them (QEMU's
// detect-zeroes). With `read_back`, then reads the file back the same way (O_DIRECT where the
// file system allows it, so from the disk, not the page cache). Unlinks the file.
struct DiskRates {
  double write_gbps = 0;
  double read_gbps = 0;  // 0 without read_back
};
DiskRates measure_disk_rates(const offload::AioOptions& aio, const std::string& path, std::uint64_t bytes,
                             bool read_back);

// GB/s of one sequential read of the first `bytes` of an existing file (all of it when shorter;
// rounded down to the O_DIRECT alignment), the requests submitted at once as measure_disk_rates
// reads back. Read where a run's own data lies (the NVMe tier's swap file), it is the disk's rate
// for those bytes: this VM's disk serves a file just written faster than one written a minute ago.
double measure_file_read_rate(const offload::AioOptions& aio, const std::string& path, std::uint64_t bytes);

}  // namespace strata::tools
