#pragma once
// Which modules have an optimizer update posted and not finished, and the event that marks the
// end of each module's last update on the device. The parameter fetcher and the gradient path
// wait here for module m's update, and only for it, before they read its parameters or reuse
// its gradient accumulator; the updater posts and finishes. Without an optimizer (inference)
// there is no gate and nothing to wait for.
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include "runtime/device/device.h"

namespace strata::runtime::zero {

class UpdateGate {
 public:
  // `check` rethrows a failure of an earlier update (the worker's); wait() calls it.
  UpdateGate(device::Device& device, int modules, std::function<void()> check) : check_(std::move(check)) {
    posted_.assign(static_cast<std::size_t>(modules), 0);
    done_.assign(static_cast<std::size_t>(modules), 0);
    for (int m = 0; m < modules; ++m) updated_.push_back(device.create_event());
  }

  void posted(int module) {
    std::lock_guard lock(mutex_);
    ++posted_[index(module)];
  }
  void finished(int module) {
    {
      std::lock_guard lock(mutex_);
      ++done_[index(module)];
    }
    cv_.notify_all();
  }
  bool pending(int module) const {
    std::lock_guard lock(mutex_);
    return done_[index(module)] != posted_[index(module)];
  }
  // Updates posted for the module so far: the trainer posts them, in its program order.
  std::uint64_t posted_count(int module) const {
    std::lock_guard lock(mutex_);
    return posted_[index(module)];
  }
  // Until module m's posted updates have finished; rethrows an update's failure.
  void wait(int module) {
    {
      std::unique_lock lock(mutex_);
      const std::size_t m = index(module);
      cv_.wait(lock, [&] { return done_[m] == posted_[m]; });
    }
    check_();
  }
  // Recorded after the device work of the module's last update (new parameters on the device,
  // or the device optimizer's kernels); the streams that read them wait on it.
  device::Event& updated(int module) const { return *updated_[index(module)]; }

 private:
  static std::size_t index(int module) { return static_cast<std::size_t>(module); }
  std::function<void()> check_;
  mutable std::mutex mutex_;
  std::condition_variable cv_;
  std::vector<std::uint64_t> posted_, done_;
  std::vector<std::unique_ptr<device::Event>> updated_;
};

}  // namespace strata::runtime::zero
