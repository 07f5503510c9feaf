#pragma once
// The live streams of a device (internal to runtime/device), so that Device::synchronize can
// reach every one of them. Streams register themselves through hook() when created and
// unregister when destroyed.
#include <exception>
#include <functional>
#include <mutex>
#include <set>

namespace strata::runtime::device {

template <typename StreamT>
class StreamRegistry {
 public:
  // What a stream calls with (itself, true) when created and (itself, false) when destroyed.
  std::function<void(StreamT*, bool)> hook() {
    return [this](StreamT* stream, bool add) {
      std::lock_guard lock(mutex_);
      if (add) {
        streams_.insert(stream);
      } else {
        streams_.erase(stream);
      }
    };
  }

  // Calls fn on every live stream, going on after one throws, then rethrows the first
  // failure. The lock is held throughout, so no stream is destroyed meanwhile.
  template <typename Fn>
  void for_each(Fn&& fn) {
    std::lock_guard lock(mutex_);
    std::exception_ptr first;
    for (StreamT* stream : streams_) {
      try {
        fn(*stream);
      } catch (...) {
        if (!first) first = std::current_exception();
      }
    }
    if (first) std::rethrow_exception(first);
  }

  bool empty() const {
    std::lock_guard lock(mutex_);
    return streams_.empty();
  }

 private:
  mutable std::mutex mutex_;
  std::set<StreamT*> streams_;
};

}  // namespace strata::runtime::device
