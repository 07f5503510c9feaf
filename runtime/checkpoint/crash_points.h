#pragma once
// Fault injection for the crash-consistency tests: the checkpoint code calls hit() after each
// step that changes the disk (a file written, an fsync, a rename, and every other piece of a
// shard file, once submitted).
// With STRATA_CRASH_AT=N in the environment, the N-th hit (counted from 1 over the process)
// prints its name to stderr and kills the process with SIGKILL: no destructor, no flush, as a
// power cut or an OOM kill would leave it. Unset or 0: hit() only counts.
//
// Thread-safe (the shard write runs on the optimizer worker while the trainer runs on).
#include <atomic>
#include <cstdint>
#include <string_view>

namespace strata::runtime::checkpoint {

class CrashPoints {
 public:
  // Reads STRATA_CRASH_AT.
  static CrashPoints from_environment();
  explicit CrashPoints(std::uint64_t crash_at = 0) : crash_at_(crash_at) {}

  void hit(std::string_view what);
  std::uint64_t hits() const { return hits_.load(); }

 private:
  std::uint64_t crash_at_ = 0;
  std::atomic<std::uint64_t> hits_{0};
};

}  // namespace strata::runtime::checkpoint
