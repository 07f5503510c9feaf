// SwiGLU on CUDA, forward and backward: the formulas of kernels/host/swiglu.h, one element
// (n, f) per thread and step of a grid-stride loop, fp32 arithmetic (expf, not __expf),
// results rounded once. The backward's thread reads gate and up at (n, f) before it writes
// dgate and dup there, so dgate_up may alias gate_up: no pointer is __restrict__.
#include <cstdint>

#include "core/error.h"
#include "kernels/cuda/common_impl.cuh"
#include "kernels/cuda/ops.h"

namespace strata::kernels::cuda {
namespace {

using detail::from_f32;
using detail::to_f32;

constexpr int kThreads = 256;

__device__ __forceinline__ float sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

// out (N, F) = silu(gate) * up; gate_up (N, 2F) rows [gate | up].
template <typename T>
__global__ void swiglu_fwd_kernel(T* out, const T* gate_up, std::int64_t N, int F) {
  const std::int64_t n_elems = N * F;
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
       i < n_elems; i += stride) {
    const std::int64_t n = i / F;
    const int f = static_cast<int>(i % F);
    const T* row = gate_up + n * 2 * F;
    const float g = to_f32(row[f]), u = to_f32(row[F + f]);
    out[i] = from_f32<T>(g * sigmoid(g) * u);
  }
}

// dgate_up (N, 2F): dgate = dout * up * s (1 + g (1 - s)), dup = dout * g s, s = sigmoid(g).
template <typename T>
__global__ void swiglu_bwd_kernel(T* dgate_up, const T* gate_up, const T* dout, std::int64_t N,
                                  int F) {
  const std::int64_t n_elems = N * F;
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
       i < n_elems; i += stride) {
    const std::int64_t n = i / F;
    const int f = static_cast<int>(i % F);
    const T* row = gate_up + n * 2 * F;
    const float g = to_f32(row[f]), u = to_f32(row[F + f]), d = to_f32(dout[i]);
    const float s = sigmoid(g);
    T* drow = dgate_up + n * 2 * F;
    drow[f] = from_f32<T>(d * u * (s * (1.0f + g * (1.0f - s))));
    drow[F + f] = from_f32<T>(d * (g * s));
  }
}

}  // namespace

void swiglu_fwd(void* out, const void* gate_up, std::int64_t N, int F, DType dtype,
                cudaStream_t stream) {
  STRATA_ASSERT(N >= 0 && F >= 0);
  if (N == 0 || F == 0) return;
  STRATA_ASSERT(out != nullptr && gate_up != nullptr);
  const std::int64_t n = N * F;
  detail::dispatch_dtype(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    swiglu_fwd_kernel<T><<<detail::grid_stride_blocks(n, kThreads), kThreads, 0, stream>>>(
        static_cast<T*>(out), static_cast<const T*>(gate_up), N, F);
    CUDA_CHECK_LAUNCH();
  });
}

void swiglu_bwd(void* dgate_up, const void* gate_up, const void* dout, std::int64_t N, int F,
                DType dtype, cudaStream_t stream) {
  STRATA_ASSERT(N >= 0 && F >= 0);
  if (N == 0 || F == 0) return;
  STRATA_ASSERT(dgate_up != nullptr && gate_up != nullptr && dout != nullptr);
  const std::int64_t n = N * F;
  detail::dispatch_dtype(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    swiglu_bwd_kernel<T><<<detail::grid_stride_blocks(n, kThreads), kThreads, 0, stream>>>(
        static_cast<T*>(dgate_up), static_cast<const T*>(gate_up), static_cast<const T*>(dout), N,
        F);
    CUDA_CHECK_LAUNCH();
  });
}

}  // namespace strata::kernels::cuda
