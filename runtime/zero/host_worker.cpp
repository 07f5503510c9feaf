#include "runtime/zero/host_worker.h"

#include <utility>

namespace strata::runtime::zero {

HostWorker::HostWorker(std::function<void()> on_start)
    : thread_([this, start = std::move(on_start)] {
        if (start) {
          try {
            start();
          } catch (...) {
            std::lock_guard lock(mutex_);
            error_ = std::current_exception();
          }
        }
        loop();
      }) {}

HostWorker::~HostWorker() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

void HostWorker::post(std::function<void()> run, std::function<void()> finally) {
  {
    std::lock_guard lock(mutex_);
    queue_.push_back({std::move(run), std::move(finally)});
  }
  wake_.notify_one();
}

void HostWorker::drain() {
  std::unique_lock lock(mutex_);
  idle_.wait(lock, [&] { return queue_.empty() && !busy_; });
  if (error_) std::rethrow_exception(error_);
}

void HostWorker::check() {
  std::lock_guard lock(mutex_);
  if (error_) std::rethrow_exception(error_);
}

void HostWorker::loop() {
  std::unique_lock lock(mutex_);
  for (;;) {
    wake_.wait(lock, [&] { return stop_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stop_ and nothing left
    Task task = std::move(queue_.front());
    queue_.pop_front();
    busy_ = true;
    const bool failed = error_ != nullptr;
    lock.unlock();
    std::exception_ptr error;
    if (!failed && task.run) {
      try {
        task.run();
      } catch (...) {
        error = std::current_exception();
      }
    }
    // The error is stored before `finally` runs: whoever `finally` wakes (a gate waiter) and
    // then calls check() sees it.
    if (error) {
      lock.lock();
      if (!error_) error_ = error;
      lock.unlock();
    }
    if (task.finally) task.finally();
    lock.lock();
    busy_ = false;
    if (queue_.empty()) idle_.notify_all();
  }
}

}  // namespace strata::runtime::zero
