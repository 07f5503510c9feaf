// kernels/host/matmul.h with bf16 / fp16 weights past the row kernel: for few rows the weight
// (forward, dinp) and the weight gradient (dweight) are widened a panel of output channels at a
// time (Note [Weights widened in panels] in kernels/host/matmul.cpp). Shapes of several panels,
// the last one short (C 300: 873 channels, then 127; C 3000: 87, 87, 76), and one of more rows,
// widened whole. Against double references over the same stored inputs; dweight accumulates
// into values already there.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "kernels/host/matmul.h"
#include "tests/kernels/host_test_util.h"

namespace strata::kernels::host {
namespace {

using test::Bytes;
using test::Dbl;
using test::Vec;

struct Shape {
  std::int64_t N;
  int C, OC;
};

TEST(MatmulPanels, ForwardAndBackwardMatchDoubleReferences) {
  for (const DType dt : {DType::bf16, DType::f16}) {
    // Each output is rounded once to the dtype: 2^-8 relative for bf16, 2^-11 for fp16.
    const double tol = dt == DType::bf16 ? 4e-3 : 5e-4;
    for (const Shape& s : {Shape{40, 300, 1000}, Shape{100, 3000, 250}, Shape{130, 64, 70}}) {
      SCOPED_TRACE(testing::Message() << dtype_name(dt) << " N " << s.N << " C " << s.C << " OC " << s.OC);
      const std::size_t N = static_cast<std::size_t>(s.N), C = static_cast<std::size_t>(s.C),
                        OC = static_cast<std::size_t>(s.OC);
      const Bytes x = test::pack(test::random_vec(N * C, 21), dt);
      const Bytes w = test::pack(test::random_vec(OC * C, 22), dt);
      const Bytes b = test::pack(test::random_vec(OC, 23), dt);
      const Bytes dy = test::pack(test::random_vec(N * OC, 24), dt);
      const Bytes dw0 = test::pack(test::random_vec(OC * C, 25), dt);
      const Vec xs = test::unpack(x, dt), ws = test::unpack(w, dt), bs = test::unpack(b, dt),
                dys = test::unpack(dy, dt), dw0s = test::unpack(dw0, dt);

      Bytes y(N * OC * dtype_size(dt));
      matmul_fwd(y.data(), x.data(), w.data(), b.data(), s.N, s.C, s.OC, dt);
      Dbl y_want(N * OC);
      for (std::size_t n = 0; n < N; ++n) {
        for (std::size_t o = 0; o < OC; ++o) {
          double acc = bs[o];
          for (std::size_t c = 0; c < C; ++c) acc += static_cast<double>(xs[n * C + c]) * ws[o * C + c];
          y_want[n * OC + o] = acc;
        }
      }
      EXPECT_LT(test::rel_err(test::unpack(y, dt), y_want), tol) << "forward";

      Bytes dx(N * C * dtype_size(dt)), dw = dw0;
      matmul_bwd(dx.data(), dw.data(), nullptr, dy.data(), x.data(), w.data(), s.N, s.C, s.OC, dt);
      Dbl dx_want(N * C, 0.0), dw_want(OC * C);
      for (std::size_t n = 0; n < N; ++n) {
        for (std::size_t o = 0; o < OC; ++o) {
          const double g = dys[n * OC + o];
          for (std::size_t c = 0; c < C; ++c) dx_want[n * C + c] += g * ws[o * C + c];
        }
      }
      for (std::size_t o = 0; o < OC; ++o) {
        for (std::size_t c = 0; c < C; ++c) {
          double acc = dw0s[o * C + c];
          for (std::size_t n = 0; n < N; ++n) acc += static_cast<double>(dys[n * OC + o]) * xs[n * C + c];
          dw_want[o * C + c] = acc;
        }
      }
      EXPECT_LT(test::rel_err(test::unpack(dx, dt), dx_want), tol) << "dinp";
      EXPECT_LT(test::rel_err(test::unpack(dw, dt), dw_want), tol) << "dweight";
    }
  }
}

// No output channels: dinp is zero (as sgemm with an empty sum gave), in every dtype.
TEST(MatmulPanels, NoOutputChannelsZeroTheInputGradient) {
  for (const DType dt : test::kDTypes) {
    const std::int64_t N = 3;
    const int C = 5;
    Bytes dx = test::pack(Vec(static_cast<std::size_t>(N * C), 7.0f), dt);
    const Bytes x = test::pack(test::random_vec(static_cast<std::size_t>(N * C), 1), dt);
    matmul_bwd(dx.data(), nullptr, nullptr, nullptr, x.data(), nullptr, N, C, 0, dt);
    for (float v : test::unpack(dx, dt)) EXPECT_EQ(v, 0.0f) << dtype_name(dt);
  }
}

}  // namespace
}  // namespace strata::kernels::host
