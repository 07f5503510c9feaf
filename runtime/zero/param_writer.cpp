#include "runtime/zero/param_writer.h"

#include <utility>

#include "core/error.h"
#include "cpu_adam/adam.h"

namespace strata::runtime::zero {

ParamWriter::ParamWriter(tiers::TierStore& store, device::Device& device, EngineStreams& streams, UpdateGate& gate,
                         int threads)
    : store_(store), streams_(streams), gate_(gate), dtype_(store.dtype()), threads_(threads) {
  bool host_updates = false;
  for (int m = 0; m < store.module_count(); ++m) {
    host_updates = host_updates || store.state(m, tiers::StateKind::master).tier() != tiers::Tier::device;
  }
  if (host_updates) {
    const std::size_t bytes = store.window_numel() * dtype_size(dtype_);
    for (int i = 0; i < 2; ++i) {
      staging_.emplace_back(store.pinned().allocate(bytes, "updated parameter buffer"), device.create_event());
    }
  }
}

ParamWriter::~ParamWriter() {
  try {
    watcher_.drain();  // its tasks keep their errors in error_ (reported by wait_writes())
  } catch (const std::exception&) {
  }
}

void ParamWriter::drain_writes() { watcher_.drain(); }

void ParamWriter::wait_writes() {
  watcher_.drain();
  check();
}

void ParamWriter::check() {
  std::lock_guard lock(error_mutex_);
  if (error_) std::rethrow_exception(error_);
}

void ParamWriter::finish(int module) {
  if (!std::exchange(task_wrote_, false)) {
    gate_.finished(module);
    return;
  }
  // Behind the task's writes on the watcher (it runs its tasks in order). As a `finally`, so that
  // it runs whatever happened before.
  watcher_.post({}, [this, module] { gate_.finished(module); });
}

// On the write watcher, for every write, even after one failed (a staging buffer is reused only
// once its write is over); the first failure is kept for check() before the gate opens.
void ParamWriter::wait_write(const PendingWrite& w) {
  try {
    store_.io().wait(w.io);  // throws the write's error, naming its file
  } catch (...) {
    std::lock_guard lock(error_mutex_);
    if (!error_) error_ = std::current_exception();
  }
  w.staging->written.store(w.count, std::memory_order_release);
  w.staging->written.notify_all();
}

ParamWriter::Out ParamWriter::out(int module, std::size_t offset) {
  tiers::TierState& param = store_.state(module, tiers::StateKind::param);
  if (std::byte* pinned = param.host_data()) return Out{pinned + offset * dtype_size(dtype_), nullptr};
  STRATA_ASSERT(!staging_.empty(), "no parameter staging buffers were planned");
  Staging& st = staging_[next_];
  next_ = (next_ + 1) % staging_.size();
  st.done->synchronize();  // its last H2D has finished
  // and its last NVMe write (the write watcher counts them; it alone waits on their handles)
  for (std::uint64_t w = st.written.load(std::memory_order_acquire); w != st.writes;
       w = st.written.load(std::memory_order_acquire)) {
    st.written.wait(w, std::memory_order_acquire);
  }
  return Out{st.buffer.data(), &st};
}

void ParamWriter::deliver(int module, std::size_t offset, std::size_t n, const float* master, const Out& out) {
  tiers::TierState& param = store_.state(module, tiers::StateKind::param);
  // fp32 parameters are the master: copied on the Adam's threads, each part by the thread that
  // updated it (a module's serial memcpy was the gap between its Adam and the next module's).
  if (dtype_ == DType::f32) cpu_adam::copy_partitioned(master, out.data, DType::f32, n, threads_);
  Staging* staging = out.staging;
  if (staging == nullptr) return;  // written in place (pinned shard)
  offload::AioHandle io = param.write_from_staging(offset, n, out.data, *streams_.copy_in);
  if (io) {
    // Waited for on the write watcher: a later window of this module may reuse the buffer.
    watcher_.post([this, w = PendingWrite{std::move(io), staging, ++staging->writes}] { wait_write(w); });
    task_wrote_ = true;
  } else {
    staging->done->record(*streams_.copy_in);
  }
}

}  // namespace strata::runtime::zero
