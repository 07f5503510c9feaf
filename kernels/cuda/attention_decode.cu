// Decoding attention on CUDA, split over the cache length (flash-decoding): a few new tokens
// (T_new <= kDecodeSplitMaxTokens) against the keys and values of the caches, called by
// attention.cu's attention_decode after it appended the new ones. Layout of
// kernels/host/attention.h; bf16, fp16 and fp32 storage, fp32 arithmetic, head size <= 256.
//
// Why: at T_new = 1 the forward kernels tile the queries (32 or 64 per block) and so leave all
// but one row of a block idle, and read each key/value head once per query head. Decoding is a
// pass over the caches: this kernel reads every cached position of a key/value head once for
// all the query heads that share it, 16 bytes a copy, and cuts the length into enough splits to
// fill the GPU at batch 1.
//
// 1. attn_decode_split_kernel, grid (splits, NKV x row blocks, B), W warps (4, 2 or 1: as many
//    as fit kSmemBudget of shared memory). The rows of key/value head g are the R = group x
//    T_new queries that read it: row r = t group + i is new token t of query head g group + i
//    (group = NH / NKV), at position past + t. A block takes kRows (1, 4 or 8) of them, so R > 8
//    takes ceil(R / 8) row blocks (each reads the keys again, mostly from L2).
//    A block's split is a range of tiles of 32 positions; its warps take them in turn (warp w:
//    tiles w, w + W, ...), each warp on its own, in its own shared memory:
//      - K and V tile (32 x hs, storage type) -> shared memory with cp.async, 16 bytes a copy;
//        positions at or after the block's last visible one are zero-filled, not read;
//      - lane j = position j of the tile: x_r = q_r . k_j for each row r (q in shared memory,
//        fp32, times log2(e) / sqrt(hs)), -inf where the position is after row r's;
//      - online softmax per row in base 2: m = max(m, max_j x), l and o scaled by 2^(m_old - m),
//        p = 2^(x - m), l += p (per lane; summed over the warp at the end);
//      - o_r += sum_j p_rj v_j: the lane owns dims (2 lane, 2 lane + 1) + 64 i, p_rj comes from
//        lane j by a shuffle.
//    Then the W warps' (m, l, o) are merged through shared memory (in warp order) and written:
//    with one split, as the output (o / l, rounded to the storage type); else as the split's fp32
//    partial (m, l, o).
// 2. attn_decode_combine_kernel (splits > 1), one warp per output row (b, t, h):
//    M = max_s m_s, L = sum_s 2^(m_s - M) l_s, out = sum_s 2^(m_s - M) o_s / L, s in order.
//    M is finite: split 0 holds position 0, which every row sees.
//
// The split is a function of the shape only (B, NKV, rows, past + T_new, hs, dtype), not of
// the device, and every sum runs in a fixed order without atomics: the same bits on every run.
// The partials ((B T_new NH) x splits x (hs + 2) fp32) live in stream-ordered scratch
// (StreamScratch).
//
// Shared memory rows are hs + 16 bytes apart: for the usual hs (hs es a multiple of 32 bytes)
// that is an odd number of 16-byte units, so the 8 lanes of each phase of a 16-byte load (lane
// = position) hit 8 different bank groups.
#include "kernels/cuda/attention_decode.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "core/error.h"
#include "kernels/cuda/attention_flash.h"
#include "kernels/cuda/attention_flash_impl.cuh"  // the cp.async wrappers
#include "kernels/cuda/common_impl.cuh"

namespace strata::kernels::cuda::detail {
namespace {

using flash::cp_async16;
using flash::cp_async_commit;
using flash::cp_async_wait;

constexpr int kTileKeys = 32;  // positions per warp tile: one per lane
constexpr int kMaxWarps = 4;
constexpr int kMaxHeadSize = 256;
// Shared memory per block: q (kRows x hs fp32) and W warps' K and V tiles. 80 KiB keeps 2
// blocks per SM of an H100 (228 KiB) for every shape, and W = 4 up to hs 128 in bf16/fp16.
constexpr std::size_t kSmemBudget = 80 * 1024;
// Splits: about kTargetBlocks blocks in all (4 per SM of a 132-SM H100: a constant, not the
// device's count, so that the split and the bits depend on the shape only), each warp with at
// least kMinTilesPerWarp tiles (the partial it writes stays small next to what it reads).
constexpr int kTargetBlocks = 512;
constexpr int kMinTilesPerWarp = 2;
constexpr int kMaxSplits = 1024;
constexpr int kCombineWarps = 4;
constexpr float kLog2e = 1.4426950408889634f;

struct DecodeArgs {
  const void* qkv;      // (B, T_new, (NH + 2 NKV) hs)
  const void* k_cache;  // (B, max_T, NKV hs)
  const void* v_cache;  // (B, max_T, NKV hs)
  void* out;            // (B, T_new, NH hs): written here when splits == 1
  float* part_ml;       // (B T_new NH, splits, 2): (m, l) of each split, when splits > 1
  float* part_o;        // (B T_new NH, splits, hs): o of each split (not divided by l)
  int T_new, past, max_T, NH, NKV, hs;
  int group;            // NH / NKV
  int rows;             // group T_new: query rows per key/value head
  int row_blocks;       // ceil(rows / kRows)
  int tiles_per_split;  // tiles of kTileKeys positions per block
  int splits;
  float scale_log2;     // log2(e) / sqrt(hs)
};

// 16 bytes of shared memory (16 / sizeof(T) elements, 16-byte aligned) as fp32.
__device__ __forceinline__ void load16(const float* p, float (&f)[4]) {
  const float4 v = *reinterpret_cast<const float4*>(p);
  f[0] = v.x;
  f[1] = v.y;
  f[2] = v.z;
  f[3] = v.w;
}
__device__ __forceinline__ void load16(const __nv_bfloat16* p, float (&f)[8]) {
  const uint4 v = *reinterpret_cast<const uint4*>(p);
  __nv_bfloat162 h[4];
  memcpy(h, &v, sizeof(v));
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 x = __bfloat1622float2(h[i]);
    f[2 * i] = x.x;
    f[2 * i + 1] = x.y;
  }
}
__device__ __forceinline__ void load16(const __half* p, float (&f)[8]) {
  const uint4 v = *reinterpret_cast<const uint4*>(p);
  __half2 h[4];
  memcpy(h, &v, sizeof(v));
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 x = __half22float2(h[i]);
    f[2 * i] = x.x;
    f[2 * i + 1] = x.y;
  }
}

// Two consecutive elements of shared memory (aligned to two elements) as fp32.
__device__ __forceinline__ float2 load2(const float* p) {
  return *reinterpret_cast<const float2*>(p);
}
__device__ __forceinline__ float2 load2(const __nv_bfloat16* p) {
  return __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(p));
}
__device__ __forceinline__ float2 load2(const __half* p) {
  return __half22float2(*reinterpret_cast<const __half2*>(p));
}

// One block: rows [rb kRows, rb kRows + kRows) of key/value head g of batch b, over the tiles of
// split `blockIdx.x`. kPairs: pairs of head dims per lane (hs <= 64 kPairs).
template <typename T, int kRows, int kPairs>
__global__ void __launch_bounds__(kMaxWarps * 32) attn_decode_split_kernel(DecodeArgs a) {
  constexpr int kVec = 16 / static_cast<int>(sizeof(T));  // elements per 16-byte copy
  extern __shared__ __align__(16) unsigned char smem_raw[];
  const int hs = a.hs, ks = hs + kVec;  // shared memory row stride of K and V: 16 bytes more
  const int W = static_cast<int>(blockDim.x) / 32, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int split = blockIdx.x, g = blockIdx.y / a.row_blocks, rb = blockIdx.y % a.row_blocks;
  const int b = blockIdx.z, r0 = rb * kRows;
  // q (kRows, hs) fp32, then per warp [K (kTileKeys, ks) | V (kTileKeys, ks)] in T.
  float* q_s = reinterpret_cast<float*>(smem_raw);
  T* const kv_base = reinterpret_cast<T*>(q_s + kRows * hs);
  const auto warp_area = [&](int w) {
    return kv_base + static_cast<std::int64_t>(w) * 2 * kTileKeys * ks;
  };
  T* k_s = warp_area(warp);
  T* v_s = k_s + kTileKeys * ks;

  // Row rr of the block: new token t = r / group of query head g group + r % group, at position
  // past + t (sees [0, pos]); pos = -1 for the rows past R (all masked).
  int pos[kRows];
#pragma unroll
  for (int rr = 0; rr < kRows; ++rr) {
    const int r = r0 + rr;
    pos[rr] = r < a.rows ? a.past + r / a.group : -1;
  }
  const int r_last = min(r0 + kRows, a.rows) - 1;
  const int key_end = a.past + r_last / a.group + 1;  // the block's rows see [0, key_end)

  const std::int64_t row = static_cast<std::int64_t>(a.NH + 2 * a.NKV) * hs;  // qkv channels
  const T* qkv = static_cast<const T*>(a.qkv);
  for (int idx = threadIdx.x; idx < kRows * hs; idx += blockDim.x) {
    const int rr = idx / hs, d = idx - rr * hs, r = r0 + rr;
    float x = 0.0f;
    if (r < a.rows) {
      const int t = r / a.group, h = g * a.group + r % a.group;
      x = to_f32(qkv[(static_cast<std::int64_t>(b) * a.T_new + t) * row +
                     static_cast<std::int64_t>(h) * hs + d]) * a.scale_log2;
    }
    q_s[idx] = x;
  }
  __syncthreads();

  const std::int64_t kv_row = static_cast<std::int64_t>(a.NKV) * hs;
  const std::int64_t kv_off = static_cast<std::int64_t>(b) * a.max_T * kv_row +
                              static_cast<std::int64_t>(g) * hs;
  const T* k_src = static_cast<const T*>(a.k_cache) + kv_off;
  const T* v_src = static_cast<const T*>(a.v_cache) + kv_off;
  const int tile_begin = split * a.tiles_per_split;
  const int tile_end = min(tile_begin + a.tiles_per_split, (key_end + kTileKeys - 1) / kTileKeys);
  const int chunks = hs / kVec;  // 16-byte copies per row

  float m[kRows], l[kRows], o[kRows][2 * kPairs];
#pragma unroll
  for (int rr = 0; rr < kRows; ++rr) {
    m[rr] = -INFINITY;
    l[rr] = 0.0f;
#pragma unroll
    for (int dd = 0; dd < 2 * kPairs; ++dd) o[rr][dd] = 0.0f;
  }

  for (int tile = tile_begin + warp; tile < tile_end; tile += W) {  // warp-uniform
    const int k0 = tile * kTileKeys;
    for (int idx = lane; idx < kTileKeys * chunks; idx += 32) {
      const int j = idx / chunks, c = idx - j * chunks;
      const bool ok = k0 + j < key_end;
      const std::int64_t src = ok ? (k0 + j) * kv_row + c * kVec : 0;
      cp_async16(k_s + j * ks + c * kVec, k_src + src, ok);
      cp_async16(v_s + j * ks + c * kVec, v_src + src, ok);
    }
    cp_async_commit();
    cp_async_wait<0>();
    __syncwarp();  // every lane's copies have landed and are visible to the warp

    // x_r = q_r . k_lane (base-2 logits).
    float x[kRows];
#pragma unroll
    for (int rr = 0; rr < kRows; ++rr) x[rr] = 0.0f;
    const T* k_j = k_s + lane * ks;
#pragma unroll 2
    for (int c = 0; c < hs; c += kVec) {
      float kf[kVec];
      load16(k_j + c, kf);
#pragma unroll
      for (int rr = 0; rr < kRows; ++rr) {
#pragma unroll
        for (int e = 0; e < kVec; e += 4) {
          const float4 q = *reinterpret_cast<const float4*>(q_s + rr * hs + c + e);
          x[rr] = fmaf(q.x, kf[e], x[rr]);
          x[rr] = fmaf(q.y, kf[e + 1], x[rr]);
          x[rr] = fmaf(q.z, kf[e + 2], x[rr]);
          x[rr] = fmaf(q.w, kf[e + 3], x[rr]);
        }
      }
    }

    // Online softmax. A row that has seen no visible position keeps m = -inf: subtract 0 then
    // (2^-inf = 0, not NaN).
    float p[kRows];
#pragma unroll
    for (int rr = 0; rr < kRows; ++rr) {
      const float xr = k0 + lane <= pos[rr] ? x[rr] : -INFINITY;
      const float m_new = fmaxf(m[rr], warp_max(xr));
      const float base = m_new == -INFINITY ? 0.0f : m_new;
      const float corr = exp2f(m[rr] - base);
      p[rr] = exp2f(xr - base);
      l[rr] = l[rr] * corr + p[rr];
      m[rr] = m_new;
#pragma unroll
      for (int dd = 0; dd < 2 * kPairs; ++dd) o[rr][dd] *= corr;
    }

    // o_r += sum_j p_rj v_j over the tile's positions before key_end (the rest have p = 0).
    const int jn = min(kTileKeys, key_end - k0);
#pragma unroll 4
    for (int j = 0; j < jn; ++j) {
      float pj[kRows];
#pragma unroll
      for (int rr = 0; rr < kRows; ++rr) pj[rr] = __shfl_sync(kFullMask, p[rr], j);
      const T* v_j = v_s + j * ks;
#pragma unroll
      for (int i = 0; i < kPairs; ++i) {
        const int d = 2 * lane + 64 * i;
        if (d < hs) {
          const float2 v = load2(v_j + d);
#pragma unroll
          for (int rr = 0; rr < kRows; ++rr) {
            o[rr][2 * i] = fmaf(pj[rr], v.x, o[rr][2 * i]);
            o[rr][2 * i + 1] = fmaf(pj[rr], v.y, o[rr][2 * i + 1]);
          }
        }
      }
    }
    __syncwarp();  // the tile is consumed before the next copies overwrite it
  }

  // Merge the warps. Each writes its (m, l) (kRows, 2) and o (kRows, hs) over its own tiles,
  // which it no longer reads (the last __syncwarp above); then, after the barrier, warp w
  // merges rows w, w + W, ... in warp order and writes them.
#pragma unroll
  for (int rr = 0; rr < kRows; ++rr) l[rr] = warp_sum(l[rr]);
  float* mine = reinterpret_cast<float*>(k_s);
  if (lane == 0) {
#pragma unroll
    for (int rr = 0; rr < kRows; ++rr) {
      mine[2 * rr] = m[rr];
      mine[2 * rr + 1] = l[rr];
    }
  }
#pragma unroll
  for (int rr = 0; rr < kRows; ++rr)
#pragma unroll
    for (int i = 0; i < kPairs; ++i) {
      const int d = 2 * lane + 64 * i;
      if (d < hs) {
        mine[2 * kRows + rr * hs + d] = o[rr][2 * i];
        mine[2 * kRows + rr * hs + d + 1] = o[rr][2 * i + 1];
      }
    }
  __syncthreads();

  for (int rr = warp; rr < kRows; rr += W) {
    const int r = r0 + rr;
    if (r >= a.rows) break;  // warp-uniform; later rows are past R too
    float M = -INFINITY, L = 0.0f;
    for (int w = 0; w < W; ++w) M = fmaxf(M, reinterpret_cast<const float*>(warp_area(w))[2 * rr]);
    const float base = M == -INFINITY ? 0.0f : M;  // no visible position in this split
    for (int w = 0; w < W; ++w) {
      const float* area = reinterpret_cast<const float*>(warp_area(w));
      L += exp2f(area[2 * rr] - base) * area[2 * rr + 1];
    }
    const int t = r / a.group, h = g * a.group + r % a.group;
    const std::int64_t out_row = (static_cast<std::int64_t>(b) * a.T_new + t) * a.NH + h;
    const std::int64_t part = out_row * a.splits + split;
    for (int d = lane; d < hs; d += 32) {
      float acc = 0.0f;
      for (int w = 0; w < W; ++w) {
        const float* area = reinterpret_cast<const float*>(warp_area(w));
        acc = fmaf(exp2f(area[2 * rr] - base), area[2 * kRows + rr * hs + d], acc);
      }
      if (a.splits == 1)  // L > 0: this split holds position 0
        static_cast<T*>(a.out)[out_row * hs + d] = from_f32<T>(acc / L);
      else
        a.part_o[part * hs + d] = acc;
    }
    if (a.splits > 1 && lane == 0) {
      a.part_ml[2 * part] = M;
      a.part_ml[2 * part + 1] = L;
    }
  }
}

// out row (b T_new + t) NH + h (hs elements at row hs: out is (B, T_new, NH hs)) from its
// splits' partials; one warp per row.
template <typename T>
__global__ void __launch_bounds__(kCombineWarps * 32)
    attn_decode_combine_kernel(T* __restrict__ out, const float* __restrict__ part_ml,
                               const float* __restrict__ part_o, std::int64_t n_rows, int splits,
                               int hs) {
  const std::int64_t r = static_cast<std::int64_t>(blockIdx.x) * kCombineWarps + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (r >= n_rows) return;  // warp-uniform
  const float* ml = part_ml + r * splits * 2;
  const float* o = part_o + r * splits * hs;
  float M = -INFINITY;
  for (int s = lane; s < splits; s += 32) M = fmaxf(M, ml[2 * s]);
  M = warp_max(M);  // finite: split 0 holds position 0
  float L = 0.0f;
  for (int s = lane; s < splits; s += 32) L += exp2f(ml[2 * s] - M) * ml[2 * s + 1];
  L = warp_sum(L);
  const float inv = 1.0f / L;
  for (int d = lane; d < hs; d += 32) {
    float acc = 0.0f;
    for (int s = 0; s < splits; ++s) acc = fmaf(exp2f(ml[2 * s] - M), o[s * hs + d], acc);
    out[r * hs + d] = from_f32<T>(acc * inv);
  }
}

// Calls f(std::integral_constant<int, kRows>{}) with kRows = 1, 4 or 8 rows per block.
template <typename F>
void dispatch_rows(int rows_per_block, F&& f) {
  if (rows_per_block == 1) return f(std::integral_constant<int, 1>{});
  if (rows_per_block == 4) return f(std::integral_constant<int, 4>{});
  return f(std::integral_constant<int, 8>{});
}

// Calls f(std::integral_constant<int, kPairs>{}) with kPairs = ceil(hs / 64) rounded to 1, 2, 4.
template <typename F>
void dispatch_pairs(int hs, F&& f) {
  if (hs <= 64) return f(std::integral_constant<int, 1>{});
  if (hs <= 128) return f(std::integral_constant<int, 2>{});
  return f(std::integral_constant<int, 4>{});
}

}  // namespace

bool decode_split_supported(DType dtype, int hs, int T_new) {
  return T_new >= 1 && T_new <= kDecodeSplitMaxTokens && hs > 0 && hs <= kMaxHeadSize &&
         (static_cast<std::size_t>(hs) * dtype_size(dtype)) % 16 == 0;
}

void attention_decode_split(void* out, const void* qkv, const void* k_cache, const void* v_cache,
                            int B, int T_new, int past, int max_T, int NH, int NKV, int hs,
                            DType dtype, cudaStream_t stream) {
  STRATA_ASSERT(decode_split_supported(dtype, hs, T_new) && NKV > 0 && NH % NKV == 0);
  STRATA_ASSERT(B >= 1 && past >= 0 && past + T_new <= max_T);
  STRATA_ASSERT(flash_aligned(k_cache) && flash_aligned(v_cache),
                "attention_decode: the caches must be 16-byte aligned");
  const int group = NH / NKV, rows = group * T_new;
  const int rows_per_block = rows <= 1 ? 1 : rows <= 4 ? 4 : 8;
  const int row_blocks = static_cast<int>(ceil_div(rows, rows_per_block));
  STRATA_ASSERT(B <= kMaxGridYZ && static_cast<std::int64_t>(NKV) * row_blocks <= kMaxGridYZ,
                "attention_decode: B and NKV x ceil(NH / NKV x T_new / 8) must be at most 65535");

  // Warps per block: as many (4, 2, 1) as fit the budget; hs <= 256 fits one warp at fp32.
  const std::size_t es = dtype_size(dtype);
  const std::size_t warp_bytes = 2 * kTileKeys * (static_cast<std::size_t>(hs) * es + 16);
  const std::size_t q_bytes = sizeof(float) * static_cast<std::size_t>(rows_per_block) * hs;
  int warps = kMaxWarps;
  while (warps > 1 && q_bytes + warps * warp_bytes > kSmemBudget) warps /= 2;
  const std::size_t smem = q_bytes + warps * warp_bytes;

  // Splits of the tiles of [0, past + T_new): about kTargetBlocks blocks in all.
  const std::int64_t tiles = ceil_div(past + T_new, kTileKeys);
  const std::int64_t blocks_per_split = static_cast<std::int64_t>(B) * NKV * row_blocks;
  const std::int64_t most = std::max<std::int64_t>(
      1, std::min<std::int64_t>(kMaxSplits, tiles / (warps * kMinTilesPerWarp)));
  const std::int64_t want =
      std::clamp<std::int64_t>(ceil_div(kTargetBlocks, blocks_per_split), 1, most);
  const std::int64_t tiles_per_split = ceil_div(tiles, want);
  const std::int64_t splits = ceil_div(tiles, tiles_per_split);

  const std::int64_t out_rows = static_cast<std::int64_t>(B) * T_new * NH;
  StreamScratch scratch(splits > 1 ? sizeof(float) * static_cast<std::size_t>(out_rows * splits) *
                                         (static_cast<std::size_t>(hs) + 2)
                                   : 0,
                        stream);
  float* part_ml = scratch.as<float>();
  float* part_o = part_ml == nullptr ? nullptr : part_ml + 2 * out_rows * splits;
  const DecodeArgs a{qkv,     k_cache, v_cache, out, part_ml, part_o,   T_new,
                     past,    max_T,   NH,      NKV, hs,      group,    rows,
                     row_blocks, static_cast<int>(tiles_per_split), static_cast<int>(splits),
                     kLog2e / sqrtf(static_cast<float>(hs))};
  const dim3 grid(static_cast<unsigned>(splits), static_cast<unsigned>(NKV * row_blocks),
                  static_cast<unsigned>(B));
  dispatch_dtype(dtype, [&](auto tag) {
    using E = typename decltype(tag)::type;
    dispatch_rows(rows_per_block, [&](auto kr) {
      dispatch_pairs(hs, [&](auto kp) {
        auto kernel = attn_decode_split_kernel<E, decltype(kr)::value, decltype(kp)::value>;
        allow_dynamic_smem(kernel, smem);
        kernel<<<grid, static_cast<unsigned>(warps * 32), smem, stream>>>(a);
        CUDA_CHECK_LAUNCH();
      });
    });
    if (splits > 1) {
      const std::int64_t blocks = ceil_div(out_rows, kCombineWarps);
      STRATA_ASSERT(blocks <= kMaxGridX, "attention_decode: too many rows");
      attn_decode_combine_kernel<E>
          <<<static_cast<unsigned>(blocks), kCombineWarps * 32, 0, stream>>>(
              static_cast<E*>(out), part_ml, part_o, out_rows, static_cast<int>(splits), hs);
      CUDA_CHECK_LAUNCH();
    }
  });
  scratch.release();
}

}  // namespace strata::kernels::cuda::detail
