// Each op: the CUDA launchers when the stream has a cudaStream_t, else a host task running the
// CPU Adam code on the stream's worker thread (as runtime/ops/ops.cpp does for the GPT ops).
#include "runtime/ops/optim_ops.h"

#include <cstdint>

#include "core/cpu_features.h"
#include "core/error.h"
#include "cpu_adam/adam.h"
#include "cpu_adam/grad_ops.h"
#include "kernels/cuda/adamw.h"
#include "kernels/cuda/grad_ops.h"
#include "runtime/ops/dispatch_impl.h"

namespace strata::runtime::ops {
namespace {

// device_scratch on CUDA: [0, 8) grad_sq_norm's result, [8, 12) all_finite's flag, then the
// norm's chunk sums from byte 16.
constexpr std::size_t kNormAt = 0;
constexpr std::size_t kFlagAt = 8;
constexpr std::size_t kPartialsAt = 16;

template <typename T>
T* scratch_at(void* device_scratch, std::size_t offset) {
  STRATA_ASSERT(device_scratch != nullptr &&
                    reinterpret_cast<std::uintptr_t>(device_scratch) % alignof(double) == 0,
                "optimizer ops on CUDA need an 8-byte aligned device_scratch "
                "(optim_scratch_bytes(n) bytes)");
  return reinterpret_cast<T*>(static_cast<unsigned char*>(device_scratch) + offset);
}

// The per-step scalars as the CUDA AdamW takes them: cpu_adam::adam_scalars' values, copied
// (kernels/ may not include cpu_adam/, so it declares the same struct). Throws strata::Error
// for invalid hyper-parameters or a step < 1, from the call itself (unused without CUDA).
[[maybe_unused]] kernels::cuda::AdamwScalars adamw_scalars(const cpu_adam::AdamHyper& hyper,
                                                           std::int64_t step, float grad_scale) {
  const cpu_adam::AdamScalars s = cpu_adam::adam_scalars(hyper, step, grad_scale);
  kernels::cuda::AdamwScalars k;
  k.grad_scale = s.grad_scale;
  k.beta1 = s.beta1;
  k.one_minus_beta1 = s.one_minus_beta1;
  k.beta2 = s.beta2;
  k.one_minus_beta2 = s.one_minus_beta2;
  k.step_size = s.step_size;
  k.bc2_sqrt = s.bc2_sqrt;
  k.eps = s.eps;
  k.l2 = s.l2;
  k.decay = s.decay;
  k.has_l2 = s.has_l2;
  k.has_decay = s.has_decay;
  return k;
}
static_assert(sizeof(kernels::cuda::AdamwScalars) == sizeof(cpu_adam::AdamScalars),
              "kernels::cuda::AdamwScalars must mirror cpu_adam::AdamScalars field for field");

}  // namespace


std::size_t optim_scratch_bytes(std::size_t n) {
  return kPartialsAt + kernels::cuda::grad_sq_norm_partials(n) * sizeof(double);
}

void accumulate_grads(device::Stream& s, float* acc, const void* x, DType dtype, std::size_t n, int threads) {
  accumulate_grads(s, acc, DType::f32, x, dtype, n, threads);
}

void accumulate_grads(device::Stream& s, void* acc, DType acc_dtype, const void* x, DType dtype, std::size_t n,
                      int threads) {
  const OpScope scope(s, "accumulate_grads");
  if (cudaStream_t cs = cuda_stream(s)) {
    CUDA_OP(kc::accumulate_grads(acc, acc_dtype, x, dtype, n, cs));
    return;
  }
  s.host_task([=] { cpu_adam::accumulate_grads(active_simd(), threads, acc, acc_dtype, x, dtype, n); },
              "accumulate grads");
}

void grad_sq_norm(device::Stream& s, const float* x, std::size_t n, float scale, double* out,
                  void* device_scratch, int threads) {
  grad_sq_norm(s, x, DType::f32, n, scale, out, device_scratch, threads);
}

void grad_sq_norm(device::Stream& s, const void* x, DType dtype, std::size_t n, float scale, double* out,
                  void* device_scratch, int threads) {
  const OpScope scope(s, "grad_sq_norm");
  if (cudaStream_t cs = cuda_stream(s)) {
    CUDA_OP(kc::grad_sq_norm(x, dtype, n, scale, scratch_at<double>(device_scratch, kNormAt),
                             scratch_at<double>(device_scratch, kPartialsAt), cs));
    s.copy_async(out, scratch_at<double>(device_scratch, kNormAt), sizeof(double));
    return;
  }
  s.host_task([=] { *out = cpu_adam::grad_sq_norm(active_simd(), threads, x, dtype, n, scale); }, "grad norm");
}

void all_finite(device::Stream& s, const float* x, std::size_t n, int* out, void* device_scratch,
                int threads) {
  all_finite(s, x, DType::f32, n, out, device_scratch, threads);
}

void all_finite(device::Stream& s, const void* x, DType dtype, std::size_t n, int* out, void* device_scratch,
                int threads) {
  const OpScope scope(s, "all_finite");
  if (cudaStream_t cs = cuda_stream(s)) {
    CUDA_OP(kc::all_finite(x, dtype, n, scratch_at<int>(device_scratch, kFlagAt), cs));
    s.copy_async(out, scratch_at<int>(device_scratch, kFlagAt), sizeof(int));
    return;
  }
  s.host_task([=] { *out = cpu_adam::all_finite(active_simd(), threads, x, dtype, n) ? 1 : 0; },
              "finite check");
}

void adam_step(device::Stream& s, const cpu_adam::AdamHyper& hyper, std::int64_t step,
               const cpu_adam::AdamShard& shard, float grad_scale, int threads) {
  const OpScope scope(s, "adam_step");
  if (cudaStream_t cs = cuda_stream(s)) {
    CUDA_OP(kc::adamw(shard.params, shard.grads, shard.grad_dtype, shard.exp_avg,
                      shard.exp_avg_sq, shard.numel, adamw_scalars(hyper, step, grad_scale),
                      shard.params_out, shard.out_dtype, cs));
    return;
  }
  s.host_task([=] { cpu_adam::adam_step(active_simd(), threads, hyper, step, shard, grad_scale); },
              "adam");
}

}  // namespace strata::runtime::ops
