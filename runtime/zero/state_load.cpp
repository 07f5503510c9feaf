// Initial values into the tier store's states (state_load.h).
#include "runtime/zero/state_load.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "core/error.h"
#include "cpu_adam/adam.h"
#include "kernels/host/quantize.h"
#include "offload/host_buffer.h"

namespace strata::runtime::zero {
namespace {
// Calls fn(offset, n) for each optimizer window of a shard of `numel` elements, in order: a
// pinned state is written window by window with the CPU Adam's partition (cpu_adam's
// copy_partitioned / first_touch), so the threads that update a page are the ones that wrote it.
template <typename Fn>
void for_each_window(std::size_t numel, std::size_t window, Fn&& fn) {
  if (window == 0) window = numel;
  for (std::size_t off = 0; off < numel; off += window) fn(off, std::min(window, numel - off));
}

// values[first, first + n) of a module of `numel` values, its padding (past numel) zero, into
// out (fp32 or the compute dtype) on `threads` threads.
void copy_padded(const float* values, std::size_t numel, std::size_t first, std::size_t n, void* out, DType dtype,
                 int threads) {
  const std::size_t have = first < numel ? std::min(n, numel - first) : 0;
  if (have > 0) cpu_adam::copy_partitioned(values + first, out, dtype, have, threads);
  std::memset(static_cast<std::byte*>(out) + have * dtype_size(dtype), 0, (n - have) * dtype_size(dtype));
}

// A state's initial values (shard elements [first, first + n) of the padded module) into its
// tier: straight into a pinned state's memory, window by window; through a host copy otherwise.
}  // namespace

void load_state(tiers::TierState& state, const float* values, std::size_t numel, std::size_t first, DType dtype,
                std::size_t window, int threads, device::Stream& stream) {
  const std::size_t n = state.numel();
  if (state.tier() == tiers::Tier::pinned) {
    for_each_window(n, window, [&](std::size_t off, std::size_t len) {
      copy_padded(values, numel, first + off, len, state.host_data() + off * dtype_size(dtype), dtype, threads);
    });
    return;
  }
  // 4 KiB-aligned, so an NVMe state is written without a bounce copy.
  offload::HostBuffer host = offload::HostBuffer::allocate(n * dtype_size(dtype), "initial state");
  copy_padded(values, numel, first, n, host.data(), dtype, threads);
  state.write(0, n, host.data(), stream);
}

// Zero moments. A pinned state is zeroed window by window with the CPU Adam's partition.
void zero_state(tiers::TierState& state, std::size_t window, int threads, device::Stream& stream) {
  if (state.tier() != tiers::Tier::pinned) {
    state.fill_zero(stream);
    return;
  }
  auto* p = reinterpret_cast<float*>(state.host_data());
  for_each_window(state.numel(), window, [&](std::size_t off, std::size_t len) {
    cpu_adam::first_touch(p + off, len, threads);
  });
}


void load_params(tiers::TierStore& store, int module, const float* values, device::Stream& copy_in) {
  const tiers::ModulePartition& part = store.module_plan(module).part;
  const DType dtype = store.dtype();
  tiers::TierState& param = store.state(module, tiers::StateKind::param);
  if (store.module_plan(module).resident) {
    offload::HostBuffer cast = offload::HostBuffer::allocate(part.padded_numel * dtype_size(dtype), "initial parameters");
    copy_padded(values, part.numel, 0, part.padded_numel, cast.data(), dtype, store.cpu_threads());
    param.write_full(cast.data(), copy_in);
    return;
  }
  if (store.module_plan(module).quantized) {
    // Quantized once here, from the fp32 values (padded with zeros), into the shard's bytes
    // (one shard: plan.cpp refuses quantization with several ranks).
    const tiers::WeightQuant& q = store.plan_inputs().quant;
    std::vector<float> padded;
    const float* x = values;
    if (part.padded_numel != part.numel) {
      padded.assign(part.padded_numel, 0.0f);
      std::copy(values, values + part.numel, padded.begin());
      x = padded.data();
    }
    STRATA_ASSERT(param.numel() == kernels::host::quant_bytes(part.padded_numel, q.group, q.bits),
                  "quantized shard size");
    if (param.tier() == tiers::Tier::pinned) {
      kernels::host::quantize_groupwise(x, part.padded_numel, q.group, q.bits, param.host_data());
      return;
    }
    offload::HostBuffer host = offload::HostBuffer::allocate(param.numel(), "quantized parameters");
    kernels::host::quantize_groupwise(x, part.padded_numel, q.group, q.bits, host.data());
    param.write(0, param.numel(), host.data(), copy_in);
    return;
  }
  load_state(param, values, part.numel, part.shard_offset(store.shard_rank()), dtype, store.window_numel(),
             store.cpu_threads(), copy_in);
}

}  // namespace strata::runtime::zero
