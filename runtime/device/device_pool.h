#pragma once
// Device memory for transient buffers (gathered parameters, gradient buffers and buckets), carved
// from one region of the device arena, with stream-ordered reuse.
//
// Note [Stream-ordered reuse]: device work is asynchronous, so a buffer the host has finished
// with may still be read or written by work enqueued on a stream. A buffer handed back with
// free_after(buffer, stream) therefore returns to the region only once an event recorded on
// that stream at the time of the call has completed; until then it stays allocated, so no later
// writer (on any stream) can touch bytes that enqueued work may still use. A buffer used by
// several streams is handed back on the last of them after that stream waited on the others'
// events (the engine records, then waits, then frees). This is PyTorch's caching-allocator rule
// (a block is reused only after the events of every stream that used it), and invariant 2 of
// docs/architecture.md.
//
// allocate() first returns the bytes of buffers whose work has completed; when the region is
// still too small it waits (on the host) for the oldest pending buffers, one by one, and retries;
// only when nothing is pending does it throw the arena's OutOfMemory. try_allocate() never
// waits: prefetching uses it so that it never delays the module computing now.
//
// Not thread-safe: used by the thread that drives the step.
#include <cstddef>
#include <deque>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/device/device.h"

namespace strata::runtime::device {

class DevicePool {
 public:
  // Takes `region_bytes` from the device arena at once and carves buffers from that region
  // (0 = an empty pool, for a size class no module uses). `name` labels it in errors.
  DevicePool(Device& device, std::uint64_t region_bytes, const std::string& name);
  ~DevicePool();  // waits for pending buffers
  DevicePool(const DevicePool&) = delete;
  DevicePool& operator=(const DevicePool&) = delete;

  DeviceBuffer allocate(std::size_t bytes, std::string_view what);
  // An empty buffer when the arena cannot give `bytes` now without waiting.
  DeviceBuffer try_allocate(std::size_t bytes, std::string_view what);
  // The buffer goes back to the arena once `stream`'s work enqueued so far has completed.
  void free_after(DeviceBuffer buffer, Stream& stream);
  // Waits for the oldest pending buffer and frees it; false when none is pending.
  bool wait_one();
  // Waits for every pending buffer and frees it.
  void drain();
  std::uint64_t region_bytes() const { return region_.bytes(); }
  ArenaStats stats() const { return arena_->stats(); }  // use of the region

 private:
  struct Pending {
    DeviceBuffer buffer;
    std::unique_ptr<Event> done;
  };
  void collect_completed();
  std::unique_ptr<Event> take_event();

  Device& device_;
  DeviceBuffer region_;
  std::unique_ptr<Arena> arena_;
  std::deque<Pending> pending_;
  std::vector<std::unique_ptr<Event>> spare_events_;
};

}  // namespace strata::runtime::device
