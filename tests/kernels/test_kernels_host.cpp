// The host GPT ops (kernels/host/{embedding,layernorm,matmul,attention,elementwise,
// cross_entropy}.h), the oracle every other backend is compared with.
//
//  - Forward: against plain double-precision references written here, norm-wise relative
//    error <= kRefTol = 1e-5 (the ops compute in fp32: a few fp32 roundings, ~1e-7, per
//    output). Each reference also rejects a plausible wrong formula (no causal mask, 1/hs
//    scale, erf GELU, unbiased variance), so the tolerance is tight enough to matter.
//  - Backward: central finite differences of L = sum(out * R) (R fixed, random) through the
//    fp32 forward, every input element perturbed by +-kFdStep, against the backward's
//    gradient, norm-wise relative error <= kFdTol, per gradient (q, k and v parts of dqkv
//    separately). Each check is also shown to reject a plausible bug (a lost update, a
//    missing term, a missing scale, an off-by-one) injected into the analytic gradient.
//    At larger shapes (several column blocks and element-wise chunks) the backward is also
//    checked against double references.
//  - Accumulate (+=) and overwrite semantics exactly as the headers state.
//  - bf16 / fp16 storage against fp32 on the same (rounded) inputs, norm-wise.
//  - Bitwise determinism: 1 vs 2 (twice), 3 and 7 OpenMP threads, and a worker thread.
//  - Out-of-range cross-entropy targets are a STRATA_ASSERT.
//  - attention_decode against attention_fwd bit for bit; the KV cache contents.
//  - The in-place uses the headers allow.
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <numbers>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "core/dtype.h"
#include "kernels/host/attention.h"
#include "kernels/host/cross_entropy.h"
#include "kernels/host/elementwise.h"
#include "kernels/host/embedding.h"
#include "kernels/host/layernorm.h"
#include "kernels/host/matmul.h"
#include "tests/kernels/host_test_util.h"

namespace strata {
namespace {

namespace host = kernels::host;
using namespace test;  // tests/kernels/host_test_util.h
using Tokens = std::vector<std::int32_t>;

constexpr float kEps = 1e-5f;  // layernorm

// ---- data and comparison --------------------------------------------------------------------

// n tokens in [0, V/2): with n > V/2 some repeat, and tokens >= V/2 never occur.
Tokens random_tokens(std::size_t n, int V, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> dist(0, V / 2 - 1);
  Tokens v(n);
  for (auto& t : v) t = dist(rng);
  return v;
}

Vec round_to(const Vec& v, DType t) { return unpack(pack(v, t), t); }

// Elements [offset, offset + len) of every row of `stride` elements (the q, k or v of qkv).
template <typename V>
V columns(const V& x, std::size_t stride, std::size_t offset, std::size_t len) {
  V out;
  for (std::size_t r = 0; r + stride <= x.size(); r += stride)
    out.insert(out.end(), x.begin() + static_cast<long>(r + offset),
               x.begin() + static_cast<long>(r + offset + len));
  return out;
}

// The tiny, odd shapes of the finite-difference and reference tests.
constexpr int B = 2, T = 5, C = 12, NH = 3, V = 11, OC = 7, NPOS = T + 3;
constexpr int N = B * T, HS = C / NH;

// ---- forward against double references --------------------------------------------------------

TEST(KernelsHost, EmbeddingForwardAddsTheOffsetPosition) {
  const Tokens tok = random_tokens(N, V, 1);
  const Vec wte = random_vec(V * C, 2), wpe = random_vec(NPOS * C, 3);
  Vec out(N * C);
  host::embedding_fwd(out.data(), tok.data(), wte.data(), wpe.data(), B, T, C, 2, DType::f32);
  Dbl ref(N * C), ref0(N * C);
  for (int n = 0; n < N; ++n)
    for (int c = 0; c < C; ++c) {
      ref[n * C + c] = double{wte[tok[n] * C + c]} + wpe[(2 + n % T) * C + c];
      ref0[n * C + c] = double{wte[tok[n] * C + c]} + wpe[(n % T) * C + c];
    }
  EXPECT_LE(rel_err(out, ref), 1e-7);  // one fp32 add: exact to rounding
  EXPECT_GT(rel_err(out, ref0), 0.1);  // the offset is applied
}

void layernorm_ref(const Vec& x, const Vec& w, const Vec& b, bool unbiased, Dbl& out, Dbl& mean,
                   Dbl& rstd) {
  out.assign(N * C, 0);
  mean.assign(N, 0);
  rstd.assign(N, 0);
  for (int n = 0; n < N; ++n) {
    double m = 0, v = 0;
    for (int c = 0; c < C; ++c) m += x[n * C + c];
    m /= C;
    for (int c = 0; c < C; ++c) v += (x[n * C + c] - m) * (x[n * C + c] - m);
    const double s = 1.0 / std::sqrt(v / (unbiased ? C - 1 : C) + double{kEps});
    for (int c = 0; c < C; ++c) out[n * C + c] = (x[n * C + c] - m) * s * w[c] + b[c];
    mean[n] = m;
    rstd[n] = s;
  }
}

TEST(KernelsHost, LayerNormForwardMatchesReference) {
  const Vec x = random_vec(N * C, 4, -2, 3), w = random_vec(C, 5, 0.5f, 1.5f), b = random_vec(C, 6);
  Vec out(N * C), mean(N), rstd(N);
  host::layernorm_fwd(out.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, C,
                      kEps, DType::f32);
  Dbl ro, rm, rs;
  layernorm_ref(x, w, b, false, ro, rm, rs);
  EXPECT_LE(rel_err(out, ro), kRefTol);
  EXPECT_LE(rel_err(mean, rm), kRefTol);
  EXPECT_LE(rel_err(rstd, rs), kRefTol);
  layernorm_ref(x, w, b, true, ro, rm, rs);  // torch's LayerNorm uses the biased variance
  EXPECT_GT(rel_err(out, ro), 100 * kRefTol);
}

TEST(KernelsHost, MatmulForwardMatchesReferenceWithAndWithoutBias) {
  const Vec x = random_vec(N * C, 7), w = random_vec(OC * C, 8), b = random_vec(OC, 9);
  Vec out(N * OC), out_nb(N * OC, std::numeric_limits<float>::quiet_NaN());
  host::matmul_fwd(out.data(), x.data(), w.data(), b.data(), N, C, OC, DType::f32);
  host::matmul_fwd(out_nb.data(), x.data(), w.data(), nullptr, N, C, OC, DType::f32);
  Dbl ref(N * OC), ref_nb(N * OC);
  for (int n = 0; n < N; ++n)
    for (int o = 0; o < OC; ++o) {
      double s = 0;
      for (int c = 0; c < C; ++c) s += double{x[n * C + c]} * w[o * C + c];
      ref_nb[n * OC + o] = s;
      ref[n * OC + o] = s + b[o];
    }
  EXPECT_LE(rel_err(out, ref), kRefTol);
  EXPECT_LE(rel_err(out_nb, ref_nb), kRefTol);  // also: out is overwritten (NaN before)
  EXPECT_GT(rel_err(out_nb, ref), 100 * kRefTol);
}

// Per (b, h, t): softmax over keys j (j <= t when causal) of q.k * scale, times v.
void attention_ref(const Vec& qkv, bool causal, double scale, Dbl& out, Dbl& lse) {
  out.assign(N * C, 0);
  lse.assign(B * NH * T, 0);
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < NH; ++h)
      for (int t = 0; t < T; ++t) {
        const float* q = &qkv[(b * T + t) * 3 * C + h * HS];
        const int keys = causal ? t + 1 : T;
        Dbl s(keys);
        double mx = -INFINITY, sum = 0;
        for (int j = 0; j < keys; ++j) {
          const float* k = &qkv[(b * T + j) * 3 * C + C + h * HS];
          for (int d = 0; d < HS; ++d) s[j] += double{q[d]} * k[d] * scale;
          mx = std::max(mx, s[j]);
        }
        for (int j = 0; j < keys; ++j) sum += std::exp(s[j] - mx);
        for (int j = 0; j < keys; ++j) {
          const float* v = &qkv[(b * T + j) * 3 * C + 2 * C + h * HS];
          for (int d = 0; d < HS; ++d) out[(b * T + t) * C + h * HS + d] += std::exp(s[j] - mx) / sum * v[d];
        }
        lse[(b * NH + h) * T + t] = mx + std::log(sum);
      }
}

TEST(KernelsHost, AttentionForwardMatchesReference) {
  const Vec qkv = random_vec(N * 3 * C, 10, -2, 2);
  Vec out(N * C), lse(B * NH * T);
  host::attention_fwd(out.data(), lse.data(), qkv.data(), B, T, NH, NH, HS, DType::f32);
  Dbl ro, rl;
  attention_ref(qkv, true, 1.0 / std::sqrt(double{HS}), ro, rl);
  EXPECT_LE(rel_err(out, ro), kRefTol);
  EXPECT_LE(rel_err(lse, rl), kRefTol);
  attention_ref(qkv, false, 1.0 / std::sqrt(double{HS}), ro, rl);
  EXPECT_GT(rel_err(out, ro), 100 * kRefTol);  // the mask matters
  attention_ref(qkv, true, 1.0 / HS, ro, rl);
  EXPECT_GT(rel_err(out, ro), 100 * kRefTol);  // so does the scale
}

TEST(KernelsHost, GeluAndResidualForwardMatchReference) {
  const Vec x = random_vec(N * C, 11, -5, 5), y = random_vec(N * C, 12);
  Vec out(x.size()), sum(x.size());
  host::gelu_fwd(out.data(), x.data(), static_cast<std::int64_t>(x.size()), DType::f32);
  host::residual_fwd(sum.data(), x.data(), y.data(), static_cast<std::int64_t>(x.size()), DType::f32);
  Dbl ref(x.size()), ref_erf(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) {
    const double v = x[i];
    ref[i] = 0.5 * v * (1 + std::tanh(std::sqrt(2 / std::numbers::pi) * (v + 0.044715 * v * v * v)));
    ref_erf[i] = 0.5 * v * (1 + std::erf(v / std::sqrt(2.0)));
    EXPECT_EQ(sum[i], x[i] + y[i]);
  }
  EXPECT_LE(rel_err(out, ref), kRefTol);
  EXPECT_GT(rel_err(out, ref_erf), 10 * kRefTol);  // the tanh approximation, not erf
}

TEST(KernelsHost, CrossEntropyForwardMatchesReference) {
  const Vec logits = random_vec(N * V, 13, -8, 8);
  const Tokens targets = random_tokens(N, 2 * V, 14);
  Vec losses(N);
  host::softmax_xent_fwd(losses.data(), logits.data(), targets.data(), N, V, V, DType::f32);
  Dbl ref(N);
  for (int n = 0; n < N; ++n) {
    double s = 0;
    for (int v = 0; v < V; ++v) s += std::exp(double{logits[n * V + v]});
    ref[n] = std::log(s) - logits[n * V + targets[n]];
  }
  EXPECT_LE(rel_err(losses, ref), kRefTol);
}

// Rows ld > V apart (a padded LM head): the padding, however large, takes no part in the loss,
// and its gradient is written as zero; the vocabulary columns equal the unpadded op's bits.
TEST(KernelsHost, CrossEntropyIgnoresPaddedColumns) {
  constexpr int kLd = V + 5;
  const Vec logits = random_vec(N * V, 16, -4, 4);
  const Tokens targets = random_tokens(N, V, 17);
  Vec padded(N * kLd, 50.0f);  // would dominate the softmax if it were read
  for (int n = 0; n < N; ++n) std::copy_n(&logits[n * V], V, &padded[n * kLd]);
  Vec losses(N), losses_padded(N);
  host::softmax_xent_fwd(losses.data(), logits.data(), targets.data(), N, V, V, DType::f32);
  host::softmax_xent_fwd(losses_padded.data(), padded.data(), targets.data(), N, V, kLd, DType::f32);
  EXPECT_EQ(losses, losses_padded);
  Vec dl(N * V);
  host::softmax_xent_bwd(dl.data(), logits.data(), targets.data(), N, V, V, 0.5f, DType::f32);
  host::softmax_xent_bwd(padded.data(), padded.data(), targets.data(), N, V, kLd, 0.5f, DType::f32);
  for (int n = 0; n < N; ++n) {
    for (int v = 0; v < kLd; ++v) {
      const float want = v < V ? dl[n * V + v] : 0.0f;
      ASSERT_EQ(padded[n * kLd + v], want) << "row " << n << " column " << v;
    }
  }
}

TEST(KernelsHostDeathTest, CrossEntropyRejectsTargetsOutOfRange) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const Vec logits = random_vec(2 * V, 15);
  Vec losses(2), dl(2 * V);
  const Tokens too_big = {1, V}, negative = {-1, 0};
  EXPECT_DEATH(host::softmax_xent_fwd(losses.data(), logits.data(), too_big.data(), 2, V, V, DType::f32),
               "target out of range");
  EXPECT_DEATH(host::softmax_xent_bwd(dl.data(), logits.data(), negative.data(), 2, V, V, 1.0f, DType::f32),
               "target out of range");
}

// ---- backward against finite differences ------------------------------------------------------

TEST(KernelsHost, EmbeddingBackwardMatchesFiniteDifferences) {
  const Tokens tok = random_tokens(N, V, 20);  // repeats, and unused rows
  Vec wte = random_vec(V * C, 21), wpe = random_vec(NPOS * C, 22);
  const Vec R = random_vec(N * C, 23);
  Vec out(N * C);
  const auto loss = [&] {
    host::embedding_fwd(out.data(), tok.data(), wte.data(), wpe.data(), B, T, C, 0, DType::f32);
    return weighted_sum(out, R);
  };
  Vec dwte(V * C, 0.0f), dwpe(NPOS * C, 0.0f);
  host::embedding_bwd(dwte.data(), dwpe.data(), R.data(), tok.data(), B, T, C, DType::f32);
  const Dbl nwte = numeric_grad(wte, loss), nwpe = numeric_grad(wpe, loss);
  expect_fd("embedding dwte", dwte, nwte);
  expect_fd("embedding dwpe", dwpe, nwpe);
  // A lost update: the last occurrence of a repeated token not added.
  int last = -1;
  for (int i = 0; i < N; ++i)
    for (int j = 0; j < i; ++j)
      if (tok[i] == tok[j]) last = i;
  ASSERT_GE(last, 0) << "no repeated token";
  Vec bad = dwte;
  for (int c = 0; c < C; ++c) bad[tok[last] * C + c] -= R[last * C + c];
  expect_fd_rejects("dwte lost update", bad, nwte);
  bad = dwpe;  // dwpe summed over b = 0 only
  for (int i = T * C; i < N * C; ++i) bad[i % (T * C)] -= R[i];
  expect_fd_rejects("dwpe without b > 0", bad, nwpe);
}

TEST(KernelsHost, LayerNormBackwardMatchesFiniteDifferences) {
  Vec x = random_vec(N * C, 30, -2, 3), w = random_vec(C, 31, 0.5f, 1.5f), b = random_vec(C, 32);
  const Vec R = random_vec(N * C, 33);
  Vec out(N * C), mean(N), rstd(N);
  const auto loss = [&] {
    host::layernorm_fwd(out.data(), nullptr, nullptr, x.data(), w.data(), b.data(), N, C, kEps,
                        DType::f32);
    return weighted_sum(out, R);
  };
  host::layernorm_fwd(out.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, C,
                      kEps, DType::f32);
  Vec dx(N * C, 0.0f), dw(C, 0.0f), db(C, 0.0f);
  host::layernorm_bwd(dx.data(), dw.data(), db.data(), R.data(), x.data(), w.data(), mean.data(),
                      rstd.data(), N, C, DType::f32);
  const Dbl nx = numeric_grad(x, loss), nw = numeric_grad(w, loss), nb = numeric_grad(b, loss);
  expect_fd("layernorm dinp", dx, nx);
  expect_fd("layernorm dweight", dw, nw);
  expect_fd("layernorm dbias", db, nb);
  // dinp = rstd (g - mean(g) - xhat mean(g xhat)), g = dout w: drop either mean term.
  Vec no_gmean = dx, no_gx = dx;
  for (int n = 0; n < N; ++n) {
    double gm = 0, gxm = 0;
    for (int c = 0; c < C; ++c) {
      gm += double{R[n * C + c]} * w[c] / C;
      gxm += double{R[n * C + c]} * w[c] * (x[n * C + c] - mean[n]) * rstd[n] / C;
    }
    for (int c = 0; c < C; ++c) {
      no_gmean[n * C + c] += static_cast<float>(rstd[n] * gm);
      no_gx[n * C + c] += static_cast<float>(rstd[n] * (x[n * C + c] - mean[n]) * rstd[n] * gxm);
    }
  }
  expect_fd_rejects("dinp without mean(g)", no_gmean, nx);
  expect_fd_rejects("dinp without mean(g xhat)", no_gx, nx);
  Vec bad_w = dw, bad_b = db;  // the last row left out of the sums
  for (int c = 0; c < C; ++c) {
    bad_w[c] -= R[(N - 1) * C + c] * (x[(N - 1) * C + c] - mean[N - 1]) * rstd[N - 1];
    bad_b[c] -= R[(N - 1) * C + c];
  }
  expect_fd_rejects("dweight without row N-1", bad_w, nw);
  expect_fd_rejects("dbias without row N-1", bad_b, nb);
}

TEST(KernelsHost, MatmulBackwardMatchesFiniteDifferences) {
  Vec x = random_vec(N * C, 40), w = random_vec(OC * C, 41), b = random_vec(OC, 42);
  const Vec R = random_vec(N * OC, 43);
  Vec out(N * OC);
  const auto loss = [&] {
    host::matmul_fwd(out.data(), x.data(), w.data(), b.data(), N, C, OC, DType::f32);
    return weighted_sum(out, R);
  };
  Vec dx(N * C), dw(OC * C, 0.0f), db(OC, 0.0f);
  host::matmul_bwd(dx.data(), dw.data(), db.data(), R.data(), x.data(), w.data(), N, C, OC,
                   DType::f32);
  const Dbl nx = numeric_grad(x, loss), nw = numeric_grad(w, loss), nb = numeric_grad(b, loss);
  expect_fd("matmul dinp", dx, nx);
  expect_fd("matmul dweight", dw, nw);
  expect_fd("matmul dbias", db, nb);
  // Off-by-one loops: the last output channel / row left out.
  Vec bad_x = dx, bad_w = dw, bad_b = db;
  for (int n = 0; n < N; ++n)
    for (int c = 0; c < C; ++c) bad_x[n * C + c] -= R[n * OC + OC - 1] * w[(OC - 1) * C + c];
  for (int o = 0; o < OC; ++o) {
    bad_b[o] -= R[(N - 1) * OC + o];
    for (int c = 0; c < C; ++c) bad_w[o * C + c] -= R[(N - 1) * OC + o] * x[(N - 1) * C + c];
  }
  expect_fd_rejects("dinp without channel OC-1", bad_x, nx);
  expect_fd_rejects("dweight without row N-1", bad_w, nw);
  expect_fd_rejects("dbias without row N-1", bad_b, nb);
}

TEST(KernelsHost, AttentionBackwardMatchesFiniteDifferences) {
  Vec qkv = random_vec(N * 3 * C, 50, -2, 2);
  const Vec R = random_vec(N * C, 51);
  Vec out(N * C), lse(B * NH * T);
  const auto loss = [&] {
    host::attention_fwd(out.data(), nullptr, qkv.data(), B, T, NH, NH, HS, DType::f32);
    return weighted_sum(out, R);
  };
  host::attention_fwd(out.data(), lse.data(), qkv.data(), B, T, NH, NH, HS, DType::f32);
  Vec dqkv(N * 3 * C);
  host::attention_bwd(dqkv.data(), R.data(), qkv.data(), out.data(), lse.data(), B, T, NH, NH, HS,
                      DType::f32);
  const Dbl num = numeric_grad(qkv, loss);
  const char* names[] = {"attention dq", "attention dk", "attention dv"};
  for (int part = 0; part < 3; ++part)
    expect_fd(names[part], columns(dqkv, 3 * C, part * C, C), columns(num, 3 * C, part * C, C));
  // dq and dk without the 1/sqrt(hs) scale; dq and dk swapped; dv one token off.
  Vec unscaled = dqkv, swapped = dqkv, shifted = dqkv;
  for (int n = 0; n < N; ++n)
    for (int c = 0; c < C; ++c) {
      const float* r = &dqkv[n * 3 * C];
      unscaled[n * 3 * C + c] = r[c] * std::sqrt(float{HS});
      unscaled[n * 3 * C + C + c] = r[C + c] * std::sqrt(float{HS});
      std::swap(swapped[n * 3 * C + c], swapped[n * 3 * C + C + c]);
      if (n % T != T - 1) shifted[n * 3 * C + 2 * C + c] = dqkv[(n + 1) * 3 * C + 2 * C + c];
    }
  expect_fd_rejects("dq without the scale", columns(unscaled, 3 * C, 0, C), columns(num, 3 * C, 0, C));
  expect_fd_rejects("dk without the scale", columns(unscaled, 3 * C, C, C), columns(num, 3 * C, C, C));
  expect_fd_rejects("dq in dk's place", columns(swapped, 3 * C, C, C), columns(num, 3 * C, C, C));
  expect_fd_rejects("dv one token off", columns(shifted, 3 * C, 2 * C, C), columns(num, 3 * C, 2 * C, C));
}

TEST(KernelsHost, GeluBackwardMatchesFiniteDifferences) {
  Vec x = random_vec(N * C, 60, -4, 4);
  const Vec R = random_vec(N * C, 61);
  const auto n = static_cast<std::int64_t>(x.size());
  Vec out(x.size());
  const auto loss = [&] {
    host::gelu_fwd(out.data(), x.data(), n, DType::f32);
    return weighted_sum(out, R);
  };
  Vec dx(x.size());
  host::gelu_bwd(dx.data(), x.data(), R.data(), n, DType::f32);
  const Dbl num = numeric_grad(x, loss);
  expect_fd("gelu dinp", dx, num);
  Vec bad(x.size());  // only the 0.5 (1 + tanh u) term, the x sech^2(u) u' one missing
  for (std::size_t i = 0; i < x.size(); ++i) {
    const double v = x[i];
    bad[i] =
        static_cast<float>(R[i] * 0.5 * (1 + std::tanh(std::sqrt(2 / std::numbers::pi) * (v + 0.044715 * v * v * v))));
  }
  expect_fd_rejects("gelu dinp without x tanh'", bad, num);
}

TEST(KernelsHost, CrossEntropyBackwardMatchesFiniteDifferences) {
  Vec logits = random_vec(N * V, 70, -3, 3);
  const Tokens targets = random_tokens(N, 2 * V, 71);
  Vec losses(N);
  const auto loss = [&] {  // the mean loss
    host::softmax_xent_fwd(losses.data(), logits.data(), targets.data(), N, V, V, DType::f32);
    double s = 0;
    for (float l : losses) s += l;
    return s / N;
  };
  Vec dl(N * V);
  host::softmax_xent_bwd(dl.data(), logits.data(), targets.data(), N, V, V, 1.0f / N, DType::f32);
  const Dbl num = numeric_grad(logits, loss);
  expect_fd("softmax_xent dlogits", dl, num);
  Vec bad = dl;  // softmax only, the one-hot forgotten
  for (int n = 0; n < N; ++n) bad[n * V + targets[n]] += 1.0f / N;
  expect_fd_rejects("dlogits without one-hot", bad, num);
}

// ---- accumulate (+=) vs overwrite ---------------------------------------------------------------

// Accumulated: with the gradient pre-filled with P, the result is P + (result from zero), to
// fp32 rounding (the sum order may differ: (P + a) + b vs P + (a + b)).
void expect_accumulates(const char* what, const Vec& from_p, const Vec& p, const Vec& from_zero) {
  ASSERT_EQ(from_p.size(), p.size());
  for (std::size_t i = 0; i < p.size(); ++i) {
    const float want = p[i] + from_zero[i];
    ASSERT_NEAR(from_p[i], want, 1e-6f * (std::fabs(p[i]) + std::fabs(from_zero[i]) + 1e-6f))
        << what << " [" << i << "]";
  }
}
// Overwritten: pre-filled with NaN, the result is bitwise the one from a zero-filled output.
void expect_overwrites(const char* what, const Vec& from_nan, const Vec& from_zero) {
  ASSERT_EQ(from_nan.size(), from_zero.size());
  EXPECT_EQ(std::memcmp(from_nan.data(), from_zero.data(), from_nan.size() * 4), 0) << what;
}

TEST(KernelsHost, GradientsAccumulateOrOverwriteAsDocumented) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const Vec R = random_vec(N * 3 * C, 80);  // dout of any op here (a prefix of it)
  {  // embedding: dwte, dwpe +=; rows never used stay exactly P
    const Tokens tok = random_tokens(N, V, 81);
    const Vec pte = random_vec(V * C, 82), ppe = random_vec(NPOS * C, 83);
    Vec te0(V * C, 0.0f), pe0(NPOS * C, 0.0f), te = pte, pe = ppe;
    host::embedding_bwd(te0.data(), pe0.data(), R.data(), tok.data(), B, T, C, DType::f32);
    host::embedding_bwd(te.data(), pe.data(), R.data(), tok.data(), B, T, C, DType::f32);
    expect_accumulates("embedding dwte", te, pte, te0);
    expect_accumulates("embedding dwpe", pe, ppe, pe0);
    for (int i = V / 2 * C; i < V * C; ++i) EXPECT_EQ(te[i], pte[i]);  // unused tokens
    for (int i = T * C; i < NPOS * C; ++i) EXPECT_EQ(pe[i], ppe[i]);   // positions >= T
  }
  {  // layernorm: dinp, dweight, dbias +=
    const Vec x = random_vec(N * C, 84), w = random_vec(C, 85), b = random_vec(C, 86);
    Vec out(N * C), mean(N), rstd(N);
    host::layernorm_fwd(out.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, C,
                        kEps, DType::f32);
    const Vec px = random_vec(N * C, 87), pw = random_vec(C, 88), pb = random_vec(C, 89);
    Vec x0(N * C, 0.0f), w0(C, 0.0f), b0(C, 0.0f), gx = px, gw = pw, gb = pb;
    host::layernorm_bwd(x0.data(), w0.data(), b0.data(), R.data(), x.data(), w.data(), mean.data(),
                        rstd.data(), N, C, DType::f32);
    host::layernorm_bwd(gx.data(), gw.data(), gb.data(), R.data(), x.data(), w.data(), mean.data(),
                        rstd.data(), N, C, DType::f32);
    expect_accumulates("layernorm dinp", gx, px, x0);
    expect_accumulates("layernorm dweight", gw, pw, w0);
    expect_accumulates("layernorm dbias", gb, pb, b0);
  }
  {  // matmul: dinp overwritten; dweight, dbias +=; null outputs skipped
    const Vec x = random_vec(N * C, 90), w = random_vec(OC * C, 91);
    const Vec pw = random_vec(OC * C, 92), pb = random_vec(OC, 93);
    Vec x0(N * C, 0.0f), w0(OC * C, 0.0f), b0(OC, 0.0f), gx(N * C, nan), gw = pw, gb = pb;
    host::matmul_bwd(x0.data(), w0.data(), b0.data(), R.data(), x.data(), w.data(), N, C, OC,
                     DType::f32);
    host::matmul_bwd(gx.data(), gw.data(), gb.data(), R.data(), x.data(), w.data(), N, C, OC,
                     DType::f32);
    expect_overwrites("matmul dinp", gx, x0);
    expect_accumulates("matmul dweight", gw, pw, w0);
    expect_accumulates("matmul dbias", gb, pb, b0);
    Vec only_b = pb;
    host::matmul_bwd(nullptr, nullptr, only_b.data(), R.data(), x.data(), w.data(), N, C, OC,
                     DType::f32);
    EXPECT_EQ(only_b, gb);
  }
  {  // attention dqkv, gelu dinp, softmax_xent dlogits: overwritten
    const Vec qkv = random_vec(N * 3 * C, 94);
    Vec out(N * C), lse(B * NH * T), d0(N * 3 * C, 0.0f), d(N * 3 * C, nan);
    host::attention_fwd(out.data(), lse.data(), qkv.data(), B, T, NH, NH, HS, DType::f32);
    host::attention_bwd(d0.data(), R.data(), qkv.data(), out.data(), lse.data(), B, T, NH, NH, HS, DType::f32);
    host::attention_bwd(d.data(), R.data(), qkv.data(), out.data(), lse.data(), B, T, NH, NH, HS, DType::f32);
    expect_overwrites("attention dqkv", d, d0);
    Vec g0(N * C, 0.0f), g(N * C, nan);
    host::gelu_bwd(g0.data(), qkv.data(), R.data(), N * C, DType::f32);
    host::gelu_bwd(g.data(), qkv.data(), R.data(), N * C, DType::f32);
    expect_overwrites("gelu dinp", g, g0);
    const Tokens targets = random_tokens(N, V, 95);
    Vec l0(N * V, 0.0f), l(N * V, nan);
    host::softmax_xent_bwd(l0.data(), qkv.data(), targets.data(), N, V, V, 0.1f, DType::f32);
    host::softmax_xent_bwd(l.data(), qkv.data(), targets.data(), N, V, V, 0.1f, DType::f32);
    expect_overwrites("softmax_xent dlogits", l, l0);
  }
}

// ---- every op, forward and backward, as one run: for determinism and the dtypes ----------------

// Larger shapes, so that every parallel loop has several work items: 2 column blocks of
// layernorm (64), 5 chunks of the element-wise ops (4096), B * NH = 12 attention heads.
constexpr int MB = 3, MT = 17, MC = 96, MNH = 4, MV = 301, MOC = 80, MN = MB * MT;

struct Output {
  const char* name;
  DType dtype;
  Bytes bytes;
};
using Outputs = std::vector<Output>;

// The inputs in storage `dt` after rounding to `in_dt` (in_dt = dt, or the fp32 twin of a
// bf16/fp16 run on the same values).
struct Inputs {
  DType dt, in_dt;
  Bytes operator()(std::size_t n, std::uint32_t seed, float lo = -1, float hi = 1) const {
    return pack(round_to(random_vec(n, seed, lo, hi), in_dt), dt);
  }
};
Bytes uninit(std::size_t n, DType dt) { return pack(Vec(n, std::numeric_limits<float>::quiet_NaN()), dt); }
Bytes f32_bytes(const Vec& v) { return pack(v, DType::f32); }

Outputs run_embedding(Inputs in) {
  const Tokens tok = random_tokens(MN, 37, 100);
  const Bytes wte = in(37 * MC, 101), wpe = in((MT + 2) * MC, 102), dout = in(MN * MC, 103);
  Bytes out = uninit(MN * MC, in.dt), dwte = in(37 * MC, 104), dwpe = in((MT + 2) * MC, 105);
  host::embedding_fwd(out.data(), tok.data(), wte.data(), wpe.data(), MB, MT, MC, 2, in.dt);
  host::embedding_bwd(dwte.data(), dwpe.data(), dout.data(), tok.data(), MB, MT, MC, in.dt);
  return {{"embedding out", in.dt, out}, {"embedding dwte", in.dt, dwte}, {"embedding dwpe", in.dt, dwpe}};
}

Outputs run_layernorm(Inputs in) {
  const Bytes x = in(MN * MC, 110, -2, 3), w = in(MC, 111, 0.5f, 1.5f), b = in(MC, 112);
  const Bytes dout = in(MN * MC, 113);
  Bytes out = uninit(MN * MC, in.dt), dx = in(MN * MC, 114), dw = in(MC, 115), db = in(MC, 116);
  Vec mean(MN), rstd(MN);
  host::layernorm_fwd(out.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), MN, MC,
                      kEps, in.dt);
  host::layernorm_bwd(dx.data(), dw.data(), db.data(), dout.data(), x.data(), w.data(), mean.data(),
                      rstd.data(), MN, MC, in.dt);
  return {{"layernorm out", in.dt, out},   {"layernorm mean", DType::f32, f32_bytes(mean)},
          {"layernorm rstd", DType::f32, f32_bytes(rstd)}, {"layernorm dinp", in.dt, dx},
          {"layernorm dweight", in.dt, dw}, {"layernorm dbias", in.dt, db}};
}

Outputs run_matmul(Inputs in) {
  const Bytes x = in(MN * MC, 120), w = in(MOC * MC, 121), b = in(MOC, 122), dout = in(MN * MOC, 123);
  Bytes out = uninit(MN * MOC, in.dt), out_nb = uninit(MN * MOC, in.dt), dx = uninit(MN * MC, in.dt);
  Bytes dw = in(MOC * MC, 124), db = in(MOC, 125);
  host::matmul_fwd(out.data(), x.data(), w.data(), b.data(), MN, MC, MOC, in.dt);
  host::matmul_fwd(out_nb.data(), x.data(), w.data(), nullptr, MN, MC, MOC, in.dt);
  host::matmul_bwd(dx.data(), dw.data(), db.data(), dout.data(), x.data(), w.data(), MN, MC, MOC, in.dt);
  return {{"matmul out", in.dt, out}, {"matmul out (no bias)", in.dt, out_nb},
          {"matmul dinp", in.dt, dx}, {"matmul dweight", in.dt, dw}, {"matmul dbias", in.dt, db}};
}

// Tokens [t0, t1) of every sequence of a (B, T, row) array.
Bytes token_slice(const Bytes& x, int Bn, int Tn, std::size_t row_bytes, int t0, int t1) {
  Bytes out;
  for (int b = 0; b < Bn; ++b)
    out.insert(out.end(), x.begin() + static_cast<long>((b * Tn + t0) * row_bytes),
               x.begin() + static_cast<long>((b * Tn + t1) * row_bytes));
  return out;
}

Outputs run_attention(Inputs in) {
  const Bytes qkv = in(MN * 3 * MC, 130, -2, 2), dout = in(MN * MC, 131);
  Bytes out = uninit(MN * MC, in.dt), dqkv = uninit(MN * 3 * MC, in.dt);
  Vec lse(MB * MNH * MT);
  host::attention_fwd(out.data(), lse.data(), qkv.data(), MB, MT, MNH, MNH, MC / MNH, in.dt);
  host::attention_bwd(dqkv.data(), dout.data(), qkv.data(), out.data(), lse.data(), MB, MT, MNH, MNH, MC / MNH, in.dt);
  // Decoding: a prefix of 6 tokens, then the other 11 at once.
  const std::size_t es = dtype_size(in.dt);
  Bytes kc(MB * MT * MC * es), vc(MB * MT * MC * es);
  const Bytes q1 = token_slice(qkv, MB, MT, 3 * MC * es, 0, 6), q2 = token_slice(qkv, MB, MT, 3 * MC * es, 6, MT);
  Bytes o1(MB * 6 * MC * es), o2(MB * (MT - 6) * MC * es);
  host::attention_decode(o1.data(), kc.data(), vc.data(), q1.data(), MB, 6, 0, MT, MNH, MNH, MC / MNH, in.dt);
  host::attention_decode(o2.data(), kc.data(), vc.data(), q2.data(), MB, MT - 6, 6, MT, MNH, MNH, MC / MNH, in.dt);
  return {{"attention out", in.dt, out}, {"attention lse", DType::f32, f32_bytes(lse)},
          {"attention dqkv", in.dt, dqkv}, {"decode out (prefix)", in.dt, o1},
          {"decode out (rest)", in.dt, o2}, {"decode k_cache", in.dt, kc}, {"decode v_cache", in.dt, vc}};
}

Outputs run_elementwise(Inputs in) {
  const std::int64_t n = MN * 4 * MC;  // the MLP's hidden activations
  const auto ns = static_cast<std::size_t>(n);
  const Bytes x = in(ns, 140, -5, 5), y = in(ns, 141), dout = in(ns, 142);
  Bytes out = uninit(ns, in.dt), dx = uninit(ns, in.dt), sum = uninit(ns, in.dt);
  host::gelu_fwd(out.data(), x.data(), n, in.dt);
  host::gelu_bwd(dx.data(), x.data(), dout.data(), n, in.dt);
  host::residual_fwd(sum.data(), x.data(), y.data(), n, in.dt);
  return {{"gelu out", in.dt, out}, {"gelu dinp", in.dt, dx}, {"residual out", in.dt, sum}};
}

Outputs run_cross_entropy(Inputs in) {
  const Bytes logits = in(MN * MV, 150, -6, 6);
  const Tokens targets = random_tokens(MN, 2 * MV, 151);
  Vec losses(MN);
  Bytes dl = uninit(MN * MV, in.dt);
  host::softmax_xent_fwd(losses.data(), logits.data(), targets.data(), MN, MV, MV, in.dt);
  host::softmax_xent_bwd(dl.data(), logits.data(), targets.data(), MN, MV, MV, 1.0f / MN, in.dt);
  return {{"softmax_xent losses", DType::f32, f32_bytes(losses)}, {"softmax_xent dlogits", in.dt, dl}};
}

using Runner = Outputs (*)(Inputs);
constexpr Runner kRunners[] = {run_embedding, run_layernorm, run_matmul, run_attention,
                               run_elementwise, run_cross_entropy};

// Against one thread: 2 threads (twice), 3 and 7 (more threads than cores, ragged splits),
// and a call from a non-main thread (its own OpenMP team).
TEST(KernelsHost, BitwiseDeterministicForAnyThreadCount) {
  ThreadCount restore;
  for (DType dt : kDTypes)
    for (Runner run : kRunners) {
      omp_set_num_threads(1);
      const Outputs one = run({dt, dt});
      const auto expect_same = [&](const Outputs& got, const std::string& how) {
        for (std::size_t i = 0; i < one.size(); ++i)
          EXPECT_TRUE(got[i].bytes == one[i].bytes)
              << one[i].name << " " << dtype_name(dt) << ": 1 thread vs " << how;
      };
      for (int threads : {2, 2, 3, 7}) {
        omp_set_num_threads(threads);
        expect_same(run({dt, dt}), std::to_string(threads) + " threads");
      }
      Outputs worker;
      std::thread([&] { worker = run({dt, dt}); }).join();
      expect_same(worker, "a worker thread");
    }
}

// bf16 / fp16 storage against fp32 on the same rounded inputs. Rounding each output to the
// storage type alone gives ~0.4 ulp norm-wise (measured: bf16 0.9e-3..2.2e-3, fp16
// 1.2e-4..2.5e-4); tolerances bf16 8e-3 (2 ulps at 1, 2^-7 relative), fp16 1e-3 (1 ulp at 1,
// 2^-10), 3.5x and 4x above the largest measured, so a dropped fp32 accumulation (a sum in
// the storage type) would fail. Outputs kept in fp32 (mean, rstd, lse, losses) come from the
// same widened inputs through the same fp32 math: 1e-6 (measured: identical).
TEST(KernelsHost, Bf16AndFp16StorageTrackFp32) {
  for (DType dt : {DType::bf16, DType::f16})
    for (Runner run : kRunners) {
      const Outputs got = run({dt, dt}), want = run({DType::f32, dt});
      for (std::size_t i = 0; i < got.size(); ++i) {
        const bool stat = got[i].dtype == DType::f32;
        const double tol = stat ? 1e-6 : (dt == DType::bf16 ? 8e-3 : 1e-3);
        const double e = rel_err(unpack(got[i].bytes, got[i].dtype), unpack(want[i].bytes, want[i].dtype));
        std::printf("  %s %-24s vs fp32: rel err %.2e (tol %.0e)\n", std::string(dtype_name(dt)).c_str(), got[i].name,
                    e, tol);
        EXPECT_LE(e, tol) << got[i].name << " " << dtype_name(dt);
      }
    }
}

// The finite differences run at C, OC < 64: the backward's blocks of 64 columns (layernorm
// dweight / dbias, matmul dbias) and the element-wise chunks of 4096 are reached only here,
// at the larger shapes, against double references.
TEST(KernelsHost, BackwardMatchesReferenceAcrossBlocksAndChunks) {
  const Vec x = random_vec(MN * MC, 180, -2, 3), dout = random_vec(MN * MC, 181);
  {  // layernorm, C = 96: two column blocks, the second ragged
    const Vec w = random_vec(MC, 182, 0.5f, 1.5f), b = random_vec(MC, 183);
    Vec out(MN * MC), mean(MN), rstd(MN), dx(MN * MC, 0.0f), dw(MC, 0.0f), db(MC, 0.0f);
    host::layernorm_fwd(out.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), MN, MC,
                        kEps, DType::f32);
    host::layernorm_bwd(dx.data(), dw.data(), db.data(), dout.data(), x.data(), w.data(),
                        mean.data(), rstd.data(), MN, MC, DType::f32);
    Dbl rx(MN * MC), rw(MC), rb(MC);
    for (int n = 0; n < MN; ++n) {
      const float* xr = &x[n * MC];
      const float* dr = &dout[n * MC];
      double m = 0, v = 0, gm = 0, gxm = 0;
      for (int c = 0; c < MC; ++c) m += double{xr[c]} / MC;
      for (int c = 0; c < MC; ++c) v += (xr[c] - m) * (xr[c] - m) / MC;
      const double s = 1 / std::sqrt(v + double{kEps});
      for (int c = 0; c < MC; ++c) {
        gm += double{dr[c]} * w[c] / MC;
        gxm += double{dr[c]} * w[c] * (xr[c] - m) * s / MC;
        rw[c] += dr[c] * (xr[c] - m) * s;
        rb[c] += dr[c];
      }
      for (int c = 0; c < MC; ++c) rx[n * MC + c] = s * (double{dr[c]} * w[c] - gm - (xr[c] - m) * s * gxm);
    }
    EXPECT_LE(rel_err(dx, rx), kRefTol);
    EXPECT_LE(rel_err(dw, rw), kRefTol);
    EXPECT_LE(rel_err(db, rb), kRefTol);
  }
  {  // matmul, OC = 80: two dbias blocks (dout: the first MN * MOC values)
    const Vec w = random_vec(MOC * MC, 184);
    Vec dx(MN * MC), dw(MOC * MC, 0.0f), db(MOC, 0.0f);
    host::matmul_bwd(dx.data(), dw.data(), db.data(), dout.data(), x.data(), w.data(), MN, MC, MOC,
                     DType::f32);
    Dbl rx(MN * MC), rw(MOC * MC), rb(MOC);
    for (int n = 0; n < MN; ++n)
      for (int o = 0; o < MOC; ++o) {
        const double d = dout[n * MOC + o];
        rb[o] += d;
        for (int c = 0; c < MC; ++c) {
          rx[n * MC + c] += d * w[o * MC + c];
          rw[o * MC + c] += d * x[n * MC + c];
        }
      }
    EXPECT_LE(rel_err(dx, rx), kRefTol);
    EXPECT_LE(rel_err(dw, rw), kRefTol);
    EXPECT_LE(rel_err(db, rb), kRefTol);
  }
  {  // gelu over 2 chunks and a ragged third
    const auto n = static_cast<std::int64_t>(2 * 4096 + 77);
    const Vec u = random_vec(static_cast<std::size_t>(n), 185, -5, 5), du_out = random_vec(u.size(), 186);
    Vec out(u.size()), du(u.size());
    host::gelu_fwd(out.data(), u.data(), n, DType::f32);
    host::gelu_bwd(du.data(), u.data(), du_out.data(), n, DType::f32);
    Dbl ro(u.size()), rd(u.size());
    const double k = std::sqrt(2 / std::numbers::pi);
    for (std::size_t i = 0; i < u.size(); ++i) {
      const double v = u[i], th = std::tanh(k * (v + 0.044715 * v * v * v));
      ro[i] = 0.5 * v * (1 + th);
      rd[i] = du_out[i] * (0.5 * (1 + th) + 0.5 * v * (1 - th * th) * k * (1 + 3 * 0.044715 * v * v));
    }
    EXPECT_LE(rel_err(out, ro), kRefTol);
    EXPECT_LE(rel_err(du, rd), kRefTol);
  }
  {  // embedding: 51 positions over 18 tokens, 3 sequences
    const Tokens tok = random_tokens(MN, 37, 187);
    Vec dwte(37 * MC, 0.0f), dwpe(MT * MC, 0.0f);
    host::embedding_bwd(dwte.data(), dwpe.data(), dout.data(), tok.data(), MB, MT, MC, DType::f32);
    Dbl rte(37 * MC), rpe(MT * MC);
    for (int n = 0; n < MN; ++n)
      for (int c = 0; c < MC; ++c) {
        rte[tok[n] * MC + c] += dout[n * MC + c];
        rpe[(n % MT) * MC + c] += dout[n * MC + c];
      }
    EXPECT_LE(rel_err(dwte, rte), kRefTol);
    EXPECT_LE(rel_err(dwpe, rpe), kRefTol);
  }
}

// ---- KV-cached decoding -----------------------------------------------------------------------

TEST(KernelsHost, AttentionDecodeMatchesForwardBitwise) {
  constexpr int kMaxT = T + 2, kPrefix = 3;
  for (DType dt : kDTypes) {
    SCOPED_TRACE(dtype_name(dt));
    const std::size_t es = dtype_size(dt), row = C * es;
    const Bytes qkv = pack(random_vec(N * 3 * C, 160, -2, 2), dt);
    Bytes full(N * row);
    host::attention_fwd(full.data(), nullptr, qkv.data(), B, T, NH, NH, HS, dt);
    // The cache rows [0, T) of sequence b must hold the k / v of qkv; rows >= T stay untouched.
    const auto expect_cache = [&](const Bytes& cache, int part) {
      for (int b = 0; b < B; ++b)
        for (int t = 0; t < kMaxT; ++t) {
          const unsigned char* got = &cache[(b * kMaxT + t) * row];
          if (t < T) {
            EXPECT_EQ(std::memcmp(got, &qkv[((b * T + t) * 3 + part) * row], row), 0) << "b " << b << " t " << t;
          } else {
            for (std::size_t i = 0; i < row; ++i) ASSERT_EQ(got[i], 0xA5) << "b " << b << " t " << t;
          }
        }
    };
    {  // past = 0, T_new = T: the forward itself
      Bytes kc(B * kMaxT * row, 0xA5), vc(B * kMaxT * row, 0xA5), out(N * row);
      host::attention_decode(out.data(), kc.data(), vc.data(), qkv.data(), B, T, 0, kMaxT, NH, NH, HS, dt);
      EXPECT_TRUE(out == full);
      expect_cache(kc, 1);
      expect_cache(vc, 2);
    }
    {  // a prefix of kPrefix tokens, then one token at a time
      Bytes kc(B * kMaxT * row, 0xA5), vc(B * kMaxT * row, 0xA5);
      Bytes out(B * kPrefix * row);
      host::attention_decode(out.data(), kc.data(), vc.data(), token_slice(qkv, B, T, 3 * row, 0, kPrefix).data(),
                             B, kPrefix, 0, kMaxT, NH, NH, HS, dt);
      EXPECT_TRUE(out == token_slice(full, B, T, row, 0, kPrefix));
      for (int t = kPrefix; t < T; ++t) {
        Bytes one(B * row);
        host::attention_decode(one.data(), kc.data(), vc.data(), token_slice(qkv, B, T, 3 * row, t, t + 1).data(),
                               B, 1, t, kMaxT, NH, NH, HS, dt);
        EXPECT_TRUE(one == token_slice(full, B, T, row, t, t + 1)) << "token " << t;
      }
      expect_cache(kc, 1);
      expect_cache(vc, 2);
    }
  }
}

// ---- in place ---------------------------------------------------------------------------------

TEST(KernelsHost, InPlaceUsesGiveTheOutOfPlaceBits) {
  const std::int64_t n = 2 * 4096 + 77;  // across the element-wise ops' chunks
  const auto ns = static_cast<std::size_t>(n);
  for (DType dt : kDTypes) {
    SCOPED_TRACE(dtype_name(dt));
    const Bytes x = pack(random_vec(ns, 170, -5, 5), dt), y = pack(random_vec(ns, 171), dt);
    Bytes out(x.size()), io = x;
    host::gelu_fwd(out.data(), x.data(), n, dt);
    host::gelu_fwd(io.data(), io.data(), n, dt);
    EXPECT_TRUE(io == out) << "gelu_fwd out == inp";
    host::gelu_bwd(out.data(), x.data(), y.data(), n, dt);
    io = y;
    host::gelu_bwd(io.data(), x.data(), io.data(), n, dt);
    EXPECT_TRUE(io == out) << "gelu_bwd dinp == dout";
    host::residual_fwd(out.data(), x.data(), y.data(), n, dt);
    io = x;
    host::residual_fwd(io.data(), io.data(), y.data(), n, dt);
    EXPECT_TRUE(io == out) << "residual out == a";
    io = y;
    host::residual_fwd(io.data(), x.data(), io.data(), n, dt);
    EXPECT_TRUE(io == out) << "residual out == b";
    const Bytes logits = pack(random_vec(N * V, 172, -4, 4), dt);
    const Tokens targets = random_tokens(N, 2 * V, 173);
    Bytes dl(logits.size());
    io = logits;
    host::softmax_xent_bwd(dl.data(), logits.data(), targets.data(), N, V, V, 0.25f, dt);
    host::softmax_xent_bwd(io.data(), io.data(), targets.data(), N, V, V, 0.25f, dt);
    EXPECT_TRUE(io == dl) << "softmax_xent_bwd dlogits == logits";
  }
}

}  // namespace
}  // namespace strata
