// The host mixture-of-experts ops (kernels/host/moe.h), the oracle of the CUDA ones.
//
//  - Router forward against a double reference (softmax; top k by a stable sort on (prob
//    descending, index ascending); renormalisation; prob_sum) at shapes multiples of nothing
//    (N 13, E 7, k 3), N 1 k 1, k = E and a Mixtral-like E 8 k 2 over several prob_sum chunks,
//    renormalize on and off, every dtype of logits; idx bit for bit.
//  - Ties: equal logits go to the lower expert index, in every dtype (a reversed tie order
//    fails the explicit expectations).
//  - Router backward: central finite differences of L = sum(weights * Rw) + dot(prob_sum, daux)
//    with respect to the logits (well-separated logits so the picks do not change), renormalize
//    on and off, daux null and not; each shown to reject a wrong formula. In bf16 / fp16 its
//    result is the fp32 one rounded once, bit for bit.
//  - moe_sort against a stable reference sort, offsets, position the inverse of order; N = 0
//    zeroes offsets.
//  - moe_gather exact copies; moe_scatter_add its adjoint (<gather x, y> = <x, scatter y>) and
//    against a reference; combine forward against a double reference and HF's rounding of the
//    weight (bit for bit at k = 1); combine backward: dy bit for bit, dweights against double
//    dots and finite differences (dweights and dy).
//  - A whole layer: router, sort, gather, per-expert maps over offsets' ranges, combine, against
//    the layer computed token by token.
//  - The experts' grouped matmul: bit for bit each expert's matmul_fwd, rows without a weight
//    untouched, against a double reference.
//  - Bitwise determinism for 1, 2, 3 and 7 OpenMP threads, every dtype; N = 0 is a no-op for
//    every op; bad E / k are a strata::Error.
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "kernels/host/matmul.h"
#include "kernels/host/moe.h"
#include "tests/kernels/host_test_util.h"

namespace strata {
namespace {

namespace host = kernels::host;
using namespace test;  // tests/kernels/host_test_util.h
using Ints = std::vector<std::int32_t>;

float round_to(float x, DType t) { return unpack(pack(Vec{x}, t), t)[0]; }

struct Route {
  long long N;
  int E, k;
};
// Multiples of nothing; one token one expert; every expert picked; Mixtral-like, 3 chunks.
constexpr Route kRoutes[] = {{13, 7, 3}, {1, 1, 1}, {5, 4, 4}, {600, 8, 2}};

// ---- router forward -------------------------------------------------------------------------

struct RouterRef {
  Dbl probs, weights, prob_sum;
  Ints idx;
};

RouterRef router_ref(const Vec& logits, const Route& r, bool renormalize) {
  RouterRef out;
  out.probs.resize(logits.size());
  out.prob_sum.assign(r.E, 0);
  for (long long n = 0; n < r.N; ++n) {
    const float* x = logits.data() + n * r.E;
    const double m = *std::max_element(x, x + r.E);
    double s = 0;
    for (int e = 0; e < r.E; ++e) s += std::exp(double{x[e]} - m);
    Ints order(r.E);
    std::iota(order.begin(), order.end(), 0);
    double* p = out.probs.data() + n * r.E;
    for (int e = 0; e < r.E; ++e) {
      p[e] = std::exp(double{x[e]} - m) / s;
      out.prob_sum[e] += p[e];
    }
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return p[a] > p[b]; });
    double picked = 0;
    for (int j = 0; j < r.k; ++j) picked += p[order[j]];
    for (int j = 0; j < r.k; ++j) {
      out.idx.push_back(order[j]);
      out.weights.push_back(renormalize ? p[order[j]] / picked : p[order[j]]);
    }
  }
  return out;
}

TEST(MoeHost, RouterForwardMatchesReference) {
  for (const Route& r : kRoutes)
    for (DType dt : kDTypes)
      for (bool renorm : {false, true}) {
        SCOPED_TRACE(std::string(dtype_name(dt)) + " N " + std::to_string(r.N) + " E " + std::to_string(r.E) +
                     " k " + std::to_string(r.k) + (renorm ? " renormalize" : ""));
        const Bytes logits = pack(random_vec(r.N * r.E, 1, -3, 3), dt);
        const Vec lf = unpack(logits, dt);
        Vec probs(r.N * r.E), weights(r.N * r.k), prob_sum(r.E, std::numeric_limits<float>::quiet_NaN());
        Ints idx(r.N * r.k, -1);
        host::moe_router_fwd(probs.data(), idx.data(), weights.data(), prob_sum.data(), logits.data(), r.N, r.E,
                             r.k, renorm, dt);
        const RouterRef ref = router_ref(lf, r, renorm);
        EXPECT_LE(rel_err(probs, ref.probs), 1e-6);
        EXPECT_EQ(idx, ref.idx);
        EXPECT_LE(rel_err(weights, ref.weights), 1e-6);
        EXPECT_LE(rel_err(prob_sum, ref.prob_sum), 1e-6);
        // The other renormalisation is another result (unless k = E = 1... or weights sum to 1).
        const RouterRef other = router_ref(lf, r, !renorm);
        if (r.k < r.E) {
          EXPECT_GT(rel_err(weights, other.weights), 1e-3);
        }
        // prob_sum may be null.
        Vec p2(probs.size()), w2(weights.size());
        Ints i2(idx.size());
        host::moe_router_fwd(p2.data(), i2.data(), w2.data(), nullptr, logits.data(), r.N, r.E, r.k, renorm, dt);
        EXPECT_EQ(p2, probs);
        EXPECT_EQ(i2, idx);
        EXPECT_EQ(w2, weights);
      }
}

// Equal probs: the lower expert index first, in descending prob order.
TEST(MoeHost, RouterTiesGoToTheLowerExpert) {
  constexpr int E = 7, k = 3;
  const Vec rows = {
      0, 0, 0, 0, 0, 0, 0,          // all tied: 0 1 2
      1, 3, 3, 0, 3, -1, 2,         // three tied at the top: 1 2 4
      -1, 2, 0.5, 2, 0.5, 0.5, 0,   // 1 3, then 2 before 4 and 5
      0, 0, 0, 0, 0, 0, 5,          // the last first, then 0 1
  };
  const Ints want = {0, 1, 2, 1, 2, 4, 1, 3, 2, 6, 0, 1};
  for (DType dt : kDTypes) {
    const Bytes logits = pack(rows, dt);
    Vec probs(rows.size()), weights(4 * k);
    Ints idx(4 * k);
    host::moe_router_fwd(probs.data(), idx.data(), weights.data(), nullptr, logits.data(), 4, E, k, true, dt);
    EXPECT_EQ(idx, want) << dtype_name(dt);
    EXPECT_EQ(weights[0], weights[1]) << "tied probs, tied weights";
  }
}

// ---- router backward ------------------------------------------------------------------------

// Logits on well-separated levels (a permutation of 0.4 e, plus noise under 0.05): a finite
// difference step of 1e-2 never changes the picks.
Vec separated_logits(const Route& r, std::uint32_t seed) {
  std::mt19937 rng(seed);
  const Vec noise = random_vec(r.N * r.E, seed + 1, -0.05f, 0.05f);
  Vec out(noise.size());
  for (long long n = 0; n < r.N; ++n) {
    Ints perm(r.E);
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), rng);
    for (int e = 0; e < r.E; ++e) out[n * r.E + e] = 0.4f * static_cast<float>(perm[e]) - 1.0f + noise[n * r.E + e];
  }
  return out;
}

TEST(MoeHost, RouterBackwardMatchesFiniteDifferences) {
  const Route r{6, 7, 3};
  for (bool renorm : {false, true})
    for (bool aux : {false, true}) {
      const std::string what = std::string(renorm ? "renormalize" : "softmax weights") + (aux ? " + daux" : "");
      Vec logits = separated_logits(r, 40);
      const Vec Rw = random_vec(r.N * r.k, 42), daux = random_vec(r.E, 43);
      Vec probs(r.N * r.E), weights(r.N * r.k), prob_sum(r.E);
      Ints idx(r.N * r.k);
      Ints picks;
      int moved = 0;  // perturbed forwards whose picks differ from the unperturbed ones
      const auto loss = [&] {
        host::moe_router_fwd(probs.data(), idx.data(), weights.data(), prob_sum.data(), logits.data(), r.N, r.E,
                             r.k, renorm, DType::f32);
        if (!picks.empty() && idx != picks) ++moved;
        return weighted_sum(weights, Rw) + (aux ? weighted_sum(prob_sum, daux) : 0.0);
      };
      loss();
      picks = idx;
      Vec dlogits(logits.size(), std::numeric_limits<float>::quiet_NaN());  // overwritten
      host::moe_router_bwd(dlogits.data(), Rw.data(), probs.data(), idx.data(), aux ? daux.data() : nullptr, r.N,
                           r.E, r.k, renorm, DType::f32);
      const Vec probs0 = probs;
      const Dbl num = numeric_grad(logits, loss);
      ASSERT_EQ(moved, 0) << "the picks moved: the logits are not separated enough";
      expect_fd(("router dlogits, " + what).c_str(), dlogits, num);
      // Wrong formulas: the other renormalisation; daux dropped or added.
      Vec bad(logits.size());
      host::moe_router_bwd(bad.data(), Rw.data(), probs0.data(), idx.data(), aux ? daux.data() : nullptr, r.N, r.E,
                           r.k, !renorm, DType::f32);
      expect_fd_rejects("the other renormalisation", bad, num);
      host::moe_router_bwd(bad.data(), Rw.data(), probs0.data(), idx.data(), aux ? nullptr : daux.data(), r.N, r.E,
                           r.k, renorm, DType::f32);
      expect_fd_rejects(aux ? "daux dropped" : "daux added", bad, num);
    }
}

// Every input of the backward is fp32: in bf16 / fp16 dlogits is the fp32 result rounded once,
// bit for bit.
TEST(MoeHost, RouterBackwardRoundsOnceToTheDtype) {
  const Route r{37, 7, 3};
  const Vec logits = random_vec(r.N * r.E, 45, -3, 3), dw = random_vec(r.N * r.k, 46), daux = random_vec(r.E, 47);
  Vec probs(r.N * r.E), weights(r.N * r.k), want(logits.size());
  Ints idx(r.N * r.k);
  host::moe_router_fwd(probs.data(), idx.data(), weights.data(), nullptr, logits.data(), r.N, r.E, r.k, true,
                       DType::f32);
  host::moe_router_bwd(want.data(), dw.data(), probs.data(), idx.data(), daux.data(), r.N, r.E, r.k, true,
                       DType::f32);
  for (DType dt : {DType::bf16, DType::f16}) {
    Bytes got(logits.size() * dtype_size(dt));
    host::moe_router_bwd(got.data(), dw.data(), probs.data(), idx.data(), daux.data(), r.N, r.E, r.k, true, dt);
    EXPECT_TRUE(got == pack(want, dt)) << dtype_name(dt);
  }
}

// ---- sort, gather, scatter ------------------------------------------------------------------

Ints random_picks(const Route& r, std::uint32_t seed) {  // k distinct experts per token
  std::mt19937 rng(seed);
  Ints idx;
  for (long long n = 0; n < r.N; ++n) {
    Ints perm(r.E);
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), rng);
    idx.insert(idx.end(), perm.begin(), perm.begin() + r.k);
  }
  return idx;
}

struct Sorted {
  Ints offsets, order, position;
};
Sorted sort(const Ints& idx, const Route& r) {
  Sorted s{Ints(r.E + 1, -7), Ints(idx.size(), -7), Ints(idx.size(), -7)};
  host::moe_sort(s.offsets.data(), s.order.data(), s.position.data(), idx.data(), r.N, r.E, r.k);
  return s;
}

TEST(MoeHost, SortIsAStableGroupingByExpert) {
  for (const Route& r : kRoutes) {
    SCOPED_TRACE("N " + std::to_string(r.N) + " E " + std::to_string(r.E) + " k " + std::to_string(r.k));
    const Ints idx = random_picks(r, 50);
    const Sorted s = sort(idx, r);
    Ints want(idx.size());
    std::iota(want.begin(), want.end(), 0);
    std::stable_sort(want.begin(), want.end(), [&](int a, int b) { return idx[a] < idx[b]; });
    EXPECT_EQ(s.order, want);
    ASSERT_EQ(s.offsets[0], 0);
    ASSERT_EQ(s.offsets[r.E], static_cast<int>(idx.size()));
    for (int e = 0; e < r.E; ++e)
      for (int row = s.offsets[e]; row < s.offsets[e + 1]; ++row) ASSERT_EQ(idx[s.order[row]], e);
    for (std::size_t i = 0; i < idx.size(); ++i) ASSERT_EQ(s.order[s.position[i]], static_cast<int>(i));
  }
  // N = 0: offsets all zero, nothing else touched.
  Ints offsets(9, -7);
  host::moe_sort(offsets.data(), nullptr, nullptr, nullptr, 0, 8, 2);
  EXPECT_EQ(offsets, Ints(9, 0));
}

TEST(MoeHost, GatherCopiesAndScatterAddIsItsAdjoint) {
  const Route r{13, 7, 3};
  constexpr int C = 37;
  const Ints idx = random_picks(r, 60);
  const Sorted s = sort(idx, r);
  for (DType dt : kDTypes) {
    const Bytes x = pack(random_vec(r.N * C, 61), dt);
    Bytes xs(r.N * r.k * C * dtype_size(dt), 0xEE);
    host::moe_gather(xs.data(), x.data(), s.order.data(), r.N, r.k, C, dt);
    const std::size_t row = C * dtype_size(dt);
    for (std::size_t rr = 0; rr < s.order.size(); ++rr)
      ASSERT_EQ(std::memcmp(xs.data() + rr * row, x.data() + (s.order[rr] / r.k) * row, row), 0) << rr;

    // scatter_add against a reference, accumulating onto random values.
    const Bytes dxs = pack(random_vec(r.N * r.k * C, 62), dt), dinp0 = pack(random_vec(r.N * C, 63), dt);
    Bytes dinp = dinp0;
    host::moe_scatter_add(dinp.data(), dxs.data(), s.position.data(), r.N, r.k, C, dt);
    const Vec dxf = unpack(dxs, dt), d0 = unpack(dinp0, dt);
    Dbl want(d0.begin(), d0.end());
    for (long long n = 0; n < r.N; ++n)
      for (int j = 0; j < r.k; ++j)
        for (int c = 0; c < C; ++c) want[n * C + c] += dxf[s.position[n * r.k + j] * C + c];
    EXPECT_LE(rel_err(unpack(dinp, dt), want), dt == DType::f32 ? kRefTol : 4e-3) << dtype_name(dt);
    if (dt != DType::f32) continue;
    // Adjoint: <gather(x), dxs> = <x, scatter(dxs)> (scatter from zero).
    Vec from_zero(r.N * C, 0.0f);
    host::moe_scatter_add(from_zero.data(), dxs.data(), s.position.data(), r.N, r.k, C, dt);
    const double lhs = weighted_sum(unpack(xs, dt), dxf), rhs = weighted_sum(unpack(x, dt), from_zero);
    EXPECT_NEAR(lhs, rhs, 1e-5 * std::fabs(lhs) + 1e-5);
    // With order in place of position the adjoint breaks.
    Vec wrong(r.N * C, 0.0f);
    host::moe_scatter_add(wrong.data(), dxs.data(), s.order.data(), r.N, r.k, C, dt);
    EXPECT_GT(std::fabs(lhs - weighted_sum(unpack(x, dt), wrong)), 0.1);
  }
}

// ---- combine --------------------------------------------------------------------------------

TEST(MoeHost, CombineForwardMatchesReference) {
  for (const Route& r : kRoutes) {
    constexpr int C = 37;
    const Ints idx = random_picks(r, 70);
    const Sorted s = sort(idx, r);
    const Vec w = random_vec(r.N * r.k, 71, 0.0f, 1.0f);
    for (DType dt : kDTypes) {
      const Bytes y = pack(random_vec(r.N * r.k * C, 72), dt);
      const Vec yf = unpack(y, dt);
      Bytes out(r.N * C * dtype_size(dt), 0xEE);
      host::moe_combine_fwd(out.data(), y.data(), w.data(), s.position.data(), r.N, r.k, C, dt);
      Dbl want(r.N * C, 0), unsorted(r.N * C, 0);
      for (long long n = 0; n < r.N; ++n)
        for (int j = 0; j < r.k; ++j)
          for (int c = 0; c < C; ++c) {
            const double wj = round_to(w[n * r.k + j], dt);
            want[n * C + c] += wj * yf[s.position[n * r.k + j] * C + c];
            unsorted[n * C + c] += wj * yf[(n * r.k + j) * C + c];
          }
      const double e = rel_err(unpack(out, dt), want);
      EXPECT_LE(e, dt == DType::f32 ? kRefTol : 4e-3) << dtype_name(dt) << " N " << r.N;
      if (r.N > 1) {
        EXPECT_GT(rel_err(unpack(out, dt), unsorted), 0.1) << "y is in sorted order";
      }
    }
  }
}

// HF casts the routing weights to the hidden dtype: at k = 1 out = rnd(rnd(w) * y), one exact
// product, bit for bit; rnd(w * y) differs somewhere.
TEST(MoeHost, CombineRoundsTheWeightLikeHuggingFace) {
  const Route r{64, 4, 1};
  constexpr int C = 64;
  const Ints idx = random_picks(r, 75);
  const Sorted s = sort(idx, r);
  const Vec w = random_vec(r.N, 76, 0.0f, 1.0f);
  for (DType dt : {DType::bf16, DType::f16}) {
    const Bytes y = pack(random_vec(r.N * C, 77), dt);
    const Vec yf = unpack(y, dt);
    Bytes out(r.N * C * dtype_size(dt));
    host::moe_combine_fwd(out.data(), y.data(), w.data(), s.position.data(), r.N, 1, C, dt);
    const Vec got = unpack(out, dt);
    int unrounded_differs = 0;
    for (long long n = 0; n < r.N; ++n)
      for (int c = 0; c < C; ++c) {
        const float yv = yf[s.position[n] * C + c];
        const float want = round_to(round_to(w[n], dt) * yv, dt);
        ASSERT_EQ(got[n * C + c], want) << dtype_name(dt);
        if (round_to(w[n] * yv, dt) != want) ++unrounded_differs;
      }
    EXPECT_GT(unrounded_differs, r.N * C / 50) << dtype_name(dt);
  }
}

TEST(MoeHost, CombineBackwardMatchesFiniteDifferences) {
  const Route r{5, 4, 2};
  constexpr int C = 9;
  const Ints idx = random_picks(r, 80);
  const Sorted s = sort(idx, r);
  Vec w = random_vec(r.N * r.k, 81, 0.0f, 1.0f), y = random_vec(r.N * r.k * C, 82);
  const Vec R = random_vec(r.N * C, 83);
  Vec out(r.N * C);
  const auto loss = [&] {
    host::moe_combine_fwd(out.data(), y.data(), w.data(), s.position.data(), r.N, r.k, C, DType::f32);
    return weighted_sum(out, R);
  };
  Vec dy(y.size(), std::numeric_limits<float>::quiet_NaN()), dw(w.size(), std::numeric_limits<float>::quiet_NaN());
  host::moe_combine_bwd(dy.data(), dw.data(), R.data(), y.data(), w.data(), s.position.data(), r.N, r.k, C,
                        DType::f32);
  const Dbl nw = numeric_grad(w, loss), ny = numeric_grad(y, loss);
  expect_fd("combine dweights", dw, nw);
  expect_fd("combine dy", dy, ny);
  // Wrong: y's rows taken in token order (position ignored).
  Ints identity(s.position.size());
  std::iota(identity.begin(), identity.end(), 0);
  Vec bad_dy(dy.size()), bad_dw(dw.size());
  host::moe_combine_bwd(bad_dy.data(), bad_dw.data(), R.data(), y.data(), w.data(), identity.data(), r.N, r.k, C,
                        DType::f32);
  expect_fd_rejects("dweights from unsorted rows", bad_dw, nw);
  expect_fd_rejects("dy to unsorted rows", bad_dy, ny);
}

// dy = rnd(rnd(w) * dout) bit for bit; dweights against double dots, every dtype.
TEST(MoeHost, CombineBackwardMatchesReference) {
  for (const Route& r : kRoutes) {
    constexpr int C = 37;
    const Ints idx = random_picks(r, 85);
    const Sorted s = sort(idx, r);
    const Vec w = random_vec(r.N * r.k, 86, 0.0f, 1.0f);
    for (DType dt : kDTypes) {
      const Bytes y = pack(random_vec(r.N * r.k * C, 87), dt), dout = pack(random_vec(r.N * C, 88), dt);
      const Vec yf = unpack(y, dt), df = unpack(dout, dt);
      Bytes dy(y.size(), 0xEE);
      Vec dw(w.size(), std::numeric_limits<float>::quiet_NaN());
      host::moe_combine_bwd(dy.data(), dw.data(), dout.data(), y.data(), w.data(), s.position.data(), r.N, r.k, C,
                            dt);
      const Vec dyf = unpack(dy, dt);
      Dbl want_dw(w.size(), 0);
      for (long long n = 0; n < r.N; ++n)
        for (int j = 0; j < r.k; ++j) {
          const int row = s.position[n * r.k + j];
          for (int c = 0; c < C; ++c) {
            ASSERT_EQ(dyf[row * C + c], round_to(round_to(w[n * r.k + j], dt) * df[n * C + c], dt));
            want_dw[n * r.k + j] += double{df[n * C + c]} * yf[row * C + c];
          }
        }
      EXPECT_LE(rel_err(dw, want_dw), 1e-6) << dtype_name(dt);
    }
  }
}

// ---- a whole layer --------------------------------------------------------------------------

// Expert e maps a row to (e + 1) / 4 * row + e / 8 (on its own rows, found through offsets):
// the layer out[n] = sum_j w_j f_{idx_j}(x[n]) computed token by token.
TEST(MoeHost, AWholeLayerMatchesTheTokenByTokenSum) {
  const Route r{13, 7, 3};
  constexpr int C = 37;
  const Vec logits = random_vec(r.N * r.E, 90, -2, 2), x = random_vec(r.N * C, 91);
  Vec probs(r.N * r.E), w(r.N * r.k);
  Ints idx(r.N * r.k);
  host::moe_router_fwd(probs.data(), idx.data(), w.data(), nullptr, logits.data(), r.N, r.E, r.k, true, DType::f32);
  const Sorted s = sort(idx, r);
  Vec xs(r.N * r.k * C), out(r.N * C);
  host::moe_gather(xs.data(), x.data(), s.order.data(), r.N, r.k, C, DType::f32);
  for (int e = 0; e < r.E; ++e)
    for (int row = s.offsets[e]; row < s.offsets[e + 1]; ++row)
      for (int c = 0; c < C; ++c) xs[row * C + c] = (e + 1) / 4.0f * xs[row * C + c] + e / 8.0f;
  host::moe_combine_fwd(out.data(), xs.data(), w.data(), s.position.data(), r.N, r.k, C, DType::f32);
  Dbl want(r.N * C, 0);
  for (long long n = 0; n < r.N; ++n)
    for (int j = 0; j < r.k; ++j) {
      const int e = idx[n * r.k + j];
      for (int c = 0; c < C; ++c) want[n * C + c] += double{w[n * r.k + j]} * ((e + 1) / 4.0 * x[n * C + c] + e / 8.0);
    }
  EXPECT_LE(rel_err(out, want), kRefTol);
}

// The experts' grouped matmul (kernels/host/matmul.h): each expert's sorted rows times its
// weight, bit for bit matmul_fwd on those rows; an expert without a weight (computed elsewhere)
// leaves its rows as they were; fp32 against a double reference.
TEST(MoeHost, GroupedMatmulIsEachExpertsMatmul) {
  const Route r{13, 7, 3};
  constexpr int C = 37, OC = 29;
  Vec probs(r.N * r.E), w(r.N * r.k);
  Ints idx(r.N * r.k);
  host::moe_router_fwd(probs.data(), idx.data(), w.data(), nullptr, random_vec(r.N * r.E, 110, -2, 2).data(), r.N,
                       r.E, r.k, true, DType::f32);
  const Sorted s = sort(idx, r);
  const long long rows = r.N * r.k;
  for (DType dt : {DType::f32, DType::bf16, DType::f16}) {
    const std::size_t es = dtype_size(dt);
    const Bytes x = pack(random_vec(rows * C, 111), dt), out0 = pack(random_vec(rows * OC, 112), dt);
    std::vector<Bytes> weights;
    std::vector<const void*> ptrs;
    for (int e = 0; e < r.E; ++e) {
      weights.push_back(pack(random_vec(OC * C, 120 + static_cast<std::uint32_t>(e)), dt));
      ptrs.push_back(e == 2 ? nullptr : weights.back().data());
    }
    Bytes got = out0, want = out0;
    host::matmul_grouped_fwd(got.data(), x.data(), ptrs.data(), s.offsets.data(), r.E, C, OC, dt);
    for (int e = 0; e < r.E; ++e) {
      if (ptrs[e] == nullptr) continue;
      host::matmul_fwd(want.data() + s.offsets[e] * OC * es, x.data() + s.offsets[e] * C * es, ptrs[e], nullptr,
                       s.offsets[e + 1] - s.offsets[e], C, OC, dt);
    }
    EXPECT_EQ(got, want) << dtype_name(dt);
    EXPECT_TRUE(std::equal(got.begin() + s.offsets[2] * OC * es, got.begin() + s.offsets[3] * OC * es,
                           out0.begin() + s.offsets[2] * OC * es))
        << "the rows of the expert without a weight were written, " << dtype_name(dt);
    EXPECT_LT(s.offsets[2], s.offsets[3]) << "the test needs rows routed to expert 2";
    if (dt != DType::f32) continue;
    const Vec xv = unpack(x, dt), gv = unpack(got, dt);
    Vec gotv;  // the routed rows with a weight, and their double reference
    Dbl routed;
    for (int e = 0; e < r.E; ++e) {
      if (ptrs[e] == nullptr) continue;
      const Vec wv = unpack(weights[e], dt);
      for (int row = s.offsets[e]; row < s.offsets[e + 1]; ++row)
        for (int o = 0; o < OC; ++o) {
          double acc = 0;
          for (int c = 0; c < C; ++c) acc += double{xv[row * C + c]} * wv[o * C + c];
          routed.push_back(acc);
          gotv.push_back(gv[row * OC + o]);
        }
    }
    EXPECT_LE(rel_err(gotv, routed), kRefTol);
  }
}

// ---- every op: determinism, zero rows, bad configs --------------------------------------------

std::vector<Bytes> run_all(DType dt) {
  const Route r{600, 8, 2};
  constexpr int C = 37;
  const Bytes logits = pack(random_vec(r.N * r.E, 100, -3, 3), dt);
  Vec probs(r.N * r.E), w(r.N * r.k), prob_sum(r.E);
  Ints idx(r.N * r.k);
  host::moe_router_fwd(probs.data(), idx.data(), w.data(), prob_sum.data(), logits.data(), r.N, r.E, r.k, true, dt);
  const Sorted s = sort(idx, r);
  const Bytes x = pack(random_vec(r.N * C, 101), dt), dout = pack(random_vec(r.N * C, 102), dt);
  Bytes xs(r.N * r.k * C * dtype_size(dt)), out(x.size()), dy(xs.size()), dinp = pack(random_vec(r.N * C, 103), dt);
  host::moe_gather(xs.data(), x.data(), s.order.data(), r.N, r.k, C, dt);
  host::moe_combine_fwd(out.data(), xs.data(), w.data(), s.position.data(), r.N, r.k, C, dt);
  Vec dw(w.size());
  host::moe_combine_bwd(dy.data(), dw.data(), dout.data(), xs.data(), w.data(), s.position.data(), r.N, r.k, C, dt);
  host::moe_scatter_add(dinp.data(), dy.data(), s.position.data(), r.N, r.k, C, dt);
  const Vec daux = random_vec(r.E, 104);
  Bytes dlogits(logits.size());
  host::moe_router_bwd(dlogits.data(), dw.data(), probs.data(), idx.data(), daux.data(), r.N, r.E, r.k, true, dt);
  const auto raw = [](const auto& v) {
    Bytes b(v.size() * sizeof(v[0]));
    std::memcpy(b.data(), v.data(), b.size());
    return b;
  };
  return {raw(probs), raw(w), raw(prob_sum), raw(idx), raw(s.offsets), raw(s.order), raw(s.position),
          xs, out, dy, raw(dw), dinp, dlogits};
}

TEST(MoeHost, BitwiseDeterministicForAnyThreadCount) {
  ThreadCount restore;
  for (DType dt : kDTypes) {
    omp_set_num_threads(1);
    const auto one = run_all(dt);
    for (int threads : {2, 3, 7}) {
      omp_set_num_threads(threads);
      const auto got = run_all(dt);
      for (std::size_t i = 0; i < one.size(); ++i)
        EXPECT_TRUE(got[i] == one[i]) << "output " << i << " " << dtype_name(dt) << ": 1 thread vs " << threads;
    }
  }
}

TEST(MoeHost, ZeroRowsAreNoOps) {
  float prob_sum[8] = {5, 5, 5, 5, 5, 5, 5, 5};
  host::moe_router_fwd(nullptr, nullptr, nullptr, prob_sum, nullptr, 0, 8, 2, true, DType::bf16);
  EXPECT_EQ(prob_sum[0], 5.0f) << "N = 0 writes nothing";
  host::moe_router_bwd(nullptr, nullptr, nullptr, nullptr, nullptr, 0, 8, 2, true, DType::bf16);
  host::moe_gather(nullptr, nullptr, nullptr, 0, 2, 4096, DType::bf16);
  host::moe_combine_fwd(nullptr, nullptr, nullptr, nullptr, 0, 2, 4096, DType::bf16);
  host::moe_combine_bwd(nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, 0, 2, 4096, DType::bf16);
  host::moe_scatter_add(nullptr, nullptr, nullptr, 0, 2, 4096, DType::bf16);
}

TEST(MoeHost, BadExpertCountsThrow) {
  Vec p(16), w(16), logits(16);
  Ints idx(16), offsets(16);
  EXPECT_THROW(host::moe_router_fwd(p.data(), idx.data(), w.data(), nullptr, logits.data(), 1, 4, 5, true,
                                    DType::f32),
               Error);
  EXPECT_THROW(host::moe_router_fwd(p.data(), idx.data(), w.data(), nullptr, logits.data(), 1, 4, 0, true,
                                    DType::f32),
               Error);
  EXPECT_THROW(host::moe_router_bwd(logits.data(), w.data(), p.data(), idx.data(), nullptr, 1, 0, 1, false,
                                    DType::f32),
               Error);
  EXPECT_THROW(host::moe_sort(offsets.data(), idx.data(), idx.data(), idx.data(), 0, 2, 3), Error);
}

}  // namespace
}  // namespace strata
