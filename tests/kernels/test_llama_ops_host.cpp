// The host LLaMA-family ops (kernels/host/{rmsnorm,rope,swiglu}.h), the oracle of the CUDA ones.
//
//  - Forward: against double-precision references written here (RMSNorm; RoPE as a complex
//    rotation (x[i] + i x[i + hs/2]) e^{i a}; SwiGLU), norm-wise relative error <= kRefTol,
//    and each reference also rejects a plausible wrong formula (mean subtracted, interleaved
//    pairs, no pos_offset, halves swapped).
//  - RMSNorm's HF roundings in bf16 and fp16: out == rnd(w * rnd(x * rstd)) and one row's
//    dweight == rnd(dout * rnd(x * rstd)) bit for bit; the formulas without the inner rounding
//    are shown to differ.
//  - RoPE's angle is the fp32 product float(pos) * inv_freq (checked at a large position where
//    it differs from the double one); rope_bwd is the transpose of rope_fwd (<R x, y> =
//    <x, R^T y>) and its inverse; v is untouched; GQA shapes (NH 6, NKV 2, hs 24).
//  - rope_inv_freq: the default frequencies, and Llama 3.1's "llama3" scaling against values
//    computed by hand (Python, double) in each of the three bands; bad configs throw.
//  - Backward: central finite differences of L = sum(out * R) (RMSNorm dinp, dweight;
//    SwiGLU dgate, dup), each shown to reject an injected bug; accumulate (+=) / overwrite
//    semantics as the headers state; RMSNorm at C = 96 (two dweight column blocks) against a
//    double reference.
//  - bf16 / fp16 storage against fp32 on the same rounded inputs; bitwise determinism for 1,
//    2, 3 and 7 OpenMP threads; the in-place uses the headers allow.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <complex>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "kernels/host/rmsnorm.h"
#include "kernels/host/rope.h"
#include "kernels/host/swiglu.h"
#include "tests/kernels/host_test_util.h"

namespace strata {
namespace {

namespace host = kernels::host;
using namespace test;  // tests/kernels/host_test_util.h

constexpr float kEps = 1e-5f;

// ---- data and comparison --------------------------------------------------------------------

float round_to(float x, DType t) { return unpack(pack(Vec{x}, t), t)[0]; }

Vec minus(const Vec& a, const Vec& b) {
  Vec d(a.size());
  for (std::size_t i = 0; i < a.size(); ++i) d[i] = a[i] - b[i];
  return d;
}

// ---- RMSNorm --------------------------------------------------------------------------------

constexpr int N = 10, C = 12;

// out = x * rstd * w with rstd = 1 / sqrt(mean(x^2) + eps); with subtract_mean, x - mean(x)
// in place of x (LayerNorm without bias: the formula RMSNorm is not).
void rmsnorm_ref(const Vec& x, const Vec& w, int n_rows, int cols, bool subtract_mean, Dbl& out,
                 Dbl& rstd) {
  out.assign(x.size(), 0);
  rstd.assign(static_cast<std::size_t>(n_rows), 0);
  for (int n = 0; n < n_rows; ++n) {
    double m = 0, sq = 0;
    if (subtract_mean) {
      for (int c = 0; c < cols; ++c) m += x[n * cols + c];
      m /= cols;
    }
    for (int c = 0; c < cols; ++c) sq += (x[n * cols + c] - m) * (x[n * cols + c] - m);
    const double s = 1.0 / std::sqrt(sq / cols + double{kEps});
    for (int c = 0; c < cols; ++c) out[n * cols + c] = (x[n * cols + c] - m) * s * w[c];
    rstd[n] = s;
  }
}

TEST(LlamaOpsHost, RmsNormForwardMatchesReference) {
  const Vec x = random_vec(N * C, 1, -2, 3), w = random_vec(C, 2, 0.5f, 1.5f);
  Vec out(N * C), rstd(N);
  host::rmsnorm_fwd(out.data(), rstd.data(), x.data(), w.data(), N, C, kEps, DType::f32);
  Dbl ro, rs;
  rmsnorm_ref(x, w, N, C, false, ro, rs);
  EXPECT_LE(rel_err(out, ro), kRefTol);
  EXPECT_LE(rel_err(rstd, rs), kRefTol);
  rmsnorm_ref(x, w, N, C, true, ro, rs);  // no mean is subtracted
  EXPECT_GT(rel_err(out, ro), 100 * kRefTol);
  Vec out2(N * C);  // rstd may be null
  host::rmsnorm_fwd(out2.data(), nullptr, x.data(), w.data(), N, C, kEps, DType::f32);
  EXPECT_EQ(out, out2);
}

// HF: weight * (x.float() * rstd).to(dtype). Bit for bit: out = rnd(w * rnd(x * rstd)) from
// the op's own rstd; rounding once, rnd(w * x * rstd), differs somewhere.
TEST(LlamaOpsHost, RmsNormRoundsLikeHuggingFace) {
  constexpr int kN = 16, kC = 96;
  for (DType dt : {DType::bf16, DType::f16}) {
    const Bytes x = pack(random_vec(kN * kC, 3, -2, 3), dt), w = pack(random_vec(kC, 4, 0.5f, 1.5f), dt);
    const Vec xf = unpack(x, dt), wf = unpack(w, dt);
    Bytes out(x.size());
    Vec rstd(kN);
    host::rmsnorm_fwd(out.data(), rstd.data(), x.data(), w.data(), kN, kC, kEps, dt);
    const Vec got = unpack(out, dt);
    int single_rounding_differs = 0;
    for (int n = 0; n < kN; ++n)
      for (int c = 0; c < kC; ++c) {
        const int i = n * kC + c;
        const float hf = round_to(wf[c] * round_to(xf[i] * rstd[n], dt), dt);
        ASSERT_EQ(got[i], hf) << dtype_name(dt) << " row " << n << " column " << c;
        if (round_to(wf[c] * (xf[i] * rstd[n]), dt) != hf) ++single_rounding_differs;
      }
    std::printf("  %s: %d of %d outputs differ from a single rounding\n",
                std::string(dtype_name(dt)).c_str(), single_rounding_differs, kN * kC);
    EXPECT_GT(single_rounding_differs, kN * kC / 50) << dtype_name(dt);
  }
}

// dweight sums dout * rnd(xhat), the value the weight multiplied. One row from zero: the
// product of two values of the storage type is exact in fp32, so dweight = rnd(dout *
// rnd(x * rstd)) bit for bit; dout * xhat unrounded differs somewhere.
TEST(LlamaOpsHost, RmsNormWeightGradientUsesTheRoundedNorm) {
  constexpr int kC = 512;
  for (DType dt : {DType::bf16, DType::f16}) {
    const Bytes x = pack(random_vec(kC, 13, -2, 3), dt), w = pack(random_vec(kC, 14, 0.5f, 1.5f), dt),
                dout = pack(random_vec(kC, 15), dt);
    const Vec xf = unpack(x, dt), df = unpack(dout, dt);
    Bytes out(x.size()), dw = pack(Vec(kC, 0.0f), dt);
    Vec rstd(1);
    host::rmsnorm_fwd(out.data(), rstd.data(), x.data(), w.data(), 1, kC, kEps, dt);
    host::rmsnorm_bwd(nullptr, dw.data(), dout.data(), x.data(), w.data(), rstd.data(), 1, kC, dt);
    const Vec got = unpack(dw, dt);
    int unrounded_differs = 0;
    for (int c = 0; c < kC; ++c) {
      const float want = round_to(df[c] * round_to(xf[c] * rstd[0], dt), dt);
      ASSERT_EQ(got[c], want) << dtype_name(dt) << " column " << c;
      if (round_to(df[c] * (xf[c] * rstd[0]), dt) != want) ++unrounded_differs;
    }
    std::printf("  %s: %d of %d dweight differ with an unrounded xhat\n",
                std::string(dtype_name(dt)).c_str(), unrounded_differs, kC);
    EXPECT_GT(unrounded_differs, kC / 50) << dtype_name(dt);
  }
}

TEST(LlamaOpsHost, RmsNormBackwardMatchesFiniteDifferences) {
  Vec x = random_vec(N * C, 5, -2, 3), w = random_vec(C, 6, 0.5f, 1.5f);
  const Vec R = random_vec(N * C, 7);
  Vec out(N * C), rstd(N);
  const auto loss = [&] {
    host::rmsnorm_fwd(out.data(), nullptr, x.data(), w.data(), N, C, kEps, DType::f32);
    return weighted_sum(out, R);
  };
  host::rmsnorm_fwd(out.data(), rstd.data(), x.data(), w.data(), N, C, kEps, DType::f32);
  // Both gradients accumulate: start from random values, compare the increments.
  const Vec dx0 = random_vec(N * C, 8), dw0 = random_vec(C, 9);
  Vec dx = dx0, dw = dw0;
  host::rmsnorm_bwd(dx.data(), dw.data(), R.data(), x.data(), w.data(), rstd.data(), N, C,
                    DType::f32);
  const Vec gx = minus(dx, dx0), gw = minus(dw, dw0);
  const Dbl nx = numeric_grad(x, loss), nw = numeric_grad(w, loss);
  expect_fd("rmsnorm dinp", gx, nx);
  expect_fd("rmsnorm dweight", gw, nw);
  expect_fd_rejects("dinp with its start value", dx, nx);  // the start matters
  // dinp = rstd (g - xhat mean(g xhat)): drop the mean term; dweight: drop the last row.
  Vec no_gx = gx, bad_w = gw;
  for (int n = 0; n < N; ++n) {
    double gxm = 0;
    for (int c = 0; c < C; ++c) gxm += double{R[n * C + c]} * w[c] * x[n * C + c] * rstd[n] / C;
    for (int c = 0; c < C; ++c)
      no_gx[n * C + c] += static_cast<float>(rstd[n] * x[n * C + c] * rstd[n] * gxm);
  }
  for (int c = 0; c < C; ++c) bad_w[c] -= R[(N - 1) * C + c] * x[(N - 1) * C + c] * rstd[N - 1];
  expect_fd_rejects("dinp without mean(g xhat)", no_gx, nx);
  expect_fd_rejects("dweight without row N-1", bad_w, nw);

  // A null gradient is skipped; the other is the same.
  Vec dx_only = dx0, dw_only = dw0;
  host::rmsnorm_bwd(dx_only.data(), nullptr, R.data(), x.data(), w.data(), rstd.data(), N, C,
                    DType::f32);
  host::rmsnorm_bwd(nullptr, dw_only.data(), R.data(), x.data(), w.data(), rstd.data(), N, C,
                    DType::f32);
  EXPECT_EQ(dx_only, dx);
  EXPECT_EQ(dw_only, dw);
}

// C = 96: the dweight sums run over two column blocks of 64, the second ragged.
TEST(LlamaOpsHost, RmsNormBackwardMatchesReferenceAcrossColumnBlocks) {
  constexpr int kN = 37, kC = 96;
  const Vec x = random_vec(kN * kC, 10, -2, 3), w = random_vec(kC, 11, 0.5f, 1.5f),
            dout = random_vec(kN * kC, 12);
  Vec out(kN * kC), rstd(kN), dx(kN * kC, 0.0f), dw(kC, 0.0f);
  host::rmsnorm_fwd(out.data(), rstd.data(), x.data(), w.data(), kN, kC, kEps, DType::f32);
  host::rmsnorm_bwd(dx.data(), dw.data(), dout.data(), x.data(), w.data(), rstd.data(), kN, kC,
                    DType::f32);
  Dbl ro, rs, rdx(kN * kC, 0), rdw(kC, 0);
  rmsnorm_ref(x, w, kN, kC, false, ro, rs);
  for (int n = 0; n < kN; ++n) {
    double gxm = 0;
    for (int c = 0; c < kC; ++c) gxm += double{dout[n * kC + c]} * w[c] * x[n * kC + c] * rs[n] / kC;
    for (int c = 0; c < kC; ++c) {
      const double xhat = x[n * kC + c] * rs[n];
      rdx[n * kC + c] = rs[n] * (double{dout[n * kC + c]} * w[c] - xhat * gxm);
      rdw[c] += dout[n * kC + c] * xhat;
    }
  }
  EXPECT_LE(rel_err(dx, rdx), kRefTol);
  EXPECT_LE(rel_err(dw, rdw), kRefTol);
}

// ---- RoPE -----------------------------------------------------------------------------------

// Grouped-query heads with an odd-ish head size: 6 query heads share 2 key/value heads.
constexpr int RB = 2, RT = 5, RNH = 6, RNKV = 2, RHS = 24;
constexpr int kRow = (RNH + 2 * RNKV) * RHS;
constexpr int kQk = (RNH + RNKV) * RHS;  // the rotated part of a row

// Each q / k head as hs/2 complex numbers z_i = x[i] + i x[i + hs/2] (rotate_half's pairs; with
// interleaved, z_i = x[2i] + i x[2i+1]) times e^{i a}, a = angle(pos, i). v copied.
Dbl rope_ref(const Vec& qkv, int pos_offset, const Vec& inv_freq, bool interleaved,
             bool fp32_angle) {
  Dbl out(qkv.begin(), qkv.end());
  const int half = RHS / 2;
  for (int bt = 0; bt < RB * RT; ++bt) {
    const int pos = pos_offset + bt % RT;
    for (int h = 0; h < RNH + RNKV; ++h)
      for (int i = 0; i < half; ++i) {
        const double a = fp32_angle ? double{static_cast<float>(pos) * inv_freq[i]}
                                    : pos * double{inv_freq[i]};
        const int re = bt * kRow + h * RHS + (interleaved ? 2 * i : i);
        const int im = interleaved ? re + 1 : re + half;
        const std::complex<double> z = std::complex<double>(qkv[re], qkv[im]) * std::polar(1.0, a);
        out[re] = z.real();
        out[im] = z.imag();
      }
  }
  return out;
}

TEST(LlamaOpsHost, RopeForwardIsTheComplexRotation) {
  const Vec inv_freq = host::rope_inv_freq(RHS, 10000.0);
  const Vec x = random_vec(RB * RT * kRow, 20, -2, 2);
  Vec y = x;
  host::rope_fwd(y.data(), RB, RT, RNH, RNKV, RHS, 3, inv_freq.data(), DType::f32);
  EXPECT_LE(rel_err(y, rope_ref(x, 3, inv_freq, false, false)), kRefTol);
  EXPECT_GT(rel_err(y, rope_ref(x, 3, inv_freq, true, false)), 0.1);   // not interleaved
  EXPECT_GT(rel_err(y, rope_ref(x, 0, inv_freq, false, false)), 0.1);  // pos_offset counts
  for (int bt = 0; bt < RB * RT; ++bt)  // v untouched, bit for bit
    for (int c = kQk; c < kRow; ++c) ASSERT_EQ(y[bt * kRow + c], x[bt * kRow + c]);
  // Token 0 at position 0 is not rotated: cos 0 = 1, sin 0 = 0 exactly.
  Vec z = x;
  host::rope_fwd(z.data(), RB, RT, RNH, RNKV, RHS, 0, inv_freq.data(), DType::f32);
  for (int c = 0; c < kRow; ++c) ASSERT_EQ(z[c], x[c]);
}

// At position 100000 the fp32 angle float(pos) * inv_freq differs from the exact product by up
// to an fp32 ulp of ~1e5 (~4e-3 rad): the op follows HF's fp32 angle.
TEST(LlamaOpsHost, RopeAngleIsTheFp32Product) {
  const Vec inv_freq = host::rope_inv_freq(RHS, 10000.0);
  const Vec x = random_vec(RB * RT * kRow, 21, -2, 2);
  Vec y = x;
  constexpr int kFar = 100003;
  host::rope_fwd(y.data(), RB, RT, RNH, RNKV, RHS, kFar, inv_freq.data(), DType::f32);
  const double e32 = rel_err(y, rope_ref(x, kFar, inv_freq, false, true));
  const double e64 = rel_err(y, rope_ref(x, kFar, inv_freq, false, false));
  std::printf("  rope at position %d: vs fp32 angle %.2e, vs double angle %.2e\n", kFar, e32, e64);
  EXPECT_LE(e32, kRefTol);
  EXPECT_GT(e64, 10 * e32);
}

// rope_bwd is R^T: <R x, y> = <x, R^T y> over the whole buffer, R^T R x = x, and R^T != R.
TEST(LlamaOpsHost, RopeBackwardIsTheTranspose) {
  const Vec inv_freq = host::rope_inv_freq(RHS, 10000.0);
  const Vec x = random_vec(RB * RT * kRow, 22), y = random_vec(RB * RT * kRow, 23);
  Vec rx = x, rty = y, ry = y;
  host::rope_fwd(rx.data(), RB, RT, RNH, RNKV, RHS, 7, inv_freq.data(), DType::f32);
  host::rope_bwd(rty.data(), RB, RT, RNH, RNKV, RHS, 7, inv_freq.data(), DType::f32);
  host::rope_fwd(ry.data(), RB, RT, RNH, RNKV, RHS, 7, inv_freq.data(), DType::f32);
  const double lhs = weighted_sum(rx, y), rhs = weighted_sum(x, rty), wrong = weighted_sum(x, ry);
  std::printf("  <Rx,y> %.9f  <x,R^T y> %.9f  <x,R y> %.9f\n", lhs, rhs, wrong);
  EXPECT_NEAR(lhs, rhs, 1e-5 * std::fabs(lhs) + 1e-5);
  EXPECT_GT(std::fabs(lhs - wrong), 0.1);
  Vec back = rx;
  host::rope_bwd(back.data(), RB, RT, RNH, RNKV, RHS, 7, inv_freq.data(), DType::f32);
  EXPECT_LE(rel_err(back, x), 1e-6);
  // With another pos_offset the transpose no longer inverts.
  Vec off = rx;
  host::rope_bwd(off.data(), RB, RT, RNH, RNKV, RHS, 6, inv_freq.data(), DType::f32);
  EXPECT_GT(rel_err(off, x), 0.01);
}

TEST(LlamaOpsHost, RopeRejectsBadHeads) {
  const Vec inv_freq = host::rope_inv_freq(RHS, 10000.0);
  Vec x(RB * RT * kRow);
  EXPECT_THROW(host::rope_fwd(x.data(), RB, RT, 6, 4, RHS, 0, inv_freq.data(), DType::f32), Error);
  EXPECT_THROW(host::rope_bwd(x.data(), RB, RT, 6, 2, 23, 0, inv_freq.data(), DType::f32), Error);
}

TEST(LlamaOpsHost, RopeInvFreqDefault) {
  // 1 / 10000^(2i/24), i = 0, 1, 2 (Python, double).
  const Vec f = host::rope_inv_freq(24, 10000.0);
  ASSERT_EQ(f.size(), 12u);
  EXPECT_EQ(f[0], 1.0f);
  EXPECT_EQ(f[1], static_cast<float>(0.46415888336127786));
  EXPECT_EQ(f[2], static_cast<float>(0.2154434690031884));
  for (int i = 0; i < 12; ++i)
    EXPECT_EQ(f[i], static_cast<float>(1.0 / std::pow(10000.0, i / 12.0))) << i;
}

// Llama 3.1 (rope_theta 500000, head_dim 128, factor 8, low 1, high 4, original 8192): the
// thresholds are wavelengths 2048 (high) and 8192 (low). Values computed in Python (double):
//   i = 32: inv = 500000^-0.5 = 1/sqrt(500000) = 0.0014142135623730950, wavelen 4442.88;
//   smooth = (8192 / 4442.88 - 1) / 3 = 0.28128; (1 - smooth) inv / 8 + smooth inv.
TEST(LlamaOpsHost, RopeInvFreqLlama3Scaling) {
  struct Want { int i; double inv, scaled; };
  const Want want[] = {
      {0, 1, 1},                                                    // high: wavelen 6.3
      {16, 0.037606030930863933, 0.037606030930863933},             // high: wavelen 167.1
      {28, 0.0032114459947525913, 0.0032114459947525913},           // high: wavelen 1956.5
      {29, 0.0026160992529250353, 0.0021665707635033591},           // medium: 2401.7
      {32, 0.001414213562373095, 0.00052484616099295468},           // medium: 4442.9
      {34, 0.00093847387035738013, 0.00017850781276799638},         // medium: 6695.1
      {35, 0.00076449698831717466, 9.5562123539646833e-05},         // low: 8218.7
      {48, 5.318295896944989e-05, 6.6478698711812362e-06},          // low: 118142.8
      {63, 2.4551407911316089e-06, 3.0689259889145111e-07},         // low: 2559195.5
  };
  const host::RopeLlama3Scaling llama31{8.0, 1.0, 4.0, 8192.0};
  const Vec plain = host::rope_inv_freq(128, 500000.0);
  const Vec scaled = host::rope_inv_freq(128, 500000.0, &llama31);
  ASSERT_EQ(scaled.size(), 64u);
  for (const Want& w : want) {
    EXPECT_NEAR(plain[w.i], w.inv, 2e-7 * w.inv) << "i = " << w.i;
    EXPECT_NEAR(scaled[w.i], w.scaled, 2e-7 * w.scaled) << "i = " << w.i;
  }
  // Bad scalings are config errors.
  const host::RopeLlama3Scaling flat{8.0, 4.0, 4.0, 8192.0}, zero{0.0, 1.0, 4.0, 8192.0};
  EXPECT_THROW(host::rope_inv_freq(128, 500000.0, &flat), Error);
  EXPECT_THROW(host::rope_inv_freq(128, 500000.0, &zero), Error);
  EXPECT_THROW(host::rope_inv_freq(127, 500000.0), Error);
  EXPECT_THROW(host::rope_inv_freq(128, 0.0), Error);
}

// ---- SwiGLU ---------------------------------------------------------------------------------

constexpr int SN = 7, SF = 9;

// out = silu(gate) * up; with swapped, silu(up) * gate.
Dbl swiglu_ref(const Vec& gu, int n_rows, int F, bool swapped) {
  Dbl out(static_cast<std::size_t>(n_rows) * F);
  for (int n = 0; n < n_rows; ++n)
    for (int f = 0; f < F; ++f) {
      double g = gu[n * 2 * F + f], u = gu[n * 2 * F + F + f];
      if (swapped) std::swap(g, u);
      out[n * F + f] = g / (1 + std::exp(-g)) * u;
    }
  return out;
}

TEST(LlamaOpsHost, SwigluForwardMatchesReference) {
  const Vec gu = random_vec(SN * 2 * SF, 30, -6, 6);
  Vec out(SN * SF, std::numeric_limits<float>::quiet_NaN());
  host::swiglu_fwd(out.data(), gu.data(), SN, SF, DType::f32);
  EXPECT_LE(rel_err(out, swiglu_ref(gu, SN, SF, false)), kRefTol);
  EXPECT_GT(rel_err(out, swiglu_ref(gu, SN, SF, true)), 0.1);  // gate first, up second
}

TEST(LlamaOpsHost, SwigluBackwardMatchesFiniteDifferences) {
  Vec gu = random_vec(SN * 2 * SF, 31, -4, 4);
  const Vec R = random_vec(SN * SF, 32);
  Vec out(SN * SF);
  const auto loss = [&] {
    host::swiglu_fwd(out.data(), gu.data(), SN, SF, DType::f32);
    return weighted_sum(out, R);
  };
  Vec dgu(gu.size(), std::numeric_limits<float>::quiet_NaN());  // overwritten
  host::swiglu_bwd(dgu.data(), gu.data(), R.data(), SN, SF, DType::f32);
  const Dbl num = numeric_grad(gu, loss);
  expect_fd("swiglu dgate_up", dgu, num);
  // Injected bugs: silu' without its second term (s instead of s (1 + g (1 - s))), and dup
  // taking sigmoid(gate) instead of silu(gate).
  Vec bad_dg = dgu, bad_du = dgu;
  for (int n = 0; n < SN; ++n)
    for (int f = 0; f < SF; ++f) {
      const float g = gu[n * 2 * SF + f], u = gu[n * 2 * SF + SF + f], d = R[n * SF + f];
      const float s = 1.0f / (1.0f + std::exp(-g));
      bad_dg[n * 2 * SF + f] = d * u * s;
      bad_du[n * 2 * SF + SF + f] = d * s;
    }
  expect_fd_rejects("dgate = dout up sigmoid", bad_dg, num);
  expect_fd_rejects("dup = dout sigmoid", bad_du, num);
}

// ---- every op, every dtype: storage, determinism, in place ------------------------------------

struct Output {
  const char* name;
  DType dtype;
  Bytes bytes;
};
using Outputs = std::vector<Output>;

Bytes f32_bytes(const Vec& v) {
  Bytes b(v.size() * 4);
  std::memcpy(b.data(), v.data(), b.size());
  return b;
}

// Shapes with several OpenMP work items each: 37 rows of 96 (RMSNorm; two column blocks),
// 4 x 9 tokens of GQA heads (RoPE), 37 x 150 (SwiGLU). `in` is the dtype the op runs in,
// `src` the dtype the inputs are rounded to first (so fp32 can run on bf16-rounded inputs).
constexpr int MN = 37, MC = 96, MB = 4, MT = 9, MF = 150;

Bytes input(DType in, DType src, std::size_t n, std::uint32_t seed, float lo = -1, float hi = 1) {
  return pack(unpack(pack(random_vec(n, seed, lo, hi), src), src), in);
}

Outputs run_rmsnorm(DType in, DType src) {
  const Bytes x = input(in, src, MN * MC, 40, -2, 3), w = input(in, src, MC, 41, 0.5f, 1.5f),
              dout = input(in, src, MN * MC, 42);
  Bytes out(x.size()), dx = input(in, src, MN * MC, 43), dw = input(in, src, MC, 44);
  Vec rstd(MN);
  host::rmsnorm_fwd(out.data(), rstd.data(), x.data(), w.data(), MN, MC, kEps, in);
  host::rmsnorm_bwd(dx.data(), dw.data(), dout.data(), x.data(), w.data(), rstd.data(), MN, MC, in);
  return {{"rmsnorm out", in, out}, {"rmsnorm rstd", DType::f32, f32_bytes(rstd)},
          {"rmsnorm dinp", in, dx}, {"rmsnorm dweight", in, dw}};
}

Outputs run_rope(DType in, DType src) {
  const Vec inv_freq = host::rope_inv_freq(RHS, 10000.0);
  Bytes q = input(in, src, MB * MT * kRow, 50, -2, 2), dq = input(in, src, MB * MT * kRow, 51);
  host::rope_fwd(q.data(), MB, MT, RNH, RNKV, RHS, 5, inv_freq.data(), in);
  host::rope_bwd(dq.data(), MB, MT, RNH, RNKV, RHS, 5, inv_freq.data(), in);
  return {{"rope qkv", in, q}, {"rope dqkv", in, dq}};
}

Outputs run_swiglu(DType in, DType src) {
  const Bytes gu = input(in, src, MN * 2 * MF, 60, -5, 5), dout = input(in, src, MN * MF, 61);
  Bytes out(MN * MF * dtype_size(in)), dgu(gu.size());
  host::swiglu_fwd(out.data(), gu.data(), MN, MF, in);
  host::swiglu_bwd(dgu.data(), gu.data(), dout.data(), MN, MF, in);
  return {{"swiglu out", in, out}, {"swiglu dgate_up", in, dgu}};
}

using Runner = Outputs (*)(DType, DType);
constexpr Runner kRunners[] = {run_rmsnorm, run_rope, run_swiglu};

TEST(LlamaOpsHost, BitwiseDeterministicForAnyThreadCount) {
  ThreadCount restore;
  for (DType dt : kDTypes)
    for (Runner run : kRunners) {
      omp_set_num_threads(1);
      const Outputs one = run(dt, dt);
      for (int threads : {2, 3, 7}) {
        omp_set_num_threads(threads);
        const Outputs got = run(dt, dt);
        for (std::size_t i = 0; i < one.size(); ++i)
          EXPECT_TRUE(got[i].bytes == one[i].bytes)
              << one[i].name << " " << dtype_name(dt) << ": 1 thread vs " << threads;
      }
    }
}

// bf16 / fp16 against fp32 on the same rounded inputs, tolerances of test_kernels_host.cpp
// (bf16 8e-3, fp16 1e-3: about two ulps norm-wise; RMSNorm's two roundings included); rstd,
// kept in fp32 from the same widened inputs: 1e-6.
TEST(LlamaOpsHost, Bf16AndFp16StorageTrackFp32) {
  for (DType dt : {DType::bf16, DType::f16})
    for (Runner run : kRunners) {
      const Outputs got = run(dt, dt), want = run(DType::f32, dt);
      for (std::size_t i = 0; i < got.size(); ++i) {
        const bool stat = got[i].dtype == DType::f32;
        const double tol = stat ? 1e-6 : (dt == DType::bf16 ? 8e-3 : 1e-3);
        const double e = rel_err(unpack(got[i].bytes, got[i].dtype), unpack(want[i].bytes, want[i].dtype));
        std::printf("  %s %-18s vs fp32: rel err %.2e (tol %.0e)\n",
                    std::string(dtype_name(dt)).c_str(), got[i].name, e, tol);
        EXPECT_LE(e, tol) << got[i].name << " " << dtype_name(dt);
      }
    }
}

// swiglu_bwd may write over gate_up: the same bits as out of place.
TEST(LlamaOpsHost, SwigluBackwardInPlaceGivesTheOutOfPlaceBits) {
  for (DType dt : kDTypes) {
    const Bytes gu = input(dt, dt, MN * 2 * MF, 70, -5, 5), dout = input(dt, dt, MN * MF, 71);
    Bytes dgu(gu.size()), inplace = gu;
    host::swiglu_bwd(dgu.data(), gu.data(), dout.data(), MN, MF, dt);
    host::swiglu_bwd(inplace.data(), inplace.data(), dout.data(), MN, MF, dt);
    EXPECT_TRUE(inplace == dgu) << dtype_name(dt);
  }
}

}  // namespace
}  // namespace strata
