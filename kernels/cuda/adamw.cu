// Adam / AdamW on CUDA: the element update of cpu_adam/adam_impl.h, operation for operation.
//
// Bits: every fp32 operation is an explicit round-to-nearest intrinsic (__fmul_rn, __fadd_rn,
// __fsub_rn, __fdiv_rn, __fsqrt_rn), which nvcc never contracts into an FMA, and the per-step
// scalars are the CPU Adam's own: cpu_adam::adam_scalars computes them (in double, rounded to
// float once) and runtime/ops passes them in. Denormals are kept (no -ftz). Narrowing of the grads'
// widening and of params_out uses core/dtype.h's scalar conversions, the same functions the CPU
// Adam runs. So the result is expected to equal the CPU Adam's bit for bit; the contract
// (kernels/cuda/adamw.h) promises an ulp or two.
#include "kernels/cuda/adamw.h"

#include <cuda_runtime.h>

#include <cstdint>

#include "core/error.h"
#include "kernels/cuda/common_impl.cuh"

namespace strata::kernels::cuda {
namespace {

using Scalars = AdamwScalars;

// The dtypes (the hyper-parameters and the step were checked by cpu_adam::adam_scalars).
void check_args(DType grad_dtype, const void* params_out, DType out_dtype) {
  if (grad_dtype != DType::f32 && grad_dtype != DType::bf16 && grad_dtype != DType::f16)
    throw Error("AdamW grad dtype is not a DType", "kernels::cuda::adamw, grad_dtype");
  if (params_out != nullptr && out_dtype != DType::bf16 && out_dtype != DType::f16)
    throw Error("AdamW params_out dtype must be bf16 or f16", "kernels::cuda::adamw, out_dtype");
}

enum class OutKind { none, bf16, f16 };

template <DType kGrad>
__device__ __forceinline__ float load_grad(const void* grads, std::size_t i) {
  if constexpr (kGrad == DType::f32) return static_cast<const float*>(grads)[i];
  else if constexpr (kGrad == DType::bf16)
    return bf16_to_fp32(static_cast<const std::uint16_t*>(grads)[i]);
  else return fp16_to_fp32(static_cast<const std::uint16_t*>(grads)[i]);
}

// One element per thread and step, in the order of adam_impl.h:
//   g = grad * grad_scale;  g = g + l2 * p;  p = p * decay
//   m = beta1 * m + one_minus_beta1 * g
//   v = beta2 * v + (one_minus_beta2 * g) * g
//   denom = sqrt(v) / bc2_sqrt + eps
//   p = p - (step_size * m) / denom
template <DType kGrad, OutKind kOut>
__global__ void adamw_kernel(float* __restrict__ params, const void* __restrict__ grads,
                             float* __restrict__ exp_avg, float* __restrict__ exp_avg_sq,
                             std::uint16_t* __restrict__ params_out, std::size_t n, Scalars s) {
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    float g = __fmul_rn(load_grad<kGrad>(grads, i), s.grad_scale);
    float p = params[i];
    if (s.has_l2) g = __fadd_rn(g, __fmul_rn(s.l2, p));
    if (s.has_decay) p = __fmul_rn(p, s.decay);
    const float m = __fadd_rn(__fmul_rn(s.beta1, exp_avg[i]), __fmul_rn(s.one_minus_beta1, g));
    const float v = __fadd_rn(__fmul_rn(s.beta2, exp_avg_sq[i]),
                              __fmul_rn(__fmul_rn(s.one_minus_beta2, g), g));
    const float denom = __fadd_rn(__fdiv_rn(__fsqrt_rn(v), s.bc2_sqrt), s.eps);
    p = __fsub_rn(p, __fdiv_rn(__fmul_rn(s.step_size, m), denom));
    params[i] = p;
    exp_avg[i] = m;
    exp_avg_sq[i] = v;
    if constexpr (kOut == OutKind::bf16) params_out[i] = fp32_to_bf16(p);
    else if constexpr (kOut == OutKind::f16) params_out[i] = fp32_to_fp16(p);
  }
}

constexpr int kThreads = 256;

template <DType kGrad, OutKind kOut>
void launch(float* params, const void* grads, float* exp_avg, float* exp_avg_sq,
            void* params_out, std::size_t n, const Scalars& s, cudaStream_t stream) {
  const unsigned blocks = detail::grid_stride_blocks(static_cast<std::int64_t>(n), kThreads);
  adamw_kernel<kGrad, kOut><<<blocks, kThreads, 0, stream>>>(
      params, grads, exp_avg, exp_avg_sq, static_cast<std::uint16_t*>(params_out), n, s);
  CUDA_CHECK_LAUNCH();
}

template <DType kGrad>
void launch_out(float* params, const void* grads, float* exp_avg, float* exp_avg_sq,
                void* params_out, DType out_dtype, std::size_t n, const Scalars& s,
                cudaStream_t stream) {
  if (params_out == nullptr)
    return launch<kGrad, OutKind::none>(params, grads, exp_avg, exp_avg_sq, nullptr, n, s, stream);
  if (out_dtype == DType::bf16)
    return launch<kGrad, OutKind::bf16>(params, grads, exp_avg, exp_avg_sq, params_out, n, s,
                                        stream);
  return launch<kGrad, OutKind::f16>(params, grads, exp_avg, exp_avg_sq, params_out, n, s, stream);
}

}  // namespace

void adamw(float* params, const void* grads, DType grad_dtype, float* exp_avg, float* exp_avg_sq,
           std::size_t numel, const AdamwScalars& s, void* params_out, DType out_dtype,
           cudaStream_t stream) {
  check_args(grad_dtype, params_out, out_dtype);
  if (numel == 0) return;
  STRATA_ASSERT(params != nullptr && grads != nullptr && exp_avg != nullptr &&
                    exp_avg_sq != nullptr,
                "kernels::cuda::adamw: null pointer with numel > 0");
  constexpr DType f32 = DType::f32, bf16 = DType::bf16, f16 = DType::f16;
  if (grad_dtype == f32)
    return launch_out<f32>(params, grads, exp_avg, exp_avg_sq, params_out, out_dtype, numel, s,
                           stream);
  if (grad_dtype == bf16)
    return launch_out<bf16>(params, grads, exp_avg, exp_avg_sq, params_out, out_dtype, numel, s,
                            stream);
  return launch_out<f16>(params, grads, exp_avg, exp_avg_sq, params_out, out_dtype, numel, s,
                         stream);
}

}  // namespace strata::kernels::cuda
