#pragma once
// The parameter writer: where the updater's Adam writes a module's new parameters (compute
// dtype), and how they reach their tier — in place in a pinned parameter shard, or through one of
// two pinned staging buffers (used in turn) with an H2D to the device or a write to NVMe.
//
// Note [Parameter writes behind]. New parameters bound for NVMe leave through the pinned staging
// buffers (two, used in turn) as asynchronous writes, and the worker does not wait for them at
// the end of the module: it goes on to the next module's Adam while they run. Each write, as it
// is issued, is handed to the parameter write watcher (a HostWorker of the writer's own, like
// the fetcher's read watcher), the only thread that waits on their AIO handles: in issue order,
// it waits for the write, then raises its staging buffer's `written` count, which out() waits on
// before reusing the buffer (also for a later window of the same module). When a task that
// wrote ends, the worker queues the gate's `finished` for its module on the watcher, behind
// those writes (finish()). So the gate opens module m (the next step's NVMe read of its
// parameters, the reuse of its gradient accumulator) only once its update AND its parameter
// writes are complete; a task that wrote nothing signals `finished` at once. A failed write is
// kept (the first one, naming its file) before the gate opens, and rethrown by check() and
// wait_writes() (so by the next gate wait); the watcher still waits for every other write, so no
// buffer is reused under a write in flight. The updater's drain(), flush_swaps() and every
// run_after task start only once the watcher has no write left.
//
// Threads: out(), deliver() and finish() run on the optimizer worker (updater.h); the write
// watcher runs wait_write(); check(), drain_writes() and wait_writes() may be called from any
// other thread.
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>

#include "core/dtype.h"
#include "offload/aio_engine.h"
#include "offload/host_buffer.h"
#include "runtime/device/device.h"
#include "runtime/tiers/tier_store.h"
#include "runtime/zero/engine_streams.h"
#include "runtime/zero/host_worker.h"
#include "runtime/zero/update_gate.h"

namespace strata::runtime::zero {

class ParamWriter {
 public:
  // Borrowed references outlive the writer. `threads`: the CPU Adam's (strata.cpu_threads), which
  // also copy fp32 parameters out. The staging buffers are allocated only when some module's
  // optimizer states are off the device (its update runs on the host).
  ParamWriter(tiers::TierStore& store, device::Device& device, EngineStreams& streams, UpdateGate& gate, int threads);
  ~ParamWriter();  // waits for the writes in flight (their errors are dropped: wait_writes() first)
  ParamWriter(const ParamWriter&) = delete;
  ParamWriter& operator=(const ParamWriter&) = delete;

 private:
  struct Staging;

 public:
  // Where Adam writes the new parameters of one window: `data`, in the compute dtype.
  struct Out {
    void* data = nullptr;
    Staging* staging = nullptr;  // null: the pinned parameter shard itself
  };
  // Worker. The window of module m at `offset`: its pinned parameter shard, or the next staging
  // buffer once its last H2D and its last NVMe write are over.
  Out out(int module, std::size_t offset);
  // Worker. After Adam wrote `out` for [offset, offset + n): fp32 parameters (the master) are
  // copied in first; then a staging buffer goes on to the device (H2D on copy_in) or to NVMe (a
  // write handed to the watcher).
  void deliver(int module, std::size_t offset, std::size_t n, const float* master, const Out& out);
  // Worker, once a task of `module` has ended (done or failed): the gate's `finished`, at once or
  // behind the task's parameter writes.
  void finish(int module);

  // Until the watcher has no write left; a failed write is not rethrown (see check()).
  void drain_writes();
  // drain_writes(), then check().
  void wait_writes();
  // Rethrows the first failed parameter write, without waiting.
  void check();

 private:
  struct Staging {
    Staging(offload::HostBuffer b, std::unique_ptr<device::Event> e) : buffer(std::move(b)), done(std::move(e)) {}
    offload::HostBuffer buffer;
    std::unique_ptr<device::Event> done;    // the H2D from it
    std::uint64_t writes = 0;               // NVMe writes started from it (worker)
    std::atomic<std::uint64_t> written{0};  // of which finished, failed or not (write watcher)
  };
  // An NVMe write of new parameters, for the write watcher to wait for.
  struct PendingWrite {
    offload::AioHandle io;
    Staging* staging = nullptr;
    std::uint64_t count = 0;  // staging->writes once it was started
  };
  void wait_write(const PendingWrite& w);  // on the write watcher

  // Set at construction, then read-only.
  tiers::TierStore& store_;
  EngineStreams& streams_;
  UpdateGate& gate_;
  DType dtype_;
  int threads_ = 1;
  // Worker only (the watcher touches the buffers' `written` counts alone).
  std::deque<Staging> staging_;  // updated parameters on their way to their tier
  std::size_t next_ = 0;
  bool task_wrote_ = false;  // the task running on the worker has handed writes to the watcher
  // Written by the watcher, read by any thread, under error_mutex_.
  std::mutex error_mutex_;
  std::exception_ptr error_;  // the first failed parameter write
  HostWorker watcher_;  // last: stops (after its writes) before the staging buffers go away
};

}  // namespace strata::runtime::zero
