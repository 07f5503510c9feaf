// GELU (tanh approximation) forward / backward and the residual add on CUDA: grid-stride loops,
// one element per thread and step, fp32 arithmetic. Outputs may alias inputs element for
// element (as the host ops allow), so no pointer is __restrict__.
#include <cstdint>

#include "core/error.h"
#include "kernels/cuda/common_impl.cuh"
#include "kernels/cuda/ops.h"

namespace strata::kernels::cuda {
namespace {

using detail::from_f32;
using detail::to_f32;

constexpr int kThreads = 256;
constexpr float kGeluScale = 0.7978845608028654f;  // sqrt(2 / pi)
constexpr float kGeluCubic = 0.044715f;

template <typename T>
__global__ void gelu_fwd_kernel(T* out, const T* inp, std::int64_t n) {
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    const float x = to_f32(inp[i]);
    const float cube = kGeluCubic * x * x * x;
    out[i] = from_f32<T>(0.5f * x * (1.0f + tanhf(kGeluScale * (x + cube))));
  }
}

// d/dx of 0.5 x (1 + tanh(u)), u = s (x + a x^3):
//   0.5 (1 + tanh(u)) + 0.5 x (1 - tanh(u)^2) s (1 + 3 a x^2)
template <typename T>
__global__ void gelu_bwd_kernel(T* dinp, const T* inp, const T* dout, std::int64_t n) {
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    const float x = to_f32(inp[i]);
    const float cube = kGeluCubic * x * x * x;
    const float th = tanhf(kGeluScale * (x + cube));
    const float sech2 = 1.0f - th * th;
    const float local =
        0.5f * (1.0f + th) + x * 0.5f * sech2 * kGeluScale * (1.0f + 3.0f * kGeluCubic * x * x);
    dinp[i] = from_f32<T>(local * to_f32(dout[i]));
  }
}

template <typename T>
__global__ void residual_fwd_kernel(T* out, const T* a, const T* b, std::int64_t n) {
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride)
    out[i] = from_f32<T>(to_f32(a[i]) + to_f32(b[i]));
}

}  // namespace

void gelu_fwd(void* out, const void* inp, std::int64_t n, DType dtype, cudaStream_t stream) {
  if (n <= 0) return;
  STRATA_ASSERT(out != nullptr && inp != nullptr);
  detail::dispatch_dtype(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    gelu_fwd_kernel<T><<<detail::grid_stride_blocks(n, kThreads), kThreads, 0, stream>>>(
        static_cast<T*>(out), static_cast<const T*>(inp), n);
    CUDA_CHECK_LAUNCH();
  });
}

void gelu_bwd(void* dinp, const void* inp, const void* dout, std::int64_t n, DType dtype,
              cudaStream_t stream) {
  if (n <= 0) return;
  STRATA_ASSERT(dinp != nullptr && inp != nullptr && dout != nullptr);
  detail::dispatch_dtype(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    gelu_bwd_kernel<T><<<detail::grid_stride_blocks(n, kThreads), kThreads, 0, stream>>>(
        static_cast<T*>(dinp), static_cast<const T*>(inp), static_cast<const T*>(dout), n);
    CUDA_CHECK_LAUNCH();
  });
}

void residual_fwd(void* out, const void* a, const void* b, std::int64_t n, DType dtype,
                  cudaStream_t stream) {
  if (n <= 0) return;
  STRATA_ASSERT(out != nullptr && a != nullptr && b != nullptr);
  detail::dispatch_dtype(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    residual_fwd_kernel<T><<<detail::grid_stride_blocks(n, kThreads), kThreads, 0, stream>>>(
        static_cast<T*>(out), static_cast<const T*>(a), static_cast<const T*>(b), n);
    CUDA_CHECK_LAUNCH();
  });
}

}  // namespace strata::kernels::cuda
