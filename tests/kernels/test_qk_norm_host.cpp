// The host per-head q/k RMSNorm (kernels/host/qk_norm.h: Qwen3's q_norm / k_norm inside the packed
// qkv row), the oracle of the CUDA one.
//
//  - Forward against a double-precision reference written here (each q head times q_weight,
//    each k head times k_weight, v copied), norm-wise relative error <= kRefTol; the reference
//    also rejects plausible wrong formulas (one norm over all q heads together, the q and k
//    weights swapped). v is copied bit for bit; rstd (N, NH + NKV).
//  - HF's roundings in bf16 / fp16: out == rnd(w * rnd(x * rstd)) bit for bit.
//  - In place (out == qkv) gives the out-of-place bits, every dtype.
//  - Backward: central finite differences of L = sum(out * R) over the whole row (dqkv starts as
//    R: its v part, untouched, is then v's gradient), dq_weight and dk_weight accumulated onto
//    random values; each check shown to reject an injected bug. Against a double reference at a
//    shape with several row chunks. Null weight gradients are skipped.
//  - bf16 / fp16 against fp32 on the same rounded inputs; bitwise determinism for 1, 2, 3 and 7
//    OpenMP threads; N = 0 is a no-op; non-positive heads are a strata::Error.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "kernels/host/qk_norm.h"
#include "tests/kernels/host_test_util.h"

namespace strata {
namespace {

namespace host = kernels::host;
using namespace test;  // tests/kernels/host_test_util.h

constexpr float kEps = 1e-6f;

float round_to(float x, DType t) { return unpack(pack(Vec{x}, t), t)[0]; }

struct Heads {
  int N, NH, NKV, hs;
  int row() const { return (NH + 2 * NKV) * hs; }
  int qk_heads() const { return NH + NKV; }
  std::size_t numel() const { return static_cast<std::size_t>(N) * row(); }
};

// Multiples of nothing: 13 rows, 4 query and 2 key/value heads, head size 37 (odd).
constexpr Heads kShape{13, 4, 2, 37};
// Small enough for finite differences over every element.
constexpr Heads kFdShape{5, 3, 1, 7};
// Several backward row chunks (32 rows each), the last ragged.
constexpr Heads kBig{101, 6, 2, 24};

enum class Bug { none, one_norm_over_q, weights_swapped };

// Double reference. rstd (N, NH + NKV).
void qk_ref(const Vec& x, const Vec& wq, const Vec& wk, const Heads& s, Bug bug, Dbl& out, Dbl& rstd) {
  out.assign(x.begin(), x.end());
  rstd.assign(static_cast<std::size_t>(s.N) * s.qk_heads(), 0);
  for (int n = 0; n < s.N; ++n) {
    const std::size_t base = static_cast<std::size_t>(n) * s.row();
    double q_all = 0;  // the one_norm_over_q bug's statistic
    for (int c = 0; c < s.NH * s.hs; ++c) q_all += double{x[base + c]} * x[base + c];
    for (int h = 0; h < s.qk_heads(); ++h) {
      const std::size_t off = base + static_cast<std::size_t>(h) * s.hs;
      double sq = 0;
      for (int c = 0; c < s.hs; ++c) sq += double{x[off + c]} * x[off + c];
      double r = 1.0 / std::sqrt(sq / s.hs + double{kEps});
      if (bug == Bug::one_norm_over_q && h < s.NH) r = 1.0 / std::sqrt(q_all / (s.NH * s.hs) + double{kEps});
      const bool q = h < s.NH;
      const Vec& w = (q != (bug == Bug::weights_swapped)) ? wq : wk;
      for (int c = 0; c < s.hs; ++c) out[off + c] = x[off + c] * r * w[c];
      rstd[static_cast<std::size_t>(n) * s.qk_heads() + h] = r;
    }
  }
}

TEST(QkNormHost, ForwardMatchesReference) {
  const Heads s = kShape;
  const Vec x = random_vec(s.numel(), 1, -2, 3), wq = random_vec(s.hs, 2, 0.5f, 1.5f),
            wk = random_vec(s.hs, 3, 0.5f, 1.5f);
  Vec out(s.numel(), std::numeric_limits<float>::quiet_NaN()), rstd(s.N * s.qk_heads());
  host::qk_rmsnorm_fwd(out.data(), rstd.data(), x.data(), wq.data(), wk.data(), s.N, s.NH, s.NKV, s.hs,
                       kEps, DType::f32);
  Dbl ro, rs;
  qk_ref(x, wq, wk, s, Bug::none, ro, rs);
  EXPECT_LE(rel_err(out, ro), kRefTol);
  EXPECT_LE(rel_err(rstd, rs), kRefTol);
  qk_ref(x, wq, wk, s, Bug::one_norm_over_q, ro, rs);
  EXPECT_GT(rel_err(out, ro), 100 * kRefTol) << "the norm is per head";
  qk_ref(x, wq, wk, s, Bug::weights_swapped, ro, rs);
  EXPECT_GT(rel_err(out, ro), 100 * kRefTol) << "q heads take q_weight, k heads k_weight";
  // v is copied bit for bit.
  for (int n = 0; n < s.N; ++n)
    for (int c = s.qk_heads() * s.hs; c < s.row(); ++c)
      ASSERT_EQ(out[n * s.row() + c], x[n * s.row() + c]) << n << " " << c;
  // rstd may be null.
  Vec out2(s.numel());
  host::qk_rmsnorm_fwd(out2.data(), nullptr, x.data(), wq.data(), wk.data(), s.N, s.NH, s.NKV, s.hs, kEps,
                       DType::f32);
  EXPECT_EQ(out, out2);
}

// HF: weight * (x.float() * rstd).to(dtype): out = rnd(w * rnd(x * rstd)) from the op's rstd.
TEST(QkNormHost, RoundsLikeHuggingFace) {
  const Heads s = kBig;
  for (DType dt : {DType::bf16, DType::f16}) {
    const Bytes x = pack(random_vec(s.numel(), 4, -2, 3), dt), wq = pack(random_vec(s.hs, 5, 0.5f, 1.5f), dt),
                wk = pack(random_vec(s.hs, 6, 0.5f, 1.5f), dt);
    const Vec xf = unpack(x, dt), wqf = unpack(wq, dt), wkf = unpack(wk, dt);
    Bytes out(x.size());
    Vec rstd(s.N * s.qk_heads());
    host::qk_rmsnorm_fwd(out.data(), rstd.data(), x.data(), wq.data(), wk.data(), s.N, s.NH, s.NKV, s.hs,
                         kEps, dt);
    const Vec got = unpack(out, dt);
    int single_rounding_differs = 0, compared = 0;
    for (int n = 0; n < s.N; ++n)
      for (int h = 0; h < s.qk_heads(); ++h)
        for (int c = 0; c < s.hs; ++c) {
          const std::size_t i = static_cast<std::size_t>(n) * s.row() + h * s.hs + c;
          const float r = rstd[n * s.qk_heads() + h], w = h < s.NH ? wqf[c] : wkf[c];
          const float hf = round_to(w * round_to(xf[i] * r, dt), dt);
          ASSERT_EQ(got[i], hf) << dtype_name(dt) << " row " << n << " head " << h << " column " << c;
          if (round_to(w * (xf[i] * r), dt) != hf) ++single_rounding_differs;
          ++compared;
        }
    EXPECT_GT(single_rounding_differs, compared / 50) << dtype_name(dt);
  }
}

TEST(QkNormHost, InPlaceGivesTheOutOfPlaceBits) {
  const Heads s = kBig;
  for (DType dt : kDTypes) {
    const Bytes x = pack(random_vec(s.numel(), 7, -2, 3), dt), wq = pack(random_vec(s.hs, 8, 0.5f, 1.5f), dt),
                wk = pack(random_vec(s.hs, 9, 0.5f, 1.5f), dt);
    Bytes out(x.size()), inplace = x;
    Vec r1(s.N * s.qk_heads()), r2(r1.size());
    host::qk_rmsnorm_fwd(out.data(), r1.data(), x.data(), wq.data(), wk.data(), s.N, s.NH, s.NKV, s.hs, kEps,
                         dt);
    host::qk_rmsnorm_fwd(inplace.data(), r2.data(), inplace.data(), wq.data(), wk.data(), s.N, s.NH, s.NKV,
                         s.hs, kEps, dt);
    EXPECT_TRUE(inplace == out) << dtype_name(dt);
    EXPECT_EQ(r1, r2) << dtype_name(dt);
  }
}

TEST(QkNormHost, BackwardMatchesFiniteDifferences) {
  const Heads s = kFdShape;
  Vec x = random_vec(s.numel(), 10, -2, 3), wq = random_vec(s.hs, 11, 0.5f, 1.5f),
      wk = random_vec(s.hs, 12, 0.5f, 1.5f);
  const Vec R = random_vec(s.numel(), 13);
  Vec out(s.numel()), rstd(s.N * s.qk_heads());
  const auto loss = [&] {
    host::qk_rmsnorm_fwd(out.data(), nullptr, x.data(), wq.data(), wk.data(), s.N, s.NH, s.NKV, s.hs, kEps,
                         DType::f32);
    return weighted_sum(out, R);
  };
  host::qk_rmsnorm_fwd(out.data(), rstd.data(), x.data(), wq.data(), wk.data(), s.N, s.NH, s.NKV, s.hs, kEps,
                       DType::f32);
  const Vec dq0 = random_vec(s.hs, 14), dk0 = random_vec(s.hs, 15);
  Vec dx = R, dq = dq0, dk = dk0;  // dx: in place, from dout = R
  host::qk_rmsnorm_bwd(dx.data(), dq.data(), dk.data(), x.data(), wq.data(), wk.data(), rstd.data(), s.N,
                       s.NH, s.NKV, s.hs, DType::f32);
  Vec gq(s.hs), gk(s.hs);
  for (int c = 0; c < s.hs; ++c) {
    gq[c] = dq[c] - dq0[c];
    gk[c] = dk[c] - dk0[c];
  }
  const Dbl nx = numeric_grad(x, loss), nq = numeric_grad(wq, loss), nk = numeric_grad(wk, loss);
  expect_fd("qk_rmsnorm dqkv", dx, nx);
  expect_fd("qk_rmsnorm dq_weight", gq, nq);
  expect_fd("qk_rmsnorm dk_weight", gk, nk);
  expect_fd_rejects("dq_weight with its start value", dq, nq);  // += matters
  // Injected bugs: dx taking q_weight for the k heads; dk_weight without the last row.
  Vec bad_dx = R;
  host::qk_rmsnorm_bwd(bad_dx.data(), nullptr, nullptr, x.data(), wq.data(), wq.data(), rstd.data(), s.N,
                       s.NH, s.NKV, s.hs, DType::f32);
  expect_fd_rejects("dx with q_weight for k", bad_dx, nx);
  Vec bad_dk = gk;
  for (int h = s.NH; h < s.qk_heads(); ++h)
    for (int c = 0; c < s.hs; ++c) {
      const std::size_t i = static_cast<std::size_t>(s.N - 1) * s.row() + h * s.hs + c;
      bad_dk[c] -= R[i] * x[i] * rstd[(s.N - 1) * s.qk_heads() + h];
    }
  expect_fd_rejects("dk_weight without row N-1", bad_dk, nk);

  // Null weight gradients are skipped; dx is the same.
  Vec dx_only = R, dq_only = dq0;
  host::qk_rmsnorm_bwd(dx_only.data(), nullptr, nullptr, x.data(), wq.data(), wk.data(), rstd.data(), s.N,
                       s.NH, s.NKV, s.hs, DType::f32);
  EXPECT_EQ(dx_only, dx);
  dx_only = R;
  host::qk_rmsnorm_bwd(dx_only.data(), dq_only.data(), nullptr, x.data(), wq.data(), wk.data(), rstd.data(),
                       s.N, s.NH, s.NKV, s.hs, DType::f32);
  EXPECT_EQ(dq_only, dq);
}

// Several row chunks: dx, dq_weight, dk_weight against a double reference.
TEST(QkNormHost, BackwardMatchesReferenceAcrossRowChunks) {
  const Heads s = kBig;
  const Vec x = random_vec(s.numel(), 20, -2, 3), wq = random_vec(s.hs, 21, 0.5f, 1.5f),
            wk = random_vec(s.hs, 22, 0.5f, 1.5f), dy = random_vec(s.numel(), 23);
  Vec out(s.numel()), rstd(s.N * s.qk_heads()), dx = dy, dq(s.hs, 0.0f), dk(s.hs, 0.0f);
  host::qk_rmsnorm_fwd(out.data(), rstd.data(), x.data(), wq.data(), wk.data(), s.N, s.NH, s.NKV, s.hs, kEps,
                       DType::f32);
  host::qk_rmsnorm_bwd(dx.data(), dq.data(), dk.data(), x.data(), wq.data(), wk.data(), rstd.data(), s.N,
                       s.NH, s.NKV, s.hs, DType::f32);
  Dbl ro, rs, rdx(dy.begin(), dy.end()), rdq(s.hs, 0), rdk(s.hs, 0);
  qk_ref(x, wq, wk, s, Bug::none, ro, rs);
  for (int n = 0; n < s.N; ++n)
    for (int h = 0; h < s.qk_heads(); ++h) {
      const std::size_t off = static_cast<std::size_t>(n) * s.row() + h * s.hs;
      const double r = rs[n * s.qk_heads() + h];
      const Vec& w = h < s.NH ? wq : wk;
      Dbl& dw = h < s.NH ? rdq : rdk;
      double gxm = 0;
      for (int c = 0; c < s.hs; ++c) gxm += double{dy[off + c]} * w[c] * x[off + c] * r / s.hs;
      for (int c = 0; c < s.hs; ++c) {
        const double xhat = x[off + c] * r;
        rdx[off + c] = r * (double{dy[off + c]} * w[c] - xhat * gxm);
        dw[c] += dy[off + c] * xhat;
      }
    }
  EXPECT_LE(rel_err(dx, rdx), kRefTol);
  EXPECT_LE(rel_err(dq, rdq), kRefTol);
  EXPECT_LE(rel_err(dk, rdk), kRefTol);
}

// ---- every dtype: storage, determinism --------------------------------------------------------

struct Output {
  const char* name;
  DType dtype;
  Bytes bytes;
};

Bytes f32_bytes(const Vec& v) {
  Bytes b(v.size() * 4);
  std::memcpy(b.data(), v.data(), b.size());
  return b;
}

// The op in `in` on inputs rounded to `src` first.
std::vector<Output> run_qk(DType in, DType src) {
  const Heads s = kBig;
  const auto input = [&](std::size_t n, std::uint32_t seed, float lo, float hi) {
    return pack(unpack(pack(random_vec(n, seed, lo, hi), src), src), in);
  };
  const Bytes x = input(s.numel(), 30, -2, 3), wq = input(s.hs, 31, 0.5f, 1.5f), wk = input(s.hs, 32, 0.5f, 1.5f);
  Bytes out(x.size()), dx = input(s.numel(), 33, -1, 1), dq = input(s.hs, 34, -1, 1), dk = input(s.hs, 35, -1, 1);
  Vec rstd(s.N * s.qk_heads());
  host::qk_rmsnorm_fwd(out.data(), rstd.data(), x.data(), wq.data(), wk.data(), s.N, s.NH, s.NKV, s.hs, kEps,
                       in);
  host::qk_rmsnorm_bwd(dx.data(), dq.data(), dk.data(), x.data(), wq.data(), wk.data(), rstd.data(), s.N, s.NH,
                       s.NKV, s.hs, in);
  return {{"out", in, out}, {"rstd", DType::f32, f32_bytes(rstd)}, {"dqkv", in, dx},
          {"dq_weight", in, dq}, {"dk_weight", in, dk}};
}

TEST(QkNormHost, BitwiseDeterministicForAnyThreadCount) {
  ThreadCount restore;
  for (DType dt : kDTypes) {
    omp_set_num_threads(1);
    const auto one = run_qk(dt, dt);
    for (int threads : {2, 3, 7}) {
      omp_set_num_threads(threads);
      const auto got = run_qk(dt, dt);
      for (std::size_t i = 0; i < one.size(); ++i)
        EXPECT_TRUE(got[i].bytes == one[i].bytes) << one[i].name << " " << dtype_name(dt) << ": 1 thread vs "
                                                  << threads;
    }
  }
}

// bf16 / fp16 against fp32 on the same rounded inputs (test_llama_ops_host's tolerances).
TEST(QkNormHost, Bf16AndFp16StorageTrackFp32) {
  for (DType dt : {DType::bf16, DType::f16}) {
    const auto got = run_qk(dt, dt), want = run_qk(DType::f32, dt);
    for (std::size_t i = 0; i < got.size(); ++i) {
      const bool stat = got[i].dtype == DType::f32;
      const double tol = stat ? 1e-6 : (dt == DType::bf16 ? 8e-3 : 1e-3);
      const double e = rel_err(unpack(got[i].bytes, got[i].dtype), unpack(want[i].bytes, want[i].dtype));
      std::printf("  %s %-10s vs fp32: rel err %.2e (tol %.0e)\n", std::string(dtype_name(dt)).c_str(),
                  got[i].name, e, tol);
      EXPECT_LE(e, tol) << got[i].name << " " << dtype_name(dt);
    }
  }
}

TEST(QkNormHost, ZeroRowsAndBadHeads) {
  host::qk_rmsnorm_fwd(nullptr, nullptr, nullptr, nullptr, nullptr, 0, 16, 8, 128, kEps, DType::bf16);
  host::qk_rmsnorm_bwd(nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, 0, 16, 8, 128,
                       DType::bf16);
  Vec x(64), w(8), r(8);
  EXPECT_THROW(host::qk_rmsnorm_fwd(x.data(), r.data(), x.data(), w.data(), w.data(), 1, 0, 1, 8, kEps,
                                    DType::f32),
               Error);
  EXPECT_THROW(host::qk_rmsnorm_bwd(x.data(), w.data(), w.data(), x.data(), w.data(), w.data(), r.data(), 1, 2,
                                    1, 0, DType::f32),
               Error);
}

}  // namespace
}  // namespace strata
