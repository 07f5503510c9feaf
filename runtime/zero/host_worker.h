#pragma once
// A host thread of strata's own that runs tasks in order: the optimizer's updates (so that they
// overlap with the backward pass and the next step's forward) and the fp32 accumulation of
// gradient shards copied to the host. Host work never runs on a device stream's host-function
// thread (on CUDA all streams share one, and block while it runs): a task here waits for the
// device work it needs with Event::synchronize, and enqueues what follows it on a stream itself.
//
// Tasks run one at a time in the order they were posted. A task that throws does not stop the
// worker: the first error is kept and rethrown by check() / drain() on the posting thread, and
// the tasks after it are skipped (their completion is still signalled, so nobody waits forever).
#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>

namespace strata::runtime::zero {

class HostWorker {
 public:
  // `on_start` runs first on the worker thread (the engine makes the device current there).
  explicit HostWorker(std::function<void()> on_start = {});
  ~HostWorker();  // runs what is queued, then stops (errors are dropped: call drain() first)
  HostWorker(const HostWorker&) = delete;
  HostWorker& operator=(const HostWorker&) = delete;

  // `run` is skipped after an earlier failure; `finally` always runs after it (or instead of it).
  void post(std::function<void()> run, std::function<void()> finally = {});
  // Waits until every posted task has finished; rethrows the first error.
  void drain();
  // Rethrows the first error, if any, without waiting.
  void check();

 private:
  void loop();
  struct Task {
    std::function<void()> run, finally;
  };
  std::mutex mutex_;
  std::condition_variable wake_, idle_;
  std::deque<Task> queue_;
  bool busy_ = false;
  bool stop_ = false;
  std::exception_ptr error_;
  std::thread thread_;
};

}  // namespace strata::runtime::zero
