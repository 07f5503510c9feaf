// The row kernel with AVX2 + FMA + F16C (Note [Few-row matmuls] in matmul_rows.cpp). Compiled
// with -mavx2 -mfma -mf16c; includes only matmul_rows_impl.h and <immintrin.h> (see there).
#include <immintrin.h>

#include "kernels/host/matmul_rows_impl.h"

namespace strata::kernels::host::detail {
namespace {

using Size = decltype(sizeof(0));

// Eight weights from `at` on, widened to fp32.
template <RowWeights K>
inline __m256 load8(const void* w, Size at) {
  if constexpr (K == RowWeights::f32) {
    return _mm256_loadu_ps(static_cast<const float*>(w) + at);
  } else {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(static_cast<const std::uint16_t*>(w) + at));
    if constexpr (K == RowWeights::bf16) {
      return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
    } else {
      return _mm256_cvtph_ps(h);
    }
  }
}

// One weight, widened to fp32.
template <RowWeights K>
inline float load1(const void* w, Size at) {
  if constexpr (K == RowWeights::f32) {
    return static_cast<const float*>(w)[at];
  } else {
    const std::uint16_t bits = static_cast<const std::uint16_t*>(w)[at];
    if constexpr (K == RowWeights::bf16) {
      return _mm_cvtss_f32(_mm_castsi128_ps(_mm_cvtsi32_si128(static_cast<int>(std::uint32_t{bits} << 16))));
    } else {
      return _cvtsh_ss(bits);
    }
  }
}

// a * b + c rounded once, as the vector lanes compute it.
inline float fma1(float a, float b, float c) {
  return _mm_cvtss_f32(_mm_fmadd_ss(_mm_set_ss(a), _mm_set_ss(b), _mm_set_ss(c)));
}

// Rows [n0, n0 + R) by output channels [oc0, oc0 + O): each weight vector is loaded once and
// used for the R rows. Every output element gets the same operations whatever R and O: lane j
// sums the products of c = j mod 8 in order of c with FMAs (the tail's elements go to lanes 0,
// 1, ...), then the lanes are added in order and the bias last. So a row's bits depend neither
// on the rows beside it nor on how the channels were split among threads.
template <RowWeights K, int R, int O>
void tile(float* y, const float* x, const void* w, const float* bias, Size C, Size OC, Size n0, Size oc0) {
  __m256 acc[R][O];
  const float* xr[R];
  Size wr[O];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) {
    xr[r] = x + (n0 + static_cast<Size>(r)) * C;
#pragma GCC unroll 4
    for (int o = 0; o < O; ++o) acc[r][o] = _mm256_setzero_ps();
  }
#pragma GCC unroll 4
  for (int o = 0; o < O; ++o) wr[o] = (oc0 + static_cast<Size>(o)) * C;
  Size c = 0;
  for (; c + 8 <= C; c += 8) {
    __m256 wv[O];
#pragma GCC unroll 4
    for (int o = 0; o < O; ++o) wv[o] = load8<K>(w, wr[o] + c);
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      const __m256 xv = _mm256_loadu_ps(xr[r] + c);
#pragma GCC unroll 4
      for (int o = 0; o < O; ++o) acc[r][o] = _mm256_fmadd_ps(xv, wv[o], acc[r][o]);
    }
  }
  for (int r = 0; r < R; ++r) {
    for (int o = 0; o < O; ++o) {
      alignas(32) float lanes[8];
      _mm256_store_ps(lanes, acc[r][o]);
      for (Size cc = c, j = 0; cc < C; ++cc, ++j) lanes[j] = fma1(xr[r][cc], load1<K>(w, wr[o] + cc), lanes[j]);
      float sum = lanes[0];
      for (int j = 1; j < 8; ++j) sum += lanes[j];
      if (bias != nullptr) sum += bias[oc0 + static_cast<Size>(o)];
      y[(n0 + static_cast<Size>(r)) * OC + oc0 + static_cast<Size>(o)] = sum;
    }
  }
}

// Every row for the O channels from oc0: four rows at a time, so that the O weight rows (a few
// KiB) are read from memory once and from L1 for the next rows.
template <RowWeights K, int O>
void channels(float* y, const float* x, const void* w, const float* bias, Size N, Size C, Size OC, Size oc0) {
  Size n = 0;
  for (; n + 4 <= N; n += 4) tile<K, 4, O>(y, x, w, bias, C, OC, n, oc0);
  switch (N - n) {
    case 3: tile<K, 3, O>(y, x, w, bias, C, OC, n, oc0); break;
    case 2: tile<K, 2, O>(y, x, w, bias, C, OC, n, oc0); break;
    case 1: tile<K, 1, O>(y, x, w, bias, C, OC, n, oc0); break;
    default: break;
  }
}

// One or two rows (decoding): four weight rows stream at once. More rows: two weight rows by
// four input rows, eight accumulators.
template <RowWeights K>
void rows(float* y, const float* x, const void* w, const float* bias, std::int64_t N, int C, int OC, int oc_begin,
          int oc_end) {
  const Size n = static_cast<Size>(N), c = static_cast<Size>(C), oc_count = static_cast<Size>(OC);
  Size oc = static_cast<Size>(oc_begin);
  const Size end = static_cast<Size>(oc_end);
  if (n <= 2) {
    for (; oc + 4 <= end; oc += 4) {
      if (n == 1) {
        tile<K, 1, 4>(y, x, w, bias, c, oc_count, 0, oc);
      } else {
        tile<K, 2, 4>(y, x, w, bias, c, oc_count, 0, oc);
      }
    }
  } else {
    for (; oc + 2 <= end; oc += 2) channels<K, 2>(y, x, w, bias, n, c, oc_count, oc);
  }
  for (; oc < end; ++oc) channels<K, 1>(y, x, w, bias, n, c, oc_count, oc);
}

void rows_any(float* y, const float* x, const void* w, RowWeights kind, const float* bias, std::int64_t N, int C,
              int OC, int oc_begin, int oc_end) {
  switch (kind) {
    case RowWeights::f32: rows<RowWeights::f32>(y, x, w, bias, N, C, OC, oc_begin, oc_end); return;
    case RowWeights::bf16: rows<RowWeights::bf16>(y, x, w, bias, N, C, OC, oc_begin, oc_end); return;
    case RowWeights::f16: rows<RowWeights::f16>(y, x, w, bias, N, C, OC, oc_begin, oc_end); return;
  }
}

}  // namespace

RowsFn avx2_rows() { return &rows_any; }

}  // namespace strata::kernels::host::detail
