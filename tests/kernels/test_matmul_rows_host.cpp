// kernels/host/matmul_rows.h: few rows of a weight read once in its dtype, at every SIMD level
// this CPU has (the portable kernel and AVX2). Against a double reference over the same stored
// inputs (each output rounded once to the dtype), with and without a bias, at row counts on both
// sides of kMatmulFewRows and widths that are not a multiple of its eight lanes nor of the AVX2
// kernel's tiles; the same bits for any OpenMP team size and for a row alone or beside others;
// matmul_fwd computes exactly matmul_takes_rows' row counts with it.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "kernels/host/matmul.h"
#include "kernels/host/matmul_rows.h"
#include "kernels/host/threads.h"
#include "tests/kernels/host_test_util.h"

namespace strata::kernels::host {
namespace {

using test::Bytes;
using test::Vec;

struct Shape {
  std::int64_t N;
  int C, OC;
};

// Every kernel this CPU runs: the portable one, and AVX2 where it has it (AVX-512 CPUs run the
// AVX2 kernel too).
std::vector<SimdLevel> levels() {
  std::vector<SimdLevel> out{SimdLevel::scalar};
  if (detected_simd() >= SimdLevel::avx2) out.push_back(SimdLevel::avx2);
  return out;
}

TEST(MatmulRows, MatchesADoubleReference) {
  for (const SimdLevel level : levels()) {
    for (DType dt : test::kDTypes) {
      for (const Shape& s : {Shape{1, 64, 96}, Shape{2, 9, 7}, Shape{3, 130, 33}, Shape{5, 8, 3}, Shape{16, 7, 40},
                             Shape{17, 72, 24}}) {
        for (bool with_bias : {false, true}) {
          SCOPED_TRACE(testing::Message() << simd_name(level) << " " << dtype_name(dt) << " N " << s.N << " C " << s.C
                                          << " OC " << s.OC << (with_bias ? " with a bias" : ""));
          const Bytes x = test::pack(test::random_vec(static_cast<std::size_t>(s.N) * s.C, 3), dt);
          const Bytes w = test::pack(test::random_vec(static_cast<std::size_t>(s.OC) * s.C, 4), dt);
          const Bytes b = test::pack(test::random_vec(static_cast<std::size_t>(s.OC), 9), dt);
          Bytes y(static_cast<std::size_t>(s.N) * s.OC * dtype_size(dt));
          matmul_rows_fwd_with(level, y.data(), x.data(), w.data(), with_bias ? b.data() : nullptr, s.N, s.C, s.OC, dt);
          const Vec xs = test::unpack(x, dt), ws = test::unpack(w, dt), bs = test::unpack(b, dt), ys = test::unpack(y, dt);
          double err = 0, norm = 0;
          for (std::int64_t n = 0; n < s.N; ++n) {
            for (int o = 0; o < s.OC; ++o) {
              double want = with_bias ? static_cast<double>(bs[static_cast<std::size_t>(o)]) : 0.0;
              for (int c = 0; c < s.C; ++c) {
                want += static_cast<double>(xs[static_cast<std::size_t>(n * s.C + c)]) *
                        static_cast<double>(ws[static_cast<std::size_t>(o) * static_cast<std::size_t>(s.C) + static_cast<std::size_t>(c)]);
              }
              const double got = ys[static_cast<std::size_t>(n * s.OC + o)];
              err += (got - want) * (got - want);
              norm += want * want;
            }
          }
          // The output is rounded once to the dtype: 2^-8 relative for bf16, 2^-11 for fp16.
          const double tol = dt == DType::bf16 ? 4e-3 : dt == DType::f16 ? 5e-4 : test::kRefTol;
          EXPECT_LT(std::sqrt(err / norm), tol);
        }
      }
    }
  }
}

TEST(MatmulRows, SameBitsForAnyTeamSize) {
  const Shape s{5, 300, 257};
  for (const SimdLevel level : levels()) {
    for (DType dt : test::kDTypes) {
      const Bytes x = test::pack(test::random_vec(static_cast<std::size_t>(s.N) * s.C, 5), dt);
      const Bytes w = test::pack(test::random_vec(static_cast<std::size_t>(s.OC) * s.C, 6), dt);
      Bytes first;
      for (int threads : {1, 2, 3, 7}) {
        set_openmp_threads(threads);
        Bytes y(static_cast<std::size_t>(s.N) * s.OC * dtype_size(dt));
        matmul_rows_fwd_with(level, y.data(), x.data(), w.data(), nullptr, s.N, s.C, s.OC, dt);
        if (first.empty()) {
          first = y;
        } else {
          EXPECT_EQ(y, first) << simd_name(level) << " " << dtype_name(dt) << ", " << threads << " threads";
        }
      }
    }
  }
  set_openmp_threads(omp_get_num_procs());
}

// Each row of a batch of N (the AVX2 kernel tiles 1, 2, 3 and 4 rows differently) against the
// same row alone. OC 33 leaves channels past the kernel's tiles of 2 and 4, C 130 a tail past its
// eight lanes.
TEST(MatmulRows, ARowGetsTheSameBitsAloneOrBesideOthers) {
  const int C = 130, OC = 33;
  for (const SimdLevel level : levels()) {
    for (DType dt : test::kDTypes) {
      const Bytes x = test::pack(test::random_vec(static_cast<std::size_t>(kMatmulFewRows) * C, 10), dt);
      const Bytes w = test::pack(test::random_vec(static_cast<std::size_t>(OC) * C, 11), dt);
      const std::size_t row = static_cast<std::size_t>(OC) * dtype_size(dt);
      const std::size_t in_row = static_cast<std::size_t>(C) * dtype_size(dt);
      for (const std::int64_t N : {std::int64_t{2}, std::int64_t{3}, std::int64_t{4}, std::int64_t{7}, kMatmulFewRows}) {
        Bytes beside(static_cast<std::size_t>(N) * row);
        matmul_rows_fwd_with(level, beside.data(), x.data(), w.data(), nullptr, N, C, OC, dt);
        for (std::int64_t n = 0; n < N; ++n) {
          Bytes alone(row);
          matmul_rows_fwd_with(level, alone.data(), x.data() + static_cast<std::size_t>(n) * in_row, w.data(), nullptr,
                               1, C, OC, dt);
          EXPECT_EQ(0, std::memcmp(alone.data(), beside.data() + static_cast<std::size_t>(n) * row, row))
              << simd_name(level) << " " << dtype_name(dt) << ": row " << n << " of " << N;
        }
      }
    }
  }
}

// matmul_fwd takes the row kernel for matmul_takes_rows' row counts (the same bits), and sgemm
// past them (which sums in another order: different bits somewhere in a (17..., 130) product).
// With AVX2 fp32 takes as many rows as bf16; the portable kernel's fp32 stops earlier.
TEST(MatmulRows, MatmulFwdTakesTheRowKernelForFewRows) {
  const int C = 130, OC = 48;
  const std::int64_t few_f32 = active_simd() >= SimdLevel::avx2 ? kMatmulFewRows : kMatmulFewRowsPortableF32;
  EXPECT_EQ(matmul_few_rows(DType::f32), few_f32);
  for (const auto& [dt, few] : {std::pair{DType::f32, few_f32}, std::pair{DType::bf16, kMatmulFewRows},
                                std::pair{DType::f16, kMatmulFewRows}}) {
    for (const std::int64_t N : {std::int64_t{1}, few, few + 1, std::int64_t{40}}) {
      SCOPED_TRACE(testing::Message() << dtype_name(dt) << " N " << N);
      EXPECT_EQ(matmul_takes_rows(N, dt), N <= few);
      const Bytes x = test::pack(test::random_vec(static_cast<std::size_t>(N) * C, 12), dt);
      const Bytes w = test::pack(test::random_vec(static_cast<std::size_t>(OC) * C, 13), dt);
      const Bytes b = test::pack(test::random_vec(static_cast<std::size_t>(OC), 14), dt);
      Bytes a(static_cast<std::size_t>(N) * OC * dtype_size(dt)), r(a.size());
      matmul_fwd(a.data(), x.data(), w.data(), b.data(), N, C, OC, dt);
      matmul_rows_fwd(r.data(), x.data(), w.data(), b.data(), N, C, OC, dt);
      if (N <= few) {
        EXPECT_EQ(a, r);
      } else if (dt == DType::f32) {
        EXPECT_NE(a, r) << "sgemm and the row kernel sum in different orders; equal bits say the row kernel ran";
      }
    }
  }
}

}  // namespace
}  // namespace strata::kernels::host
