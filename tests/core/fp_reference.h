#pragma once
// Test helpers for the dtype conversions: an independent reference (fields decoded into a
// double with ldexp, not the code under test), a round-to-nearest-even checker, and input
// sets (edge values, tie sweeps, random bit patterns). Shared by tests/core and tests/kernels.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "core/dtype.h"

namespace strata::test {

inline std::uint32_t bits_of(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline float float_of(std::uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// A 16-bit binary format: 1 sign bit, kExpBits exponent bits, kManBits mantissa bits.
struct Format16 {
  int exp_bits;
  int man_bits;
  const char* name;

  int bias() const { return (1 << (exp_bits - 1)) - 1; }
  std::uint16_t exp_mask() const { return static_cast<std::uint16_t>(((1 << exp_bits) - 1) << man_bits); }
  std::uint16_t man_mask() const { return static_cast<std::uint16_t>((1 << man_bits) - 1); }
  std::uint16_t quiet_bit() const { return static_cast<std::uint16_t>(1 << (man_bits - 1)); }
  std::uint16_t inf_bits() const { return exp_mask(); }
  std::uint16_t max_finite_bits() const { return static_cast<std::uint16_t>(inf_bits() - 1); }
  bool is_nan(std::uint16_t h) const { return (h & exp_mask()) == exp_mask() && (h & man_mask()); }

  // The value of the bits, from the fields: (-1)^s * 1.m * 2^(e - bias), subnormals
  // 0.m * 2^(1 - bias). NaN for NaN patterns.
  double decode(std::uint16_t h) const {
    const int e = (h & exp_mask()) >> man_bits;
    const int m = h & man_mask();
    double magnitude;
    if (e == (1 << exp_bits) - 1)
      magnitude = m ? std::numeric_limits<double>::quiet_NaN() : HUGE_VAL;
    else if (e == 0)
      magnitude = std::ldexp(m, 1 - bias() - man_bits);
    else
      magnitude = std::ldexp((1 << man_bits) + m, e - bias() - man_bits);
    return (h & 0x8000) ? -magnitude : magnitude;
  }
  // The magnitude one step past the largest finite value, as if the exponent were unbounded:
  // values from the midpoint between it and the largest finite value up round to Inf.
  double overflow_magnitude() const { return std::ldexp(1.0, bias() + 1); }
};

inline constexpr Format16 kFp16{5, 10, "fp16"};
inline constexpr Format16 kBf16{8, 7, "bf16"};

// Checks that `out` is `in` rounded to the nearest `fmt` value, ties to even, with overflow to
// Inf at the right threshold, the sign kept (also for zero), and a NaN turned into a quiet
// NaN of the same sign that keeps the top payload bits.
inline testing::AssertionResult is_rne(const Format16& fmt, float in, std::uint16_t out) {
  const std::uint32_t x = bits_of(in);
  auto fail = [&](const char* why) {
    return testing::AssertionFailure() << fmt.name << ": fp32 0x" << std::hex << x << " -> 0x"
                                       << out << ": " << why;
  };
  if (((x >> 31) != 0) != ((out & 0x8000) != 0)) return fail("sign changed");
  if (std::isnan(in)) {
    if (!fmt.is_nan(out)) return fail("NaN became a non-NaN");
    if (!(out & fmt.quiet_bit())) return fail("NaN not quiet");
    const int shift = 23 - fmt.man_bits;
    const std::uint32_t payload_mask = fmt.man_mask() & ~fmt.quiet_bit();
    if ((out & payload_mask) != ((x >> shift) & payload_mask)) return fail("NaN payload lost");
    return testing::AssertionSuccess();
  }
  const double v = std::fabs(static_cast<double>(in));
  const auto m = static_cast<std::uint16_t>(out & 0x7FFF);
  const bool even = (m & 1) == 0;
  if (m > fmt.inf_bits()) return fail("non-NaN became NaN");
  if (m == fmt.inf_bits()) {
    const double threshold = (fmt.decode(fmt.max_finite_bits()) + fmt.overflow_magnitude()) / 2;
    return v >= threshold ? testing::AssertionSuccess() : fail("Inf below the overflow threshold");
  }
  // All midpoints below are exact in double (at most a few more bits than the format).
  const double r = fmt.decode(m);
  const double above = m == fmt.max_finite_bits() ? fmt.overflow_magnitude()
                                                  : fmt.decode(static_cast<std::uint16_t>(m + 1));
  const double upper_mid = (r + above) / 2;
  if (v > upper_mid || (v == upper_mid && !even)) return fail("should round up");
  if (m > 0) {
    const double lower_mid = (fmt.decode(static_cast<std::uint16_t>(m - 1)) + r) / 2;
    if (v < lower_mid || (v == lower_mid && !even)) return fail("should round down");
  }
  return testing::AssertionSuccess();
}

// Interesting fp32 inputs: zeros, Inf, NaNs (quiet, signalling, payloads), extremes of fp32
// and of both 16-bit formats, ties and near-ties at several places.
inline std::vector<float> edge_fp32() {
  std::vector<std::uint32_t> bits = {
      0x00000000, 0x80000000, 0x7F800000, 0xFF800000,              // +-0, +-Inf
      0x7FC00000, 0xFFC00000, 0x7F800001, 0xFF800001, 0x7FFFFFFF,  // NaNs
      0xFFFFFFFF, 0x7FA00000, 0x7F802000, 0x7FBFE000, 0x7F810000, 0x7F80FFFF,
      0x00000001, 0x80000001, 0x007FFFFF, 0x807FFFFF, 0x00800000,  // fp32 subnormals, min normal
      0x7F7FFFFF, 0xFF7FFFFF, 0x7F7F7FFF, 0x7F7F8000, 0x7F7F8001,  // fp32 max, bf16 overflow
      0x3F800000, 0xBF800000, 0x3F808000, 0x3F818000, 0x3F808001, 0x3F807FFF, 0x3FFFFFFF,
      0x00008000, 0x00018000, 0x00008001,                          // bf16 subnormal ties
      0x477FE000, 0x477FEFFF, 0x477FF000, 0x477FF001, 0x47800000,  // fp16 max, overflow
      0xC77FF000, 0xC77FEFFF, 0x3F801000, 0x3F803000, 0x3F801001,  // fp16 ties
      0x33800000, 0x33000000, 0x33000001, 0x33C00000, 0x32800000,  // fp16 subnormal ties
      0x387FC000, 0x387FE000, 0x387FDFFF, 0x38800000, 0x387FFFFF,  // fp16 subnormal -> normal
      0xB3000000, 0xB3000001, 0x3DCCCCCD, 0xC2F6E979, 0x4479FFFF,
  };
  std::vector<float> out;
  for (std::uint32_t b : bits) out.push_back(float_of(b));
  return out;
}

// Random fp32 bit patterns, a mix of: uniform bits; exponents near the range of fp16; and
// exact midpoints between neighbouring fp16 / bf16 values, and one fp32 ulp either side.
inline std::vector<float> random_fp32(std::size_t n, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<float> out(n);
  for (std::size_t i = 0; i < n; ++i) {
    const std::uint64_t r = rng();
    const auto lo = static_cast<std::uint32_t>(r);
    const auto kind = static_cast<unsigned>(r >> 32) % 4;
    if (kind == 0) {
      out[i] = float_of(lo);
    } else if (kind == 1) {  // exponent 96..159: fp16 subnormals up to past its overflow
      const std::uint32_t e = 96 + static_cast<std::uint32_t>((r >> 40) % 64);
      out[i] = float_of((lo & 0x807FFFFFu) | (e << 23));
    } else {
      const Format16& fmt = kind == 2 ? kFp16 : kBf16;
      auto h = static_cast<std::uint16_t>(lo % fmt.max_finite_bits());  // h + 1 finite
      const double mid = (fmt.decode(h) + fmt.decode(static_cast<std::uint16_t>(h + 1))) / 2;
      float f = static_cast<float>(mid);  // exact: a midpoint has few significant bits
      const int nudge = static_cast<int>((r >> 48) % 3);
      if (nudge == 1) f = std::nextafter(f, HUGE_VALF);
      if (nudge == 2) f = std::nextafter(f, 0.0f);
      out[i] = (r >> 63) ? -f : f;
    }
  }
  return out;
}

// Structured sweep: every value of the bits above `dropped_bits` (sign, exponent, the kept
// mantissa), each with the dropped bits set to 0, just below half, half, just above half, all
// ones. Covers every rounding case of every binade of a format that keeps 32 - dropped_bits.
inline std::vector<float> tie_sweep_fp32(int dropped_bits) {
  const std::uint32_t half = 1u << (dropped_bits - 1);
  const std::uint32_t lows[] = {0, half - 1, half, half + 1, (half << 1) - 1};
  std::vector<float> out;
  out.reserve((std::size_t{1} << (32 - dropped_bits)) * 5);
  for (std::uint64_t high = 0; high < (std::uint64_t{1} << (32 - dropped_bits)); ++high)
    for (std::uint32_t low : lows)
      out.push_back(float_of(static_cast<std::uint32_t>(high << dropped_bits) | low));
  return out;
}

// Source bytes for n elements of `from`: edge values first, then random bits (which cover
// every class of value: NaNs with payloads, subnormals, Inf) and random near-tie values.
inline std::vector<unsigned char> source_bytes(DType from, std::size_t n, std::uint64_t seed) {
  std::vector<float> values = edge_fp32();
  const std::vector<float> random = random_fp32(n, seed);
  values.insert(values.end(), random.begin(), random.end());
  values.resize(n);
  std::vector<unsigned char> out(n * dtype_size(from));
  for (std::size_t i = 0; i < n; ++i) {
    if (from == DType::f32) {
      std::memcpy(out.data() + 4 * i, &values[i], 4);
    } else {  // take 16 bits of the pattern: all classes of 16-bit values occur
      const std::uint32_t bits = bits_of(values[i]);
      const auto h = static_cast<std::uint16_t>(i % 2 ? bits >> 16 : bits ^ (bits >> 16));
      std::memcpy(out.data() + 2 * i, &h, 2);
    }
  }
  return out;
}

// All 65,536 16-bit patterns, in order.
inline std::vector<std::uint16_t> all_16bit_patterns() {
  std::vector<std::uint16_t> out(65536);
  for (std::uint32_t i = 0; i < 65536; ++i) out[i] = static_cast<std::uint16_t>(i);
  return out;
}

}  // namespace strata::test
