// models/param_init.h: the counter-based normal generator (Note [Fast normal init]). Its
// distribution (moments, the mass within 1, 2 and 3 standard deviations, the tail bound, the
// pairs' angles uniform over the circle and their radii as Box-Muller's), and its promise: an
// element's bits depend on (seed, name, index) only: not on the thread count, nor on how many
// elements were asked for, nor on the machine (some pinned).
#include <gtest/gtest.h>
#include <omp.h>

#include <array>
#include <bit>
#include <cmath>
#include <cstddef>
#include <vector>

#include "models/param_init.h"

namespace strata::models {
namespace {

constexpr double kPi = 3.14159265358979323846;

std::vector<float> normals(std::size_t n, std::uint64_t seed, const char* name) {
  std::vector<float> v(n);
  fill_normal(v.data(), n, seed, name, 1.0);
  return v;
}

TEST(ParamInit, StandardNormalMoments) {
  const std::size_t n = std::size_t{1} << 22;
  const std::vector<float> z = normals(n, 3, "model.layers.0.mlp.up_proj.weight");
  double sum = 0, sum2 = 0, sum3 = 0, sum4 = 0, biggest = 0;
  std::array<std::size_t, 3> within{};  // |z| < 1, 2, 3
  for (float f : z) {
    const double x = f;
    sum += x;
    sum2 += x * x;
    sum3 += x * x * x;
    sum4 += x * x * x * x;
    biggest = std::max(biggest, std::fabs(x));
    for (int k = 0; k < 3; ++k) within[static_cast<std::size_t>(k)] += std::fabs(x) < k + 1 ? 1 : 0;
  }
  const double N = static_cast<double>(n);
  EXPECT_NEAR(sum / N, 0.0, 5.0 / std::sqrt(N));
  EXPECT_NEAR(sum2 / N, 1.0, 0.005);
  EXPECT_NEAR(sum3 / N, 0.0, 0.01);
  EXPECT_NEAR(sum4 / N, 3.0, 0.03);
  EXPECT_NEAR(static_cast<double>(within[0]) / N, 0.682689, 0.002);
  EXPECT_NEAR(static_cast<double>(within[1]) / N, 0.954500, 0.001);
  EXPECT_NEAR(static_cast<double>(within[2]) / N, 0.997300, 0.0003);
  EXPECT_LE(biggest, std::sqrt(-2.0 * std::log(0x1.0p-24)) + 1e-5);  // 24-bit uniforms' tail
  EXPECT_GT(biggest, 4.5);
}

// Elements 2j and 2j + 1 are one Box-Muller pair (r cos t, r sin t): t uniform, so each eighth of
// the circle holds an eighth of the pairs (a quadrant turned wrongly would empty one), r^2 / 2
// exponential, and the two uncorrelated.
TEST(ParamInit, PairsAreUniformAnglesWithBoxMullerRadii) {
  const std::size_t pairs = std::size_t{1} << 20;
  const std::vector<float> z = normals(2 * pairs, 11, "lm_head.weight");
  std::array<std::size_t, 8> octant{};
  std::size_t far = 0;
  double cross = 0;
  for (std::size_t j = 0; j < pairs; ++j) {
    const double a = z[2 * j], b = z[2 * j + 1];
    const double t = std::atan2(b, a) + kPi;  // [0, 2 pi]
    octant[std::min<std::size_t>(7, static_cast<std::size_t>(t / (kPi / 4)))] += 1;
    far += a * a + b * b > 2.0 ? 1 : 0;
    cross += a * b;
  }
  const double P = static_cast<double>(pairs);
  for (std::size_t k = 0; k < 8; ++k) EXPECT_NEAR(static_cast<double>(octant[k]) / P, 0.125, 0.002) << "octant " << k;
  EXPECT_NEAR(static_cast<double>(far) / P, std::exp(-1.0), 0.002);  // P(r^2 > 2) = e^-1
  EXPECT_NEAR(cross / P, 0.0, 0.01);
}

TEST(ParamInit, AnElementDependsOnSeedNameAndIndexOnly) {
  const std::size_t n = 100003;  // odd: the last element is the first of its pair
  std::vector<float> first;
  for (int threads : {1, 2, 3}) {
    omp_set_num_threads(threads);
    const std::vector<float> v = normals(n, 5, "w");
    if (first.empty()) {
      first = v;
    } else {
      EXPECT_EQ(v, first) << threads << " threads";
    }
  }
  omp_set_num_threads(omp_get_num_procs());
  const std::vector<float> longer = normals(n + 6, 5, "w");
  EXPECT_TRUE(std::equal(first.begin(), first.end(), longer.begin())) << "a prefix must not depend on the length";
  EXPECT_NE(normals(n, 6, "w"), first) << "another seed";
  EXPECT_NE(normals(n, 5, "v"), first) << "another name";
  std::vector<float> scaled(n);
  fill_normal(scaled.data(), n, 5, "w", 0.02);
  for (std::size_t i = 0; i < n; i += 997) EXPECT_EQ(scaled[i], 0.02f * first[i]) << i;
}

// The first values of one stream, as bits: the same on every CPU, compiler and build type (the
// file is compiled without contracted multiply-adds). A change of the generator changes every
// random-weight run's numbers; it must be meant (and these updated).
TEST(ParamInit, TheBitsArePinned) {
  constexpr std::uint32_t kWant[] = {0x3FC7C849u, 0xBFA22886u, 0xBEB822FCu, 0x3F6D16F3u, 0xBF51BCABu,
                                     0xBF422A4Du, 0x3EFEB1D5u, 0x3F1ECC03u, 0xBF6634C1u};
  const std::vector<float> v = normals(9, 1, "w");  // odd: the last is the first of its pair
  for (std::size_t i = 0; i < v.size(); ++i) {
    EXPECT_EQ(std::bit_cast<std::uint32_t>(v[i]), kWant[i]) << "element " << i << " = " << v[i];
  }
}

}  // namespace
}  // namespace strata::models
