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
      writer_(store, device, streams, gate, threads_),
      speculation_(store, config.strata.speculative_update_memory_bytes),
      worker_([&device] { device.bind_thread(); }) {
  for (const std::string& name : store.plan_inputs().module_names) adam_span_names_.push_back("adam " + name);
}

Updater::~Updater() {
  // The facade drained already and reported what failed; the writer's destructor then waits for
  // its writes, the ring's for its I/O.
  try {
    worker_.drain();
  } catch (const std::exception&) {
  }
}

void Updater::drain() {
  // The worker first: its tasks hand their writes to the watcher as they end.
  try {
    worker_.drain();
  } catch (...) {
    writer_.drain_writes();
    throw;
  }
  writer_.wait_writes();
}

void Updater::check() {
  worker_.check();
  writer_.check();
}

void Updater::flush_swaps() {
  writer_.drain_writes();
  ring_.flush();
  writer_.check();
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
    writer_.finish(module);
  });
}

void Updater::post(int module, const UpdateArgs& args) {
  queue(module, [this, module, args] { update(module, args); });
}

bool Updater::post_speculative(int module, const UpdateArgs& args, std::uint64_t step) {
  if (!speculation_.reserve(module)) return false;
  queue(module, [this, module, args, step] {
    if (speculation_.cancelled(step)) return;  // the norm was over: redone from scratch
    update(module, args, Mode::speculative);
  });
  return true;
}

void Updater::post_commit(int module) {
  queue(module, [this, module] { speculation_.commit(module); });
}

void Updater::post_redo(int module, const UpdateArgs& args) {
  queue(module, [this, module, args] {
    update(module, args, Mode::redo);
    speculation_.commit(module);
  });
}

void Updater::run_after(std::function<void()> task, std::function<void()> done) {
  {
    std::lock_guard lock(queue_mutex_);
    queued_.push_back(-1);  // the swap ring reads ahead no further than this
  }
  // Checkpoints read the states: after every parameter write too (a failed one fails the task).
  auto after_writes = [this, task = std::move(task)] {
    writer_.wait_writes();
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
    Speculation::Inputs in;
    if (mode != Mode::in_place) {
      STRATA_ASSERT(!swapped, "a speculative update of NVMe states");
      in = speculation_.out_of_place(module, off, w);
    }
    const ParamWriter::Out out = writer_.out(module, off);
    cpu_adam::AdamShard s;
    s.params = w.master;
    s.grads = acc.host_data() + off * dtype_size(store_.grad_dtype());
    s.grad_dtype = store_.grad_dtype();
    s.exp_avg = w.exp_avg;
    s.exp_avg_sq = w.exp_avg_sq;
    s.params_in = in.master;
    s.exp_avg_in = in.exp_avg;
    s.exp_avg_sq_in = in.exp_avg_sq;
    s.numel = n;
    if (dtype_ != DType::f32) {
      s.params_out = out.data;
      s.out_dtype = dtype_;
    }
    {
      trace::ScopedSpan span(tracer_, adam_span_names_[static_cast<std::size_t>(module)], "cpu optimizer");
      cpu_adam::adam_step(active_simd(), threads_, args.hyper, args.step, s, args.grad_scale);
    }
    writer_.deliver(module, off, n, w.master, out);  // copies fp32 parameters out first
    if (swapped) ring_.release(w);
  }
  // The accumulator is not zeroed: the next step's first micro-batch overwrites it.
  // New parameters on their way to the device (resident modules, device shards) or to NVMe:
  // the fetcher reads them after this event, or once the gate opens (NVMe: once the writes
  // handed to the writer's watcher are over; Note [Parameter writes behind] in param_writer.h).
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

}  // namespace strata::runtime::zero
