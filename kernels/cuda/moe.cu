// The mixture-of-experts ops on CUDA: kernels/host/moe.h for their meaning, kernels/cuda/moe.h
// for how they run. Summary:
//   router fwd / bwd   one warp per token (E strided over the lanes); the picks are k rounds
//                      of a warp arg-max over the experts that come after the previous pick in
//                      the order (prob descending, index ascending), so no per-expert state;
//   prob_sum           partial column sums over chunks of rows, then the chunks in order;
//   sort               one block of kSortThreads: per-thread counts (E, threads) in scratch, a
//                      block scan over them in (expert, thread) order, a stable placement;
//   gather / combine / scatter_add / combine_bwd
//                      one block per row (grid-stride over rows), threads over the channels;
//                      each output element is written by one thread, sums in slot order.
// No atomics anywhere: deterministic for given shapes.
#include <climits>
#include <cstdint>
#include <string>

#include "core/error.h"
#include "kernels/cuda/common_impl.cuh"
#include "kernels/cuda/moe.h"

namespace strata::kernels::cuda {
namespace {

using detail::from_f32;
using detail::kFullMask;
using detail::to_f32;
using detail::warp_max;
using detail::warp_sum;

constexpr int kWarpsPerBlock = 8;   // tokens per block in the router kernels
constexpr int kTileE = 32;          // experts per block in the prob_sum partial kernel
constexpr int kTileRows = 8;        // threads along the rows in the prob_sum partial kernel
constexpr int kRowThreads = 256;    // threads per block in the per-row kernels
constexpr int kSortThreads = 1024;  // the sort's single block
constexpr std::int64_t kMaxRowBlocks = 65536;  // grid of the per-row kernels (grid-stride)

template <typename T>
__device__ __forceinline__ float round_to(float x) {
  return to_f32(from_f32<T>(x));
}

// ---- router ---------------------------------------------------------------------------------

// NaN sorts below every prob (kernels/host/moe.cpp's select_key).
__device__ __forceinline__ float select_key(float p) { return isnan(p) ? -INFINITY : p; }

// (ka, a) comes before (kb, b) among the picks: larger key, then lower index.
__device__ __forceinline__ bool ranks_before(float ka, int a, float kb, int b) {
  return ka > kb || (ka == kb && a < b);
}

template <typename T>
__global__ void moe_router_fwd_kernel(float* __restrict__ probs, std::int32_t* __restrict__ idx,
                                      float* __restrict__ weights, const T* __restrict__ logits,
                                      std::int64_t N, int E, int k, bool renormalize) {
  const int lane = threadIdx.x % 32;
  const std::int64_t n = static_cast<std::int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
  if (n >= N) return;
  const T* x = logits + n * E;
  float* p = probs + n * E;
  // Softmax in fp32. Each lane reads back only the probs it wrote itself.
  float m = -INFINITY;
  for (int e = lane; e < E; e += 32) m = fmaxf(m, to_f32(x[e]));
  m = warp_max(m);
  float s = 0.0f;
  for (int e = lane; e < E; e += 32) {
    const float v = expf(to_f32(x[e]) - m);
    p[e] = v;
    s += v;
  }
  s = warp_sum(s);
  for (int e = lane; e < E; e += 32) p[e] = p[e] / s;

  // Pick j: the best expert after pick j - 1 in the order of ranks_before.
  float prev_key = INFINITY, picked_sum = 0.0f;
  int prev = -1;
  for (int j = 0; j < k; ++j) {
    float best_key = -INFINITY, best_p = 0.0f;
    int best = -1;
    for (int e = lane; e < E; e += 32) {
      const float pe = p[e], key = select_key(pe);
      const bool after_prev = prev < 0 || ranks_before(prev_key, prev, key, e);
      if (after_prev && (best < 0 || ranks_before(key, e, best_key, best))) {
        best = e;
        best_key = key;
        best_p = pe;
      }
    }
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) {
      const float other_key = __shfl_xor_sync(kFullMask, best_key, offset);
      const float other_p = __shfl_xor_sync(kFullMask, best_p, offset);
      const int other = __shfl_xor_sync(kFullMask, best, offset);
      if (other >= 0 && (best < 0 || ranks_before(other_key, other, best_key, best))) {
        best = other;
        best_key = other_key;
        best_p = other_p;
      }
    }
    // k <= E: a candidate always exists, and every lane now holds the same pick.
    prev = best;
    prev_key = best_key;
    picked_sum += best_p;
    if (lane == 0) {
      idx[n * k + j] = best;
      weights[n * k + j] = best_p;
    }
  }
  if (renormalize && lane == 0)
    for (int j = 0; j < k; ++j) weights[n * k + j] /= picked_sum;
}

// Block (expert tile, chunk), threads (kTileE, kTileRows): partial[chunk, e] = sum over the
// chunk's rows of probs[r, e].
__global__ void moe_prob_sum_partials_kernel(float* __restrict__ partial,
                                             const float* __restrict__ probs, std::int64_t N,
                                             int E, std::int64_t rows_per_chunk) {
  __shared__ float sp[kTileRows][kTileE];
  const int e = blockIdx.x * kTileE + threadIdx.x;
  const std::int64_t r0 = static_cast<std::int64_t>(blockIdx.y) * rows_per_chunk;
  const std::int64_t r1 = N < r0 + rows_per_chunk ? N : r0 + rows_per_chunk;
  float acc = 0.0f;
  if (e < E)
    for (std::int64_t r = r0 + threadIdx.y; r < r1; r += kTileRows) acc += probs[r * E + e];
  sp[threadIdx.y][threadIdx.x] = acc;
  __syncthreads();
  if (threadIdx.y == 0 && e < E) {
    for (int t = 1; t < kTileRows; ++t) acc += sp[t][threadIdx.x];
    partial[static_cast<std::int64_t>(blockIdx.y) * E + e] = acc;
  }
}

// prob_sum[e] = the chunks' partials in chunk order (overwritten).
__global__ void moe_prob_sum_finish_kernel(float* __restrict__ prob_sum,
                                           const float* __restrict__ partial, int chunks, int E) {
  const int e = blockIdx.x * blockDim.x + threadIdx.x;
  if (e >= E) return;
  float s = 0.0f;
  for (int t = 0; t < chunks; ++t) s += partial[static_cast<std::int64_t>(t) * E + e];
  prob_sum[e] = s;
}

// dp[e] of the header's formula for this lane's expert e (every lane computes S and c the same
// way, in slot order).
__device__ __forceinline__ float router_dp(int e, const std::int32_t* ri, const float* dw,
                                           const float* daux, int k, bool renormalize, float S,
                                           float c) {
  float d = daux != nullptr ? daux[e] : 0.0f;
  for (int j = 0; j < k; ++j)
    if (ri[j] == e) d += renormalize ? (dw[j] - c) / S : dw[j];
  return d;
}

template <typename T>
__global__ void moe_router_bwd_kernel(T* __restrict__ dlogits, const float* __restrict__ dweights,
                                      const float* __restrict__ probs,
                                      const std::int32_t* __restrict__ idx,
                                      const float* __restrict__ daux, std::int64_t N, int E, int k,
                                      bool renormalize) {
  const int lane = threadIdx.x % 32;
  const std::int64_t n = static_cast<std::int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
  if (n >= N) return;
  const float* p = probs + n * E;
  const std::int32_t* ri = idx + n * k;
  const float* dw = dweights + n * k;
  float S = 0.0f, c = 0.0f;
  if (renormalize) {
    float dwp = 0.0f;
    for (int j = 0; j < k; ++j) {
      const int e = ri[j];
      const float pe = e >= 0 && e < E ? p[e] : 0.0f;
      S += pe;
      dwp += dw[j] * pe;
    }
    c = dwp / S;
  }
  // sum_e dp_e p_e in double, as the host sums it (kernels/host/moe.h): with 128 experts and a
  // large aux gradient the fp32 sum would cancel further than the other outputs' rounding.
  double dot = 0.0;
  for (int e = lane; e < E; e += 32) {
    dot += static_cast<double>(router_dp(e, ri, dw, daux, k, renormalize, S, c)) * static_cast<double>(p[e]);
  }
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) dot += __shfl_xor_sync(detail::kFullMask, dot, offset);
  const float dotf = static_cast<float>(dot);
  T* out = dlogits + n * E;
  for (int e = lane; e < E; e += 32)
    out[e] = from_f32<T>(p[e] * (router_dp(e, ri, dw, daux, k, renormalize, S, c) - dotf));
}

// ---- sort -----------------------------------------------------------------------------------

// Exclusive prefix sum of v over the block (blockDim.x a multiple of 32), in thread order;
// scratch holds 32 ints of shared memory.
__device__ int block_exclusive_scan(int v, int* scratch) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  int incl = v;
#pragma unroll
  for (int offset = 1; offset < 32; offset <<= 1) {
    const int o = __shfl_up_sync(kFullMask, incl, offset);
    if (lane >= offset) incl += o;
  }
  if (lane == 31) scratch[warp] = incl;
  __syncthreads();
  if (warp == 0) {
    const int ws = lane < warps ? scratch[lane] : 0;
    int w_incl = ws;
#pragma unroll
    for (int offset = 1; offset < 32; offset <<= 1) {
      const int o = __shfl_up_sync(kFullMask, w_incl, offset);
      if (lane >= offset) w_incl += o;
    }
    scratch[lane] = w_incl - ws;
  }
  __syncthreads();
  return scratch[warp] + incl - v;
}

// One block of kSortThreads. Thread t owns the pairs [pairs t / T, pairs (t + 1) / T) and the
// counters cnt[e T + t] (scratch, E x T). Ordering the counters expert-major, thread-minor makes
// their exclusive prefix sums the first sorted row of (expert e, thread t): the placement is
// stable (pairs ascending within an expert).
__global__ void moe_sort_kernel(std::int32_t* __restrict__ offsets, std::int32_t* __restrict__ order,
                                std::int32_t* __restrict__ position,
                                const std::int32_t* __restrict__ idx, std::int64_t pairs, int E,
                                std::int32_t* __restrict__ cnt) {
  __shared__ int scratch[32];
  const int T = kSortThreads, t = threadIdx.x;
  const std::int64_t begin = pairs * t / T, end = pairs * (t + 1) / T;
  for (int e = 0; e < E; ++e) cnt[e * T + t] = 0;
  for (std::int64_t i = begin; i < end; ++i) {
    const int e = idx[i];
    if (e >= 0 && e < E) ++cnt[e * T + t];
  }
  __syncthreads();
  // Scan: thread t takes the counters [t E, (t + 1) E) of the expert-major order.
  const std::int64_t f0 = static_cast<std::int64_t>(t) * E;
  int local = 0;
  for (int f = 0; f < E; ++f) local += cnt[f0 + f];
  int running = block_exclusive_scan(local, scratch);
  for (int f = 0; f < E; ++f) {
    const std::int64_t g = f0 + f;
    const int c = cnt[g];
    cnt[g] = running;
    if (g % T == 0) offsets[g / T] = running;
    running += c;
  }
  if (t == T - 1) offsets[E] = running;
  __syncthreads();
  for (std::int64_t i = begin; i < end; ++i) {
    const int e = idx[i];
    if (e < 0 || e >= E) continue;
    const int r = cnt[e * T + t]++;
    order[r] = static_cast<std::int32_t>(i);
    position[i] = r;
  }
}

// ---- gather / combine / scatter -------------------------------------------------------------

template <typename T>
__global__ void moe_gather_kernel(T* __restrict__ out, const T* __restrict__ inp,
                                  const std::int32_t* __restrict__ order, std::int64_t pairs,
                                  int k, int C) {
  for (std::int64_t r = blockIdx.x; r < pairs; r += gridDim.x) {
    const std::int32_t pair = order[r];
    if (pair < 0 || pair >= pairs) continue;
    const T* src = inp + static_cast<std::int64_t>(pair / k) * C;
    T* dst = out + r * C;
    for (int c = threadIdx.x; c < C; c += blockDim.x) dst[c] = src[c];
  }
}

template <typename T>
__global__ void moe_combine_fwd_kernel(T* __restrict__ out, const T* __restrict__ y,
                                       const float* __restrict__ weights,
                                       const std::int32_t* __restrict__ position, std::int64_t N,
                                       int k, int C) {
  const std::int64_t pairs = N * k;
  for (std::int64_t n = blockIdx.x; n < N; n += gridDim.x)
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
      float acc = 0.0f;
      for (int j = 0; j < k; ++j) {
        const std::int32_t r = position[n * k + j];
        if (r < 0 || r >= pairs) continue;
        acc += round_to<T>(weights[n * k + j]) * to_f32(y[static_cast<std::int64_t>(r) * C + c]);
      }
      out[n * C + c] = from_f32<T>(acc);
    }
}

// Sum over the block in double, returned to thread 0 (blockDim.x = kRowThreads).
__device__ double block_sum_double(double v, double* scratch) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(kFullMask, v, offset);
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  double r = 0.0;
  if (threadIdx.x == 0)
    for (int w = 0; w < warps; ++w) r += scratch[w];
  __syncthreads();
  return r;
}

template <typename T>
__global__ void moe_combine_bwd_kernel(T* __restrict__ dy, float* __restrict__ dweights,
                                       const T* __restrict__ dout, const T* __restrict__ y,
                                       const float* __restrict__ weights,
                                       const std::int32_t* __restrict__ position, std::int64_t N,
                                       int k, int C) {
  __shared__ double scratch[32];
  const std::int64_t pairs = N * k;
  for (std::int64_t n = blockIdx.x; n < N; n += gridDim.x)
    for (int j = 0; j < k; ++j) {
      const std::int32_t r = position[n * k + j];
      const bool valid = r >= 0 && r < pairs;  // the same for the whole block
      double dot = 0.0;
      if (valid) {
        const float w = round_to<T>(weights[n * k + j]);
        const T* yr = y + static_cast<std::int64_t>(r) * C;
        T* g = dy + static_cast<std::int64_t>(r) * C;
        for (int c = threadIdx.x; c < C; c += blockDim.x) {
          const float d = to_f32(dout[n * C + c]);
          dot += static_cast<double>(d) * to_f32(yr[c]);
          g[c] = from_f32<T>(w * d);
        }
      }
      dot = block_sum_double(dot, scratch);
      if (threadIdx.x == 0 && valid) dweights[n * k + j] = static_cast<float>(dot);
    }
}

template <typename T>
__global__ void moe_scatter_add_kernel(T* __restrict__ dinp, const T* __restrict__ dx,
                                       const std::int32_t* __restrict__ position, std::int64_t N,
                                       int k, int C) {
  const std::int64_t pairs = N * k;
  for (std::int64_t n = blockIdx.x; n < N; n += gridDim.x)
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
      float acc = 0.0f;
      for (int j = 0; j < k; ++j) {
        const std::int32_t r = position[n * k + j];
        if (r < 0 || r >= pairs) continue;
        acc += to_f32(dx[static_cast<std::int64_t>(r) * C + c]);
      }
      dinp[n * C + c] = from_f32<T>(to_f32(dinp[n * C + c]) + acc);
    }
}

// ---- host side ------------------------------------------------------------------------------

void check_experts(int E, int k, const char* op) {
  if (E < 1 || k < 1 || k > E)
    throw Error("moe: " + std::to_string(E) + " experts, " + std::to_string(k) +
                    " per token: need 1 <= k <= E",
                std::string("kernels::cuda::") + op,
                "check num_local_experts / num_experts and num_experts_per_tok in the model config");
}

unsigned per_row_blocks(std::int64_t rows) {
  return static_cast<unsigned>(rows < kMaxRowBlocks ? rows : kMaxRowBlocks);
}

}  // namespace

void moe_router_fwd(float* probs, std::int32_t* idx, float* weights, float* prob_sum,
                    const void* logits, std::int64_t N, int E, int k, bool renormalize,
                    DType dtype, cudaStream_t stream) {
  check_experts(E, k, "moe_router_fwd");
  STRATA_ASSERT(N >= 0);
  if (N == 0) return;
  STRATA_ASSERT(probs != nullptr && idx != nullptr && weights != nullptr && logits != nullptr);
  const unsigned blocks = detail::row_blocks(N, kWarpsPerBlock, "moe_router_fwd");
  detail::dispatch_dtype(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    moe_router_fwd_kernel<T><<<blocks, kWarpsPerBlock * 32, 0, stream>>>(
        probs, idx, weights, static_cast<const T*>(logits), N, E, k, renormalize);
    CUDA_CHECK_LAUNCH();
  });
  if (prob_sum == nullptr) return;
  const auto [rows_per_chunk, chunks] = detail::row_chunks(N);
  detail::StreamScratch scratch(static_cast<std::size_t>(chunks) * E * sizeof(float), stream);
  float* partial = scratch.as<float>();
  const dim3 grid(static_cast<unsigned>(detail::ceil_div(E, kTileE)), static_cast<unsigned>(chunks));
  moe_prob_sum_partials_kernel<<<grid, dim3(kTileE, kTileRows), 0, stream>>>(partial, probs, N, E,
                                                                              rows_per_chunk);
  CUDA_CHECK_LAUNCH();
  moe_prob_sum_finish_kernel<<<static_cast<unsigned>(detail::ceil_div(E, kRowThreads)), kRowThreads,
                               0, stream>>>(prob_sum, partial, chunks, E);
  CUDA_CHECK_LAUNCH();
  scratch.release();
}

void moe_router_bwd(void* dlogits, const float* dweights, const float* probs,
                    const std::int32_t* idx, const float* daux, std::int64_t N, int E, int k,
                    bool renormalize, DType dtype, cudaStream_t stream) {
  check_experts(E, k, "moe_router_bwd");
  STRATA_ASSERT(N >= 0);
  if (N == 0) return;
  STRATA_ASSERT(dlogits != nullptr && dweights != nullptr && probs != nullptr && idx != nullptr);
  const unsigned blocks = detail::row_blocks(N, kWarpsPerBlock, "moe_router_bwd");
  detail::dispatch_dtype(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    moe_router_bwd_kernel<T><<<blocks, kWarpsPerBlock * 32, 0, stream>>>(
        static_cast<T*>(dlogits), dweights, probs, idx, daux, N, E, k, renormalize);
    CUDA_CHECK_LAUNCH();
  });
}

void moe_sort(std::int32_t* offsets, std::int32_t* order, std::int32_t* position,
              const std::int32_t* idx, std::int64_t N, int E, int k, cudaStream_t stream) {
  check_experts(E, k, "moe_sort");
  STRATA_ASSERT(N >= 0 && offsets != nullptr);
  if (N == 0) {
    CUDA_CHECK(cudaMemsetAsync(offsets, 0, (static_cast<std::size_t>(E) + 1) * sizeof(std::int32_t),
                               stream));
    return;
  }
  STRATA_ASSERT(N * k <= INT32_MAX, "moe_sort: N k does not fit in int32");
  STRATA_ASSERT(order != nullptr && position != nullptr && idx != nullptr);
  detail::StreamScratch scratch(static_cast<std::size_t>(E) * kSortThreads * sizeof(std::int32_t),
                                stream);
  moe_sort_kernel<<<1, kSortThreads, 0, stream>>>(offsets, order, position, idx, N * k, E,
                                                  scratch.as<std::int32_t>());
  CUDA_CHECK_LAUNCH();
  scratch.release();
}

void moe_gather(void* out, const void* inp, const std::int32_t* order, std::int64_t N, int k,
                int C, DType dtype, cudaStream_t stream) {
  STRATA_ASSERT(N >= 0 && k >= 1 && C >= 0);
  if (N == 0 || C == 0) return;
  STRATA_ASSERT(out != nullptr && inp != nullptr && order != nullptr);
  detail::dispatch_dtype(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    moe_gather_kernel<T><<<per_row_blocks(N * k), kRowThreads, 0, stream>>>(
        static_cast<T*>(out), static_cast<const T*>(inp), order, N * k, k, C);
    CUDA_CHECK_LAUNCH();
  });
}

void moe_combine_fwd(void* out, const void* y, const float* weights,
                     const std::int32_t* position, std::int64_t N, int k, int C, DType dtype,
                     cudaStream_t stream) {
  STRATA_ASSERT(N >= 0 && k >= 1 && C >= 0);
  if (N == 0 || C == 0) return;
  STRATA_ASSERT(out != nullptr && y != nullptr && weights != nullptr && position != nullptr);
  detail::dispatch_dtype(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    moe_combine_fwd_kernel<T><<<per_row_blocks(N), kRowThreads, 0, stream>>>(
        static_cast<T*>(out), static_cast<const T*>(y), weights, position, N, k, C);
    CUDA_CHECK_LAUNCH();
  });
}

void moe_combine_bwd(void* dy, float* dweights, const void* dout, const void* y,
                     const float* weights, const std::int32_t* position, std::int64_t N, int k,
                     int C, DType dtype, cudaStream_t stream) {
  STRATA_ASSERT(N >= 0 && k >= 1 && C >= 0);
  if (N == 0) return;
  STRATA_ASSERT(dy != nullptr && dweights != nullptr && dout != nullptr && y != nullptr &&
                weights != nullptr && position != nullptr);
  detail::dispatch_dtype(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    moe_combine_bwd_kernel<T><<<per_row_blocks(N), kRowThreads, 0, stream>>>(
        static_cast<T*>(dy), dweights, static_cast<const T*>(dout), static_cast<const T*>(y),
        weights, position, N, k, C);
    CUDA_CHECK_LAUNCH();
  });
}

void moe_scatter_add(void* dinp, const void* dx, const std::int32_t* position, std::int64_t N,
                     int k, int C, DType dtype, cudaStream_t stream) {
  STRATA_ASSERT(N >= 0 && k >= 1 && C >= 0);
  if (N == 0 || C == 0) return;
  STRATA_ASSERT(dinp != nullptr && dx != nullptr && position != nullptr);
  detail::dispatch_dtype(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    moe_scatter_add_kernel<T><<<per_row_blocks(N), kRowThreads, 0, stream>>>(
        static_cast<T*>(dinp), static_cast<const T*>(dx), position, N, k, C);
    CUDA_CHECK_LAUNCH();
  });
}

}  // namespace strata::kernels::cuda
