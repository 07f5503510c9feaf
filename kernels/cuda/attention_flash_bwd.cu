// Causal attention backward on tensor cores (FlashAttention-2), bf16 / fp16, head size 64 or
// 128, grouped-query heads. Deterministic: every element of dqkv is written by exactly one
// thread, after a fixed sequence of fp32 accumulations; no atomics. With P = exp(S scale - lse)
// recomputed from the forward's lse and D = rowsum(dO o O) (computed by the caller):
//   dV = P^T dO,  dP = dO V^T,  dS = P o (dP - D),  dK = scale dS^T Q,  dQ = scale dS K.
// Two kernels (S and dP are computed in both: the price of owning each output in one warp):
//   flash_dkv_kernel: block = (key tile of 64 keys, key/value head, batch), warp w owns keys
//     16 w .. 16 w + 15. K and V stay in shared memory; for each query head of the group in
//     order and each query tile at or after the keys (queries before the tile see none of
//     them), Q, dO, lse and D are streamed in: S^T = K Q^T, P^T, dV += P^T dO, dP^T = V dO^T,
//     dS^T = P^T o (dP^T - D), dK += dS^T Q.
//   flash_dq_kernel: block = (query tile of 64 queries, query head, batch), warp w owns queries
//     16 w .. 16 w + 15. Q and dO stay in shared memory; the key tiles at or before the tile's
//     last query are streamed in: S = Q K^T, P, dP = dO V^T, dS, dQ += dS K.
// P and dS are rounded to the storage type to be the A operand of the next mma (as the forward
// does with P); accumulators, exp and the softmax statistics are fp32. Streamed tiles are 64
// rows at hs 64 and 32 rows at hs 128 (Tiles::kStreamBwd), which keeps the two score
// accumulators (S, dP) at 16 x 32 when the output accumulators are 16 x 128.
// Streamed tiles are double-buffered (the cp.async of tile t + 1 is issued before the math of
// tile t). Shared memory: hs 64: 54 KiB; hs 128: 68 KiB (both kernels).
#include <climits>
#include <cstdint>

#include "core/error.h"
#include "kernels/cuda/attention_flash.h"
#include "kernels/cuda/attention_flash_impl.cuh"
#include "kernels/cuda/common_impl.cuh"

namespace strata::kernels::cuda::detail {
namespace {

using namespace flash;

struct BwdArgs {
  void* dqkv;        // (B, T, row), overwritten; row = (NH + 2 NKV) hs
  const void* dout;  // (B, T, NH hs)
  const void* qkv;   // (B, T, row)
  const float* lse;  // (B, NH, T)
  const float* D;    // (B, NH, T)
  int T, NH, NKV;
  float scale;       // 1 / sqrt(hs)
};

template <typename T, int kHs>
__global__ void __launch_bounds__(kThreads) flash_dkv_kernel(BwdArgs a) {
  using Tl = Tiles<kHs>;
  constexpr int kN = Tl::kRows, kQ = Tl::kStreamBwd, kStride = Tl::kStride;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  T* k_s = reinterpret_cast<T*>(smem_raw);  // (kN, kStride): the block's keys
  T* v_s = k_s + kN * kStride;              // (kN, kStride)
  T* qdo_s = v_s + kN * kStride;            // 2 stages of [Q (kQ, kStride) | dO (kQ, kStride)]
  float* stat_s = reinterpret_cast<float*>(qdo_s + 4 * kQ * kStride);  // 2 stages of
                                                                         // [lse log2(e) | D] (kQ each)

  const int T_ = a.T;
  const int k0 = blockIdx.x * kN;  // first tiles (most queries) first
  const int group = a.NH / a.NKV;
  const int kvh = blockIdx.y, b = blockIdx.z;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, c = lane % 4;
  const float scale_log2 = a.scale * kLog2e;
  const std::int64_t row = static_cast<std::int64_t>(a.NH + 2 * a.NKV) * kHs;
  const std::int64_t C = static_cast<std::int64_t>(a.NH) * kHs;
  const T* base = static_cast<const T*>(a.qkv) + static_cast<std::int64_t>(b) * T_ * row;
  const std::int64_t k_col = static_cast<std::int64_t>(a.NH + kvh) * kHs;
  const std::int64_t v_col = static_cast<std::int64_t>(a.NH + a.NKV + kvh) * kHs;

  // The streamed tiles: it = 0, 1, ... is query tile it % n_q of query head kvh group + it / n_q
  // (the heads of the group in order, and for each the query tiles at or after the keys).
  const int n_q = (T_ - k0 + kQ - 1) / kQ, n_it = group * n_q;
  const auto load_q = [&](int it) {
    const int h = kvh * group + it / n_q, q0 = k0 + (it % n_q) * kQ;
    T* q_s = qdo_s + (it % 2) * 2 * kQ * kStride;
    load_rows_async<kQ, kHs>(q_s, base + static_cast<std::int64_t>(h) * kHs, row, q0, T_);
    load_rows_async<kQ, kHs>(q_s + kQ * kStride,
                             static_cast<const T*>(a.dout) + static_cast<std::int64_t>(b) * T_ * C +
                                 static_cast<std::int64_t>(h) * kHs,
                             C, q0, T_);
    cp_async_commit();
    if (threadIdx.x < kQ) {  // plain stores: visible after the barrier of iteration it
      const std::int64_t stat = (static_cast<std::int64_t>(b) * a.NH + h) * T_;
      const int i = q0 + threadIdx.x;
      float* st = stat_s + (it % 2) * 2 * kQ;
      st[threadIdx.x] = i < T_ ? a.lse[stat + i] * kLog2e : 0.0f;
      st[kQ + threadIdx.x] = i < T_ ? a.D[stat + i] : 0.0f;
    }
  };
  load_rows_async<kN, kHs>(k_s, base + k_col, row, k0, T_);
  load_rows_async<kN, kHs>(v_s, base + v_col, row, k0, T_);
  load_q(0);

  // This thread's two keys (absolute positions).
  const int key0 = k0 + warp * 16 + g, key1 = key0 + 8;
  float dk[kHs / 8][4], dv[kHs / 8][4];
  zero(dk);
  zero(dv);

  for (int it = 0; it < n_it; ++it) {
    const int q0 = k0 + (it % n_q) * kQ;
    const T* q_s = qdo_s + (it % 2) * 2 * kQ * kStride;
    const T* do_s = q_s + kQ * kStride;
    const float* lse_s = stat_s + (it % 2) * 2 * kQ;
    const float* d_s = lse_s + kQ;
    cp_async_wait<0>();  // this thread's copies of tile it (and K, V) have landed
    __syncthreads();     // everyone's have; every warp is done with tile it - 1's stage
    if (it + 1 < n_it) load_q(it + 1);  // overlaps this tile's math

    // P^T (16 keys x kQ queries): 2^(S^T scale log2(e) - lse log2(e)), 0 where the query
    // is before the key or at / after T.
    float p[kQ / 8][4];
    zero(p);
    mma_abt<T, kQ, kHs>(p, k_s + warp * 16 * kStride, q_s);
#pragma unroll
    for (int n = 0; n < kQ / 8; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int qi = n * 8 + 2 * c + (e & 1);  // query within the tile
        const int key = e < 2 ? key0 : key1;
        const bool visible = q0 + qi < T_ && q0 + qi >= key;
        p[n][e] = visible ? exp2f(p[n][e] * scale_log2 - lse_s[qi]) : 0.0f;
      }
    unsigned pa[kQ / 16][4];
    to_a_operand<T, kQ>(pa, p);
    mma_ab<T, kQ, kHs>(dv, pa, do_s);

    // dS^T = P^T o (dP^T - D), dP^T = V dO^T.
    float ds[kQ / 8][4];
    zero(ds);
    mma_abt<T, kQ, kHs>(ds, v_s + warp * 16 * kStride, do_s);
#pragma unroll
    for (int n = 0; n < kQ / 8; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) ds[n][e] = p[n][e] * (ds[n][e] - d_s[n * 8 + 2 * c + (e & 1)]);
    unsigned dsa[kQ / 16][4];
    to_a_operand<T, kQ>(dsa, ds);
    mma_ab<T, kQ, kHs>(dk, dsa, q_s);
  }

  T* dqkv = static_cast<T*>(a.dqkv) + static_cast<std::int64_t>(b) * T_ * row;
  store_rows<T, kHs>(dqkv + k_col, row, k0 + warp * 16, T_, dk, a.scale, a.scale);
  store_rows<T, kHs>(dqkv + v_col, row, k0 + warp * 16, T_, dv, 1.0f, 1.0f);
}

template <typename T, int kHs>
__global__ void __launch_bounds__(kThreads) flash_dq_kernel(BwdArgs a) {
  using Tl = Tiles<kHs>;
  constexpr int kM = Tl::kRows, kN = Tl::kStreamBwd, kStride = Tl::kStride;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  T* q_s = reinterpret_cast<T*>(smem_raw);  // (kM, kStride): the block's queries
  T* do_s = q_s + kM * kStride;             // (kM, kStride)
  T* kv_s = do_s + kM * kStride;            // 2 stages of [K (kN, kStride) | V (kN, kStride)]

  const int T_ = a.T;
  const int q0 = (gridDim.x - 1 - blockIdx.x) * kM;  // last tiles (most keys) first
  const int h = blockIdx.y, b = blockIdx.z;
  const int kvh = h / (a.NH / a.NKV);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, c = lane % 4;
  const float scale_log2 = a.scale * kLog2e;
  const std::int64_t row = static_cast<std::int64_t>(a.NH + 2 * a.NKV) * kHs;
  const std::int64_t C = static_cast<std::int64_t>(a.NH) * kHs;
  const T* base = static_cast<const T*>(a.qkv) + static_cast<std::int64_t>(b) * T_ * row;
  const T* k_src = base + static_cast<std::int64_t>(a.NH + kvh) * kHs;
  const T* v_src = base + static_cast<std::int64_t>(a.NH + a.NKV + kvh) * kHs;
  const std::int64_t q_col = static_cast<std::int64_t>(h) * kHs;

  // Stage st of the K/V ring holds key tile t with t % 2 = st.
  const auto load_kv = [&](int t) {
    T* k_s = kv_s + (t % 2) * 2 * kN * kStride;
    load_rows_async<kN, kHs>(k_s, k_src, row, t * kN, T_);
    load_rows_async<kN, kHs>(k_s + kN * kStride, v_src, row, t * kN, T_);
    cp_async_commit();
  };
  load_rows_async<kM, kHs>(q_s, base + q_col, row, q0, T_);
  load_rows_async<kM, kHs>(do_s, static_cast<const T*>(a.dout) + static_cast<std::int64_t>(b) * T_ * C + q_col,
                           C, q0, T_);
  load_kv(0);

  // This thread's two queries: lse (times log2(e)) and D; rows >= T are never stored.
  const int r0 = q0 + warp * 16 + g, r1 = r0 + 8;
  const std::int64_t stat = (static_cast<std::int64_t>(b) * a.NH + h) * T_;
  const float lse0 = r0 < T_ ? a.lse[stat + r0] * kLog2e : 0.0f;
  const float lse1 = r1 < T_ ? a.lse[stat + r1] * kLog2e : 0.0f;
  const float D0 = r0 < T_ ? a.D[stat + r0] : 0.0f;
  const float D1 = r1 < T_ ? a.D[stat + r1] : 0.0f;
  float dq[kHs / 8][4];
  zero(dq);

  const int key_end = min(q0 + kM, T_);
  const int n_tiles = (key_end + kN - 1) / kN;
  for (int t = 0; t < n_tiles; ++t) {
    const int k0 = t * kN;
    const T* k_s = kv_s + (t % 2) * 2 * kN * kStride;
    const T* v_s = k_s + kN * kStride;
    cp_async_wait<0>();  // this thread's copies of tile t (and Q, dO) have landed
    __syncthreads();     // everyone's have; every warp is done with tile t - 1's stage
    if (t + 1 < n_tiles) load_kv(t + 1);  // overlaps this tile's math

    // P (16 queries x kN keys), 0 where the key is after the query (or the query at / after T).
    float p[kN / 8][4];
    zero(p);
    mma_abt<T, kN, kHs>(p, q_s + warp * 16 * kStride, k_s);
#pragma unroll
    for (int n = 0; n < kN / 8; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int key = k0 + n * 8 + 2 * c + (e & 1);
        const int qr = e < 2 ? r0 : r1;
        p[n][e] = key <= qr && qr < T_ ? exp2f(p[n][e] * scale_log2 - (e < 2 ? lse0 : lse1)) : 0.0f;
      }
    // dS = P o (dP - D), dP = dO V^T.
    float ds[kN / 8][4];
    zero(ds);
    mma_abt<T, kN, kHs>(ds, do_s + warp * 16 * kStride, v_s);
#pragma unroll
    for (int n = 0; n < kN / 8; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) ds[n][e] = p[n][e] * (ds[n][e] - (e < 2 ? D0 : D1));
    unsigned dsa[kN / 16][4];
    to_a_operand<T, kN>(dsa, ds);
    mma_ab<T, kN, kHs>(dq, dsa, k_s);
  }

  T* dqkv = static_cast<T*>(a.dqkv) + static_cast<std::int64_t>(b) * T_ * row;
  store_rows<T, kHs>(dqkv + q_col, row, q0 + warp * 16, T_, dq, a.scale, a.scale);
}

template <typename T, int kHs>
void launch(const BwdArgs& a, int B, cudaStream_t stream) {
  using Tl = Tiles<kHs>;
  const auto tiles = static_cast<unsigned>(ceil_div(a.T, Tl::kRows));
  // Both kernels: 2 resident tiles of kRows rows, 2 stages of 2 streamed tiles of kStreamBwd
  // rows; dK/dV also 2 stages of lse and D.
  const std::size_t tiles_bytes =
      sizeof(T) * static_cast<std::size_t>(2 * Tl::kRows + 4 * Tl::kStreamBwd) * Tl::kStride;
  const std::size_t smem_dkv = tiles_bytes + sizeof(float) * 4 * Tl::kStreamBwd;
  auto dkv = flash_dkv_kernel<T, kHs>;
  allow_dynamic_smem(dkv, smem_dkv);
  dkv<<<dim3(tiles, static_cast<unsigned>(a.NKV), static_cast<unsigned>(B)), kThreads, smem_dkv,
        stream>>>(a);
  CUDA_CHECK_LAUNCH();
  auto dq = flash_dq_kernel<T, kHs>;
  allow_dynamic_smem(dq, tiles_bytes);
  dq<<<dim3(tiles, static_cast<unsigned>(a.NH), static_cast<unsigned>(B)), kThreads, tiles_bytes,
       stream>>>(a);
  CUDA_CHECK_LAUNCH();
}

}  // namespace

void flash_attention_bwd(void* dqkv, const void* dout, const void* qkv, const float* lse,
                         const float* D, int B, int T, int NH, int NKV, int hs, DType dtype,
                         cudaStream_t stream) {
  STRATA_ASSERT(flash_supported(dtype, hs) && NKV > 0 && NH % NKV == 0);
  STRATA_ASSERT(B <= kMaxGridYZ && NH <= kMaxGridYZ, "attention: B and NH must be at most 65535");
  const BwdArgs a{dqkv, dout, qkv, lse, D, T, NH, NKV, 1.0f / sqrtf(static_cast<float>(hs))};
  const auto run = [&](auto tag) {
    using E = typename decltype(tag)::type;
    if (hs == 64) launch<E, 64>(a, B, stream);
    else launch<E, 128>(a, B, stream);
  };
  if (dtype == DType::bf16) run(Tag<__nv_bfloat16>{});
  else run(Tag<__half>{});
}

}  // namespace strata::kernels::cuda::detail
