// ZeroEngine: gradients. acquire_grads hands the model a zeroed device buffer (compute dtype,
// padded); grads_ready reduces it over the ranks on the comm stream and accumulates this rank's
// shard in fp32, on the device (optimizer states there) or on the host after a D2H copy.
//
//   compute --done--> comm: reduce-scatter (stage >= 2) or all-reduce (stage 0-1), in place
//     device optimizer: comm: acc_dev += shard                    buffer freed after comm
//     host optimizer:   d2h: shard -> pinned staging --> accum: acc_pin += staging
//                                                                 buffer freed after d2h
#include "core/error.h"
#include "cpu_adam/grad_ops.h"
#include "runtime/ops/optim_ops.h"
#include "runtime/zero/engine_impl.h"

namespace strata::runtime {
namespace {
void accumulate_on_host(ZeroEngine::Impl& d, ModuleState& s, const void* shard);
}  // namespace

ModuleView ZeroEngine::acquire_grads(int module) {
  Impl& d = *impl_;
  ModuleState& s = d.modules.at(static_cast<std::size_t>(module));
  const std::size_t bytes = s.plan.part.padded_numel * dtype_size(d.dtype);
  if (s.grad.empty()) {
    s.grad = d.allocate_now(s.plan.size_class, bytes, s.name + " gradient buffer");
    d.compute.memset_async(s.grad.data(), 0, bytes);
  }
  ModuleView view;
  view.data = s.grad.data();
  view.numel = s.plan.part.numel;
  view.dtype = d.dtype;
  view.ready = nullptr;  // zeroed on the compute stream itself
  return view;
}

void ZeroEngine::grads_ready(int module, const Event& done) {
  Impl& d = *impl_;
  ModuleState& s = d.modules.at(static_cast<std::size_t>(module));
  STRATA_ASSERT(!s.grad.empty(), "grads_ready without acquire_grads");
  const ModulePartition& part = s.plan.part;
  const std::size_t ds = dtype_size(d.dtype);
  const std::size_t full_bytes = part.padded_numel * ds;
  Stream& comm = *d.comm_stream;
  const bool last = ++s.grad_calls == d.gas;
  if (s.grad_calls == 1) {
    // The accumulator is the last step's until its update has read and zeroed it.
    d.wait_update(module);
    comm.wait(*s.updated);
  }
  comm.wait(done);
  if (d.world > 1) {
    if (d.plan.stage >= 2) {
      void* mine = static_cast<char*>(s.grad.data()) + d.shard_offset_bytes(s);
      d.comm.reduce_scatter(s.grad.data(), mine, part.shard_numel, d.dtype, comm);
      d.count_reduce(full_bytes, false);
    } else {
      d.comm.all_reduce(s.grad.data(), s.grad.data(), part.padded_numel, d.dtype, comm);
      d.count_reduce(full_bytes, true);
    }
  }
  const void* shard = static_cast<const char*>(s.grad.data()) + d.shard_offset_bytes(s);
  if (s.plan.optimizer_tier == Tier::device) {
    ops::accumulate_grads(comm, s.acc_dev.as<float>(), shard, d.dtype, part.shard_numel, d.threads);
    if (last) s.grad_done->record(comm);
    d.pool_of(s).free_after(std::move(s.grad), comm);
  } else {
    accumulate_on_host(d, s, shard);
    if (last) s.grad_done->record(*d.accum);
  }
  if (last && !d.global_before_update) d.post_update(module, d.step_hyper, d.adam_steps, 1.0f);
}

namespace {

// D2H of this rank's gradient shard into pinned staging, then += into the fp32 accumulator on
// the accumulate stream.
void accumulate_on_host(ZeroEngine::Impl& d, ModuleState& s, const void* shard) {
  Staging& st = d.take_staging(d.grad_staging, &d.grad_staging_next);
  d.comm_done->record(*d.comm_stream);
  d.copy_out->wait(*d.comm_done);
  d.d2h(st.buffer.data(), shard, d.shard_bytes(s));
  d.copy_out_done->record(*d.copy_out);
  d.accum->wait(*d.copy_out_done);
  float* acc = reinterpret_cast<float*>(s.acc_pin.data());
  const void* staged = st.buffer.data();
  const DType dtype = d.dtype;
  const std::size_t n = s.plan.part.shard_numel;
  const int threads = d.threads;
  d.accum->host_task([=] { cpu_adam::accumulate_grads(active_simd(), threads, acc, staged, dtype, n); },
                     "accumulate grads");
  st.done->record(*d.accum);
  d.pool_of(s).free_after(std::move(s.grad), *d.copy_out);
}

}  // namespace

}  // namespace strata::runtime
