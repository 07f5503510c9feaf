#pragma once
// The swap space's per-run folders (internal): creation, the lock that marks a run as alive,
// reclaim of folders left by runs that crashed, removal at clean exit.
//
//   <path>/strata-swap-<host>-<pid>-<random>/     mode 0700, this run's folder
//            lock                                 mode 0600, flock(LOCK_EX) while the run lives
//            swap.bin                             (made by the swap space)
//
// A folder is made as `.strata-swap-...tmp` (hidden), its lock file created and locked, and
// only then renamed to its final name: a folder with a final name and no held lock belongs to
// no living run. The kernel drops a flock when its holder dies however it dies, so the lock
// (not the pid in the name, which another machine or pid namespace may reuse) is the test.
//
// Reclaim takes a stale folder's lock itself, renames the folder to a hidden
// `.<name>.<tag>.removing` (so that a second process reclaiming at the same time skips it) and
// removes it, the lock file last, holding the lock throughout (a clean exit removes its own
// folder the same way). So a `.removing` folder whose lock is free belongs to a reclaim that
// died (a SIGKILL while it deleted a large swap.bin, seen in tests/soak) and is removed at once.
// Other hidden folders (a run that crashed while making its folder, or a `.removing` one whose
// lock is already gone) are removed once their lock is free or missing and they are older than
// a minute: making a folder takes microseconds, and its lock is missing for a moment after its
// mkdir, so an older one is not being made.
#include <cstdint>
#include <string>

namespace strata::offload::swap_dir {

inline constexpr const char* kPrefix = "strata-swap-";
inline constexpr const char* kLockName = "lock";

// Throws strata::Error when `parent` is missing, not a folder, or (checked by making a folder
// in it) not writable.
void check_parent(const std::string& parent);

struct Reclaimed {
  std::uint64_t bytes = 0;  // disk space the removed folders held (allocated blocks)
  std::uint64_t folders = 0;
};

// Removes the stale run folders in `parent`, each reported with log::warn (path and size).
// Never throws: a folder that cannot be inspected or removed is reported and left.
Reclaimed reclaim_stale(const std::string& parent);

// This run's folder in one swap path: created and locked by create(), removed (with
// everything in it) by remove() or the destructor. Move-only.
class RunDir {
 public:
  RunDir() = default;
  // Throws strata::Error as check_parent() does, or naming the failing step.
  static RunDir create(const std::string& parent);
  ~RunDir() { remove(); }
  RunDir(RunDir&& other) noexcept;
  RunDir& operator=(RunDir&& other) noexcept;
  RunDir(const RunDir&) = delete;
  RunDir& operator=(const RunDir&) = delete;

  const std::string& path() const { return path_; }  // empty once removed
  std::string file(const std::string& name) const { return path_ + "/" + name; }

  // Removes the folder and its files, then drops the lock. Failures are logged, not thrown.
  void remove() noexcept;

 private:
  std::string path_;
  int lock_fd_ = -1;
};

}  // namespace strata::offload::swap_dir
