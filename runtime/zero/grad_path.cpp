#include "runtime/zero/grad_path.h"

#include <algorithm>
#include <cstring>

#include "core/cpu_features.h"
#include "core/error.h"
#include "cpu_adam/grad_ops.h"
#include "runtime/ops/optim_ops.h"

namespace strata::runtime::zero {

GradPath::GradPath(const config::Config& config, tiers::TierStore& store, device::Device& device,
                   device::Stream& compute, EngineStreams& streams, comm::Communicator& comm, ParamFetcher& fetcher,
                   UpdateGate& gate, trace::Tracer& tracer)
    : store_(store),
      device_(device),
      compute_(compute),
      streams_(streams),
      comm_(comm),
      fetcher_(fetcher),
      gate_(gate),
      dtype_(store.dtype()),
      grad_dtype_(store.grad_dtype()),
      world_(comm.world()),
      tracer_(tracer),
      accumulator_([&device] { device.bind_thread(); }) {
  gas_ = static_cast<int>(config.gradient_accumulation_steps.value_or(std::uint64_t{1}).value_or(1));
  threads_ = static_cast<int>(config.strata.cpu_threads);
  reduce_bucket_ = static_cast<std::size_t>(
      config::value_or_default(config.zero_optimization, &config::ZeroConfig::reduce_bucket_size));
  modules_.resize(static_cast<std::size_t>(store.module_count()));
  std::size_t max_host_shard = 0;
  for (int m = 0; m < store.module_count(); ++m) {
    modules_[static_cast<std::size_t>(m)].done = device.create_event();
    if (store.state(m, tiers::StateKind::grad_accum).host_data() != nullptr) {
      max_host_shard = std::max(max_host_shard, store.module_plan(m).part.shard_numel);
    }
  }
  if (max_host_shard > 0) {
    for (int i = 0; i < 2; ++i) {
      staging_.push_back({store.pinned().allocate(max_host_shard * dtype_size(dtype_), "gradient D2H buffer"),
                          device.create_event(), false});
    }
  }
  comm_done_ = device.create_event();
  zeroed_ = device.create_event();
  host_posted_.assign(modules_.size(), 0);
  host_done_.assign(modules_.size(), 0);
}

GradPath::~GradPath() {
  try {
    accumulator_.drain();
  } catch (const std::exception&) {
  }
}

void GradPath::wait_grad_done(int module) {
  const std::size_t m = static_cast<std::size_t>(module);
  if (store_.state(module, tiers::StateKind::grad_accum).host_data() == nullptr) {
    modules_[m].done->synchronize();
    return;
  }
  {
    std::unique_lock lock(mutex_);
    changed_.wait(lock, [&] { return host_done_[m] == host_posted_[m]; });
  }
  accumulator_.check();
}

void GradPath::drain() { accumulator_.drain(); }

void GradPath::begin_step() {
  for (Module& s : modules_) s.calls = 0;
}

params::ModuleView GradPath::acquire(int module) {
  Module& s = modules_.at(static_cast<std::size_t>(module));
  const tiers::ModulePlan& mp = store_.module_plan(module);
  const std::size_t bytes = mp.part.padded_numel * dtype_size(dtype_);
  if (s.grad.empty()) {
    s.grad = fetcher_.allocate_now(mp.size_class, bytes,
                                   store_.plan_inputs().module_names[static_cast<std::size_t>(module)] +
                                       " gradient buffer");
    compute_.memset_async(s.grad.data(), 0, bytes);
  }
  params::ModuleView view;
  view.data = s.grad.data();
  view.numel = mp.part.numel;
  view.dtype = dtype_;
  view.ready = nullptr;  // zeroed on the compute stream itself
  return view;
}

bool GradPath::ready(int module, const device::Event& done) {
  Module& s = modules_.at(static_cast<std::size_t>(module));
  STRATA_ASSERT(!s.grad.empty(), "grads_ready without acquire_grads");
  const tiers::ModulePlan& mp = store_.module_plan(module);
  device::Stream& comm = *streams_.comm;
  const bool last = ++s.calls == gas_;
  if (s.calls == 1) {
    // The accumulator is the last step's until its update has read and zeroed it.
    gate_.wait(module);
    comm.wait(gate_.updated(module));
  }
  comm.wait(done);
  if (world_ > 1) reduce(module);
  const void* shard = static_cast<const char*>(s.grad.data()) +
                      mp.part.shard_offset(store_.shard_rank()) * dtype_size(dtype_);
  tiers::TierState& acc = store_.state(module, tiers::StateKind::grad_accum);
  if (acc.host_data() == nullptr) {
    ops::accumulate_grads(comm, acc.device_data(), grad_dtype_, shard, dtype_, mp.part.shard_numel, threads_);
    if (last) s.done->record(comm);
    fetcher_.free_after(mp.size_class, std::move(s.grad), comm);
  } else {
    accumulate_on_host(module, shard, /*first=*/s.calls == 1);
  }
  return last;
}

bool GradPath::ready_none(int module, const device::Event& done) {
  Module& s = modules_.at(static_cast<std::size_t>(module));
  if (world_ > 1 || !s.grad.empty()) {
    // `done` was recorded before acquire's zero fill (a new buffer's, on the compute stream): the
    // collective waits for the fill too, not for `done` alone (it reduced the bytes the buffer
    // held before: two ranks of a mixture, each with experts no token of its own reached, gave a
    // gradient norm that changed from run to run).
    acquire(module);
    zeroed_->record(compute_);
    return ready(module, *zeroed_);
  }
  device::Stream& comm = *streams_.comm;
  const bool last = ++s.calls == gas_;
  if (s.calls == 1) {
    gate_.wait(module);
    comm.wait(gate_.updated(module));
  }
  tiers::TierState& acc = store_.state(module, tiers::StateKind::grad_accum);
  if (acc.host_data() == nullptr) {
    if (last) s.done->record(comm);
  } else if (s.calls == 1) {
    zero_on_host(module);
  }
  return last;
}

// Reduces the module's gradient buffer over the ranks on the comm stream, in collectives of at
// most reduce_bucket_size elements. Stages 1-3 reduce-scatter (each rank accumulates and updates
// only its shard, so it needs only its shard's sum: ZeRO's 2Ψ per step at stage 1 too, not an
// all-reduce's 2Ψ plus the parameters' all-gather): a module within one bucket in
// place; a larger one piece by piece, each piece gathering the same slice of every rank's shard
// into a contiguous bucket buffer (reduce-scatter needs rank k's part at offset k), reducing it
// and copying this rank's slice back. Stage 0 all-reduces, in bucket-size pieces. Each element
// is summed in the same rank order either way, so bucketing never changes the bits.
void GradPath::reduce(int module) {
  Module& s = modules_[static_cast<std::size_t>(module)];
  const tiers::ModulePlan& mp = store_.module_plan(module);
  const tiers::ModulePartition& part = mp.part;
  const std::size_t ds = dtype_size(dtype_);
  const std::size_t bucket = std::max<std::size_t>(reduce_bucket_, static_cast<std::size_t>(world_));
  device::Stream& stream = *streams_.comm;
  char* grad = static_cast<char*>(s.grad.data());
  if (store_.plan().shards == 1) {
    for (std::size_t off = 0; off < part.padded_numel; off += bucket) {
      const std::size_t n = std::min(bucket, part.padded_numel - off);
      comm_.all_reduce(grad + off * ds, grad + off * ds, n, dtype_, stream);
      count_reduce(n * ds, true);
    }
    return;
  }
  const int shard_rank = store_.shard_rank();
  char* mine = grad + part.shard_offset(shard_rank) * ds;
  if (part.padded_numel <= bucket) {
    comm_.reduce_scatter(grad, mine, part.shard_numel, dtype_, stream);
    count_reduce(part.padded_numel * ds, false);
    return;
  }
  const std::size_t piece = bucket / static_cast<std::size_t>(world_);  // of each rank's shard
  device::DeviceBuffer staging = fetcher_.allocate_now(
      mp.size_class, piece * static_cast<std::size_t>(world_) * ds,
      store_.plan_inputs().module_names[static_cast<std::size_t>(module)] + " reduce bucket");
  char* b = static_cast<char*>(staging.data());
  for (std::size_t off = 0; off < part.shard_numel; off += piece) {
    const std::size_t n = std::min(piece, part.shard_numel - off);
    for (int r = 0; r < world_; ++r) {
      stream.copy_async(b + static_cast<std::size_t>(r) * n * ds, grad + (part.shard_offset(r) + off) * ds, n * ds);
    }
    char* slot = b + static_cast<std::size_t>(shard_rank) * n * ds;
    comm_.reduce_scatter(b, slot, n, dtype_, stream);
    count_reduce(n * static_cast<std::size_t>(world_) * ds, false);
    stream.copy_async(mine + off * ds, slot, n * ds);
  }
  fetcher_.free_after(mp.size_class, std::move(staging), stream);
}

// D2H of this rank's gradient shard into pinned staging (enqueued here), then the fp32
// accumulation on the accumulator thread once the copy's event completes. The trainer waits only
// when both staging buffers still hold gradients the accumulator has not read.
// The step's first micro-batch of module m added nothing: its host accumulator becomes zero, in
// order with the accumulations posted before (the update gate has released it already).
void GradPath::zero_on_host(int module) {
  const tiers::ModulePlan& mp = store_.module_plan(module);
  {
    std::lock_guard lock(mutex_);
    ++host_posted_[static_cast<std::size_t>(module)];
  }
  std::byte* acc = store_.state(module, tiers::StateKind::grad_accum).host_data();
  const std::size_t bytes = mp.part.shard_numel * dtype_size(grad_dtype_);
  accumulator_.post([acc, bytes] { std::memset(acc, 0, bytes); },
                    [this, module] {
                      {
                        std::lock_guard lock(mutex_);
                        ++host_done_[static_cast<std::size_t>(module)];
                      }
                      changed_.notify_all();
                    });
}

void GradPath::accumulate_on_host(int module, const void* shard, bool first) {
  Module& s = modules_[static_cast<std::size_t>(module)];
  const tiers::ModulePlan& mp = store_.module_plan(module);
  STRATA_ASSERT(!staging_.empty(), "no gradient staging buffers were planned");
  Staging& st = staging_[staging_next_];
  staging_next_ = (staging_next_ + 1) % staging_.size();
  {
    std::unique_lock lock(mutex_);
    changed_.wait(lock, [&] { return !st.busy; });
    st.busy = true;
    ++host_posted_[static_cast<std::size_t>(module)];
  }
  const std::size_t bytes = mp.part.shard_numel * dtype_size(dtype_);
  comm_done_->record(*streams_.comm);
  streams_.copy_out->wait(*comm_done_);
  streams_.copy_out->copy_async(st.buffer.data(), shard, bytes);
  store_.transfers().add_d2h(bytes);
  st.copied->record(*streams_.copy_out);
  fetcher_.free_after(mp.size_class, std::move(s.grad), *streams_.copy_out);

  std::byte* acc = store_.state(module, tiers::StateKind::grad_accum).host_data();
  const std::size_t n = mp.part.shard_numel;
  accumulator_.post(
      [this, &st, acc, n, first] {
        st.copied->synchronize();  // a failed D2H is reported by its stream's synchronize (the step fails there)
        trace::ScopedSpan span(tracer_, first ? "store grads" : "accumulate grads", "grad accumulate");
        if (first) {
          cpu_adam::store_first_grads(active_simd(), threads_, acc, grad_dtype_, st.buffer.data(), dtype_, n);
        } else {
          cpu_adam::accumulate_grads(active_simd(), threads_, acc, grad_dtype_, st.buffer.data(), dtype_, n);
        }
      },
      [this, &st, module] {
        {
          std::lock_guard lock(mutex_);
          st.busy = false;
          ++host_done_[static_cast<std::size_t>(module)];
        }
        changed_.notify_all();
      });
}

void GradPath::count_reduce(std::size_t full_bytes, bool all_reduce) {
  const std::size_t once = full_bytes / static_cast<std::size_t>(world_) * static_cast<std::size_t>(world_ - 1);
  collective_bytes_ += all_reduce ? 2 * once : once;
}

void GradPath::check_step_complete() const {
  for (std::size_t m = 0; m < modules_.size(); ++m) {
    const Module& s = modules_[m];
    const std::string& name = store_.plan_inputs().module_names[m];
    STRATA_ASSERT(s.grad.empty() && !fetcher_.held(static_cast<int>(m)), "step() while the model holds module " + name);
    STRATA_ASSERT(s.calls == gas_, "module " + name + " got " + std::to_string(s.calls) +
                                       " gradients this step, expected gradient_accumulation_steps");
  }
}

void GradPath::norm_and_overflow(bool need_norm, bool need_finite, float unscale, double* sq_norm,
                                 bool* overflow) {
  std::vector<double> sq(modules_.size(), 0.0);
  std::vector<int> finite(modules_.size(), 1);
  device::DeviceBuffer ops_scratch;  // the device ops' results and partial sums (used on CUDA)
  device::Stream& optim = *streams_.optim;
  for (std::size_t m = 0; m < modules_.size(); ++m) {
    const tiers::TierState& acc = store_.state(static_cast<int>(m), tiers::StateKind::grad_accum);
    const std::size_t n = acc.numel();
    if (acc.host_data() == nullptr) {
      if (ops_scratch.empty()) {
        ops_scratch = device_.allocate(ops::optim_scratch_bytes(store_.plan().max_shard_numel), "grad norm scratch");
      }
      const void* g = acc.device_data();
      if (need_norm) ops::grad_sq_norm(optim, g, grad_dtype_, n, unscale, &sq[m], ops_scratch.data(), threads_);
      if (need_finite) ops::all_finite(optim, g, grad_dtype_, n, &finite[m], ops_scratch.data(), threads_);
    } else {
      const std::byte* g = acc.host_data();
      if (need_norm) sq[m] = cpu_adam::grad_sq_norm(active_simd(), threads_, g, grad_dtype_, n, unscale);
      if (need_finite) finite[m] = cpu_adam::all_finite(active_simd(), threads_, g, grad_dtype_, n) ? 1 : 0;
    }
  }
  optim.synchronize();
  double total = 0.0;
  for (double v : sq) total += v;  // module order: the same bits on every placement
  bool any_overflow = std::find(finite.begin(), finite.end(), 0) != finite.end();
  if (store_.plan().shards > 1 && (need_norm || need_finite)) {
    // Sum the squares and take the max of the overflow flags over the ranks.
    device::Stream& comm = *streams_.comm;
    device::DeviceBuffer scratch = device_.allocate(2 * sizeof(float), "grad norm scratch");
    float host[2] = {static_cast<float>(total), any_overflow ? 1.0f : 0.0f};
    comm.copy_async(scratch.data(), host, sizeof host);
    comm_.all_reduce(scratch.as<float>(), scratch.as<float>(), 1, DType::f32, comm, comm::ReduceOp::sum);
    comm_.all_reduce(scratch.as<float>() + 1, scratch.as<float>() + 1, 1, DType::f32, comm, comm::ReduceOp::max);
    comm.copy_async(host, scratch.data(), sizeof host);
    comm.synchronize();
    total = host[0];
    any_overflow = host[1] != 0.0f;
  }
  *sq_norm = total;
  *overflow = any_overflow;
}

void GradPath::zero_accumulators() {
  for (int m = 0; m < store_.module_count(); ++m) {
    tiers::TierState& acc = store_.state(m, tiers::StateKind::grad_accum);
    if (acc.host_data() != nullptr) continue;  // the next step's first micro-batch overwrites it
    // Zeroed on the optimizer stream: the next accumulation waits on it.
    acc.fill_zero(*streams_.optim);
    gate_.updated(m).record(*streams_.optim);
  }
}

}  // namespace strata::runtime::zero
