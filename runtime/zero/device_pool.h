#pragma once
// Device memory for the engine's transient buffers (gathered parameters, gradient buckets),
// with stream-ordered reuse (Note [Stream-ordered reuse]): a buffer handed back with
// free_after(buffer, stream) returns to the arena only once the work enqueued on that stream so
// far has completed. Until then it stays allocated, so no later writer can touch bytes that a
// kernel may still read.
//
// allocate() first returns the bytes of buffers whose work has completed; when the arena is
// still too small it waits (on the host) for the oldest pending buffers, one by one, and retries;
// only when nothing is pending does it throw the arena's OutOfMemory. try_allocate() never
// waits: prefetching uses it so that it never delays the module computing now.
//
// Not thread-safe: used by the thread that drives the step.
#include <cstddef>
#include <deque>
#include <memory>
#include <string_view>
#include <vector>

#include "runtime/device/device.h"

namespace strata::runtime {

class DevicePool {
 public:
  explicit DevicePool(Device& device) : device_(device) {}
  ~DevicePool();  // waits for pending buffers
  DevicePool(const DevicePool&) = delete;
  DevicePool& operator=(const DevicePool&) = delete;

  DeviceBuffer allocate(std::size_t bytes, std::string_view what);
  // An empty buffer when the arena cannot give `bytes` now without waiting.
  DeviceBuffer try_allocate(std::size_t bytes, std::string_view what);
  // The buffer goes back to the arena once `stream`'s work enqueued so far has completed.
  void free_after(DeviceBuffer buffer, Stream& stream);
  // Waits for every pending buffer and frees it.
  void drain();
  std::size_t pending() const { return pending_.size(); }

 private:
  struct Pending {
    DeviceBuffer buffer;
    std::unique_ptr<Event> done;
  };
  void collect_completed();
  std::unique_ptr<Event> take_event();

  Device& device_;
  std::deque<Pending> pending_;
  std::vector<std::unique_ptr<Event>> spare_events_;
};

}  // namespace strata::runtime
