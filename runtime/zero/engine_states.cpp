// ZeroEngine: model states in and out of the tiers — initial values, the master weights for
// export, this rank's optimizer states for checkpoints, and the step counters. Each goes through
// the tier store's states, so none of this knows where a state lives.
#include <algorithm>
#include <cstring>
#include <vector>

#include "core/error.h"
#include "cpu_adam/adam.h"
#include "runtime/zero/engine.h"
#include "runtime/zero/engine_parts.h"
#include "runtime/zero/state_load.h"

namespace strata::runtime::zero {

void ZeroEngine::load_module(int module, const float* values) {
  Parts& p = *parts_;
  const tiers::ModulePartition& part = p.store.module_plan(module).part;
  const std::size_t window = p.store.window_numel();
  const int threads = p.store.cpu_threads();
  // This rank's shard of the padded module: [first, first + shard_numel); the padding is zero.
  const std::size_t first = part.shard_offset(p.store.shard_rank());
  device::Stream& copy_in = *p.streams.copy_in;

  tiers::TierState& master = p.store.state(module, tiers::StateKind::master);
  load_state(master, values, part.numel, first, DType::f32, window, threads, copy_in);
  zero_state(p.store.state(module, tiers::StateKind::exp_avg), window, threads, *p.streams.optim);
  zero_state(p.store.state(module, tiers::StateKind::exp_avg_sq), window, threads, *p.streams.optim);
  p.streams.optim->synchronize();

  // Parameters in the compute dtype, as an update writes them (the master cast).
  load_params(p.store, module, values, copy_in);
}

void ZeroEngine::gather_module(int module, float* out) {
  Parts& p = *parts_;
  const tiers::ModulePartition& part = p.store.module_plan(module).part;
  std::vector<float> mine(part.shard_numel);
  finish_updates();
  device_.synchronize();
  p.store.state(module, tiers::StateKind::master).read(0, part.shard_numel, mine.data(), *p.streams.copy_out);
  const int shards = p.store.plan().shards;
  if (shards == 1) {
    std::copy(mine.begin(), mine.begin() + static_cast<std::ptrdiff_t>(part.numel), out);
    return;
  }
  // Through a bounded device buffer, a piece of every shard at a time.
  device::Stream& comm = *p.streams.comm;
  const std::size_t piece = std::min<std::size_t>(part.shard_numel, std::size_t{1} << 16);
  device::DeviceBuffer scratch =
      p.fetcher.allocate_now(0, piece * 4 * static_cast<std::size_t>(shards), "gather scratch");
  std::vector<float> all(piece * static_cast<std::size_t>(shards));
  for (std::size_t begin = 0; begin < part.shard_numel; begin += piece) {
    const std::size_t n = std::min(piece, part.shard_numel - begin);
    float* slot = scratch.as<float>() + static_cast<std::size_t>(p.store.shard_rank()) * n;
    comm.copy_async(slot, mine.data() + begin, n * 4);
    p.comm.all_gather(slot, scratch.data(), n, DType::f32, comm);
    comm.copy_async(all.data(), scratch.data(), n * 4 * static_cast<std::size_t>(shards));
    comm.synchronize();
    for (int r = 0; r < shards; ++r) {
      const std::size_t dst = part.shard_offset(r) + begin;
      if (dst >= part.numel) continue;
      const std::size_t take = std::min(n, part.numel - dst);
      std::copy(all.begin() + static_cast<std::ptrdiff_t>(static_cast<std::size_t>(r) * n),
                all.begin() + static_cast<std::ptrdiff_t>(static_cast<std::size_t>(r) * n + take), out + dst);
    }
  }
  p.fetcher.free_after(0, std::move(scratch), comm);
}

// ---- Checkpoints -------------------------------------------------------------------------------

int ZeroEngine::shards() const { return parts_->store.plan().shards; }
int ZeroEngine::shard_index() const { return parts_->store.shard_rank(); }
std::size_t ZeroEngine::shard_numel(int module) const {
  return parts_->store.module_plan(module).part.shard_numel;
}
const std::string& ZeroEngine::module_name(int module) const {
  return parts_->store.plan_inputs().module_names.at(static_cast<std::size_t>(module));
}
std::size_t ZeroEngine::state_chunk_numel() const { return parts_->store.chunk_numel(); }

namespace {

void check_range(const ZeroEngine& engine, int module, std::size_t offset, std::size_t n) {
  STRATA_ASSERT(module >= 0 && module < engine.module_count(), "module index out of range");
  STRATA_ASSERT(offset % engine.state_chunk_numel() == 0 && n <= engine.state_chunk_numel() &&
                    offset + n <= engine.shard_numel(module),
                "checkpoint state range out of bounds or unaligned");
}

}  // namespace

void ZeroEngine::read_state(int module, tiers::OptimState state, std::size_t offset, std::size_t n, float* buf) {
  check_range(*this, module, offset, n);
  Parts& p = *parts_;
  p.updater.flush_swaps();
  // Device-tier states were last written on the optimizer stream: read them in its order.
  p.store.state(module, tiers::state_kind(state)).read(offset, n, buf, *p.streams.optim);
}

void ZeroEngine::write_state(int module, tiers::OptimState state, std::size_t offset, std::size_t n, const float* buf) {
  check_range(*this, module, offset, n);
  Parts& p = *parts_;
  p.updater.flush_swaps();
  p.store.state(module, tiers::state_kind(state)).write(offset, n, buf, *p.streams.copy_in);
  if (state != tiers::OptimState::master) return;
  // The parameters of this piece, as an update writes them.
  offload::HostBuffer cast =
      offload::HostBuffer::allocate(n * dtype_size(p.store.dtype()), "parameters from a checkpoint");
  convert(buf, DType::f32, cast.data(), p.store.dtype(), n);
  p.store.state(module, tiers::StateKind::param).write(offset, n, cast.data(), *p.streams.copy_in);
  p.fetcher.params_changed(module);  // the other ranks' slices come with the next gather
}

ZeroEngine::TrainState ZeroEngine::train_state() const {
  TrainState t;
  t.adam_steps = adam_steps_;
  t.loss_scaler = scaler_.save_state();
  return t;
}

void ZeroEngine::restore_train_state(const TrainState& state) {
  if (state.adam_steps < 0) throw Error("a checkpoint's Adam step count is negative", "meta.json");
  scaler_.load_state(state.loss_scaler);
  adam_steps_ = state.adam_steps;
}

}  // namespace strata::runtime::zero
