#pragma once
// Signals as a request to stop at the next safe point, for `strata train` (SIGINT / SIGTERM:
// stop after the next step's checkpoint, the way schedulers preempt jobs: SLURM sends
// SIGTERM, then SIGKILL after a grace period) and `strata bench step` (also SIGHUP / SIGPIPE:
// remove the scratch folder, then end as the signal would have).
//
// While a StopSignals exists, a signal in its list only records itself; with
// `second_stops_now`, a second one restores the default action and re-raises it, so a user
// pressing Ctrl-C twice stops at once. A signal ignored when it is made stays ignored. The
// destructor (or restore()) puts the previous handlers back.
// A signal handler can only reach process state: the flag is a file-static lock-free atomic,
// owned by this class; one StopSignals at a time.
#include <csignal>
#include <initializer_list>
#include <vector>

namespace strata::train {

class StopSignals {
 public:
  StopSignals(std::initializer_list<int> signals, bool second_stops_now);
  ~StopSignals();
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;

  // The first signal received, or 0.
  int received() const;
  void restore();

 private:
  std::vector<int> signals_;
  std::vector<struct sigaction> previous_;
  bool restored_ = false;
};

}  // namespace strata::train
