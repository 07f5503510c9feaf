// Scaffolding shared by the host kernel tests (test_kernels_host.cpp, test_llama_ops_host.cpp):
// random inputs from a seed, dtype round trips, the norm-wise relative error, and central finite
// differences of L = sum(out * R) with the checks that use them.
//
// Everything is `inline` (a test uses only part of it). The inputs must not change: a seed gives
// the same values as the per-file copies these replace (std::mt19937 through
// std::uniform_real_distribution<float>).
#pragma once

#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <random>
#include <vector>

#include "core/dtype.h"

namespace strata::test {

using Bytes = std::vector<unsigned char>;
using Vec = std::vector<float>;
using Dbl = std::vector<double>;

// The storage dtypes every op is tested in.
inline constexpr DType kDTypes[] = {DType::f32, DType::bf16, DType::f16};

// Forward vs a double reference: the ops are fp32 with fp32 (or double) sums over at most a few
// hundred terms, ~1e-7 relative per output norm-wise; 1e-5 leaves 100x.
inline constexpr double kRefTol = 1e-5;

// Finite differences. Inputs are O(1), so an absolute step h = 1e-2 is a 1e-2 relative one.
// Truncation error of the central difference is h^2/6 |f'''| ~ 2e-5 relative; the fp32
// forward's rounding noise in L is ~1e-7 |L| (L sums <= 400 products in double from fp32
// outputs), divided by 2h: ~1e-5 of a gradient element. Measured on the GPT ops: 4e-7..3.5e-5
// (printed); 2e-3 leaves 50x margin, and every injected bug gives >= 0.19 (printed), ~100x
// above it.
inline constexpr float kFdStep = 1e-2f;
inline constexpr double kFdTol = 2e-3;

// ---- data and comparison --------------------------------------------------------------------

// n floats uniform in [lo, hi) from std::mt19937(seed).
inline Vec random_vec(std::size_t n, std::uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  Vec v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

inline Bytes pack(const Vec& v, DType t) {
  Bytes b(v.size() * dtype_size(t));
  convert(v.data(), DType::f32, b.data(), t, v.size());
  return b;
}
inline Vec unpack(const Bytes& b, DType t) {
  Vec v(b.size() / dtype_size(t));
  convert(b.data(), t, v.data(), DType::f32, v.size());
  return v;
}

// ||got - want||_2 / ||want||_2 (NaN anywhere gives NaN, which fails every <= check).
template <typename Got, typename Want>
double rel_err(const Got& got, const Want& want) {
  EXPECT_EQ(got.size(), want.size());
  double d2 = 0, w2 = 0;
  for (std::size_t i = 0; i < got.size() && i < want.size(); ++i) {
    const double d = static_cast<double>(got[i]) - static_cast<double>(want[i]);
    d2 += d * d;
    w2 += static_cast<double>(want[i]) * static_cast<double>(want[i]);
  }
  return std::sqrt(d2 / w2);
}

// sum(out * R) in double.
inline double weighted_sum(const Vec& out, const Vec& R) {
  double s = 0;
  for (std::size_t i = 0; i < out.size(); ++i) s += static_cast<double>(out[i]) * R[i];
  return s;
}

// ---- finite differences ---------------------------------------------------------------------

// Restores the OpenMP thread count on scope exit.
struct ThreadCount {
  int saved = omp_get_max_threads();
  ~ThreadCount() { omp_set_num_threads(saved); }
};

// Central differences of loss() with respect to every element of x (restored afterwards).
// The denominator is the step actually taken after rounding x +- h to fp32. On one thread:
// thousands of tiny forwards, and waking a team costs milliseconds on a loaded machine.
inline Dbl numeric_grad(Vec& x, const std::function<double()>& loss) {
  ThreadCount restore;
  omp_set_num_threads(1);
  Dbl g(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) {
    const float x0 = x[i], xp = x0 + kFdStep, xm = x0 - kFdStep;
    x[i] = xp;
    const double lp = loss();
    x[i] = xm;
    const double lm = loss();
    x[i] = x0;
    g[i] = (lp - lm) / (static_cast<double>(xp) - static_cast<double>(xm));
  }
  return g;
}

inline void expect_fd(const char* what, const Vec& analytic, const Dbl& numeric) {
  const double e = rel_err(analytic, numeric);
  std::printf("  FD %-34s rel err %.2e\n", what, e);
  EXPECT_LE(e, kFdTol) << what;
}
// A check that cannot fail proves nothing: the same comparison must reject a plausible bug.
inline void expect_fd_rejects(const char* bug, const Vec& mutated, const Dbl& numeric) {
  const double e = rel_err(mutated, numeric);
  std::printf("  FD rejects %-26s rel err %.2e\n", bug, e);
  EXPECT_GT(e, 5 * kFdTol) << bug;
}

}  // namespace strata::test
