// ZeroEngine: the optimizer step and the updates.
//
// step():
//   without clipping and fp16: nothing left to decide; the updates were posted from grads_ready
//   otherwise: wait for every gradient; the global norm (sum of squares per shard, in module
//   order, all-reduced over the shards) and the overflow check (fp16; the loss scaler may skip
//   the step); then post the updates, modules in forward order
// update_module() (on the optimizer worker): wait for the module's last accumulation; Adam on
// its shard where the states live (device: ops::adam_step on the optimizer stream; pinned: the
// CPU Adam on the worker; nvme: sub-groups through the ring of swap sets, reads ahead and
// writes behind); the new parameters (compute dtype) to their tier; the accumulator zeroed for
// the next step; `updated` recorded after the module's device work.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/error.h"
#include "cpu_adam/grad_ops.h"
#include "runtime/ops/optim_ops.h"
#include "runtime/trace/trace.h"
#include "runtime/zero/engine_impl.h"

namespace strata::runtime {
cpu_adam::AdamHyper ZeroEngine::Impl::make_hyper(double lr) const {
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

void ZeroEngine::Impl::norm_and_overflow(bool need_norm, bool need_finite, double* sq_norm, bool* overflow) {
  const float unscale = 1.0f / scaler.scale();
  std::vector<double> sq(modules.size(), 0.0);
  std::vector<int> finite(modules.size(), 1);
  DeviceBuffer ops_scratch;  // the device ops' results and partial sums (used on CUDA)
  for (std::size_t m = 0; m < modules.size(); ++m) {
    ModuleState& s = modules[m];
    const std::size_t n = s.plan.part.shard_numel;
    if (s.plan.optimizer_tier == Tier::device) {
      if (ops_scratch.empty())
        ops_scratch = device.allocate(ops::optim_scratch_bytes(plan.max_shard_numel), "grad norm scratch");
      if (need_norm) ops::grad_sq_norm(*optim, s.acc_dev.as<float>(), n, unscale, &sq[m], ops_scratch.data(), threads);
      if (need_finite) ops::all_finite(*optim, s.acc_dev.as<float>(), n, &finite[m], ops_scratch.data(), threads);
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

void* ZeroEngine::Impl::params_out_for(ModuleState& s, std::size_t offset, Staging** staging) {
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

void ZeroEngine::Impl::update_device_tier(ModuleState& s, const cpu_adam::AdamHyper& hyper, std::int64_t step,
                                          float grad_scale) {
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
  ops::adam_step(*optim, hyper, step, shard, grad_scale, threads);
  if (dtype == DType::f32) optim->copy_async(dst, s.master_dev.data(), n * 4);
  optim->memset_async(s.acc_dev.data(), 0, n * 4);
  s.updated->record(*optim);
}

void ZeroEngine::Impl::update_pinned_tier(ModuleState& s, const cpu_adam::AdamHyper& hyper, std::int64_t step,
                                          float grad_scale) {
  const std::size_t n_all = s.plan.part.shard_numel;
  const std::size_t chunk = plan.optimizer_chunk_numel ? plan.optimizer_chunk_numel : plan.max_shard_numel;
  float* master = reinterpret_cast<float*>(s.master_pin.data());
  for (std::size_t off = 0; off < n_all; off += chunk) {
    const std::size_t n = std::min(chunk, n_all - off);
    Staging* staging = nullptr;
    void* out = params_out_for(s, off, &staging);
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
      cpu_adam::adam_step(active_simd(), threads, hyper, step, shard, grad_scale);
    }
    deliver_params(s, off, n, master + off, staging);
  }
}

void ZeroEngine::Impl::update_nvme_tier(ModuleState& s, const cpu_adam::AdamHyper& hyper, std::int64_t step,
                                        float grad_scale) {
  // The module's sub-groups through the ring: while sub-group j is updated, the next ones are
  // read (pipeline_read) and the previous one is written (pipeline_write).
  struct Item {
    std::size_t offset, n;
  };
  std::vector<Item> items;
  const std::size_t chunk = plan.optimizer_chunk_numel;
  const std::size_t n_all = s.plan.part.shard_numel;
  for (std::size_t off = 0; off < n_all; off += chunk) items.push_back({off, std::min(chunk, n_all - off)});
  offload::SwapSpace& sw = swap();
  offload::AioEngine& io = sw.engine();
  const OffloadOptimizerConfig& oc = config.zero_optimization.offload_optimizer;
  const std::size_t lookahead = oc.pipeline_read ? swap_sets.size() - 2 : 0;
  std::size_t next_read = 0;
  auto issue_read = [&](std::size_t k) {
    SwapSet& set = swap_sets[k % swap_sets.size()];
    for (offload::AioHandle& w : set.writes) {
      if (w) io.wait(w);
      w = {};
    }
    const Item& it = items[k];
    set.reads[0] = sw.read(s.master_ext, set.master.data(), it.n * 4, it.offset * 4);
    set.reads[1] = sw.read(s.exp_avg_ext, set.exp_avg.data(), it.n * 4, it.offset * 4);
    set.reads[2] = sw.read(s.exp_avg_sq_ext, set.exp_avg_sq.data(), it.n * 4, it.offset * 4);
  };
  for (std::size_t j = 0; j < items.size(); ++j) {
    while (next_read < items.size() && next_read <= j + lookahead) issue_read(next_read++);
    SwapSet& set = swap_sets[j % swap_sets.size()];
    {
      ScopedSpan span(tracer, "wait for NVMe reads", "cpu optimizer");
      for (offload::AioHandle& r : set.reads) io.wait(r);  // errors name the extent
    }
    const Item& it = items[j];
    Staging* staging = nullptr;
    void* out = params_out_for(s, it.offset, &staging);
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
      cpu_adam::adam_step(active_simd(), threads, hyper, step, shard, grad_scale);
    }
    deliver_params(s, it.offset, it.n, shard.params, staging);  // copies fp32 parameters out first
    set.writes[0] = sw.write(s.master_ext, set.master.data(), it.n * 4, it.offset * 4);
    set.writes[1] = sw.write(s.exp_avg_ext, set.exp_avg.data(), it.n * 4, it.offset * 4);
    set.writes[2] = sw.write(s.exp_avg_sq_ext, set.exp_avg_sq.data(), it.n * 4, it.offset * 4);
    if (!oc.pipeline_write) {
      for (offload::AioHandle& w : set.writes) io.wait(w);
    }
  }
  // The next update of this module reads what these wrote.
  for (SwapSet& set : swap_sets) {
    for (offload::AioHandle& w : set.writes) {
      if (w) io.wait(w);
      w = {};
    }
  }
}

void ZeroEngine::Impl::update_module(ModuleState& s, const cpu_adam::AdamHyper& hyper, std::int64_t step,
                                     float grad_scale) {
  s.grad_done->synchronize();  // the step's last accumulation into this module's gradient
  switch (s.plan.optimizer_tier) {
    case Tier::device: update_device_tier(s, hyper, step, grad_scale); return;
    case Tier::pinned: update_pinned_tier(s, hyper, step, grad_scale); break;
    case Tier::nvme: update_nvme_tier(s, hyper, step, grad_scale); break;
  }
  std::memset(s.acc_pin.data(), 0, s.plan.part.shard_numel * 4);
  // New parameters on their way to the device (resident modules, device shards) or to NVMe.
  s.updated->record(*copy_in);
  if (!s.plan.resident && s.plan.param_tier == Tier::nvme) {
    for (Staging& st : out_staging) {
      if (st.io) swap().engine().wait(st.io);
      st.io = {};
    }
  }
}

void ZeroEngine::Impl::post_update(int module, const cpu_adam::AdamHyper& hyper, std::int64_t step,
                                   float grad_scale) {
  ModuleState& s = modules[static_cast<std::size_t>(module)];
  {
    std::lock_guard lock(update_mutex);
    ++updates_posted[static_cast<std::size_t>(module)];
  }
  if (s.plan.resident && plan.shards > 1) s.stale = true;
  worker.post([this, &s, hyper, step, grad_scale] { update_module(s, hyper, step, grad_scale); },
              [this, module] {
                {
                  std::lock_guard lock(update_mutex);
                  ++updates_done[static_cast<std::size_t>(module)];
                }
                update_cv.notify_all();
              });
}

void ZeroEngine::Impl::wait_update(int module) {
  {
    std::unique_lock lock(update_mutex);
    const std::size_t m = static_cast<std::size_t>(module);
    update_cv.wait(lock, [&] { return updates_done[m] == updates_posted[m]; });
  }
  worker.check();
}

bool ZeroEngine::Impl::update_pending(int module) {
  std::lock_guard lock(update_mutex);
  const std::size_t m = static_cast<std::size_t>(module);
  return updates_done[m] != updates_posted[m];
}

void ZeroEngine::Impl::wait_all_updates() { worker.drain(); }

StepOutcome ZeroEngine::Impl::step() {
  StepOutcome out;
  out.loss_scale = scaler.scale();
  worker.check();
  trace.end_step();
  drop_all_gathered();
  for (ModuleState& s : modules) {
    STRATA_ASSERT(s.grad.empty() && s.holders == 0, "step() while the model holds module " + s.name);
    STRATA_ASSERT(s.grad_calls == gas, "module " + s.name + " got " + std::to_string(s.grad_calls) +
                                           " gradients this step, expected gradient_accumulation_steps");
  }
  if (!global_before_update) return out;  // the updates are under way

  wait_all_updates();
  device.synchronize();  // every gradient has landed; rethrows a failure of any stream
  const double max_norm = config.gradient_clipping.value_or(0.0);
  const bool fp16 = config.fp16.enabled.value_or(false);
  double sq = 0.0;
  bool overflow = false;
  norm_and_overflow(max_norm > 0.0, fp16, &sq, &overflow);
  if (max_norm > 0.0) out.grad_norm = std::sqrt(sq);
  if (fp16 && scaler.update(overflow)) {
    out.skipped = true;
    ++counters.skipped_steps;
    for (ModuleState& s : modules) {  // the next step starts from zero gradients
      const std::size_t bytes = s.plan.part.shard_numel * 4;
      if (s.plan.optimizer_tier == Tier::device) {
        optim->memset_async(s.acc_dev.data(), 0, bytes);
        s.updated->record(*optim);
      } else {
        std::memset(s.acc_pin.data(), 0, bytes);
      }
    }
    return out;
  }
  // torch.nn.utils.clip_grad_norm_'s coefficient.
  float clip = 1.0f;
  if (max_norm > 0.0 && out.grad_norm > max_norm) clip = static_cast<float>(max_norm / (out.grad_norm + 1e-6));
  ++adam_steps;
  for (std::size_t m = 0; m < modules.size(); ++m) {
    post_update(static_cast<int>(m), step_hyper, adam_steps, clip / out.loss_scale);
  }
  return out;
}

}  // namespace strata::runtime
