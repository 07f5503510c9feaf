// Softmax + cross-entropy on CUDA: one block per row of logits (N, ld), the first V columns
// the vocabulary, any V <= ld (the columns after V are an aligned LM head's padding: ignored by
// the forward, given a zero gradient by the backward).
//
// Each thread makes one pass over its strided share of the row keeping an online (max, sum of
// exp(x - max)) pair; the block combines the pairs (block max, then the sum rescaled to it) into
// the row's log-sum-exp, in fp32. Forward: loss = lse - x[target]. Backward: a second pass
// writes (exp(x - lse) - onehot) * dloss; every logit is read in the first pass, before the
// block's barriers, and then by the thread that overwrites it, so dlogits may alias logits.
// A target outside [0, V) (which the device cannot report) gives a NaN loss and no onehot.
#include <climits>
#include <cstdint>

#include "core/error.h"
#include "kernels/cuda/common_impl.cuh"
#include "kernels/cuda/ops.h"

namespace strata::kernels::cuda {
namespace {

using detail::from_f32;
using detail::to_f32;

// The row's log-sum-exp, returned to every thread of the block.
template <typename T>
__device__ float row_lse(const T* x, int V, float* scratch) {
  float m = -INFINITY, s = 0.0f;
  for (int i = threadIdx.x; i < V; i += blockDim.x) {
    const float v = to_f32(x[i]);
    if (v > m) {
      s = s * expf(m - v) + 1.0f;
      m = v;
    } else if (v != -INFINITY) {  // (-inf adds nothing; -inf - -inf would be NaN)
      s += expf(v - m);
    }
  }
  const float row_max = detail::block_max(m, scratch);
  const float scaled = m == -INFINITY ? 0.0f : s * expf(m - row_max);
  const float sum = detail::block_sum(scaled, scratch);
  return row_max + logf(sum);
}

template <typename T>
__global__ void softmax_xent_fwd_kernel(float* __restrict__ losses, const T* __restrict__ logits,
                                        const std::int32_t* __restrict__ targets, int V, int ld) {
  __shared__ float scratch[32];
  const std::int64_t row = blockIdx.x;
  const T* x = logits + row * ld;
  const float lse = row_lse(x, V, scratch);
  if (threadIdx.x == 0) {
    const std::int32_t t = targets[row];
    losses[row] = (t >= 0 && t < V) ? lse - to_f32(x[t]) : NAN;
  }
}

template <typename T>
__global__ void softmax_xent_bwd_kernel(T* dlogits, const T* logits,
                                        const std::int32_t* __restrict__ targets, int V,
                                        int ld, float dloss) {
  __shared__ float scratch[32];
  const std::int64_t row = blockIdx.x;
  const T* x = logits + row * ld;
  T* dx = dlogits + row * ld;
  const float lse = row_lse(x, V, scratch);
  const std::int32_t t = targets[row];
  for (int i = threadIdx.x; i < V; i += blockDim.x) {
    const float p = expf(to_f32(x[i]) - lse);
    dx[i] = from_f32<T>((p - (i == t ? 1.0f : 0.0f)) * dloss);
  }
  for (int i = V + static_cast<int>(threadIdx.x); i < ld; i += blockDim.x) dx[i] = from_f32<T>(0.0f);
}

int threads_for(int V) {
  if (V >= 8192) return 1024;
  if (V >= 1024) return 256;
  return 64;
}

void check_shape(std::int64_t N, int V, int ld) {
  STRATA_ASSERT(N >= 0 && V >= 0 && ld >= V);
  STRATA_ASSERT(N <= detail::kMaxGridX, "softmax_xent: too many rows for one grid");
}

}  // namespace

void softmax_xent_fwd(float* losses, const void* logits, const std::int32_t* targets,
                      std::int64_t N, int V, int ld, DType dtype, cudaStream_t stream) {
  check_shape(N, V, ld);
  if (N == 0) return;
  STRATA_ASSERT(V > 0, "softmax_xent_fwd: V must be > 0");
  STRATA_ASSERT(losses != nullptr && logits != nullptr && targets != nullptr);
  detail::dispatch_dtype(dtype, [&](auto tag) {
    using E = typename decltype(tag)::type;
    softmax_xent_fwd_kernel<E><<<static_cast<unsigned>(N), threads_for(V), 0, stream>>>(
        losses, static_cast<const E*>(logits), targets, V, ld);
    CUDA_CHECK_LAUNCH();
  });
}

void softmax_xent_bwd(void* dlogits, const void* logits, const std::int32_t* targets,
                      std::int64_t N, int V, int ld, float dloss, DType dtype,
                      cudaStream_t stream) {
  check_shape(N, V, ld);
  if (N == 0 || V == 0) return;
  STRATA_ASSERT(dlogits != nullptr && logits != nullptr && targets != nullptr);
  detail::dispatch_dtype(dtype, [&](auto tag) {
    using E = typename decltype(tag)::type;
    softmax_xent_bwd_kernel<E><<<static_cast<unsigned>(N), threads_for(V), 0, stream>>>(
        static_cast<E*>(dlogits), static_cast<const E*>(logits), targets, V, ld, dloss);
    CUDA_CHECK_LAUNCH();
  });
}

}  // namespace strata::kernels::cuda
