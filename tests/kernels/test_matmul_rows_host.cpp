// kernels/host/matmul_rows.h: few rows of a weight read once in its dtype. Against a double
// reference over the same stored inputs (each output rounded once to the dtype), at row counts on
// both sides of kMatmulFewRows and widths that are not a multiple of its eight lanes; the same
// bits for any OpenMP team size; fp32 and many rows are matmul_fwd's, bit for bit.
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

TEST(MatmulRows, MatchesADoubleReference) {
  for (DType dt : test::kDTypes) {
    for (const Shape& s : {Shape{1, 64, 96}, Shape{3, 130, 33}, Shape{16, 7, 40}, Shape{17, 72, 24}}) {
      SCOPED_TRACE(testing::Message() << dtype_name(dt) << " N " << s.N << " C " << s.C << " OC " << s.OC);
      const Bytes x = test::pack(test::random_vec(static_cast<std::size_t>(s.N) * s.C, 3), dt);
      const Bytes w = test::pack(test::random_vec(static_cast<std::size_t>(s.OC) * s.C, 4), dt);
      Bytes y(static_cast<std::size_t>(s.N) * s.OC * dtype_size(dt));
      matmul_rows_fwd(y.data(), x.data(), w.data(), s.N, s.C, s.OC, dt);
      const Vec xs = test::unpack(x, dt), ws = test::unpack(w, dt), ys = test::unpack(y, dt);
      double err = 0, norm = 0;
      for (std::int64_t n = 0; n < s.N; ++n) {
        for (int o = 0; o < s.OC; ++o) {
          double want = 0;
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

TEST(MatmulRows, SameBitsForAnyTeamSize) {
  const Shape s{5, 300, 257};
  const Bytes x = test::pack(test::random_vec(static_cast<std::size_t>(s.N) * s.C, 5), DType::bf16);
  const Bytes w = test::pack(test::random_vec(static_cast<std::size_t>(s.OC) * s.C, 6), DType::bf16);
  Bytes first;
  for (int threads : {1, 2, 3, 7}) {
    set_openmp_threads(threads);
    Bytes y(static_cast<std::size_t>(s.N) * s.OC * 2);
    matmul_rows_fwd(y.data(), x.data(), w.data(), s.N, s.C, s.OC, DType::bf16);
    if (first.empty()) {
      first = y;
    } else {
      EXPECT_EQ(y, first) << threads << " threads";
    }
  }
  set_openmp_threads(omp_get_num_procs());
}

TEST(MatmulRows, Fp32AndManyRowsAreMatmulFwd) {
  for (const auto& [dt, N] : {std::pair{DType::f32, std::int64_t{2}}, std::pair{DType::bf16, kMatmulFewRows + 1}}) {
    const int C = 40, OC = 24;
    const Bytes x = test::pack(test::random_vec(static_cast<std::size_t>(N) * C, 7), dt);
    const Bytes w = test::pack(test::random_vec(static_cast<std::size_t>(OC) * C, 8), dt);
    Bytes a(static_cast<std::size_t>(N) * OC * dtype_size(dt)), b(a.size());
    matmul_rows_fwd(a.data(), x.data(), w.data(), N, C, OC, dt);
    matmul_fwd(b.data(), x.data(), w.data(), nullptr, N, C, OC, dt);
    EXPECT_EQ(a, b) << dtype_name(dt);
  }
}

}  // namespace
}  // namespace strata::kernels::host
