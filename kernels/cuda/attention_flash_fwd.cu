// Causal attention forward on tensor cores (FlashAttention-2), bf16 / fp16, head size 64 or
// 128, grouped-query heads. The mma / ldmatrix building blocks and their fragment layouts are
// in attention_flash_impl.cuh.
//
// Block = (query tile of 64 rows, query head h, batch b), 4 warps, warp w owns query rows
// 16 w .. 16 w + 15 of the tile. Heaviest tiles (the last queries) are scheduled first.
// Query i sits at position q_pos0 + i: q_pos0 = 0 for attention_fwd (q, k and v all from qkv);
// decoding's prefill (flash_attention_decode) reads k and v from the caches and has
// q_pos0 = past, so query i sees keys [0, past + i].
//   1. Q tile (64 x hs) -> shared memory (cp.async), rows >= T zero-filled.
//   2. For each key tile of 64 keys at or before the tile's last query (tiles entirely above the
//      diagonal are skipped): K and V tiles -> shared memory, double-buffered (the cp.async of
//      tile t + 1 is issued before the math of tile t), key rows >= q_pos0 + T zero-filled;
//      S = Q K^T (16 x 64 per warp, fp32); x = S scale log2(e), masked to -inf where key > the
//      query's position; online softmax in the base-2 domain: m = max(m, rowmax x), O and the
//      partial row sum l scaled by 2^(m_old - m), P = 2^(x - m); P rounded to the storage type
//      is the A operand of O += P V.
//   3. out = O / l (rows < T), lse = (m ln 2 + ln l) (natural log of the sum of e^(s scale)).
// Each thread holds two rows (g and g + 8 of its warp's 16) and, per row, 2 of every 8 columns:
// row max and sum are reduced over the 4 lanes of a quad (shuffles with xor 1 and 2).
// Shared memory: Q and 2 x (K, V) tiles of 64 x (hs + 8) elements: 45 KiB at hs 64, 85 KiB at
// 128 (2 blocks per SM of an H100 at 128).
#include <climits>
#include <cstdint>
#include <string>

#include "core/error.h"
#include "kernels/cuda/attention_flash.h"
#include "kernels/cuda/attention_flash_impl.cuh"
#include "kernels/cuda/common_impl.cuh"

namespace strata::kernels::cuda::detail {
namespace {

using namespace flash;

// Head h of query row t of batch b starts at q + b q_batch + t q_row + h hs (elements); key /
// value head g of key position j at k (v) + b kv_batch + j kv_row + g hs. attention_fwd: q, k,
// v point into qkv (rows of (NH + 2 NKV) hs); decoding: k, v are the caches (rows of NKV hs).
struct FwdArgs {
  const void* q;
  const void* k;
  const void* v;
  std::int64_t q_row, q_batch, kv_row, kv_batch;
  void* out;         // (B, T, NH hs)
  float* lse;        // (B, NH, T) or null
  int T;             // queries per batch
  int q_pos0;        // absolute position of query 0: query t sees keys [0, q_pos0 + t]
  int NH, NKV;
  float scale_log2;  // log2(e) / sqrt(hs)
};

template <typename T, int kHs>
__global__ void __launch_bounds__(kThreads) flash_fwd_kernel(FwdArgs a) {
  using Tl = Tiles<kHs>;
  constexpr int kM = Tl::kRows, kN = Tl::kStreamFwd, kStride = Tl::kStride;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  // Q (kM, kStride), then 2 stages of [K (kN, kStride) | V (kN, kStride)].
  T* q_s = reinterpret_cast<T*>(smem_raw);
  T* kv_s = q_s + kM * kStride;

  const int T_ = a.T;
  const int q0 = (gridDim.x - 1 - blockIdx.x) * kM;  // last tiles (most keys) first
  const int h = blockIdx.y, b = blockIdx.z;
  const int kvh = h / (a.NH / a.NKV);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, c = lane % 4;
  const std::int64_t q_col = static_cast<std::int64_t>(h) * kHs;
  const std::int64_t kv_col = static_cast<std::int64_t>(kvh) * kHs;
  const T* q_src = static_cast<const T*>(a.q) + b * a.q_batch + q_col;
  const T* k_src = static_cast<const T*>(a.k) + b * a.kv_batch + kv_col;
  const T* v_src = static_cast<const T*>(a.v) + b * a.kv_batch + kv_col;
  const int kv_len = a.q_pos0 + T_;  // keys that exist; rows at or after it are zero-filled

  // Stage st of the K/V ring holds key tile t with t % 2 = st.
  const auto load_kv = [&](int t) {
    T* k_s = kv_s + (t % 2) * 2 * kN * kStride;
    load_rows_async<kN, kHs>(k_s, k_src, a.kv_row, t * kN, kv_len);
    load_rows_async<kN, kHs>(k_s + kN * kStride, v_src, a.kv_row, t * kN, kv_len);
    cp_async_commit();
  };
  load_rows_async<kM, kHs>(q_s, q_src, a.q_row, q0, T_);
  load_kv(0);

  // This thread's two query rows (indices into the T queries; positions q_pos0 + r).
  const int r0 = q0 + warp * 16 + g, r1 = r0 + 8;
  const int p0 = a.q_pos0 + r0, p1 = a.q_pos0 + r1;
  float m0 = -INFINITY, m1 = -INFINITY;  // running max of x, base-2 units
  float l0 = 0.0f, l1 = 0.0f;            // this thread's share of the row sums
  float o[kHs / 8][4];
  zero(o);

  const int key_end = a.q_pos0 + min(q0 + kM, T_);  // the tile's queries see keys [0, key_end)
  const int n_tiles = (key_end + kN - 1) / kN;
  for (int t = 0; t < n_tiles; ++t) {
    const int k0 = t * kN;
    const T* k_s = kv_s + (t % 2) * 2 * kN * kStride;
    const T* v_s = k_s + kN * kStride;
    cp_async_wait<0>();  // this thread's copies of tile t (and Q) have landed
    // Everyone's copies of tile t are visible, and every warp is done with tile t - 1, whose
    // stage the next load overwrites: it overlaps this tile's math.
    __syncthreads();
    if (t + 1 < n_tiles) load_kv(t + 1);

    float s[kN / 8][4];
    zero(s);
    mma_abt<T, kN, kHs>(s, q_s + warp * 16 * kStride, k_s);

    // Scale, mask (key after the query's position: -inf), row maxima over the quad.
    float mx0 = -INFINITY, mx1 = -INFINITY;
#pragma unroll
    for (int n = 0; n < kN / 8; ++n) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int key = k0 + n * 8 + 2 * c + (e & 1);
        const int pos = e < 2 ? p0 : p1;
        s[n][e] = key <= pos ? s[n][e] * a.scale_log2 : -INFINITY;
      }
      mx0 = fmaxf(mx0, fmaxf(s[n][0], s[n][1]));
      mx1 = fmaxf(mx1, fmaxf(s[n][2], s[n][3]));
    }
    mx0 = fmaxf(mx0, __shfl_xor_sync(kFullMask, mx0, 1));
    mx0 = fmaxf(mx0, __shfl_xor_sync(kFullMask, mx0, 2));
    mx1 = fmaxf(mx1, __shfl_xor_sync(kFullMask, mx1, 1));
    mx1 = fmaxf(mx1, __shfl_xor_sync(kFullMask, mx1, 2));
    const float mn0 = fmaxf(m0, mx0), mn1 = fmaxf(m1, mx1);
    // A row with no visible key yet keeps m = -inf; subtract 0 then (2^-inf = 0, not NaN).
    const float base0 = mn0 == -INFINITY ? 0.0f : mn0, base1 = mn1 == -INFINITY ? 0.0f : mn1;
    const float corr0 = exp2f(m0 - base0), corr1 = exp2f(m1 - base1);
    m0 = mn0;
    m1 = mn1;
    float sum0 = 0.0f, sum1 = 0.0f;
#pragma unroll
    for (int n = 0; n < kN / 8; ++n) {
      s[n][0] = exp2f(s[n][0] - base0);
      s[n][1] = exp2f(s[n][1] - base0);
      s[n][2] = exp2f(s[n][2] - base1);
      s[n][3] = exp2f(s[n][3] - base1);
      sum0 += s[n][0] + s[n][1];
      sum1 += s[n][2] + s[n][3];
    }
    l0 = l0 * corr0 + sum0;
    l1 = l1 * corr1 + sum1;
#pragma unroll
    for (int n = 0; n < kHs / 8; ++n) {
      o[n][0] *= corr0;
      o[n][1] *= corr0;
      o[n][2] *= corr1;
      o[n][3] *= corr1;
    }
    unsigned p[kN / 16][4];
    to_a_operand<T, kN>(p, s);
    mma_ab<T, kN, kHs>(o, p, v_s);
  }

  l0 += __shfl_xor_sync(kFullMask, l0, 1);
  l0 += __shfl_xor_sync(kFullMask, l0, 2);
  l1 += __shfl_xor_sync(kFullMask, l1, 1);
  l1 += __shfl_xor_sync(kFullMask, l1, 2);
  const std::int64_t C = static_cast<std::int64_t>(a.NH) * kHs;
  T* out = static_cast<T*>(a.out) + static_cast<std::int64_t>(b) * T_ * C +
           static_cast<std::int64_t>(h) * kHs;
  store_rows<T, kHs>(out, C, q0 + warp * 16, T_, o, 1.0f / l0, 1.0f / l1);
  if (a.lse != nullptr && c == 0) {
    float* lse = a.lse + (static_cast<std::int64_t>(b) * a.NH + h) * T_;
    if (r0 < T_) lse[r0] = m0 * kLn2 + logf(l0);
    if (r1 < T_) lse[r1] = m1 * kLn2 + logf(l1);
  }
}

template <typename T, int kHs>
void launch(const FwdArgs& a, int B, cudaStream_t stream) {
  using Tl = Tiles<kHs>;
  const std::size_t smem =
      sizeof(T) * static_cast<std::size_t>(Tl::kRows + 4 * Tl::kStreamFwd) * Tl::kStride;
  auto kernel = flash_fwd_kernel<T, kHs>;
  allow_dynamic_smem(kernel, smem);
  const dim3 grid(static_cast<unsigned>(ceil_div(a.T, Tl::kRows)), static_cast<unsigned>(a.NH),
                  static_cast<unsigned>(B));
  kernel<<<grid, kThreads, smem, stream>>>(a);
  CUDA_CHECK_LAUNCH();
}

// Runs the kernel for (dtype, hs) with a's pointers set by make(Tag<E>) (E the storage type).
template <typename F>
void run(DType dtype, int hs, int B, cudaStream_t stream, F&& make) {
  const auto go = [&](auto tag) {
    using E = typename decltype(tag)::type;
    const FwdArgs a = make(tag);
    if (hs == 64) launch<E, 64>(a, B, stream);
    else launch<E, 128>(a, B, stream);
  };
  if (dtype == DType::bf16) go(Tag<__nv_bfloat16>{});
  else go(Tag<__half>{});
}

void check_shape(DType dtype, int B, int NH, int NKV, int hs) {
  STRATA_ASSERT(flash_supported(dtype, hs) && NKV > 0 && NH % NKV == 0);
  STRATA_ASSERT(B <= kMaxGridYZ && NH <= kMaxGridYZ, "attention: B and NH must be at most 65535");
}

}  // namespace

bool flash_aligned(const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; }

void flash_attention_fwd(void* out, float* lse, const void* qkv, int B, int T, int NH, int NKV,
                         int hs, DType dtype, cudaStream_t stream) {
  check_shape(dtype, B, NH, NKV, hs);
  const std::int64_t C = static_cast<std::int64_t>(NH) * hs;
  const std::int64_t KVC = static_cast<std::int64_t>(NKV) * hs;
  const std::int64_t row = C + 2 * KVC;
  run(dtype, hs, B, stream, [&](auto tag) {
    using E = typename decltype(tag)::type;
    const E* base = static_cast<const E*>(qkv);
    return FwdArgs{base, base + C, base + C + KVC, row, row * T, row, row * T, out, lse, T, 0,
                   NH, NKV, kLog2e / sqrtf(static_cast<float>(hs))};
  });
}

void flash_attention_decode(void* out, const void* qkv, const void* k_cache, const void* v_cache,
                            int B, int T_new, int past, int max_T, int NH, int NKV, int hs,
                            DType dtype, cudaStream_t stream) {
  check_shape(dtype, B, NH, NKV, hs);
  STRATA_ASSERT(past >= 0 && past + T_new <= max_T);
  const std::int64_t C = static_cast<std::int64_t>(NH) * hs;
  const std::int64_t KVC = static_cast<std::int64_t>(NKV) * hs;
  const std::int64_t row = C + 2 * KVC;
  run(dtype, hs, B, stream, [&](auto) {
    return FwdArgs{qkv, k_cache, v_cache, row, row * T_new, KVC, KVC * max_T, out, nullptr, T_new,
                   past, NH, NKV, kLog2e / sqrtf(static_cast<float>(hs))};
  });
}

}  // namespace strata::kernels::cuda::detail
