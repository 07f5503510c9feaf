#include "models/param_init.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <utility>
#include <vector>

namespace strata::models {
namespace {

constexpr std::uint64_t kGolden = 0x9E3779B97F4A7C15ull;  // SplitMix64's increment

std::uint64_t splitmix64(std::uint64_t x) {
  x += kGolden;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// FNV-1a: a stable hash of the tensor's name, so that values do not depend on layout order.
std::uint64_t name_hash(std::string_view s) {
  std::uint64_t h = 0xCBF29CE484222325ull;
  for (char c : s) {
    h ^= static_cast<unsigned char>(c);
    h *= 0x100000001B3ull;
  }
  return h;
}

// Note [Fast normal init]
// ~~~~~~~~~~~~~~~~~~~~~~~
// A random-weight model (a preset, a benchmark) is initialized on the host before anything runs,
// so the generator's speed is the start-up time: Qwen3-30B-A3B is 30.5 B elements. Box-Muller in
// double with libm's log and cos, one element per pair of 53-bit uniforms, ran at 16 M elements/s
// per core (the dev VM): two minutes for that model on 16 cores, at every bench cell. Here a pair
// of elements comes from one 64-bit draw (the pair's index-th output of SplitMix64 seeded with
// the stream's key): two 24-bit uniforms u1 in (0, 1] and u2 in [0, 1), r = sqrt(-2 ln u1), and
// the two elements r cos(2 pi u2), r sin(2 pi u2), in float with the polynomials below (plain
// arithmetic that the compiler vectorizes; this file is compiled with -ffp-contract=off, so the
// bits are the same on every CPU and compiler: tests/models/test_param_init.cpp pins some).
// Tails stop at sqrt(-2 ln 2^-24) = 5.8 standard deviations.

constexpr int kPairsPerBlock = 64;  // pairs drawn, then computed, together

// take ? a : b by the bits, so that the loop stays free of branches for the vectorizer.
inline float pick(bool take, float a, float b) {
  const std::uint32_t mask = 0u - static_cast<std::uint32_t>(take);
  return std::bit_cast<float>((std::bit_cast<std::uint32_t>(a) & mask) | (std::bit_cast<std::uint32_t>(b) & ~mask));
}

// ln x for x in (0, 1]: x = m 2^e with m in [sqrt(1/2), sqrt(2)), ln m = 2 atanh(t), t = (m - 1) /
// (m + 1), |t| <= 0.172 (the odd series to t^9: under 1e-9 off). Branch-free, for the vectorizer.
inline float log_unit(float x) {
  const std::uint32_t bits = std::bit_cast<std::uint32_t>(x);
  const float m1 = std::bit_cast<float>((bits & 0x007FFFFFu) | 0x3F800000u);  // [1, 2)
  const bool high = m1 > 1.41421356f;
  const float m = pick(high, m1 * 0.5f, m1);
  const int e = static_cast<int>(bits >> 23) - 127 + static_cast<int>(high);
  const float t = (m - 1.0f) / (m + 1.0f), t2 = t * t;
  const float series =
      t * (2.0f + t2 * (2.0f / 3.0f + t2 * (2.0f / 5.0f + t2 * (2.0f / 7.0f + t2 * (2.0f / 9.0f)))));
  return static_cast<float>(e) * 0.693147181f + series;
}

// The pairs [first, first + count) of stream `key` (count <= kPairsPerBlock), times sd, into
// out[2 (j - first)] and out[2 (j - first) + 1] (Note [Fast normal init]).
void normal_pairs(std::uint64_t key, std::uint64_t first, int count, float sd, float* out) {
  std::uint32_t high[kPairsPerBlock], mid[kPairsPerBlock];
  for (int b = 0; b < count; ++b) {
    const std::uint64_t r = splitmix64(key + (first + static_cast<std::uint64_t>(b)) * kGolden);
    high[b] = static_cast<std::uint32_t>(r >> 40);
    mid[b] = static_cast<std::uint32_t>(r >> 16) & 0xFFFFFFu;
  }
  float z0[kPairsPerBlock], z1[kPairsPerBlock];
  for (int b = 0; b < count; ++b) {
    const float u1 = static_cast<float>(static_cast<std::int32_t>(high[b]) + 1) * 0x1.0p-24f;  // (0, 1]
    const float u2 = static_cast<float>(static_cast<std::int32_t>(mid[b])) * 0x1.0p-24f;       // [0, 1)
    const float radius = std::sqrt(-2.0f * log_unit(u1));
    // cos and sin of 2 pi u2: the quadrant from 4 u2, the angle within it a in [0, pi / 2) by
    // Taylor series to a^12 / a^13 (under 7e-9 off), then turned by the quadrant.
    const float q = u2 * 4.0f;
    const int quadrant = static_cast<int>(q);  // 0..3
    const float a = (q - static_cast<float>(quadrant)) * 1.57079633f, a2 = a * a;
    const float sa = a * (1.0f + a2 * (-1.0f / 6 + a2 * (1.0f / 120 + a2 * (-1.0f / 5040 + a2 * (1.0f / 362880 +
                     a2 * (-1.0f / 39916800 + a2 * (1.0f / 6227020800.0f)))))));
    const float ca = 1.0f + a2 * (-0.5f + a2 * (1.0f / 24 + a2 * (-1.0f / 720 + a2 * (1.0f / 40320 +
                     a2 * (-1.0f / 3628800 + a2 * (1.0f / 479001600.0f))))));
    // (cos, sin) of a + quadrant pi / 2: odd quadrants swap the two, signs by quadrant (exact).
    const bool odd = (quadrant & 1) != 0;
    const float c = pick(odd, sa, ca) * (1.0f - static_cast<float>((quadrant + 1) & 2));
    const float s = pick(odd, ca, sa) * (1.0f - static_cast<float>(quadrant & 2));
    z0[b] = sd * (radius * c);
    z1[b] = sd * (radius * s);
  }
  for (int b = 0; b < count; ++b) {
    out[2 * b] = z0[b];
    out[2 * b + 1] = z1[b];
  }
}

}  // namespace

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

void zero_gaps(const ModuleLayout& module, float* out) {
  // Every tensor writes all of its elements, so the whole module is not cleared first (that was
  // a serial pass over 6 GB for GPT-2 XL).
  std::vector<std::pair<std::size_t, std::size_t>> covered;  // (offset, end)
  for (const TensorSlot& t : module.tensors) covered.emplace_back(t.offset, t.offset + t.numel);
  std::sort(covered.begin(), covered.end());
  std::size_t at = 0;
  for (const auto& [begin, end] : covered) {
    if (begin > at) std::memset(out + at, 0, (begin - at) * sizeof(float));
    at = std::max(at, end);
  }
  if (module.numel > at) std::memset(out + at, 0, (module.numel - at) * sizeof(float));
}

void fill_normal(float* p, std::size_t n, std::uint64_t seed, std::string_view name, double stddev) {
  const std::uint64_t key = splitmix64(seed ^ name_hash(name));
  const auto sd = static_cast<float>(stddev);
  const std::size_t pairs = n / 2;
  const auto blocks = static_cast<std::int64_t>((pairs + kPairsPerBlock - 1) / kPairsPerBlock);
#pragma omp parallel for schedule(static)
  for (std::int64_t blk = 0; blk < blocks; ++blk) {
    const std::size_t first = static_cast<std::size_t>(blk) * kPairsPerBlock;
    const int count = static_cast<int>(std::min<std::size_t>(kPairsPerBlock, pairs - first));
    normal_pairs(key, first, count, sd, p + 2 * first);
  }
  if (n % 2 == 1) {  // the last element: the first of its pair
    float two[2];
    normal_pairs(key, pairs, 1, sd, two);
    p[n - 1] = two[0];
  }
}

void fill_value(float* p, std::size_t n, float value) { std::fill(p, p + n, value); }

}  // namespace strata::models
