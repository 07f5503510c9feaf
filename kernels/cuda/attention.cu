// Causal attention on CUDA with grouped-query heads (query head h reads key/value head
// h / (NH / NKV)): the dispatch, the fp32 CUDA-core kernels and KV-cached decoding.
//
// Dispatch: bf16 / fp16 with head size 64 or 128 take the tensor-core FlashAttention-2 kernels
// (attention_flash_fwd.cu, attention_flash_bwd.cu; the backward shares step 1 below); fp32 and
// other head sizes (up to 256) take the kernels of this file: flash-attention style too (online
// softmax, saves the log-sum-exp, no T x T matrix), fp32 arithmetic on fp32 copies of the tiles
// in shared memory.
// Decoding (attention_decode) appends the new keys and values to the caches (kv_append_kernel),
// then reads everything from the caches with one of (decode_path):
//   - T_new <= 16: the split-KV kernel of attention_decode.cu (flash-decoding), any dtype, head
//     size <= 256 with 16-byte head rows;
//   - longer prefills in bf16 / fp16 at head size 64 / 128: the flash forward with its queries at
//     positions past, past + 1, ... (flash_attention_decode);
//   - otherwise (or where a tensor is not 16-byte aligned) this file's forward, below.
//
// Forward (attn_fwd_kernel), block = (query tile of kRows queries, head, batch), 8 warps:
//   - the block's queries are loaded once; then the key/value tiles of kKeys keys that some
//     query of the block can see are streamed through shared memory, in order;
//   - each warp owns kRowsPerWarp queries. For one query and one key tile, lane j computes the
//     score of key j (a dot product over hs), the warp takes the tile max, rescales its running
//     sum and output (online softmax), and every lane adds p_j v_j for the head dims it owns
//     (d = lane, lane + 32, ...; kDimsPerLane registers per query), p_j broadcast by shuffles;
//   - at the end out = o / l and lse = max + log(l).
// Decoding's fallback runs the same kernel with the keys and values read from the caches, the
// queries at absolute positions past, past + 1, ... (query i sees keys [0, past + i]).
//
// Backward, deterministic, no atomics, three kernels (dS = P (dP - D), dP = dO V^T):
//   1. attn_bwd_rowdot_kernel: D[b,h,t] = dout . out (fp32 scratch (B,NH,T), stream-ordered);
//   2. attn_bwd_dq_kernel: block per query tile, as the forward: recomputes s, p = exp(s - lse),
//      dp, ds over the visible key tiles, dq = scale * sum_j ds_j k_j;
//   3. attn_bwd_dkv_kernel: block per key tile and key/value head, warps own keys, lanes are
//      queries: for each query head of the group in order, streams the query tiles at or after
//      the keys, dv = sum_i p_i dout_i and dk = scale * sum_i ds_i q_i.
// Scores and dP are computed twice (once per kernel): the price of owning every output row in
// exactly one warp, which makes the result the same bits on every run.
//
// Shared memory rows that lanes read at once (lane = key or query) have an odd stride (hs | 1)
// so the 32 lanes hit 32 different banks.
#include <climits>
#include <cstdint>
#include <string>
#include <type_traits>

#include "core/error.h"
#include "kernels/cuda/attention_decode.h"
#include "kernels/cuda/attention_flash.h"
#include "kernels/cuda/common_impl.cuh"
#include "kernels/cuda/ops.h"

namespace strata::kernels::cuda {
namespace {

using detail::from_f32;
using detail::kFullMask;
using detail::to_f32;
using detail::warp_max;
using detail::warp_sum;

constexpr int kWarps = 8;
constexpr int kThreads = kWarps * 32;
constexpr int kRowsPerWarp = 4;
constexpr int kRows = kWarps * kRowsPerWarp;  // rows (queries, or keys in dkv) per block
constexpr int kKeys = 32;                     // streamed tile: one per lane
constexpr int kMaxHeadSize = 256;

// Strides in elements. Head h of row t of batch b starts at base + b*batch + t*row + h*hs.
struct FwdArgs {
  const void* q;
  const void* k;
  const void* v;
  std::int64_t q_row, q_batch;
  std::int64_t kv_row, kv_batch;
  void* out;  // (B, Tq, C), C = NH hs
  float* lse;  // (B, NH, Tq) or null
  int Tq;      // queries per batch
  int q_pos0;  // absolute position of query 0 (past when decoding)
  int C, NH, hs;
  int group;   // query heads per key/value head: head h reads k and v of head h / group
  float scale;
};

__device__ __forceinline__ float dot(const float* a, const float* b, int n) {
  float acc = 0.0f;
#pragma unroll 4
  for (int d = 0; d < n; ++d) acc += a[d] * b[d];
  return acc;
}

// Loads rows [r0, r0 + rows) of one head into shared memory as fp32 (stride `stride`), zeros
// for rows at or after `valid`.
template <typename T>
__device__ __forceinline__ void load_tile(float* dst, int stride, const T* src, std::int64_t row,
                                          int r0, int rows, int valid, int hs) {
  for (int idx = threadIdx.x; idx < rows * hs; idx += blockDim.x) {
    const int r = idx / hs, d = idx - r * hs;
    dst[r * stride + d] = r0 + r < valid ? to_f32(src[(r0 + r) * row + d]) : 0.0f;
  }
}

template <typename T, int kDPL>
__global__ void __launch_bounds__(kThreads) attn_fwd_kernel(FwdArgs a) {
  extern __shared__ float smem[];
  const int hs = a.hs, ks = hs | 1;
  float* q_s = smem;               // (kRows, hs)
  float* k_s = q_s + kRows * hs;   // (kKeys, ks)
  float* v_s = k_s + kKeys * ks;   // (kKeys, hs)
  const int b = blockIdx.z, h = blockIdx.y, q0 = blockIdx.x * kRows;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const T* q = static_cast<const T*>(a.q) + b * a.q_batch + h * hs;
  const T* k = static_cast<const T*>(a.k) + b * a.kv_batch + (h / a.group) * hs;
  const T* v = static_cast<const T*>(a.v) + b * a.kv_batch + (h / a.group) * hs;

  load_tile(q_s, hs, q, a.q_row, q0, kRows, a.Tq, hs);
  float o[kRowsPerWarp][kDPL];
  float m[kRowsPerWarp], l[kRowsPerWarp];  // running max; this lane's share of the sum
#pragma unroll
  for (int rr = 0; rr < kRowsPerWarp; ++rr) {
    m[rr] = -INFINITY;
    l[rr] = 0.0f;
#pragma unroll
    for (int dd = 0; dd < kDPL; ++dd) o[rr][dd] = 0.0f;
  }
  const int q_last = min(q0 + kRows, a.Tq) - 1;
  const int key_end = a.q_pos0 + q_last + 1;  // the block's queries see keys [0, key_end)
  for (int k0 = 0; k0 < key_end; k0 += kKeys) {
    __syncthreads();  // the previous tile is consumed
    load_tile(k_s, ks, k, a.kv_row, k0, kKeys, key_end, hs);
    load_tile(v_s, hs, v, a.kv_row, k0, kKeys, key_end, hs);
    __syncthreads();
#pragma unroll
    for (int rr = 0; rr < kRowsPerWarp; ++rr) {
      const int r = warp * kRowsPerWarp + rr, i = q0 + r;
      const int pos = a.q_pos0 + i;         // sees keys [0, pos]
      if (i < a.Tq && pos >= k0) {          // warp-uniform
        const bool visible = k0 + lane <= pos;
        const float s = visible ? dot(q_s + r * hs, k_s + lane * ks, hs) * a.scale : -INFINITY;
        const float m_new = fmaxf(m[rr], warp_max(s));  // finite: key k0 is visible
        const float corr = expf(m[rr] - m_new);
        const float p = visible ? expf(s - m_new) : 0.0f;
        l[rr] = l[rr] * corr + p;
        m[rr] = m_new;
        const int jn = min(kKeys, pos - k0 + 1);
#pragma unroll
        for (int dd = 0; dd < kDPL; ++dd) o[rr][dd] *= corr;
        for (int j = 0; j < jn; ++j) {
          const float pj = __shfl_sync(kFullMask, p, j);
#pragma unroll
          for (int dd = 0; dd < kDPL; ++dd) {
            const int d = lane + 32 * dd;
            if (d < hs) o[rr][dd] += pj * v_s[j * hs + d];
          }
        }
      }
    }
  }
  T* out = static_cast<T*>(a.out) + static_cast<std::int64_t>(b) * a.Tq * a.C + h * hs;
#pragma unroll
  for (int rr = 0; rr < kRowsPerWarp; ++rr) {
    const int i = q0 + warp * kRowsPerWarp + rr;
    if (i < a.Tq) {
      const float sum = warp_sum(l[rr]);
      const float inv = 1.0f / sum;
#pragma unroll
      for (int dd = 0; dd < kDPL; ++dd) {
        const int d = lane + 32 * dd;
        if (d < hs) out[static_cast<std::int64_t>(i) * a.C + d] = from_f32<T>(o[rr][dd] * inv);
      }
      if (a.lse != nullptr && lane == 0)
        a.lse[(static_cast<std::int64_t>(b) * a.NH + h) * a.Tq + i] = m[rr] + logf(sum);
    }
  }
}

// ---- backward -------------------------------------------------------------------------------

struct BwdArgs {
  void* dqkv;          // (B, T, row), overwritten
  const void* dout;    // (B, T, C)
  const void* qkv;     // (B, T, row): [q (C) | k (NKV hs) | v (NKV hs)], row = (NH + 2 NKV) hs
  const void* out;     // (B, T, C), C = NH hs
  const float* lse;    // (B, NH, T)
  const float* D;      // (B, NH, T): dout . out per row and head
  int T, C, NH, NKV, hs;
  float scale;
  __device__ std::int64_t row() const { return static_cast<std::int64_t>(NH + 2 * NKV) * hs; }
  // Offsets of key/value head g's channels within a token of qkv / dqkv.
  __device__ std::int64_t k_col(int g) const { return static_cast<std::int64_t>(NH + g) * hs; }
  __device__ std::int64_t v_col(int g) const { return static_cast<std::int64_t>(NH + NKV + g) * hs; }
};

// D[b,h,t] = sum_d dout[b,t,h*hs+d] * out[b,t,h*hs+d]; one warp per (b, t, h).
template <typename T>
__global__ void attn_bwd_rowdot_kernel(float* __restrict__ D, const T* __restrict__ dout,
                                       const T* __restrict__ out, int B, int T_, int C, int NH,
                                       int hs) {
  const std::int64_t w = static_cast<std::int64_t>(blockIdx.x) * kWarps + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (w >= static_cast<std::int64_t>(B) * T_ * NH) return;
  const int h = static_cast<int>(w % NH);
  const std::int64_t bt = w / NH;  // b * T + t
  const std::int64_t base = bt * C + h * hs;
  float acc = 0.0f;
  for (int d = lane; d < hs; d += 32) acc += to_f32(dout[base + d]) * to_f32(out[base + d]);
  acc = warp_sum(acc);
  const std::int64_t b = bt / T_, t = bt % T_;
  if (lane == 0) D[(b * NH + h) * T_ + t] = acc;
}

// dq for a tile of kRows queries of one (b, h); keys and values of head h / group.
template <typename T, int kDPL>
__global__ void __launch_bounds__(kThreads) attn_bwd_dq_kernel(BwdArgs a) {
  extern __shared__ float smem[];
  const int hs = a.hs, ks = hs | 1, C = a.C, T_ = a.T;
  const int g = blockIdx.y / (a.NH / a.NKV);
  float* q_s = smem;                // (kRows, hs)
  float* do_s = q_s + kRows * hs;   // (kRows, hs)
  float* k_s = do_s + kRows * hs;   // (kKeys, ks)
  float* v_s = k_s + kKeys * ks;    // (kKeys, ks)
  const int b = blockIdx.z, h = blockIdx.y, q0 = blockIdx.x * kRows;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const std::int64_t row3 = a.row();
  const T* qkv = static_cast<const T*>(a.qkv) + b * T_ * row3;
  const T* dout = static_cast<const T*>(a.dout) + static_cast<std::int64_t>(b) * T_ * C + h * hs;
  const std::int64_t stat = (static_cast<std::int64_t>(b) * a.NH + h) * T_;

  load_tile(q_s, hs, qkv + h * hs, row3, q0, kRows, T_, hs);
  load_tile(do_s, hs, dout, C, q0, kRows, T_, hs);
  float acc[kRowsPerWarp][kDPL];
  float lse[kRowsPerWarp], Dr[kRowsPerWarp];
#pragma unroll
  for (int rr = 0; rr < kRowsPerWarp; ++rr) {
    const int i = q0 + warp * kRowsPerWarp + rr;
    lse[rr] = i < T_ ? a.lse[stat + i] : 0.0f;
    Dr[rr] = i < T_ ? a.D[stat + i] : 0.0f;
#pragma unroll
    for (int dd = 0; dd < kDPL; ++dd) acc[rr][dd] = 0.0f;
  }
  const int key_end = min(q0 + kRows, T_);
  for (int k0 = 0; k0 < key_end; k0 += kKeys) {
    __syncthreads();
    load_tile(k_s, ks, qkv + a.k_col(g), row3, k0, kKeys, key_end, hs);
    load_tile(v_s, ks, qkv + a.v_col(g), row3, k0, kKeys, key_end, hs);
    __syncthreads();
#pragma unroll
    for (int rr = 0; rr < kRowsPerWarp; ++rr) {
      const int r = warp * kRowsPerWarp + rr, i = q0 + r;
      if (i < T_ && i >= k0) {  // warp-uniform
        float ds = 0.0f;
        if (k0 + lane <= i) {
          const float s = dot(q_s + r * hs, k_s + lane * ks, hs) * a.scale;
          const float p = expf(s - lse[rr]);
          const float dp = dot(do_s + r * hs, v_s + lane * ks, hs);
          ds = p * (dp - Dr[rr]);
        }
        const int jn = min(kKeys, i - k0 + 1);
        for (int j = 0; j < jn; ++j) {
          const float dsj = __shfl_sync(kFullMask, ds, j);
#pragma unroll
          for (int dd = 0; dd < kDPL; ++dd) {
            const int d = lane + 32 * dd;
            if (d < hs) acc[rr][dd] += dsj * k_s[j * ks + d];
          }
        }
      }
    }
  }
  T* dq = static_cast<T*>(a.dqkv) + b * T_ * row3 + h * hs;
#pragma unroll
  for (int rr = 0; rr < kRowsPerWarp; ++rr) {
    const int i = q0 + warp * kRowsPerWarp + rr;
    if (i < T_) {
#pragma unroll
      for (int dd = 0; dd < kDPL; ++dd) {
        const int d = lane + 32 * dd;
        if (d < hs) dq[i * row3 + d] = from_f32<T>(acc[rr][dd] * a.scale);
      }
    }
  }
}

// dk and dv for a tile of kRows keys of one (b, key/value head g = blockIdx.y), summed over the
// group's query heads g r, ..., g r + r - 1 in order (r = NH / NKV).
template <typename T, int kDPL>
__global__ void __launch_bounds__(kThreads) attn_bwd_dkv_kernel(BwdArgs a) {
  extern __shared__ float smem[];
  const int hs = a.hs, ks = hs | 1, C = a.C, T_ = a.T;
  float* k_s = smem;                 // (kRows, hs): the block's keys
  float* v_s = k_s + kRows * hs;     // (kRows, hs)
  float* q_s = v_s + kRows * hs;     // (kKeys, ks): streamed queries
  float* do_s = q_s + kKeys * ks;    // (kKeys, ks)
  float* lse_s = do_s + kKeys * ks;  // (kKeys)
  float* D_s = lse_s + kKeys;        // (kKeys)
  const int b = blockIdx.z, g = blockIdx.y, j0 = blockIdx.x * kRows;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int group = a.NH / a.NKV;
  const std::int64_t row3 = a.row();
  const T* qkv = static_cast<const T*>(a.qkv) + b * T_ * row3;

  load_tile(k_s, hs, qkv + a.k_col(g), row3, j0, kRows, T_, hs);
  load_tile(v_s, hs, qkv + a.v_col(g), row3, j0, kRows, T_, hs);
  float dk[kRowsPerWarp][kDPL], dv[kRowsPerWarp][kDPL];
#pragma unroll
  for (int rr = 0; rr < kRowsPerWarp; ++rr)
#pragma unroll
    for (int dd = 0; dd < kDPL; ++dd) dk[rr][dd] = dv[rr][dd] = 0.0f;

  for (int h = g * group; h < (g + 1) * group; ++h) {
    const T* dout = static_cast<const T*>(a.dout) + static_cast<std::int64_t>(b) * T_ * C + h * hs;
    const std::int64_t stat = (static_cast<std::int64_t>(b) * a.NH + h) * T_;
    for (int qs = j0; qs < T_; qs += kKeys) {  // queries before j0 see none of the block's keys
      __syncthreads();
      load_tile(q_s, ks, qkv + h * hs, row3, qs, kKeys, T_, hs);
      load_tile(do_s, ks, dout, C, qs, kKeys, T_, hs);
      if (threadIdx.x < kKeys) {
        const int i = qs + threadIdx.x;
        lse_s[threadIdx.x] = i < T_ ? a.lse[stat + i] : 0.0f;
        D_s[threadIdx.x] = i < T_ ? a.D[stat + i] : 0.0f;
      }
      __syncthreads();
#pragma unroll
      for (int rr = 0; rr < kRowsPerWarp; ++rr) {
        const int r = warp * kRowsPerWarp + rr, j = j0 + r;
        if (j < T_) {  // warp-uniform
          const int i = qs + lane;
          float p = 0.0f, ds = 0.0f;
          if (i < T_ && i >= j) {
            const float s = dot(q_s + lane * ks, k_s + r * hs, hs) * a.scale;
            p = expf(s - lse_s[lane]);
            const float dp = dot(do_s + lane * ks, v_s + r * hs, hs);
            ds = p * (dp - D_s[lane]);
          }
          const int i_begin = max(0, j - qs), i_end = min(kKeys, T_ - qs);
          for (int ii = i_begin; ii < i_end; ++ii) {
            const float pi = __shfl_sync(kFullMask, p, ii);
            const float dsi = __shfl_sync(kFullMask, ds, ii);
#pragma unroll
            for (int dd = 0; dd < kDPL; ++dd) {
              const int d = lane + 32 * dd;
              if (d < hs) {
                dv[rr][dd] += pi * do_s[ii * ks + d];
                dk[rr][dd] += dsi * q_s[ii * ks + d];
              }
            }
          }
        }
      }
    }
  }
  T* dqkv = static_cast<T*>(a.dqkv) + b * T_ * row3;
#pragma unroll
  for (int rr = 0; rr < kRowsPerWarp; ++rr) {
    const int j = j0 + warp * kRowsPerWarp + rr;
    if (j < T_) {
#pragma unroll
      for (int dd = 0; dd < kDPL; ++dd) {
        const int d = lane + 32 * dd;
        if (d < hs) {
          dqkv[j * row3 + a.k_col(g) + d] = from_f32<T>(dk[rr][dd] * a.scale);
          dqkv[j * row3 + a.v_col(g) + d] = from_f32<T>(dv[rr][dd]);
        }
      }
    }
  }
}

// ---- decoding -------------------------------------------------------------------------------

// k_cache[b, past + t, :] = k of qkv[b, t] (NKV hs channels), v_cache likewise; one element per
// thread and step. row = (NH + 2 NKV) hs channels per token of qkv, k at q_channels, v after it.
template <typename T>
__global__ void kv_append_kernel(T* __restrict__ k_cache, T* __restrict__ v_cache,
                                 const T* __restrict__ qkv, int T_new, int past, int max_T,
                                 int kv_channels, std::int64_t q_channels, std::int64_t row,
                                 std::int64_t n) {
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t idx = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
       idx < n; idx += stride) {
    const std::int64_t bt = idx / kv_channels;  // b * T_new + t
    const int c = static_cast<int>(idx - bt * kv_channels);
    const std::int64_t b = bt / T_new, t = bt % T_new;
    const std::int64_t dst = (b * max_T + past + t) * kv_channels + c;
    k_cache[dst] = qkv[bt * row + q_channels + c];
    v_cache[dst] = qkv[bt * row + q_channels + kv_channels + c];
  }
}

// ---- launch helpers -------------------------------------------------------------------------

// Checks the head counts and size (a strata::Error when NH is not a multiple of NKV or hs is
// beyond what the fp32 kernels hold in registers).
void check_heads(int NH, int NKV, int hs, const char* op) {
  if (NH <= 0 || NKV <= 0 || hs <= 0 || NH % NKV != 0)
    throw Error("attention: " + std::to_string(NH) + " query heads, " + std::to_string(NKV) +
                    " key/value heads, head size " + std::to_string(hs) +
                    ": the heads must be positive and NH a multiple of NKV",
                std::string("kernels::cuda::") + op, "check n_head / n_kv_head in the model config");
  if (hs > kMaxHeadSize)
    throw Error("attention: head size " + std::to_string(hs) + " is above the " +
                    std::to_string(kMaxHeadSize) + " the CUDA kernels support",
                std::string("kernels::cuda::") + op,
                "use more heads, or extend kernels/cuda/attention.cu");
}

// Calls f(std::integral_constant<int, kDPL>) with kDPL = ceil(hs / 32) rounded up to 1, 2, 4, 8.
template <typename F>
void dispatch_dims(int hs, F&& f) {
  if (hs <= 32) return f(std::integral_constant<int, 1>{});
  if (hs <= 64) return f(std::integral_constant<int, 2>{});
  if (hs <= 128) return f(std::integral_constant<int, 4>{});
  return f(std::integral_constant<int, 8>{});
}

dim3 tile_grid(int T, int heads, int B) {
  STRATA_ASSERT(B <= detail::kMaxGridYZ && heads <= detail::kMaxGridYZ,
                "attention: B and NH must be at most 65535");
  return dim3(static_cast<unsigned>(detail::ceil_div(T, kRows)), static_cast<unsigned>(heads),
              static_cast<unsigned>(B));
}

template <typename T>
void launch_fwd(const FwdArgs& a, int B, cudaStream_t stream) {
  const int ks = a.hs | 1;
  const std::size_t smem = sizeof(float) * (static_cast<std::size_t>(kRows) * a.hs +
                                            static_cast<std::size_t>(kKeys) * (ks + a.hs));
  dispatch_dims(a.hs, [&](auto dims) {
    constexpr int kDPL = decltype(dims)::value;
    auto kernel = attn_fwd_kernel<T, kDPL>;
    detail::allow_dynamic_smem(kernel, smem);
    kernel<<<tile_grid(a.Tq, a.NH, B), kThreads, smem, stream>>>(a);
    CUDA_CHECK_LAUNCH();
  });
}

// The kernels attention_decode takes after the append (ops.h: attention_decode_kernel): the
// split kernel for a few new tokens, the flash forward over the caches for longer prefills in
// bf16 / fp16 at head size 64 / 128, the fp32 forward otherwise, or where a tensor is not
// 16-byte aligned for the kernel that wants it.
// caches_aligned: k_cache and v_cache are; io_aligned: qkv and out are.
AttentionDecodeKernel decode_path(DType dtype, int hs, int T_new, bool caches_aligned,
                                  bool io_aligned) {
  if (detail::decode_split_supported(dtype, hs, T_new) && caches_aligned)
    return AttentionDecodeKernel::split_kv;
  if (detail::flash_supported(dtype, hs) && caches_aligned && io_aligned)
    return AttentionDecodeKernel::flash_tensor_core;
  return AttentionDecodeKernel::fp32_cuda_core;
}

}  // namespace

AttentionDecodeKernel attention_decode_kernel(DType dtype, int hs, int T_new) {
  return decode_path(dtype, hs, T_new, true, true);
}

AttentionKernel attention_kernel(DType dtype, int hs) {
  return detail::flash_supported(dtype, hs) ? AttentionKernel::flash_tensor_core
                                            : AttentionKernel::fp32_cuda_core;
}

void attention_fwd(void* out, float* lse, const void* qkv, int B, int T, int NH, int NKV, int hs,
                   DType dtype, cudaStream_t stream) {
  check_heads(NH, NKV, hs, "attention_fwd");
  STRATA_ASSERT(B >= 0 && T >= 0);
  if (B == 0 || T == 0) return;
  STRATA_ASSERT(out != nullptr && qkv != nullptr);
  if (detail::flash_supported(dtype, hs)) {
    STRATA_ASSERT(detail::flash_aligned(out) && detail::flash_aligned(qkv),
                  "attention_fwd: bf16/fp16 tensors must be 16-byte aligned");
    detail::flash_attention_fwd(out, lse, qkv, B, T, NH, NKV, hs, dtype, stream);
    return;
  }
  const int C = NH * hs;
  const std::int64_t row = static_cast<std::int64_t>(NH + 2 * NKV) * hs;
  detail::dispatch_dtype(dtype, [&](auto tag) {
    using E = typename decltype(tag)::type;
    const E* base = static_cast<const E*>(qkv);
    const FwdArgs a{base, base + C, base + C + NKV * hs, row, row * T, row, row * T, out, lse, T,
                    0,    C,        NH,                  hs,  NH / NKV,
                    1.0f / sqrtf(static_cast<float>(hs))};
    launch_fwd<E>(a, B, stream);
  });
}

void attention_bwd(void* dqkv, const void* dout, const void* qkv, const void* out,
                   const float* lse, int B, int T, int NH, int NKV, int hs, DType dtype,
                   cudaStream_t stream) {
  check_heads(NH, NKV, hs, "attention_bwd");
  STRATA_ASSERT(B >= 0 && T >= 0);
  if (B == 0 || T == 0) return;
  STRATA_ASSERT(dqkv != nullptr && dout != nullptr && qkv != nullptr && out != nullptr &&
                lse != nullptr);
  const bool flash = detail::flash_supported(dtype, hs);
  STRATA_ASSERT(!flash || (detail::flash_aligned(dqkv) && detail::flash_aligned(dout) &&
                           detail::flash_aligned(qkv)),
                "attention_bwd: bf16/fp16 tensors must be 16-byte aligned");
  const int C = NH * hs;
  const std::int64_t rows = static_cast<std::int64_t>(B) * T * NH;
  detail::StreamScratch scratch(static_cast<std::size_t>(rows) * sizeof(float), stream);
  const BwdArgs a{dqkv, dout, qkv, out, lse, scratch.as<float>(), T, C, NH, NKV, hs,
                  1.0f / sqrtf(static_cast<float>(hs))};
  const int ks = hs | 1;
  const std::size_t smem_dq =
      sizeof(float) * (2 * static_cast<std::size_t>(kRows) * hs + 2 * static_cast<std::size_t>(kKeys) * ks);
  const std::size_t smem_dkv = smem_dq + sizeof(float) * 2 * kKeys;
  detail::dispatch_dtype(dtype, [&](auto tag) {
    using E = typename decltype(tag)::type;
    const std::int64_t blocks = detail::ceil_div(rows, kWarps);
    STRATA_ASSERT(blocks <= detail::kMaxGridX, "attention_bwd: too many rows");
    attn_bwd_rowdot_kernel<E><<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(
        scratch.as<float>(), static_cast<const E*>(dout), static_cast<const E*>(out), B, T, C,
        NH, hs);
    CUDA_CHECK_LAUNCH();
    if (flash) {
      detail::flash_attention_bwd(dqkv, dout, qkv, lse, scratch.as<float>(), B, T, NH, NKV, hs,
                                  dtype, stream);
      return;
    }
    dispatch_dims(hs, [&](auto dims) {
      constexpr int kDPL = decltype(dims)::value;
      auto dq_kernel = attn_bwd_dq_kernel<E, kDPL>;
      detail::allow_dynamic_smem(dq_kernel, smem_dq);
      dq_kernel<<<tile_grid(T, NH, B), kThreads, smem_dq, stream>>>(a);
      CUDA_CHECK_LAUNCH();
      auto dkv_kernel = attn_bwd_dkv_kernel<E, kDPL>;
      detail::allow_dynamic_smem(dkv_kernel, smem_dkv);
      dkv_kernel<<<tile_grid(T, NKV, B), kThreads, smem_dkv, stream>>>(a);
      CUDA_CHECK_LAUNCH();
    });
  });
  scratch.release();
}

void attention_decode(void* out, void* k_cache, void* v_cache, const void* qkv, int B,
                      int T_new, int past, int max_T, int NH, int NKV, int hs, DType dtype,
                      cudaStream_t stream) {
  check_heads(NH, NKV, hs, "attention_decode");
  STRATA_ASSERT(B >= 0 && T_new >= 0 && past >= 0);
  STRATA_ASSERT(past + T_new <= max_T, "attention_decode: past + T_new > max_T");
  if (B == 0 || T_new == 0) return;
  STRATA_ASSERT(out != nullptr && k_cache != nullptr && v_cache != nullptr && qkv != nullptr);
  const int C = NH * hs, KVC = NKV * hs;  // channels of out, of a cache position
  const std::int64_t row = static_cast<std::int64_t>(C) + 2 * KVC;
  detail::dispatch_dtype(dtype, [&](auto tag) {
    using E = typename decltype(tag)::type;
    const std::int64_t n = static_cast<std::int64_t>(B) * T_new * KVC;
    kv_append_kernel<E><<<detail::grid_stride_blocks(n, kThreads), kThreads, 0, stream>>>(
        static_cast<E*>(k_cache), static_cast<E*>(v_cache), static_cast<const E*>(qkv), T_new,
        past, max_T, KVC, C, row, n);
    CUDA_CHECK_LAUNCH();
  });
  const bool caches_aligned = detail::flash_aligned(k_cache) && detail::flash_aligned(v_cache);
  const bool io_aligned = detail::flash_aligned(qkv) && detail::flash_aligned(out);
  switch (decode_path(dtype, hs, T_new, caches_aligned, io_aligned)) {
    case AttentionDecodeKernel::split_kv:
      detail::attention_decode_split(out, qkv, k_cache, v_cache, B, T_new, past, max_T, NH, NKV,
                                     hs, dtype, stream);
      return;
    case AttentionDecodeKernel::flash_tensor_core:
      detail::flash_attention_decode(out, qkv, k_cache, v_cache, B, T_new, past, max_T, NH, NKV,
                                     hs, dtype, stream);
      return;
    case AttentionDecodeKernel::fp32_cuda_core:
      break;
  }
  detail::dispatch_dtype(dtype, [&](auto tag) {
    using E = typename decltype(tag)::type;
    const std::int64_t kv_batch = static_cast<std::int64_t>(max_T) * KVC;
    const FwdArgs a{qkv,      k_cache,  v_cache, row,     row * T_new,
                    KVC,      kv_batch, out,     nullptr, T_new,
                    past,     C,        NH,      hs,      NH / NKV,
                    1.0f / sqrtf(static_cast<float>(hs))};
    launch_fwd<E>(a, B, stream);
  });
}

}  // namespace strata::kernels::cuda
