// ZeroEngine: gradients. acquire_grads hands the model a zeroed device buffer (compute dtype,
// padded); grads_ready reduces it over the ranks on the comm stream and accumulates this rank's
// shard in fp32, on the device (optimizer states there) or on the host after a D2H copy.
//
//   compute --done--> comm: reduce-scatter (stage >= 2) or all-reduce (stage 0-1), in place
//     device optimizer: comm: acc_dev += shard                    buffer freed after comm
//     host optimizer:   d2h: shard -> pinned staging --> accum: acc_pin += staging
//                                                                 buffer freed after d2h
#include <algorithm>

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
  Stream& comm = *d.comm_stream;
  const bool last = ++s.grad_calls == d.gas;
  if (s.grad_calls == 1) {
    // The accumulator is the last step's until its update has read and zeroed it.
    d.wait_update(module);
    comm.wait(*s.updated);
  }
  comm.wait(done);
  if (d.world > 1) d.reduce_gradient(s);
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

// Reduces s.grad over the ranks on the comm stream, in collectives of at most
// reduce_bucket_size elements. Stage >= 2 reduce-scatters: a module within one bucket in place;
// a larger one piece by piece, each piece gathering the same slice of every rank's shard into a
// contiguous bucket buffer (reduce-scatter needs rank k's part at offset k), reducing it and
// copying this rank's slice back. Stage 0-1 all-reduce, in bucket-size pieces. Each element is
// summed in the same rank order either way, so bucketing never changes the bits.
void ZeroEngine::Impl::reduce_gradient(ModuleState& s) {
  const ModulePartition& part = s.plan.part;
  const std::size_t ds = dtype_size(dtype);
  const std::size_t bucket = std::max<std::size_t>(reduce_bucket, static_cast<std::size_t>(world));
  Stream& stream = *comm_stream;
  char* grad = static_cast<char*>(s.grad.data());
  if (plan.stage < 2) {
    for (std::size_t off = 0; off < part.padded_numel; off += bucket) {
      const std::size_t n = std::min(bucket, part.padded_numel - off);
      comm.all_reduce(grad + off * ds, grad + off * ds, n, dtype, stream);
      count_reduce(n * ds, true);
    }
    return;
  }
  char* mine = grad + shard_offset_bytes(s);
  if (part.padded_numel <= bucket) {
    comm.reduce_scatter(grad, mine, part.shard_numel, dtype, stream);
    count_reduce(part.padded_numel * ds, false);
    return;
  }
  const std::size_t piece = bucket / static_cast<std::size_t>(world);  // of each rank's shard
  DeviceBuffer staging = allocate_now(s.plan.size_class, piece * static_cast<std::size_t>(world) * ds,
                                      s.name + " reduce bucket");
  char* b = static_cast<char*>(staging.data());
  for (std::size_t off = 0; off < part.shard_numel; off += piece) {
    const std::size_t n = std::min(piece, part.shard_numel - off);
    for (int r = 0; r < world; ++r) {
      stream.copy_async(b + static_cast<std::size_t>(r) * n * ds, grad + (part.shard_offset(r) + off) * ds, n * ds);
    }
    char* slot = b + static_cast<std::size_t>(shard_rank) * n * ds;
    comm.reduce_scatter(b, slot, n, dtype, stream);
    count_reduce(n * static_cast<std::size_t>(world) * ds, false);
    stream.copy_async(mine + off * ds, slot, n * ds);
  }
  pool_of(s).free_after(std::move(staging), stream);
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
