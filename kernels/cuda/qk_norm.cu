// Qwen3's per-head q/k RMSNorm on CUDA: kernels/host/qk_norm.h (HF's roundings, out =
// rnd(w * rnd(x * rstd)), rstd fp32 from an fp32 sum of squares).
//
// Forward: one warp per (row, head) over all NH + 2 NKV heads of a row: q and k heads are
// normalised (each warp reads its head, then writes it: in place is safe), v heads copied when
// out != qkv.
// Backward, in place on dqkv, three kernels (the weight sums read dy before it is overwritten):
//   1. partials: the rows cut into chunks (detail::row_chunks); block (channel tile of 32,
//      chunk, q-or-k) sums dy * rnd(x * rstd) over its rows and heads in a fixed order into
//      fp32 scratch (2, chunks, hs);
//   2. one thread per (q-or-k, channel) adds the chunks' partials in chunk order into the
//      weight gradient;
//   3. dx: one warp per (row, q or k head), one reduction, then the overwrite.
// No atomics: deterministic for given shapes. Scratch is stream-ordered (cudaMallocAsync).
#include <cstdint>
#include <string>

#include "core/error.h"
#include "kernels/cuda/common_impl.cuh"
#include "kernels/cuda/ops.h"

namespace strata::kernels::cuda {
namespace {

using detail::from_f32;
using detail::to_f32;
using detail::warp_sum;

constexpr int kWarpsPerBlock = 8;  // (row, head) pairs per block in the per-head kernels
constexpr int kTileC = 32;         // channels per block in the partial-sum kernel
constexpr int kTileRows = 8;       // threads along the rows in the partial-sum kernel

template <typename T>
__device__ __forceinline__ float round_to(float x) {
  return to_f32(from_f32<T>(x));
}

// Warp w of the grid owns (row, head) = (w / row_heads, w % row_heads).
template <typename T>
__global__ void qk_rmsnorm_fwd_kernel(T* out, float* __restrict__ rstd, const T* qkv,
                                      const T* __restrict__ q_weight,
                                      const T* __restrict__ k_weight, std::int64_t N, int NH,
                                      int NKV, int hs, float eps) {
  const int lane = threadIdx.x % 32;
  const int row_heads = NH + 2 * NKV, qk_heads = NH + NKV;
  const std::int64_t warp = static_cast<std::int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
  if (warp >= N * row_heads) return;
  const std::int64_t n = warp / row_heads;
  const int h = static_cast<int>(warp % row_heads);
  const std::int64_t off = n * row_heads * hs + static_cast<std::int64_t>(h) * hs;
  const T* x = qkv + off;
  T* y = out + off;
  if (h >= qk_heads) {  // v
    if (y != x)
      for (int c = lane; c < hs; c += 32) y[c] = x[c];
    return;
  }
  float sq = 0.0f;
  for (int c = lane; c < hs; c += 32) {
    const float v = to_f32(x[c]);
    sq += v * v;
  }
  const float s = 1.0f / sqrtf(warp_sum(sq) / static_cast<float>(hs) + eps);
  const T* w = h < NH ? q_weight : k_weight;
  // Every lane has read its values (the warp_sum above synchronises the warp) before any
  // lane writes: in place is safe, each lane rewriting only its own channels.
  for (int c = lane; c < hs; c += 32) y[c] = from_f32<T>(to_f32(w[c]) * round_to<T>(to_f32(x[c]) * s));
  if (lane == 0 && rstd != nullptr) rstd[n * qk_heads + h] = s;
}

// Block (channel tile, chunk, which: 0 q, 1 k), threads (kTileC, kTileRows):
// partial[which, chunk, c] = sum over the chunk's rows (and the heads of `which`, in order) of
// dy * rnd(x * rstd).
template <typename T>
__global__ void qk_rmsnorm_bwd_partials_kernel(float* __restrict__ partial,
                                               const T* __restrict__ dqkv,
                                               const T* __restrict__ qkv,
                                               const float* __restrict__ rstd, std::int64_t N,
                                               int NH, int NKV, int hs, int chunks,
                                               std::int64_t rows_per_chunk) {
  __shared__ float sw[kTileRows][kTileC];
  const int c = blockIdx.x * kTileC + threadIdx.x;
  const int which = blockIdx.z;
  const int h0 = which == 0 ? 0 : NH, h1 = which == 0 ? NH : NH + NKV;
  const int row_heads = NH + 2 * NKV, qk_heads = NH + NKV;
  const std::int64_t r0 = static_cast<std::int64_t>(blockIdx.y) * rows_per_chunk;
  const std::int64_t r1 = N < r0 + rows_per_chunk ? N : r0 + rows_per_chunk;
  float aw = 0.0f;
  if (c < hs) {
    for (std::int64_t r = r0 + threadIdx.y; r < r1; r += kTileRows)
      for (int h = h0; h < h1; ++h) {
        const std::int64_t i = (r * row_heads + h) * hs + c;
        aw += to_f32(dqkv[i]) * round_to<T>(to_f32(qkv[i]) * rstd[r * qk_heads + h]);
      }
  }
  sw[threadIdx.y][threadIdx.x] = aw;
  __syncthreads();
  if (threadIdx.y == 0 && c < hs) {
    for (int t = 1; t < kTileRows; ++t) aw += sw[t][threadIdx.x];
    partial[(static_cast<std::int64_t>(which) * chunks + blockIdx.y) * hs + c] = aw;
  }
}

// dq_weight[c] (which 0) / dk_weight[c] (which 1) += the chunks' partials in chunk order.
template <typename T>
__global__ void qk_rmsnorm_bwd_finish_kernel(T* __restrict__ dq_weight, T* __restrict__ dk_weight,
                                             const float* __restrict__ partial, int chunks,
                                             int hs) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= 2 * hs) return;
  const int which = i / hs, c = i % hs;
  T* dw = which == 0 ? dq_weight : dk_weight;
  if (dw == nullptr) return;
  float sw = 0.0f;
  for (int t = 0; t < chunks; ++t) sw += partial[(static_cast<std::int64_t>(which) * chunks + t) * hs + c];
  dw[c] = from_f32<T>(to_f32(dw[c]) + sw);
}

// Warp w owns (row, q-or-k head) = (w / (NH + NKV), w % (NH + NKV)): dx = rstd (g - xhat
// mean(g xhat)), g = dy * w, written over dy.
template <typename T>
__global__ void qk_rmsnorm_bwd_dx_kernel(T* dqkv, const T* __restrict__ qkv,
                                         const T* __restrict__ q_weight,
                                         const T* __restrict__ k_weight,
                                         const float* __restrict__ rstd, std::int64_t N, int NH,
                                         int NKV, int hs) {
  const int lane = threadIdx.x % 32;
  const int row_heads = NH + 2 * NKV, qk_heads = NH + NKV;
  const std::int64_t warp = static_cast<std::int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
  if (warp >= N * qk_heads) return;
  const std::int64_t n = warp / qk_heads;
  const int h = static_cast<int>(warp % qk_heads);
  const std::int64_t off = n * row_heads * hs + static_cast<std::int64_t>(h) * hs;
  const T* x = qkv + off;
  T* d = dqkv + off;
  const T* w = h < NH ? q_weight : k_weight;
  const float s = rstd[warp];  // rstd (N, NH + NKV): warp = n * qk_heads + h
  float gx_sum = 0.0f;
  for (int c = lane; c < hs; c += 32)
    gx_sum += (to_f32(d[c]) * to_f32(w[c])) * (to_f32(x[c]) * s);
  const float gx_mean = warp_sum(gx_sum) / static_cast<float>(hs);
  for (int c = lane; c < hs; c += 32) {
    const float g = to_f32(d[c]) * to_f32(w[c]);
    const float xhat = to_f32(x[c]) * s;
    d[c] = from_f32<T>(s * (g - xhat * gx_mean));
  }
}

void check_heads(int NH, int NKV, int hs, const char* op) {
  if (NH <= 0 || NKV <= 0 || hs <= 0)
    throw Error("qk_rmsnorm: " + std::to_string(NH) + " query heads, " + std::to_string(NKV) +
                    " key/value heads, head size " + std::to_string(hs) +
                    ": all must be positive",
                std::string("kernels::cuda::") + op,
                "check num_attention_heads / num_key_value_heads / head_dim in the model config");
}

}  // namespace

void qk_rmsnorm_fwd(void* out, float* rstd, const void* qkv, const void* q_weight,
                    const void* k_weight, std::int64_t N, int NH, int NKV, int hs, float eps,
                    DType dtype, cudaStream_t stream) {
  check_heads(NH, NKV, hs, "qk_rmsnorm_fwd");
  STRATA_ASSERT(N >= 0);
  if (N == 0) return;
  STRATA_ASSERT(out != nullptr && qkv != nullptr && q_weight != nullptr && k_weight != nullptr);
  const unsigned blocks = detail::row_blocks(N * (NH + 2 * NKV), kWarpsPerBlock, "qk_rmsnorm_fwd");
  detail::dispatch_dtype(dtype, [&](auto tag) {
    using E = typename decltype(tag)::type;
    qk_rmsnorm_fwd_kernel<E><<<blocks, kWarpsPerBlock * 32, 0, stream>>>(
        static_cast<E*>(out), rstd, static_cast<const E*>(qkv), static_cast<const E*>(q_weight),
        static_cast<const E*>(k_weight), N, NH, NKV, hs, eps);
    CUDA_CHECK_LAUNCH();
  });
}

void qk_rmsnorm_bwd(void* dqkv, void* dq_weight, void* dk_weight, const void* qkv,
                    const void* q_weight, const void* k_weight, const float* rstd, std::int64_t N,
                    int NH, int NKV, int hs, DType dtype, cudaStream_t stream) {
  check_heads(NH, NKV, hs, "qk_rmsnorm_bwd");
  STRATA_ASSERT(N >= 0);
  if (N == 0) return;
  STRATA_ASSERT(dqkv != nullptr && qkv != nullptr && q_weight != nullptr &&
                k_weight != nullptr && rstd != nullptr);
  detail::dispatch_dtype(dtype, [&](auto tag) {
    using E = typename decltype(tag)::type;
    if (dq_weight != nullptr || dk_weight != nullptr) {  // before dx overwrites dy
      const auto [rows_per_chunk, chunks] = detail::row_chunks(N);
      detail::StreamScratch scratch(2 * static_cast<std::size_t>(chunks) * hs * sizeof(float),
                                    stream);
      float* partial = scratch.as<float>();
      const dim3 grid(static_cast<unsigned>(detail::ceil_div(hs, kTileC)),
                      static_cast<unsigned>(chunks), 2);
      qk_rmsnorm_bwd_partials_kernel<E><<<grid, dim3(kTileC, kTileRows), 0, stream>>>(
          partial, static_cast<const E*>(dqkv), static_cast<const E*>(qkv), rstd, N, NH, NKV, hs,
          chunks, rows_per_chunk);
      CUDA_CHECK_LAUNCH();
      constexpr int kFinishThreads = 256;
      qk_rmsnorm_bwd_finish_kernel<E>
          <<<static_cast<unsigned>(detail::ceil_div(2 * hs, kFinishThreads)), kFinishThreads, 0,
             stream>>>(static_cast<E*>(dq_weight), static_cast<E*>(dk_weight), partial, chunks, hs);
      CUDA_CHECK_LAUNCH();
      scratch.release();
    }
    const unsigned blocks = detail::row_blocks(N * (NH + NKV), kWarpsPerBlock, "qk_rmsnorm_bwd");
    qk_rmsnorm_bwd_dx_kernel<E><<<blocks, kWarpsPerBlock * 32, 0, stream>>>(
        static_cast<E*>(dqkv), static_cast<const E*>(qkv), static_cast<const E*>(q_weight),
        static_cast<const E*>(k_weight), rstd, N, NH, NKV, hs);
    CUDA_CHECK_LAUNCH();
  });
}

}  // namespace strata::kernels::cuda
