// ZeroEngine: reading and writing this rank's optimizer states for checkpoints, wherever the
// plan keeps them (device, pinned host, NVMe), and the step counters.
#include <cstring>

#include "core/error.h"
#include "runtime/zero/engine_impl.h"

namespace strata::runtime {
namespace {

DeviceBuffer& device_state(ModuleState& s, OptimState state) {
  switch (state) {
    case OptimState::master: return s.master_dev;
    case OptimState::exp_avg: return s.exp_avg_dev;
    case OptimState::exp_avg_sq: return s.exp_avg_sq_dev;
  }
  detail::assert_fail("a known OptimState", __FILE__, __LINE__);
}

offload::HostBuffer& pinned_state(ModuleState& s, OptimState state) {
  switch (state) {
    case OptimState::master: return s.master_pin;
    case OptimState::exp_avg: return s.exp_avg_pin;
    case OptimState::exp_avg_sq: return s.exp_avg_sq_pin;
  }
  detail::assert_fail("a known OptimState", __FILE__, __LINE__);
}

offload::ExtentId nvme_state(const ModuleState& s, OptimState state) {
  switch (state) {
    case OptimState::master: return s.master_ext;
    case OptimState::exp_avg: return s.exp_avg_ext;
    case OptimState::exp_avg_sq: return s.exp_avg_sq_ext;
  }
  detail::assert_fail("a known OptimState", __FILE__, __LINE__);
}

ModuleState& checked(ZeroEngine::Impl& d, int module, std::size_t offset, std::size_t n) {
  STRATA_ASSERT(module >= 0 && static_cast<std::size_t>(module) < d.modules.size(), "module index out of range");
  ModuleState& s = d.modules[static_cast<std::size_t>(module)];
  STRATA_ASSERT(offset % d.tiers_chunk_numel() == 0 && n <= d.tiers_chunk_numel() &&
                    offset + n <= s.plan.part.shard_numel,
                "checkpoint state range out of bounds or unaligned");
  return s;
}

}  // namespace

std::size_t ZeroEngine::Impl::tiers_chunk_numel() const {
  // One NVMe block of elements: fp32 offsets (4 bytes each) and compute-dtype offsets (2 or 4)
  // are then whole blocks.
  return config.aio.block_size;
}

int ZeroEngine::shards() const { return impl_->plan.shards; }
int ZeroEngine::shard_index() const { return impl_->shard_rank; }
std::size_t ZeroEngine::shard_numel(int module) const {
  return impl_->modules.at(static_cast<std::size_t>(module)).plan.part.shard_numel;
}
const std::string& ZeroEngine::module_name(int module) const {
  return impl_->modules.at(static_cast<std::size_t>(module)).name;
}
std::size_t ZeroEngine::state_chunk_numel() const { return impl_->tiers_chunk_numel(); }

void ZeroEngine::read_state(int module, OptimState state, std::size_t offset, std::size_t n, float* buf) {
  Impl& d = *impl_;
  ModuleState& s = checked(d, module, offset, n);
  switch (s.plan.optimizer_tier) {
    case Tier::device: {
      d.optim->copy_async(buf, device_state(s, state).as<float>() + offset, n * 4);
      d.optim->synchronize();
      std::lock_guard lock(d.counters_mutex);
      d.counters.d2h_bytes += n * 4;
      break;
    }
    case Tier::pinned:
      std::memcpy(buf, reinterpret_cast<const float*>(pinned_state(s, state).data()) + offset, n * 4);
      break;
    case Tier::nvme:
      d.swap().engine().wait(d.swap().read(nvme_state(s, state), buf, n * 4, offset * 4));
      break;
  }
}

void ZeroEngine::write_state(int module, OptimState state, std::size_t offset, std::size_t n, const float* buf) {
  Impl& d = *impl_;
  ModuleState& s = checked(d, module, offset, n);
  switch (s.plan.optimizer_tier) {
    case Tier::device:
      d.h2d(device_state(s, state).as<float>() + offset, buf, n * 4);
      d.copy_in->synchronize();
      break;
    case Tier::pinned:
      std::memcpy(reinterpret_cast<float*>(pinned_state(s, state).data()) + offset, buf, n * 4);
      break;
    case Tier::nvme:
      d.swap().engine().wait(d.swap().write(nvme_state(s, state), buf, n * 4, offset * 4));
      break;
  }
  if (state != OptimState::master) return;

  // The parameters of this piece: the master cast to the compute dtype, as an update writes them.
  const std::size_t ds = dtype_size(d.dtype);
  offload::HostBuffer cast = offload::HostBuffer::allocate(n * ds, "parameters from a checkpoint");
  convert(buf, DType::f32, cast.data(), d.dtype, n);
  if (s.plan.resident) {
    d.h2d(static_cast<char*>(s.full.data()) + d.shard_offset_bytes(s) + offset * ds, cast.data(), n * ds);
    d.copy_in->synchronize();
    if (d.plan.shards > 1) s.stale = true;  // the other ranks' slices come with the next gather
    return;
  }
  switch (s.plan.param_tier) {
    case Tier::device:
      d.h2d(static_cast<char*>(s.shard_dev.data()) + offset * ds, cast.data(), n * ds);
      d.copy_in->synchronize();
      break;
    case Tier::pinned: std::memcpy(s.shard_pin.data() + offset * ds, cast.data(), n * ds); break;
    case Tier::nvme: d.swap().engine().wait(d.swap().write(s.shard_ext, cast.data(), n * ds, offset * ds)); break;
  }
}

void ZeroEngine::run_after_updates(std::function<void()> task, std::function<void()> done) {
  impl_->worker.post(std::move(task), std::move(done));
}

ZeroEngine::TrainState ZeroEngine::train_state() const {
  TrainState t;
  t.adam_steps = impl_->adam_steps;
  t.loss_scaler = impl_->scaler.save_state();
  return t;
}

void ZeroEngine::restore_train_state(const TrainState& state) {
  Impl& d = *impl_;
  if (state.adam_steps < 0) throw Error("a checkpoint's Adam step count is negative", "meta.json");
  d.scaler.load_state(state.loss_scaler);
  d.adam_steps = state.adam_steps;
}

}  // namespace strata::runtime
