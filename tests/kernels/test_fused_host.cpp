// The host's fused ops (kernels/host: matmul_bias_gelu_fwd, matmul_bwd_dgelu,
// residual_layernorm_fwd) give, bit for bit, what the sequences of unfused ops they stand for
// give (the GPT model switched to them and its host results must not move by a bit), in every
// dtype, with and without the optional outputs, and in place where the headers allow it. The
// unfused ops themselves are checked against references in test_kernels_host.cpp.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "kernels/host/elementwise.h"
#include "kernels/host/layernorm.h"
#include "kernels/host/matmul.h"

namespace strata {
namespace {

namespace host = kernels::host;
using Bytes = std::vector<unsigned char>;

constexpr DType kDTypes[] = {DType::f32, DType::bf16, DType::f16};

Bytes random_bytes(DType t, std::size_t n, std::uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  Bytes b(n * dtype_size(t));
  convert(v.data(), DType::f32, b.data(), t, n);
  return b;
}

struct Shape {
  long long N;
  int C, OC;
};
// Several of the ops' column blocks (64) and element-wise chunks (4096), N odd.
const Shape kShapes[] = {{1, 1, 1}, {7, 13, 5}, {77, 64, 192}, {131, 96, 200}};

std::string name(DType t, const Shape& s) {
  return std::string(dtype_name(t)) + " N=" + std::to_string(s.N) + " C=" + std::to_string(s.C) +
         " OC=" + std::to_string(s.OC);
}

TEST(FusedHost, MatmulBiasGeluIsMatmulThenGelu) {
  for (DType t : kDTypes) {
    for (const Shape& s : kShapes) {
      for (bool with_bias : {true, false}) {
        SCOPED_TRACE(name(t, s) + (with_bias ? " bias" : " no bias"));
        const std::size_t n_out = static_cast<std::size_t>(s.N) * s.OC;
        const Bytes inp = random_bytes(t, static_cast<std::size_t>(s.N) * s.C, 1),
                    w = random_bytes(t, static_cast<std::size_t>(s.OC) * s.C, 2, -2.0f, 2.0f),
                    bias = random_bytes(t, s.OC, 3);
        const void* b = with_bias ? bias.data() : nullptr;
        Bytes pre(n_out * dtype_size(t)), out(pre.size()), want_pre(pre.size()),
            want_out(pre.size());
        host::matmul_fwd(want_pre.data(), inp.data(), w.data(), b, s.N, s.C, s.OC, t);
        host::gelu_fwd(want_out.data(), want_pre.data(), static_cast<std::int64_t>(n_out), t);
        host::matmul_bias_gelu_fwd(out.data(), pre.data(), inp.data(), w.data(), b, s.N, s.C, s.OC,
                                   t);
        EXPECT_EQ(pre, want_pre);
        EXPECT_EQ(out, want_out);
      }
    }
  }
}

// The GPT backward before the fusion: c_proj's matmul_bwd, gelu_bwd in place, and c_fc's bias
// gradient from c_fc's matmul_bwd (whose dinp / dweight do not touch it).
TEST(FusedHost, MatmulBackwardDgeluIsTheUnfusedSequence) {
  for (DType t : kDTypes) {
    for (const Shape& f : kShapes) {
      for (bool with_pre_bias : {true, false}) {
        SCOPED_TRACE(name(t, f) + (with_pre_bias ? " dpre_bias" : " no dpre_bias"));
        const long long N = f.N;
        const int C = f.OC, OC = f.C;  // c_proj: its input is c_fc's output
        const std::size_t n_in = static_cast<std::size_t>(N) * C;
        const Bytes pre = random_bytes(t, n_in, 11, -4.0f, 4.0f),
                    w = random_bytes(t, static_cast<std::size_t>(OC) * C, 12),
                    dout = random_bytes(t, static_cast<std::size_t>(N) * OC, 13);
        Bytes inp(pre.size());
        host::gelu_fwd(inp.data(), pre.data(), static_cast<std::int64_t>(n_in), t);
        const Bytes dw0 = random_bytes(t, static_cast<std::size_t>(OC) * C, 14),
                    db0 = random_bytes(t, OC, 15), dpb0 = random_bytes(t, C, 16);
        // Unfused.
        Bytes want_dpre(pre.size()), want_dw = dw0, want_db = db0, want_dpb = dpb0;
        host::matmul_bwd(want_dpre.data(), want_dw.data(), want_db.data(), dout.data(), inp.data(),
                         w.data(), N, C, OC, t);
        host::gelu_bwd(want_dpre.data(), pre.data(), want_dpre.data(),
                       static_cast<std::int64_t>(n_in), t);
        if (with_pre_bias) {
          // c_fc's matmul_bwd with its own dinp, dweight and inputs, as the model called it.
          const int C_fc = 3;
          const Bytes x_fc = random_bytes(t, static_cast<std::size_t>(N) * C_fc, 17),
                      w_fc = random_bytes(t, static_cast<std::size_t>(C) * C_fc, 18);
          Bytes dx_fc(x_fc.size()), dw_fc(w_fc.size());
          host::matmul_bwd(dx_fc.data(), dw_fc.data(), want_dpb.data(), want_dpre.data(),
                           x_fc.data(), w_fc.data(), N, C_fc, C, t);
        }
        // Fused.
        Bytes dpre = random_bytes(t, n_in, 19), dw = dw0, db = db0, dpb = dpb0;
        host::matmul_bwd_dgelu(dpre.data(), with_pre_bias ? dpb.data() : nullptr, dw.data(),
                               db.data(), dout.data(), inp.data(), pre.data(), w.data(), N, C, OC,
                               t);
        EXPECT_EQ(dpre, want_dpre);
        EXPECT_EQ(dw, want_dw);
        EXPECT_EQ(db, want_db);
        EXPECT_EQ(dpb, want_dpb);
        if (with_pre_bias && N > 1) {
          EXPECT_NE(dpb, dpb0) << "dpre_bias did not accumulate";
        }
      }
    }
  }
}

TEST(FusedHost, ResidualLayerNormIsResidualThenLayerNorm) {
  constexpr float kEps = 1e-5f;
  for (DType t : kDTypes) {
    for (const Shape& s : kShapes) {
      SCOPED_TRACE(name(t, s));
      const int C = s.OC;
      const std::size_t n = static_cast<std::size_t>(s.N) * C;
      const Bytes a = random_bytes(t, n, 21, -2.0f, 3.0f), b = random_bytes(t, n, 22),
                  w = random_bytes(t, C, 23, 0.5f, 1.5f), bias = random_bytes(t, C, 24);
      Bytes want_res(a.size()), want_ln(a.size());
      std::vector<float> want_mean(s.N), want_rstd(s.N);
      host::residual_fwd(want_res.data(), a.data(), b.data(), static_cast<std::int64_t>(n), t);
      host::layernorm_fwd(want_ln.data(), want_mean.data(), want_rstd.data(), want_res.data(),
                          w.data(), bias.data(), s.N, C, kEps, t);

      Bytes res(a.size()), ln(a.size());
      std::vector<float> mean(s.N), rstd(s.N);
      host::residual_layernorm_fwd(res.data(), ln.data(), mean.data(), rstd.data(), a.data(),
                                   b.data(), w.data(), bias.data(), s.N, C, kEps, t);
      EXPECT_EQ(res, want_res);
      EXPECT_EQ(ln, want_ln);
      EXPECT_EQ(mean, want_mean);
      EXPECT_EQ(rstd, want_rstd);

      // In place (res_out aliases a, then b), without statistics.
      Bytes a2 = a, b2 = b, ln2(a.size());
      host::residual_layernorm_fwd(a2.data(), ln2.data(), nullptr, nullptr, a2.data(), b.data(),
                                   w.data(), bias.data(), s.N, C, kEps, t);
      EXPECT_EQ(a2, want_res);
      EXPECT_EQ(ln2, want_ln);
      host::residual_layernorm_fwd(b2.data(), ln2.data(), nullptr, nullptr, a.data(), b2.data(),
                                   w.data(), bias.data(), s.N, C, kEps, t);
      EXPECT_EQ(b2, want_res);
    }
  }
}

}  // namespace
}  // namespace strata
