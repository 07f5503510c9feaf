// RMSNorm on CUDA, forward and backward, fp32 statistics; the roundings of
// kernels/host/rmsnorm.h (out = rnd(weight * rnd(inp * rstd)), HF's LlamaRMSNorm).
//
// Forward: one warp per row (the sum of squares, then the output).
// Backward, three kernels, as layernorm.cu:
//   1. dinp += ...: one warp per row (one reduction, then the update);
//   2. dweight partials: the rows are cut into `chunks` contiguous ranges; block (channel tile
//      of 32, chunk) sums dout * rnd(inp * rstd) over its rows into fp32 scratch (chunks, C),
//      in a fixed order inside the block;
//   3. one thread per channel adds the chunks' partials in chunk order into dweight.
// No atomics: deterministic for given shapes. Scratch is stream-ordered (cudaMallocAsync).
#include <cstdint>

#include "core/error.h"
#include "kernels/cuda/common_impl.cuh"
#include "kernels/cuda/ops.h"

namespace strata::kernels::cuda {
namespace {

using detail::from_f32;
using detail::to_f32;
using detail::warp_sum;

constexpr int kWarpsPerBlock = 8;  // rows per block in the per-row kernels
constexpr int kTileC = 32;         // channels per block in the partial-sum kernel
constexpr int kTileRows = 8;       // threads along the rows in the partial-sum kernel

// x rounded to the storage type T and widened back (the identity for float).
template <typename T>
__device__ __forceinline__ float round_to(float x) {
  return to_f32(from_f32<T>(x));
}

// out (N,C), rstd (N) (may be null).
template <typename T>
__global__ void rmsnorm_fwd_kernel(T* __restrict__ out, float* __restrict__ rstd,
                                   const T* __restrict__ inp, const T* __restrict__ weight,
                                   std::int64_t N, int C, float eps) {
  const int lane = threadIdx.x % 32;
  const std::int64_t row = static_cast<std::int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
  if (row >= N) return;
  const T* x = inp + row * C;
  float sq = 0.0f;
  for (int c = lane; c < C; c += 32) {
    const float v = to_f32(x[c]);
    sq += v * v;
  }
  const float s = 1.0f / sqrtf(warp_sum(sq) / static_cast<float>(C) + eps);
  T* y = out + row * C;
  for (int c = lane; c < C; c += 32)
    y[c] = from_f32<T>(to_f32(weight[c]) * round_to<T>(to_f32(x[c]) * s));
  if (lane == 0 && rstd != nullptr) rstd[row] = s;
}

// dinp[n,:] += rstd * (g - xhat * mean(g * xhat)), g = dout * weight, xhat = inp * rstd.
template <typename T>
__global__ void rmsnorm_bwd_dinp_kernel(T* __restrict__ dinp, const T* __restrict__ dout,
                                        const T* __restrict__ inp, const T* __restrict__ weight,
                                        const float* __restrict__ rstd, std::int64_t N, int C) {
  const int lane = threadIdx.x % 32;
  const std::int64_t row = static_cast<std::int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
  if (row >= N) return;
  const T* x = inp + row * C;
  const T* dy = dout + row * C;
  const float s = rstd[row];
  float gx_sum = 0.0f;
  for (int c = lane; c < C; c += 32)
    gx_sum += (to_f32(dy[c]) * to_f32(weight[c])) * (to_f32(x[c]) * s);
  const float gx_mean = warp_sum(gx_sum) / static_cast<float>(C);
  T* dx = dinp + row * C;
  for (int c = lane; c < C; c += 32) {
    const float g = to_f32(dy[c]) * to_f32(weight[c]);
    const float xhat = to_f32(x[c]) * s;
    dx[c] = from_f32<T>(to_f32(dx[c]) + s * (g - xhat * gx_mean));
  }
}

// Block (channel tile, chunk), threads (kTileC, kTileRows): partial[chunk, c] = sum over the
// chunk's rows of dout * rnd(inp * rstd).
template <typename T>
__global__ void rmsnorm_bwd_partials_kernel(float* __restrict__ partial,
                                            const T* __restrict__ dout,
                                            const T* __restrict__ inp,
                                            const float* __restrict__ rstd, std::int64_t N,
                                            int C, std::int64_t rows_per_chunk) {
  __shared__ float sw[kTileRows][kTileC];
  const int c = blockIdx.x * kTileC + threadIdx.x;
  const std::int64_t r0 = static_cast<std::int64_t>(blockIdx.y) * rows_per_chunk;
  const std::int64_t r1 = N < r0 + rows_per_chunk ? N : r0 + rows_per_chunk;
  float aw = 0.0f;
  if (c < C) {
    for (std::int64_t r = r0 + threadIdx.y; r < r1; r += kTileRows)
      aw += to_f32(dout[r * C + c]) * round_to<T>(to_f32(inp[r * C + c]) * rstd[r]);
  }
  sw[threadIdx.y][threadIdx.x] = aw;
  __syncthreads();
  if (threadIdx.y == 0 && c < C) {
    for (int k = 1; k < kTileRows; ++k) aw += sw[k][threadIdx.x];
    partial[static_cast<std::int64_t>(blockIdx.y) * C + c] = aw;
  }
}

// dweight[c] += sum over chunks of partial[chunk, c], in chunk order.
template <typename T>
__global__ void rmsnorm_bwd_finish_kernel(T* __restrict__ dweight,
                                          const float* __restrict__ partial, int chunks, int C) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= C) return;
  float sw = 0.0f;
  for (int k = 0; k < chunks; ++k) sw += partial[static_cast<std::int64_t>(k) * C + c];
  dweight[c] = from_f32<T>(to_f32(dweight[c]) + sw);
}

unsigned row_blocks(std::int64_t N) { return detail::row_blocks(N, kWarpsPerBlock, "rmsnorm"); }

}  // namespace

void rmsnorm_fwd(void* out, float* rstd, const void* inp, const void* weight, std::int64_t N,
                 int C, float eps, DType dtype, cudaStream_t stream) {
  STRATA_ASSERT(N >= 0 && C >= 0);
  if (N == 0 || C == 0) return;
  STRATA_ASSERT(out != nullptr && inp != nullptr && weight != nullptr);
  detail::dispatch_dtype(dtype, [&](auto tag) {
    using E = typename decltype(tag)::type;
    rmsnorm_fwd_kernel<E><<<row_blocks(N), kWarpsPerBlock * 32, 0, stream>>>(
        static_cast<E*>(out), rstd, static_cast<const E*>(inp), static_cast<const E*>(weight), N,
        C, eps);
    CUDA_CHECK_LAUNCH();
  });
}

void rmsnorm_bwd(void* dinp, void* dweight, const void* dout, const void* inp,
                 const void* weight, const float* rstd, std::int64_t N, int C, DType dtype,
                 cudaStream_t stream) {
  STRATA_ASSERT(N >= 0 && C >= 0);
  if (N == 0 || C == 0) return;
  STRATA_ASSERT(dout != nullptr && inp != nullptr && rstd != nullptr);
  detail::dispatch_dtype(dtype, [&](auto tag) {
    using E = typename decltype(tag)::type;
    if (dinp != nullptr) {
      STRATA_ASSERT(weight != nullptr);
      rmsnorm_bwd_dinp_kernel<E><<<row_blocks(N), kWarpsPerBlock * 32, 0, stream>>>(
          static_cast<E*>(dinp), static_cast<const E*>(dout), static_cast<const E*>(inp),
          static_cast<const E*>(weight), rstd, N, C);
      CUDA_CHECK_LAUNCH();
    }
    if (dweight == nullptr) return;
    const auto [rows_per_chunk, chunks] = detail::row_chunks(N);
    detail::StreamScratch scratch(static_cast<std::size_t>(chunks) * C * sizeof(float), stream);
    float* partial = scratch.as<float>();
    const dim3 grid(static_cast<unsigned>(detail::ceil_div(C, kTileC)),
                    static_cast<unsigned>(chunks));
    rmsnorm_bwd_partials_kernel<E><<<grid, dim3(kTileC, kTileRows), 0, stream>>>(
        partial, static_cast<const E*>(dout), static_cast<const E*>(inp), rstd, N, C,
        rows_per_chunk);
    CUDA_CHECK_LAUNCH();
    constexpr int kFinishThreads = 256;
    rmsnorm_bwd_finish_kernel<E><<<static_cast<unsigned>(detail::ceil_div(C, kFinishThreads)),
                                   kFinishThreads, 0, stream>>>(static_cast<E*>(dweight),
                                                                partial, chunks, C);
    CUDA_CHECK_LAUNCH();
    scratch.release();
  });
}

}  // namespace strata::kernels::cuda
