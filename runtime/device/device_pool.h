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
// waits (with one rank: see below): prefetching uses it so that it never delays the module
// computing now.
//
// Note [Placement in issue order]: where a buffer lands, and whether try_allocate() finds room,
// then depends on which pending buffers' work has completed: on timing. With several ranks that
// decides which collectives a rank issues when (a module all-gathered ahead or not before the
// next reduce-scatter), and every rank must issue the same ones in the same order (Note
// [Collective order] in runtime/comm/sequencer.h): two ranks of a ZeRO-3 run with 8 MiB of
// device memory issued an all-gather and a reduce-scatter in opposite orders in one run of
// three (strata train --config auto, 2 ranks; MPI_ERR_TRUNCATE). Reuse::in_issue_order makes
// the pool a function of its calls alone: free_after() gives the bytes back to the arena at once
// and keeps a fence (the range and the stream's event), and an allocation that lands on fenced
// bytes waits on the host for those fences only. Placement, room and fragmentation are those of
// a pool whose every buffer came back at once; the waits are for work already enqueued. (Waiting
// on the stream that writes the buffer first instead, gathers on their copy stream and gradient
// buffers on compute, gave a wrong gradient norm at step 2 in train_moe_ranks_2's stage-3 run,
// the same wrong value every run; with the gradient buffers alone too; not from reusing the
// fence's event; right again when the thread also waits for the fence or for the first user's
// stream on the host: something the trainer does next relies on that work being done. Not found
// yet.)
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
  enum class Reuse {
    when_done,       // bytes back once their work has completed (one rank)
    in_issue_order,  // bytes back at free_after, fenced (Note [Placement in issue order])
  };
  // Takes `region_bytes` from the device arena at once and carves buffers from that region
  // (0 = an empty pool, for a size class no module uses). `name` labels it in errors.
  DevicePool(Device& device, std::uint64_t region_bytes, const std::string& name,
             Reuse reuse = Reuse::when_done);
  ~DevicePool();  // waits for pending buffers and fences
  DevicePool(const DevicePool&) = delete;
  DevicePool& operator=(const DevicePool&) = delete;

  DeviceBuffer allocate(std::size_t bytes, std::string_view what);
  // An empty buffer when the arena cannot give `bytes` now without waiting (in_issue_order:
  // when it cannot give them at all; it may wait for the fences of the bytes it gives).
  DeviceBuffer try_allocate(std::size_t bytes, std::string_view what);
  // The buffer goes back to the arena once `stream`'s work enqueued so far has completed.
  void free_after(DeviceBuffer buffer, Stream& stream);
  // Waits for the oldest pending buffer and frees it; false when none is pending (always, in
  // issue order: no pending buffer holds bytes there).
  bool wait_one();
  // Waits for every pending buffer (or fence) and frees it.
  void drain();
  std::uint64_t region_bytes() const { return region_.bytes(); }
  ArenaStats stats() const { return arena_->stats(); }  // use of the region

 private:
  struct Pending {
    DeviceBuffer buffer;
    std::unique_ptr<Event> done;
  };
  // in_issue_order: bytes given back whose work may still run.
  struct Fence {
    const char* begin;
    const char* end;
    std::unique_ptr<Event> done;
  };
  void collect_completed();
  void wait_for_fences(const DeviceBuffer& buffer);
  std::unique_ptr<Event> take_event();

  Device& device_;
  Reuse reuse_;
  DeviceBuffer region_;
  std::unique_ptr<Arena> arena_;
  std::deque<Pending> pending_;
  std::vector<Fence> fences_;
  std::vector<std::unique_ptr<Event>> spare_events_;
};

}  // namespace strata::runtime::device
