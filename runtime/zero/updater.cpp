#include "runtime/zero/updater.h"

#include <algorithm>
#include <utility>

#include "core/cpu_features.h"
#include "core/error.h"
#include "runtime/ops/optim_ops.h"
#include "runtime/trace/trace.h"

namespace strata::runtime::zero {

Updater::Updater(const config::Config& config, tiers::TierStore& store, device::Device& device, EngineStreams& streams,
                 UpdateGate& gate, GradPath& grads, trace::Tracer& tracer)
    : store_(store),
      streams_(streams),
      gate_(gate),
      grads_(grads),
      tracer_(tracer),
      dtype_(store.dtype()),
      threads_(static_cast<int>(config.strata.cpu_threads)),
      ring_(store, store.plan().optimizer_swap_buffers, store.plan().optimizer_chunk_numel,
            config.zero_optimization.offload_optimizer.pipeline_read,
            config.zero_optimization.offload_optimizer.pipeline_write),
      worker_([&device] { device.bind_thread(); }) {
  for (const std::string& name : store.plan_inputs().module_names) adam_span_names_.push_back("adam " + name);
  shadows_.resize(static_cast<std::size_t>(store.module_count()));
  has_shadow_.assign(static_cast<std::size_t>(store.module_count()), 0);
  shadow_budget_bytes_ = config.strata.speculative_update_memory_bytes;
  bool host_updates = false;
  for (int m = 0; m < store.module_count(); ++m) {
    host_updates = host_updates || store.state(m, tiers::StateKind::master).tier() != tiers::Tier::device;
  }
  if (host_updates) {
    const std::size_t bytes = store.window_numel() * dtype_size(dtype_);
    for (int i = 0; i < 2; ++i) {
      out_staging_.emplace_back(store.pinned().allocate(bytes, "updated parameter buffer"), device.create_event());
    }
  }
}

Updater::~Updater() {
  // The facade drained already and reported what failed; the ring's own destructor then waits
  // for its I/O.
  try {
    worker_.drain();
  } catch (const std::exception&) {
  }
  try {
    write_watcher_.drain();  // its tasks keep their errors in write_error_ (reported by drain())
  } catch (const std::exception&) {
  }
}

void Updater::drain() {
  // The worker first: its tasks hand their writes to the watcher as they end.
  try {
    worker_.drain();
  } catch (...) {
    write_watcher_.drain();
    throw;
  }
  wait_for_writes();
}

void Updater::check() {
  worker_.check();
  check_writes();
}

void Updater::flush_swaps() {
  write_watcher_.drain();
  ring_.flush();
  check_writes();
}

void Updater::wait_for_writes() {
  write_watcher_.drain();
  check_writes();
}

void Updater::check_writes() {
  std::lock_guard lock(write_error_mutex_);
  if (write_error_) std::rethrow_exception(write_error_);
}

void Updater::queue(int module, std::function<void()> task) {
  gate_.posted(module);
  {
    std::lock_guard lock(queue_mutex_);
    queued_.push_back(module);
  }
  auto pop = [this] {
    std::lock_guard lock(queue_mutex_);
    queued_.pop_front();
  };
  worker_.post(std::move(task), [this, module, pop] {
    pop();
    finish(module);
  });
}

void Updater::finish(int module) {
  if (!std::exchange(task_wrote_, false)) {
    gate_.finished(module);
    return;
  }
  // Behind the task's writes on the watcher (it runs its tasks in order). As a `finally`, so that
  // it runs whatever happened before.
  write_watcher_.post({}, [this, module] { gate_.finished(module); });
}

// On the write watcher, for every write, even after one failed (a staging buffer is reused only
// once its write is over); the first failure is kept for check() before the gate opens.
void Updater::wait_write(const PendingWrite& w) {
  try {
    store_.io().wait(w.io);  // throws the write's error, naming its file
  } catch (...) {
    std::lock_guard lock(write_error_mutex_);
    if (!write_error_) write_error_ = std::current_exception();
  }
  w.staging->written.store(w.count, std::memory_order_release);
  w.staging->written.notify_all();
}

void Updater::post(int module, const UpdateArgs& args) {
  queue(module, [this, module, args] { update(module, args); });
}

bool Updater::post_speculative(int module, const UpdateArgs& args, std::uint64_t step) {
  const tiers::TierState& master = store_.state(module, tiers::StateKind::master);
  if (master.tier() != tiers::Tier::pinned) return false;
  const std::size_t m = static_cast<std::size_t>(module);
  if (!has_shadow_[m]) {
    // Allocated here, before the first task that uses it is queued; from then on only the
    // worker touches the shadow (commit swaps it), so the trainer reads has_shadow_ alone.
    Shadow& sh = shadows_[m];
    const std::uint64_t bytes = 3 * master.bytes();
    if (shadow_bytes_ + bytes > shadow_budget_bytes_) return false;
    const std::string& name = store_.plan_inputs().module_names[static_cast<std::size_t>(module)];
    sh.master = offload::HostBuffer::allocate(master.bytes(), name + " speculative master");
    sh.exp_avg = offload::HostBuffer::allocate(master.bytes(), name + " speculative exp_avg");
    sh.exp_avg_sq = offload::HostBuffer::allocate(master.bytes(), name + " speculative exp_avg_sq");
    shadow_bytes_ += bytes;
    has_shadow_[m] = 1;
  }
  queue(module, [this, module, args, step] {
    if (cancelled_through_.load() >= step) return;  // the norm was over: redone from scratch
    update(module, args, Mode::speculative);
  });
  return true;
}

void Updater::post_commit(int module) {
  queue(module, [this, module] { commit(module); });
}

void Updater::post_redo(int module, const UpdateArgs& args) {
  queue(module, [this, module, args] {
    update(module, args, Mode::redo);
    commit(module);
  });
}

// The shadow holds the new states: it becomes the module's states, and the old ones its shadow.
void Updater::commit(int module) {
  Shadow& sh = shadows_[static_cast<std::size_t>(module)];
  store_.state(module, tiers::StateKind::master).swap_host_buffer(sh.master);
  store_.state(module, tiers::StateKind::exp_avg).swap_host_buffer(sh.exp_avg);
  store_.state(module, tiers::StateKind::exp_avg_sq).swap_host_buffer(sh.exp_avg_sq);
}

void Updater::run_after(std::function<void()> task, std::function<void()> done) {
  {
    std::lock_guard lock(queue_mutex_);
    queued_.push_back(-1);  // the swap ring reads ahead no further than this
  }
  // Checkpoints read the states: after every parameter write too (a failed one fails the task).
  auto after_writes = [this, task = std::move(task)] {
    wait_for_writes();
    if (task) task();
  };
  worker_.post(std::move(after_writes), [this, done = std::move(done)] {
    {
      std::lock_guard lock(queue_mutex_);
      queued_.pop_front();
    }
    if (done) done();
  });
}

int Updater::upcoming(std::size_t k) {
  // queued_.front() is the update running now.
  std::lock_guard lock(queue_mutex_);
  for (std::size_t i = 1; i < queued_.size(); ++i) {
    if (queued_[i] < 0) return -1;
    if (i - 1 == k) return queued_[i];
  }
  return -1;
}

void Updater::update(int module, const UpdateArgs& args, Mode mode) {
  grads_.wait_grad_done(module);  // the step's last accumulation into this module's gradient
  tiers::TierState& master = store_.state(module, tiers::StateKind::master);
  if (master.tier() == tiers::Tier::device) {
    update_on_device(module, args);
    return;
  }
  tiers::TierState& acc = store_.state(module, tiers::StateKind::grad_accum);
  const bool swapped = master.tier() == tiers::Tier::nvme;
  const std::size_t shard = master.numel();
  const std::size_t window = store_.window_numel();
  for (std::size_t off = 0; off < shard; off += window) {
    const std::size_t n = std::min(window, shard - off);
    SwapRing::Window w;
    if (swapped) {
      w = ring_.acquire(module, off, n, [this](std::size_t k) { return upcoming(k); });
    } else {
      w.master = reinterpret_cast<float*>(master.host_data()) + off;
      w.exp_avg = reinterpret_cast<float*>(store_.state(module, tiers::StateKind::exp_avg).host_data()) + off;
      w.exp_avg_sq = reinterpret_cast<float*>(store_.state(module, tiers::StateKind::exp_avg_sq).host_data()) + off;
    }
    // Out of place (Note [Speculative updates]): read the current states, write the shadow.
    const float* master_in = nullptr;
    const float* exp_avg_in = nullptr;
    const float* exp_avg_sq_in = nullptr;
    if (mode != Mode::in_place) {
      STRATA_ASSERT(!swapped, "a speculative update of NVMe states");
      Shadow& sh = shadows_[static_cast<std::size_t>(module)];
      master_in = w.master;
      exp_avg_in = w.exp_avg;
      exp_avg_sq_in = w.exp_avg_sq;
      w.master = reinterpret_cast<float*>(sh.master.data()) + off;
      w.exp_avg = reinterpret_cast<float*>(sh.exp_avg.data()) + off;
      w.exp_avg_sq = reinterpret_cast<float*>(sh.exp_avg_sq.data()) + off;
    }
    Staging* staging = nullptr;
    void* out = params_out(module, off, &staging);
    cpu_adam::AdamShard s;
    s.params = w.master;
    s.grads = acc.host_data() + off * dtype_size(store_.grad_dtype());
    s.grad_dtype = store_.grad_dtype();
    s.exp_avg = w.exp_avg;
    s.exp_avg_sq = w.exp_avg_sq;
    s.params_in = master_in;
    s.exp_avg_in = exp_avg_in;
    s.exp_avg_sq_in = exp_avg_sq_in;
    s.numel = n;
    if (dtype_ != DType::f32) {
      s.params_out = out;
      s.out_dtype = dtype_;
    }
    {
      trace::ScopedSpan span(tracer_, adam_span_names_[static_cast<std::size_t>(module)], "cpu optimizer");
      cpu_adam::adam_step(active_simd(), threads_, args.hyper, args.step, s, args.grad_scale);
    }
    deliver(module, off, n, w.master, staging);  // copies fp32 parameters out first
    if (swapped) ring_.release(w);
  }
  // The accumulator is not zeroed: the next step's first micro-batch overwrites it.
  // New parameters on their way to the device (resident modules, device shards) or to NVMe:
  // the fetcher reads them after this event, or once the gate opens (NVMe: once the writes
  // handed to the write watcher are over; Note [Parameter writes behind]).
  gate_.updated(module).record(*streams_.copy_in);
}

void Updater::update_on_device(int module, const UpdateArgs& args) {
  tiers::TierState& param = store_.state(module, tiers::StateKind::param);
  tiers::TierState& master = store_.state(module, tiers::StateKind::master);
  tiers::TierState& acc = store_.state(module, tiers::StateKind::grad_accum);
  device::Stream& optim = *streams_.optim;
  const std::size_t n = master.numel();
  cpu_adam::AdamShard s;
  s.params = static_cast<float*>(master.device_data());
  s.grads = acc.device_data();
  s.grad_dtype = store_.grad_dtype();
  s.exp_avg = static_cast<float*>(store_.state(module, tiers::StateKind::exp_avg).device_data());
  s.exp_avg_sq = static_cast<float*>(store_.state(module, tiers::StateKind::exp_avg_sq).device_data());
  s.numel = n;
  if (dtype_ != DType::f32) {
    s.params_out = param.device_data();
    s.out_dtype = dtype_;
  }
  ops::adam_step(optim, args.hyper, args.step, s, args.grad_scale, threads_);
  if (dtype_ == DType::f32) optim.copy_async(param.device_data(), master.device_data(), n * 4);
  acc.fill_zero(optim);
  gate_.updated(module).record(optim);
}

void* Updater::params_out(int module, std::size_t offset, Staging** staging) {
  *staging = nullptr;
  tiers::TierState& param = store_.state(module, tiers::StateKind::param);
  if (std::byte* pinned = param.host_data()) return pinned + offset * dtype_size(dtype_);
  STRATA_ASSERT(!out_staging_.empty(), "no parameter staging buffers were planned");
  Staging& st = out_staging_[out_next_];
  out_next_ = (out_next_ + 1) % out_staging_.size();
  st.done->synchronize();  // its last H2D has finished
  // and its last NVMe write (the write watcher counts them; it alone waits on their handles)
  for (std::uint64_t w = st.written.load(std::memory_order_acquire); w != st.writes;
       w = st.written.load(std::memory_order_acquire)) {
    st.written.wait(w, std::memory_order_acquire);
  }
  *staging = &st;
  return st.buffer.data();
}

void Updater::deliver(int module, std::size_t offset, std::size_t n, const float* master, Staging* staging) {
  tiers::TierState& param = store_.state(module, tiers::StateKind::param);
  void* host = staging ? static_cast<void*>(staging->buffer.data())
                       : static_cast<void*>(param.host_data() + offset * dtype_size(dtype_));
  // fp32 parameters are the master: copied on the Adam's threads, each part by the thread that
  // updated it (a module's serial memcpy was the gap between its Adam and the next module's).
  if (dtype_ == DType::f32) cpu_adam::copy_partitioned(master, host, DType::f32, n, threads_);
  if (staging == nullptr) return;  // written in place (pinned shard)
  offload::AioHandle io = param.write_from_staging(offset, n, host, *streams_.copy_in);
  if (io) {
    // Waited for on the write watcher: a later window of this module may reuse the buffer.
    write_watcher_.post([this, w = PendingWrite{std::move(io), staging, ++staging->writes}] { wait_write(w); });
    task_wrote_ = true;
  } else {
    staging->done->record(*streams_.copy_in);
  }
}

}  // namespace strata::runtime::zero
