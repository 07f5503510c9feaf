#pragma once
// Internal to the flash attention kernels (attention_flash_fwd.cu, attention_flash_bwd.cu):
// warp-level tensor-core tiles over shared memory, written with inline PTX:
//   mma.sync.aligned.m16n8k16.row.col.f32.{bf16,f16}.{bf16,f16}.f32  (fp32 accumulators),
//   ldmatrix.sync.aligned.m8n8.x4[.trans].shared.b16, cp.async.cg.shared.global (16 bytes).
// Why PTX rather than nvcuda::wmma: the FlashAttention-2 algorithm feeds the score
// accumulators back as the A operand of the next product (P V, dS K) without a trip through
// shared memory; that needs the documented per-lane layout of the mma fragments, which wmma
// leaves unspecified. The layouts used (PTX ISA, "Matrix fragments for mma.m16n8k16"), with
// g = lane / 4 and c = lane % 4:
//   A (16 x 16, row-major)  a0: (g, 2c..2c+1)  a1: (g+8, 2c..)  a2: (g, 2c+8..)  a3: (g+8, 2c+8..)
//   B (16 x 8, k x n)       b0: (k = 2c..2c+1, n = g)          b1: (k = 2c+8.., n = g)
//   C (16 x 8, fp32)        c0, c1: (g, 2c..2c+1)              c2, c3: (g+8, 2c..2c+1)
// ldmatrix .x4: lanes 8i..8i+7 give the row addresses of 8x8 matrix i, and every lane receives
// register i = matrix i's (row g, columns 2c, 2c+1); with .trans it receives (rows 2c, 2c+1,
// column g) instead.
//
// Tiles in shared memory are row-major with kPad extra elements per row: rows are then 16
// bytes apart modulo 128, so the 8 row addresses of one ldmatrix hit 8 different bank groups.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>

namespace strata::kernels::cuda::detail::flash {

constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;
constexpr int kPad = 8;                      // elements of padding per shared-memory row
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

// ---- PTX wrappers ---------------------------------------------------------------------------

__device__ __forceinline__ unsigned smem_addr(const void* p) {
  return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

// 16 bytes global -> shared, asynchronously; zero-filled (nothing read) when !valid.
__device__ __forceinline__ void cp_async16(void* dst, const void* src, bool valid) {
  const int bytes = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(dst)), "l"(src),
               "r"(bytes));
}
__device__ __forceinline__ void cp_async_commit() {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}
// Waits until at most n of this thread's committed groups are still in flight.
template <int n>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(n) : "memory");
}

__device__ __forceinline__ void ldmatrix_x4(unsigned (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(p)));
}
__device__ __forceinline__ void ldmatrix_x4_trans(unsigned (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(p)));
}

// c += a b for one m16n8k16 tile, T = __nv_bfloat16 or __half.
template <typename T>
__device__ __forceinline__ void mma(float (&c)[4], const unsigned (&a)[4], unsigned b0,
                                    unsigned b1);
template <>
__device__ __forceinline__ void mma<__nv_bfloat16>(float (&c)[4], const unsigned (&a)[4],
                                                   unsigned b0, unsigned b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
template <>
__device__ __forceinline__ void mma<__half>(float (&c)[4], const unsigned (&a)[4], unsigned b0,
                                            unsigned b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Two floats as one register of two 16-bit values, lo in the low half (the lower column).
template <typename T>
__device__ __forceinline__ unsigned pack2(float lo, float hi);
template <>
__device__ __forceinline__ unsigned pack2<__nv_bfloat16>(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  unsigned r;
  memcpy(&r, &v, sizeof(r));
  return r;
}
template <>
__device__ __forceinline__ unsigned pack2<__half>(float lo, float hi) {
  const __half2 v = __floats2half2_rn(lo, hi);
  unsigned r;
  memcpy(&r, &v, sizeof(r));
  return r;
}

// ---- tiles ----------------------------------------------------------------------------------

// Rows [row0, row0 + kRows) of one head (kHs elements from src + row * row_stride) into shared
// memory dst (stride kHs + kPad), asynchronously, by the whole block; rows >= valid are zeros.
// The caller commits and waits.
template <int kRows, int kHs, typename T>
__device__ __forceinline__ void load_rows_async(T* dst, const T* src, std::int64_t row_stride,
                                                int row0, int valid) {
  constexpr int kChunks = kHs / 8;  // 16-byte chunks per row
  for (int idx = threadIdx.x; idx < kRows * kChunks; idx += kThreads) {
    const int r = idx / kChunks, c = idx % kChunks;
    const bool ok = row0 + r < valid;
    const T* s = ok ? src + static_cast<std::int64_t>(row0 + r) * row_stride + c * 8 : src;
    cp_async16(dst + r * (kHs + kPad) + c * 8, s, ok);
  }
}

// acc (16 x kN, kN / 8 C tiles) += A B^T, A: 16 rows of shared memory (stride kHs + kPad), B: kN
// rows; both kHs wide (the reduction dimension). S = Q K^T, dP = dO V^T and their transposes.
template <typename T, int kN, int kHs>
__device__ __forceinline__ void mma_abt(float (&acc)[kN / 8][4], const T* a_rows,
                                        const T* b_rows) {
  constexpr int kStride = kHs + kPad;
  const int lane = threadIdx.x % 32, quad = lane / 8;
#pragma unroll
  for (int kk = 0; kk < kHs / 16; ++kk) {
    unsigned a[4];  // matrices: rows 0-7 / 8-15 (lane bit 3) x columns 0-7 / 8-15 (lane bit 4)
    ldmatrix_x4(a, a_rows + (lane % 16) * kStride + kk * 16 + (lane / 16) * 8);
#pragma unroll
    for (int nn = 0; nn < kN / 16; ++nn) {
      unsigned b[4];  // b0, b1 of n tile 2 nn, then of 2 nn + 1
      ldmatrix_x4(b, b_rows + (nn * 16 + (quad / 2) * 8 + lane % 8) * kStride + kk * 16 +
                         (quad % 2) * 8);
      mma<T>(acc[2 * nn], a, b[0], b[1]);
      mma<T>(acc[2 * nn + 1], a, b[2], b[3]);
    }
  }
}

// The C tiles of a 16 x kK fp32 product (kK / 8 tiles) as the A operand of the next product
// (kK / 16 tiles of 16 x 16), rounded to T.
template <typename T, int kK>
__device__ __forceinline__ void to_a_operand(unsigned (&a)[kK / 16][4], const float (&c)[kK / 8][4]) {
#pragma unroll
  for (int kk = 0; kk < kK / 16; ++kk) {
    a[kk][0] = pack2<T>(c[2 * kk][0], c[2 * kk][1]);
    a[kk][1] = pack2<T>(c[2 * kk][2], c[2 * kk][3]);
    a[kk][2] = pack2<T>(c[2 * kk + 1][0], c[2 * kk + 1][1]);
    a[kk][3] = pack2<T>(c[2 * kk + 1][2], c[2 * kk + 1][3]);
  }
}

// acc (16 x kHs, kHs / 8 C tiles) += A B, A given as operand registers (16 x kK), B: kK rows of
// shared memory (stride kHs + kPad), kHs wide. O += P V, dV += P^T dO, dK += dS^T Q, dQ += dS K.
template <typename T, int kK, int kHs>
__device__ __forceinline__ void mma_ab(float (&acc)[kHs / 8][4], const unsigned (&a)[kK / 16][4],
                                       const T* b_rows) {
  constexpr int kStride = kHs + kPad;
  const int lane = threadIdx.x % 32, quad = lane / 8;
#pragma unroll
  for (int kk = 0; kk < kK / 16; ++kk) {
#pragma unroll
    for (int dd = 0; dd < kHs / 16; ++dd) {
      unsigned b[4];  // transposed: b0, b1 of n tile 2 dd (rows kk 16 + 0-7 / 8-15), then 2 dd + 1
      ldmatrix_x4_trans(b, b_rows + (kk * 16 + (quad % 2) * 8 + lane % 8) * kStride + dd * 16 +
                               (quad / 2) * 8);
      mma<T>(acc[2 * dd], a[kk], b[0], b[1]);
      mma<T>(acc[2 * dd + 1], a[kk], b[2], b[3]);
    }
  }
}

template <int kN>
__device__ __forceinline__ void zero(float (&acc)[kN][4]) {
#pragma unroll
  for (int i = 0; i < kN; ++i) acc[i][0] = acc[i][1] = acc[i][2] = acc[i][3] = 0.0f;
}

// Writes a warp's 16 x kHs fp32 tile times `mul`, rounded to T, to rows row0 + (0..15) of dst
// (row stride `stride` elements), rows >= valid skipped; pairs of columns as one 4-byte store.
template <typename T, int kHs>
__device__ __forceinline__ void store_rows(T* dst, std::int64_t stride, int row0, int valid,
                                           const float (&acc)[kHs / 8][4], float mul0, float mul1) {
  const int lane = threadIdx.x % 32, g = lane / 4, c = lane % 4;
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int r = row0 + g + 8 * half;
    if (r >= valid) continue;
    const float mul = half == 0 ? mul0 : mul1;
    T* row = dst + static_cast<std::int64_t>(r) * stride + 2 * c;
#pragma unroll
    for (int n = 0; n < kHs / 8; ++n) {
      // 4-byte aligned: row strides and head offsets are multiples of 8 elements, 2 c is even.
      *reinterpret_cast<unsigned*>(row + n * 8) =
          pack2<T>(acc[n][2 * half] * mul, acc[n][2 * half + 1] * mul);
    }
  }
}

// Block tiles, in rows of kStride elements of shared memory. kRows: the rows a block owns
// (queries, or keys in dK/dV); kStream*: the rows of each tile streamed past them (keys in the
// forward and dQ, queries in dK/dV). At hs 128 the backward streams 32 rows: its S and dP
// accumulators (16 x kStreamBwd each) live next to two 16 x 128 output accumulators.
template <int kHs>
struct Tiles {
  static constexpr int kRows = 64;                         // 4 warps x 16 rows
  static constexpr int kStreamFwd = 64;
  static constexpr int kStreamBwd = kHs == 128 ? 32 : 64;
  static constexpr int kStride = kHs + kPad;
};

}  // namespace strata::kernels::cuda::detail::flash
