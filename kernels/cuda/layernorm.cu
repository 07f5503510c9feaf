// LayerNorm on CUDA, forward and backward, fp32 statistics.
//
// Forward: one warp per row, two passes over the row (mean, then the biased variance, as the
// host does), then the normalised output. The residual add fused with it
// (residual_layernorm_fwd) is the same kernel with a first pass that forms the row as
// a + b rounded to the storage type and stores it: the statistics are those of the stored
// residual, as in the unfused pair.
// Backward, three kernels:
//   1. dinp += ...: one warp per row (the row's two reductions, then the update);
//   2. dweight / dbias partials: the rows are cut into `chunks` contiguous ranges; block
//      (channel tile of 32, chunk) sums dout * norm and dout over its rows into fp32 scratch
//      (chunks, C) — a fixed order inside the block;
//   3. one thread per channel adds the chunks' partials, in chunk order, and accumulates the
//      total into dweight / dbias.
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

// The rest of one row's LayerNorm, by its warp, once each lane has summed its elements of x
// (`lane_sum`): the mean, the biased variance around it (a second pass over x), y, and the
// row's mean / rstd (either may be null).
template <typename T>
__device__ __forceinline__ void layernorm_row(T* y, float* mean, float* rstd, const T* x,
                                              const T* weight, const T* bias, std::int64_t row,
                                              int C, float eps, int lane, float lane_sum) {
  const float m = warp_sum(lane_sum) / static_cast<float>(C);
  float sq = 0.0f;
  for (int c = lane; c < C; c += 32) {
    const float d = to_f32(x[c]) - m;
    sq += d * d;
  }
  const float s = 1.0f / sqrtf(warp_sum(sq) / static_cast<float>(C) + eps);
  for (int c = lane; c < C; c += 32)
    y[c] = from_f32<T>((to_f32(x[c]) - m) * s * to_f32(weight[c]) + to_f32(bias[c]));
  if (lane == 0) {
    if (mean != nullptr) mean[row] = m;
    if (rstd != nullptr) rstd[row] = s;
  }
}

// out (N,C), mean / rstd (N) (either may be null).
template <typename T>
__global__ void layernorm_fwd_kernel(T* __restrict__ out, float* __restrict__ mean,
                                     float* __restrict__ rstd, const T* __restrict__ inp,
                                     const T* __restrict__ weight, const T* __restrict__ bias,
                                     std::int64_t N, int C, float eps) {
  const int lane = threadIdx.x % 32;
  const std::int64_t row = static_cast<std::int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
  if (row >= N) return;
  const T* x = inp + row * C;
  float sum = 0.0f;
  for (int c = lane; c < C; c += 32) sum += to_f32(x[c]);
  layernorm_row(out + row * C, mean, rstd, x, weight, bias, row, C, eps, lane, sum);
}

// res_out = a + b (rounded to T), ln_out = layernorm(res_out), mean / rstd (either may be null).
// res_out may alias a or b: each lane reads its elements of a and b before it writes the same
// elements of res_out, and afterwards reads only elements it wrote itself (hence no
// __restrict__ on those three).
template <typename T>
__global__ void residual_layernorm_fwd_kernel(T* res_out, T* __restrict__ ln_out,
                                              float* __restrict__ mean, float* __restrict__ rstd,
                                              const T* a, const T* b,
                                              const T* __restrict__ weight,
                                              const T* __restrict__ bias, std::int64_t N, int C,
                                              float eps) {
  const int lane = threadIdx.x % 32;
  const std::int64_t row =
      static_cast<std::int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
  if (row >= N) return;
  const T* xa = a + row * C;
  const T* xb = b + row * C;
  T* r = res_out + row * C;
  float sum = 0.0f;
  for (int c = lane; c < C; c += 32) {
    const T v = from_f32<T>(to_f32(xa[c]) + to_f32(xb[c]));
    r[c] = v;
    sum += to_f32(v);
  }
  layernorm_row(ln_out + row * C, mean, rstd, static_cast<const T*>(r), weight, bias, row, C, eps,
                lane, sum);
}

// dinp[n,:] += (dnorm - mean(dnorm) - norm * mean(dnorm * norm)) * rstd, dnorm = weight * dout.
template <typename T>
__global__ void layernorm_bwd_dinp_kernel(T* __restrict__ dinp, const T* __restrict__ dout,
                                          const T* __restrict__ inp, const T* __restrict__ weight,
                                          const float* __restrict__ mean,
                                          const float* __restrict__ rstd, std::int64_t N, int C) {
  const int lane = threadIdx.x % 32;
  const std::int64_t row = static_cast<std::int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
  if (row >= N) return;
  const T* x = inp + row * C;
  const T* dy = dout + row * C;
  const float m = mean[row], s = rstd[row];
  float dnorm_sum = 0.0f, dnorm_norm_sum = 0.0f;
  for (int c = lane; c < C; c += 32) {
    const float dnorm = to_f32(weight[c]) * to_f32(dy[c]);
    dnorm_sum += dnorm;
    dnorm_norm_sum += dnorm * ((to_f32(x[c]) - m) * s);
  }
  const float dnorm_mean = warp_sum(dnorm_sum) / static_cast<float>(C);
  const float dnorm_norm_mean = warp_sum(dnorm_norm_sum) / static_cast<float>(C);
  T* dx = dinp + row * C;
  for (int c = lane; c < C; c += 32) {
    const float norm = (to_f32(x[c]) - m) * s;
    const float dnorm = to_f32(weight[c]) * to_f32(dy[c]);
    const float grad = (dnorm - dnorm_mean - norm * dnorm_norm_mean) * s;
    dx[c] = from_f32<T>(to_f32(dx[c]) + grad);
  }
}

// Block (channel tile, chunk), threads (kTileC, kTileRows): partial_w[chunk, c] = sum over the
// chunk's rows of dout * norm, partial_b[chunk, c] = sum of dout.
template <typename T>
__global__ void layernorm_bwd_partials_kernel(float* __restrict__ partial_w,
                                              float* __restrict__ partial_b,
                                              const T* __restrict__ dout,
                                              const T* __restrict__ inp,
                                              const float* __restrict__ mean,
                                              const float* __restrict__ rstd, std::int64_t N,
                                              int C, std::int64_t rows_per_chunk) {
  __shared__ float sw[kTileRows][kTileC];
  __shared__ float sb[kTileRows][kTileC];
  const int c = blockIdx.x * kTileC + threadIdx.x;
  const std::int64_t r0 = static_cast<std::int64_t>(blockIdx.y) * rows_per_chunk;
  const std::int64_t r1 = N < r0 + rows_per_chunk ? N : r0 + rows_per_chunk;
  float aw = 0.0f, ab = 0.0f;
  if (c < C) {
    for (std::int64_t r = r0 + threadIdx.y; r < r1; r += kTileRows) {
      const float dy = to_f32(dout[r * C + c]);
      const float norm = (to_f32(inp[r * C + c]) - mean[r]) * rstd[r];
      aw += dy * norm;
      ab += dy;
    }
  }
  sw[threadIdx.y][threadIdx.x] = aw;
  sb[threadIdx.y][threadIdx.x] = ab;
  __syncthreads();
  if (threadIdx.y == 0 && c < C) {
    for (int k = 1; k < kTileRows; ++k) {
      aw += sw[k][threadIdx.x];
      ab += sb[k][threadIdx.x];
    }
    partial_w[static_cast<std::int64_t>(blockIdx.y) * C + c] = aw;
    partial_b[static_cast<std::int64_t>(blockIdx.y) * C + c] = ab;
  }
}

// dweight[c] += sum over chunks of partial_w[chunk, c]; the same for dbias (either may be null).
template <typename T>
__global__ void layernorm_bwd_finish_kernel(T* __restrict__ dweight, T* __restrict__ dbias,
                                            const float* __restrict__ partial_w,
                                            const float* __restrict__ partial_b, int chunks,
                                            int C) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= C) return;
  float sw = 0.0f, sb = 0.0f;
  for (int k = 0; k < chunks; ++k) {
    sw += partial_w[static_cast<std::int64_t>(k) * C + c];
    sb += partial_b[static_cast<std::int64_t>(k) * C + c];
  }
  if (dweight != nullptr) dweight[c] = from_f32<T>(to_f32(dweight[c]) + sw);
  if (dbias != nullptr) dbias[c] = from_f32<T>(to_f32(dbias[c]) + sb);
}

unsigned row_blocks(std::int64_t N) { return detail::row_blocks(N, kWarpsPerBlock, "layernorm"); }

}  // namespace

void layernorm_fwd(void* out, float* mean, float* rstd, const void* inp, const void* weight,
                   const void* bias, std::int64_t N, int C, float eps, DType dtype,
                   cudaStream_t stream) {
  STRATA_ASSERT(N >= 0 && C >= 0);
  if (N == 0 || C == 0) return;
  STRATA_ASSERT(out != nullptr && inp != nullptr && weight != nullptr && bias != nullptr);
  detail::dispatch_dtype(dtype, [&](auto tag) {
    using E = typename decltype(tag)::type;
    layernorm_fwd_kernel<E><<<row_blocks(N), kWarpsPerBlock * 32, 0, stream>>>(
        static_cast<E*>(out), mean, rstd, static_cast<const E*>(inp),
        static_cast<const E*>(weight), static_cast<const E*>(bias), N, C, eps);
    CUDA_CHECK_LAUNCH();
  });
}

void residual_layernorm_fwd(void* res_out, void* ln_out, float* mean, float* rstd, const void* a,
                            const void* b, const void* weight, const void* bias, std::int64_t N,
                            int C, float eps, DType dtype, cudaStream_t stream) {
  STRATA_ASSERT(N >= 0 && C >= 0);
  if (N == 0 || C == 0) return;
  STRATA_ASSERT(res_out != nullptr && ln_out != nullptr && a != nullptr && b != nullptr &&
                weight != nullptr && bias != nullptr);
  detail::dispatch_dtype(dtype, [&](auto tag) {
    using E = typename decltype(tag)::type;
    residual_layernorm_fwd_kernel<E><<<row_blocks(N), kWarpsPerBlock * 32, 0, stream>>>(
        static_cast<E*>(res_out), static_cast<E*>(ln_out), mean, rstd, static_cast<const E*>(a),
        static_cast<const E*>(b), static_cast<const E*>(weight), static_cast<const E*>(bias), N,
        C, eps);
    CUDA_CHECK_LAUNCH();
  });
}

void layernorm_bwd(void* dinp, void* dweight, void* dbias, const void* dout, const void* inp,
                   const void* weight, const float* mean, const float* rstd, std::int64_t N,
                   int C, DType dtype, cudaStream_t stream) {
  STRATA_ASSERT(N >= 0 && C >= 0);
  if (N == 0 || C == 0) return;
  STRATA_ASSERT(dout != nullptr && inp != nullptr && mean != nullptr && rstd != nullptr);
  detail::dispatch_dtype(dtype, [&](auto tag) {
    using E = typename decltype(tag)::type;
    if (dinp != nullptr) {
      STRATA_ASSERT(weight != nullptr);
      layernorm_bwd_dinp_kernel<E><<<row_blocks(N), kWarpsPerBlock * 32, 0, stream>>>(
          static_cast<E*>(dinp), static_cast<const E*>(dout), static_cast<const E*>(inp),
          static_cast<const E*>(weight), mean, rstd, N, C);
      CUDA_CHECK_LAUNCH();
    }
    if (dweight == nullptr && dbias == nullptr) return;
    const auto [rows_per_chunk, chunks] = detail::row_chunks(N);
    detail::StreamScratch scratch(2 * static_cast<std::size_t>(chunks) * C * sizeof(float),
                                  stream);
    float* partial_w = scratch.as<float>();
    float* partial_b = partial_w + static_cast<std::size_t>(chunks) * C;
    const dim3 grid(static_cast<unsigned>(detail::ceil_div(C, kTileC)),
                    static_cast<unsigned>(chunks));
    layernorm_bwd_partials_kernel<E><<<grid, dim3(kTileC, kTileRows), 0, stream>>>(
        partial_w, partial_b, static_cast<const E*>(dout), static_cast<const E*>(inp), mean,
        rstd, N, C, rows_per_chunk);
    CUDA_CHECK_LAUNCH();
    constexpr int kFinishThreads = 256;
    layernorm_bwd_finish_kernel<E><<<static_cast<unsigned>(detail::ceil_div(C, kFinishThreads)),
                                     kFinishThreads, 0, stream>>>(
        static_cast<E*>(dweight), static_cast<E*>(dbias), partial_w, partial_b, chunks, C);
    CUDA_CHECK_LAUNCH();
    scratch.release();
  });
}

}  // namespace strata::kernels::cuda
