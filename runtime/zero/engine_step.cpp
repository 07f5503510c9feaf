// ZeroEngine: the optimizer step.
//
//   1. wait until every gradient has landed (all streams drained); drop gathered parameters
//   2. the global gradient norm (clipping) and the overflow check (fp16), summed over the shards
//      in module order and over the ranks (all-reduce)
//   3. fp16: the loss scaler decides whether the step is skipped
//   4. Adam on each module's shard where its states live, modules in forward order:
//      device: ops::adam_step on the optimizer stream; pinned: the CPU Adam on this thread;
//      nvme: sub-groups through a ring of swap buffers (read ahead, update, write behind)
//   5. the new parameters (compute dtype) go to their tier; resident modules are all-gathered
//      and the next forward waits on `params_updated`
#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/error.h"
#include "cpu_adam/grad_ops.h"
#include "runtime/ops/optim_ops.h"
#include "runtime/trace/trace.h"
#include "runtime/zero/engine_impl.h"

namespace strata::runtime {
namespace {

cpu_adam::AdamHyper make_hyper(const Config& config, double lr) {
  STRATA_ASSERT(config.optimizer.has_value(), "the engine needs an optimizer section");
  const OptimizerConfig& o = *config.optimizer;
  cpu_adam::AdamHyper h;
  h.lr = static_cast<float>(lr);
  const std::array<double, 2> betas = o.betas.value();
  h.beta1 = static_cast<float>(betas[0]);
  h.beta2 = static_cast<float>(betas[1]);
  h.eps = static_cast<float>(o.eps.value());
  h.weight_decay = static_cast<float>(o.weight_decay.value());
  h.mode = (o.type == OptimizerType::kAdamW || o.adam_w_mode) ? cpu_adam::AdamMode::adamw
                                                                : cpu_adam::AdamMode::adam;
  h.bias_correction = o.bias_correction;
  return h;
}

}  // namespace

void ZeroEngine::Impl::norm_and_overflow(bool need_norm, bool need_finite, double* sq_norm, bool* overflow) {
  const float unscale = 1.0f / scaler.scale();
  std::vector<double> sq(modules.size(), 0.0);
  std::vector<char> finite(modules.size(), 1);
  for (std::size_t m = 0; m < modules.size(); ++m) {
    ModuleState& s = modules[m];
    const std::size_t n = s.plan.part.shard_numel;
    if (s.plan.optimizer_tier == Tier::device) {
      if (need_norm) ops::grad_sq_norm(*optim, s.acc_dev.as<float>(), n, unscale, &sq[m], threads);
      if (need_finite) ops::all_finite(*optim, s.acc_dev.as<float>(), n, reinterpret_cast<bool*>(&finite[m]), threads);
    } else {
      const float* acc = reinterpret_cast<const float*>(s.acc_pin.data());
      if (need_norm) sq[m] = cpu_adam::grad_sq_norm(active_simd(), threads, acc, DType::f32, n, unscale);
      if (need_finite) finite[m] = cpu_adam::all_finite(active_simd(), threads, acc, DType::f32, n) ? 1 : 0;
    }
  }
  optim->synchronize();
  double total = 0.0;
  for (double v : sq) total += v;  // module order: the same bits on every placement
  bool any_overflow = std::find(finite.begin(), finite.end(), 0) != finite.end();
  if (plan.shards > 1 && (need_norm || need_finite)) {
    // Sum the squares and take the max of the overflow flags over the ranks.
    DeviceBuffer scratch = device.allocate(2 * sizeof(float), "grad norm scratch");
    float host[2] = {static_cast<float>(total), any_overflow ? 1.0f : 0.0f};
    comm_stream->copy_async(scratch.data(), host, sizeof host);
    comm.all_reduce(scratch.as<float>(), scratch.as<float>(), 1, DType::f32, *comm_stream, ReduceOp::sum);
    comm.all_reduce(scratch.as<float>() + 1, scratch.as<float>() + 1, 1, DType::f32, *comm_stream, ReduceOp::max);
    comm_stream->copy_async(host, scratch.data(), sizeof host);
    comm_stream->synchronize();
    total = host[0];
    any_overflow = host[1] != 0.0f;
  }
  *sq_norm = total;
  *overflow = any_overflow;
}

void* ZeroEngine::Impl::params_out_for(ModuleState& s, std::size_t offset, std::size_t n, Staging** staging) {
  (void)n;
  *staging = nullptr;
  if (!s.plan.resident && s.plan.param_tier == Tier::pinned) {
    return reinterpret_cast<char*>(s.shard_pin.data()) + offset * dtype_size(dtype);
  }
  *staging = &take_staging(out_staging, &out_staging_next);
  return (*staging)->buffer.data();
}

void ZeroEngine::Impl::deliver_params(ModuleState& s, std::size_t offset, std::size_t n, const float* master,
                                      Staging* staging) {
  const std::size_t ds = dtype_size(dtype);
  const std::size_t bytes = n * ds;
  void* host = staging ? static_cast<void*>(staging->buffer.data())
                       : static_cast<void*>(reinterpret_cast<char*>(s.shard_pin.data()) + offset * ds);
  if (dtype == DType::f32) std::memcpy(host, master, bytes);  // fp32 parameters are the master
  if (staging == nullptr) return;  // written in place (pinned shard)
  if (s.plan.resident) {
    h2d(static_cast<char*>(s.full.data()) + shard_offset_bytes(s) + offset * ds, host, bytes);
    staging->done->record(*copy_in);
  } else if (s.plan.param_tier == Tier::device) {
    h2d(static_cast<char*>(s.shard_dev.data()) + offset * ds, host, bytes);
    staging->done->record(*copy_in);
  } else {
    staging->io = swap().write(s.shard_ext, host, bytes, offset * ds);
  }
}

void ZeroEngine::Impl::update_device_tier(ModuleState& s, const cpu_adam::AdamHyper& hyper, float grad_scale) {
  const std::size_t n = s.plan.part.shard_numel;
  void* dst = s.plan.resident ? static_cast<char*>(s.full.data()) + shard_offset_bytes(s) : s.shard_dev.data();
  cpu_adam::AdamShard shard;
  shard.params = s.master_dev.as<float>();
  shard.grads = s.acc_dev.data();
  shard.grad_dtype = DType::f32;
  shard.exp_avg = s.exp_avg_dev.as<float>();
  shard.exp_avg_sq = s.exp_avg_sq_dev.as<float>();
  shard.numel = n;
  if (dtype != DType::f32) {
    shard.params_out = dst;
    shard.out_dtype = dtype;
  }
  ops::adam_step(*optim, hyper, adam_steps, shard, grad_scale, threads);
  if (dtype == DType::f32) optim->copy_async(dst, s.master_dev.data(), n * 4);
}

void ZeroEngine::Impl::update_pinned_tier(ModuleState& s, const cpu_adam::AdamHyper& hyper, float grad_scale) {
  const std::size_t n_all = s.plan.part.shard_numel;
  const std::size_t chunk = plan.optimizer_chunk_numel ? plan.optimizer_chunk_numel : plan.max_shard_numel;
  float* master = reinterpret_cast<float*>(s.master_pin.data());
  for (std::size_t off = 0; off < n_all; off += chunk) {
    const std::size_t n = std::min(chunk, n_all - off);
    Staging* staging = nullptr;
    void* out = params_out_for(s, off, n, &staging);
    cpu_adam::AdamShard shard;
    shard.params = master + off;
    shard.grads = reinterpret_cast<const float*>(s.acc_pin.data()) + off;
    shard.grad_dtype = DType::f32;
    shard.exp_avg = reinterpret_cast<float*>(s.exp_avg_pin.data()) + off;
    shard.exp_avg_sq = reinterpret_cast<float*>(s.exp_avg_sq_pin.data()) + off;
    shard.numel = n;
    if (dtype != DType::f32) {
      shard.params_out = out;
      shard.out_dtype = dtype;
    }
    {
      ScopedSpan span(tracer, "adam", "cpu optimizer");
      cpu_adam::adam_step(active_simd(), threads, hyper, adam_steps, shard, grad_scale);
    }
    deliver_params(s, off, n, master + off, staging);
  }
}

void ZeroEngine::Impl::update_nvme_tier(const cpu_adam::AdamHyper& hyper, float grad_scale) {
  struct Item {
    int module;
    std::size_t offset, n;
  };
  std::vector<Item> items;
  const std::size_t chunk = plan.optimizer_chunk_numel;
  for (std::size_t m = 0; m < modules.size(); ++m) {
    if (modules[m].plan.optimizer_tier != Tier::nvme) continue;
    const std::size_t n_all = modules[m].plan.part.shard_numel;
    for (std::size_t off = 0; off < n_all; off += chunk)
      items.push_back({static_cast<int>(m), off, std::min(chunk, n_all - off)});
  }
  if (items.empty()) return;

  // A ring of swap sets: while item j is updated, item j+1.. are read and item j-1 is written.
  struct SwapSet {
    offload::HostBuffer master, exp_avg, exp_avg_sq;
    offload::AioHandle reads[3], writes[3];
  };
  offload::SwapSpace& sw = swap();
  offload::AioEngine& io = sw.engine();
  std::vector<SwapSet> sets(static_cast<std::size_t>(plan.optimizer_swap_buffers));
  for (SwapSet& set : sets) {
    set.master = tiers.pinned().allocate(chunk * 4, "optimizer swap buffer");
    set.exp_avg = tiers.pinned().allocate(chunk * 4, "optimizer swap buffer");
    set.exp_avg_sq = tiers.pinned().allocate(chunk * 4, "optimizer swap buffer");
  }
  const OffloadOptimizerConfig& oc = config.zero_optimization.offload_optimizer;
  const std::size_t lookahead = oc.pipeline_read ? sets.size() - 2 : 0;
  std::size_t next_read = 0;
  auto issue_read = [&](std::size_t k) {
    SwapSet& set = sets[k % sets.size()];
    for (offload::AioHandle& w : set.writes) {
      if (w) io.wait(w);
      w = {};
    }
    const Item& it = items[k];
    const ModuleState& s = modules[static_cast<std::size_t>(it.module)];
    set.reads[0] = sw.read(s.master_ext, set.master.data(), it.n * 4, it.offset * 4);
    set.reads[1] = sw.read(s.exp_avg_ext, set.exp_avg.data(), it.n * 4, it.offset * 4);
    set.reads[2] = sw.read(s.exp_avg_sq_ext, set.exp_avg_sq.data(), it.n * 4, it.offset * 4);
  };
  for (std::size_t j = 0; j < items.size(); ++j) {
    while (next_read < items.size() && next_read <= j + lookahead) issue_read(next_read++);
    SwapSet& set = sets[j % sets.size()];
    {
      ScopedSpan span(tracer, "wait for NVMe reads", "cpu optimizer");
      for (offload::AioHandle& r : set.reads) io.wait(r);  // errors name the extent
    }
    const Item& it = items[j];
    ModuleState& s = modules[static_cast<std::size_t>(it.module)];
    Staging* staging = nullptr;
    void* out = params_out_for(s, it.offset, it.n, &staging);
    cpu_adam::AdamShard shard;
    shard.params = reinterpret_cast<float*>(set.master.data());
    shard.grads = reinterpret_cast<const float*>(s.acc_pin.data()) + it.offset;
    shard.grad_dtype = DType::f32;
    shard.exp_avg = reinterpret_cast<float*>(set.exp_avg.data());
    shard.exp_avg_sq = reinterpret_cast<float*>(set.exp_avg_sq.data());
    shard.numel = it.n;
    if (dtype != DType::f32) {
      shard.params_out = out;
      shard.out_dtype = dtype;
    }
    {
      ScopedSpan span(tracer, "adam", "cpu optimizer");
      cpu_adam::adam_step(active_simd(), threads, hyper, adam_steps, shard, grad_scale);
    }
    deliver_params(s, it.offset, it.n, shard.params, staging);
    set.writes[0] = sw.write(s.master_ext, set.master.data(), it.n * 4, it.offset * 4);
    set.writes[1] = sw.write(s.exp_avg_ext, set.exp_avg.data(), it.n * 4, it.offset * 4);
    set.writes[2] = sw.write(s.exp_avg_sq_ext, set.exp_avg_sq.data(), it.n * 4, it.offset * 4);
    if (!oc.pipeline_write) {
      for (offload::AioHandle& w : set.writes) io.wait(w);
    }
    // deliver_params may still be copying from the master buffer (fp32 parameters): the set is
    // reused only after its writes, and the staging copy finished inside deliver_params.
  }
  for (SwapSet& set : sets) {
    for (offload::AioHandle& w : set.writes)
      if (w) io.wait(w);
  }
}

void ZeroEngine::Impl::finish_param_updates() {
  // Updated parameters are in place once the optimizer stream, the H2D copies and the NVMe
  // writes are done; resident modules are then all-gathered.
  optim->synchronize();
  copy_in->synchronize();
  for (Staging& st : out_staging) {
    if (st.io) swap().engine().wait(st.io);
    st.io = {};
  }
  const std::size_t ds = dtype_size(dtype);
  if (plan.shards > 1) {
    for (ModuleState& s : modules) {
      if (!s.plan.resident) continue;
      void* slice = static_cast<char*>(s.full.data()) + shard_offset_bytes(s);
      comm.all_gather(slice, s.full.data(), s.plan.part.shard_numel, dtype, *comm_stream);
      count_all_gather(s.plan.part.padded_numel * ds);
    }
  }
  params_updated->record(*comm_stream);
  for (auto& pool : pools) pool->drain();  // the step's buffers are done with
}

StepOutcome ZeroEngine::Impl::step(double lr) {
  StepOutcome out;
  out.loss_scale = scaler.scale();
  device.synchronize();  // every gradient has landed; rethrows a failure of any stream
  trace.end_step();
  drop_all_gathered();
  for (ModuleState& s : modules) {
    STRATA_ASSERT(s.grad.empty() && s.holders == 0, "step() while the model holds module " + s.name);
  }

  const double max_norm = config.gradient_clipping.value_or(0.0);
  const bool fp16 = config.fp16.enabled.value_or(false);
  double sq = 0.0;
  bool overflow = false;
  if (max_norm > 0.0 || fp16) norm_and_overflow(max_norm > 0.0, fp16, &sq, &overflow);
  if (max_norm > 0.0) out.grad_norm = std::sqrt(sq);
  if (fp16 && scaler.update(overflow)) {
    out.skipped = true;
    ++counters.skipped_steps;
    return out;
  }
  // torch.nn.utils.clip_grad_norm_'s coefficient.
  float clip = 1.0f;
  if (max_norm > 0.0 && out.grad_norm > max_norm) {
    clip = static_cast<float>(max_norm / (out.grad_norm + 1e-6));
  }
  const float grad_scale = clip / out.loss_scale;
  ++adam_steps;
  const cpu_adam::AdamHyper hyper = make_hyper(config, lr);
  for (ModuleState& s : modules) {
    if (s.plan.optimizer_tier == Tier::device) update_device_tier(s, hyper, grad_scale);
    if (s.plan.optimizer_tier == Tier::pinned) update_pinned_tier(s, hyper, grad_scale);
  }
  update_nvme_tier(hyper, grad_scale);
  finish_param_updates();
  return out;
}

}  // namespace strata::runtime
