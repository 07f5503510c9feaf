// kernels/host/quantize.h: group-wise INT8 / INT4 weight quantization. The round trip is within
// half a scale per element, scales are bf16(max|x| / qmax), int4 packs two values per byte (low
// nibble first, two's complement in [-7, 7]), the last group's padding quantizes to 0 and is
// never written back, the dtypes round the fp32 product once, and bad input is refused.
#include "kernels/host/quantize.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "core/error.h"

namespace strata::kernels::host {
namespace {

std::vector<float> random_values(std::size_t n, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, 0.05f);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

const std::uint16_t* scales_of(const std::vector<std::uint8_t>& q, std::size_t n, int group, int bits) {
  return reinterpret_cast<const std::uint16_t*>(q.data() + quant_packed_bytes(n, group, bits));
}

TEST(Quantize, SizesAndLayout) {
  EXPECT_EQ(quant_groups(256, 128), 2u);
  EXPECT_EQ(quant_groups(257, 128), 3u);
  EXPECT_EQ(quant_packed_bytes(257, 128, 8), 3u * 128);
  EXPECT_EQ(quant_packed_bytes(257, 128, 4), 3u * 64);
  EXPECT_EQ(quant_bytes(257, 64, 8), 5u * 64 + 5 * 2);
  EXPECT_EQ(quant_bytes(257, 64, 4), 5u * 32 + 5 * 2);
  EXPECT_TRUE(quant_format_valid(8, 128) && quant_format_valid(4, 64));
  EXPECT_FALSE(quant_format_valid(2, 128) || quant_format_valid(8, 32));
}

TEST(Quantize, RoundTripWithinHalfAScale) {
  for (int bits : {8, 4}) {
    for (int group : {64, 128}) {
      for (std::size_t n : {std::size_t{1}, std::size_t{63}, std::size_t{128}, std::size_t{1000}, std::size_t{4099}}) {
        SCOPED_TRACE(testing::Message() << "bits " << bits << " group " << group << " n " << n);
        std::vector<float> x = random_values(n, static_cast<std::uint32_t>(n * 7 + bits + group));
        if (n > 10) x[5] = 0.0f;
        std::vector<std::uint8_t> q(quant_bytes(n, group, bits), 0xCD);
        quantize_groupwise(x.data(), n, group, bits, q.data());
        std::vector<float> y(n + 1, -123.0f);
        dequantize_groupwise(y.data(), DType::f32, q.data(), n, group, bits);
        EXPECT_EQ(y[n], -123.0f) << "nothing written past numel";
        const std::uint16_t* scales = scales_of(q, n, group, bits);
        const float qmax = static_cast<float>(quant_qmax(bits));
        for (std::size_t g = 0; g < quant_groups(n, group); ++g) {
          const std::size_t b = g * static_cast<std::size_t>(group), e = std::min(n, b + group);
          float amax = 0.0f;
          for (std::size_t i = b; i < e; ++i) amax = std::max(amax, std::fabs(x[i]));
          EXPECT_EQ(scales[g], fp32_to_bf16(amax / qmax)) << "group " << g;
          const float s = bf16_to_fp32(scales[g]);
          for (std::size_t i = b; i < e; ++i) {
            ASSERT_LE(std::fabs(x[i] - y[i]), s / 2) << "element " << i;
            const int v = quant_value(q.data(), i, bits);
            ASSERT_LE(std::abs(v), quant_qmax(bits));
            ASSERT_EQ(y[i], static_cast<float>(v) * s);
          }
        }
      }
    }
  }
}

TEST(Quantize, Int4PacksLowNibbleFirst) {
  // One group of 64: max 7 -> scale 1 (exact in bf16), values are their own codes.
  std::vector<float> x(64, 0.0f);
  x[0] = 7.0f;
  x[1] = -7.0f;
  x[2] = 1.0f;
  x[3] = -1.0f;
  x[4] = 2.4f;   // rounds to 2
  x[5] = -2.5f;  // half to even: -2
  std::vector<std::uint8_t> q(quant_bytes(64, 64, 4));
  quantize_groupwise(x.data(), 64, 64, 4, q.data());
  EXPECT_EQ(q[0], 0x97);  // low 7, high -7 = 0b1001
  EXPECT_EQ(q[1], 0xF1);  // low 1, high -1 = 0b1111
  EXPECT_EQ(q[2], 0xE2);  // low 2, high -2 = 0b1110
  for (std::size_t i = 3; i < 32; ++i) EXPECT_EQ(q[i], 0);
  EXPECT_EQ(*scales_of(q, 64, 64, 4), fp32_to_bf16(1.0f));
  // INT8 of the same values: one byte each, two's complement, scale 7/127.
  std::vector<std::uint8_t> q8(quant_bytes(64, 64, 8));
  quantize_groupwise(x.data(), 64, 64, 8, q8.data());
  EXPECT_EQ(q8[0], 127);
  EXPECT_EQ(q8[1], static_cast<std::uint8_t>(-127));
}

TEST(Quantize, LastGroupPaddedWithZeros) {
  const std::size_t n = 130;  // a full group of 128 and 2 elements of a padded one
  std::vector<float> x = random_values(n, 3);
  for (int bits : {8, 4}) {
    std::vector<std::uint8_t> q(quant_bytes(n, 128, bits), 0xFF);
    quantize_groupwise(x.data(), n, 128, bits, q.data());
    for (std::size_t i = n; i < 256; ++i) EXPECT_EQ(quant_value(q.data(), i, bits), 0) << i;
    // The padded group's scale comes from its 2 real elements only.
    const float amax = std::max(std::fabs(x[128]), std::fabs(x[129]));
    EXPECT_EQ(scales_of(q, n, 128, bits)[1], fp32_to_bf16(amax / static_cast<float>(quant_qmax(bits))));
  }
}

TEST(Quantize, ZeroGroupsAndTinyValues) {
  std::vector<float> x(128, 0.0f);
  x[64] = 1e-40f;  // a subnormal: its scale rounds to a subnormal bf16 or 0
  std::vector<std::uint8_t> q(quant_bytes(128, 64, 8));
  quantize_groupwise(x.data(), 128, 64, 8, q.data());
  EXPECT_EQ(scales_of(q, 128, 64, 8)[0], 0);
  std::vector<float> y(128, 1.0f);
  dequantize_groupwise(y.data(), DType::f32, q.data(), 128, 64, 8);
  for (std::size_t i = 0; i < 64; ++i) EXPECT_EQ(y[i], 0.0f);
  EXPECT_LE(std::fabs(y[64] - x[64]), 1e-40f);
}

TEST(Quantize, DtypesRoundTheFp32ProductOnce) {
  const std::size_t n = 777;
  const std::vector<float> x = random_values(n, 11);
  for (int bits : {8, 4}) {
    std::vector<std::uint8_t> q(quant_bytes(n, 128, bits));
    quantize_groupwise(x.data(), n, 128, bits, q.data());
    std::vector<float> f(n);
    dequantize_groupwise(f.data(), DType::f32, q.data(), n, 128, bits);
    std::vector<std::uint16_t> b(n), h(n);
    dequantize_groupwise(b.data(), DType::bf16, q.data(), n, 128, bits);
    dequantize_groupwise(h.data(), DType::f16, q.data(), n, 128, bits);
    for (std::size_t i = 0; i < n; ++i) {
      ASSERT_EQ(b[i], fp32_to_bf16(f[i])) << i;
      ASSERT_EQ(h[i], fp32_to_fp16(f[i])) << i;
    }
  }
}

TEST(Quantize, Deterministic) {
  const std::size_t n = 300'000;  // large enough for the OpenMP dequantization
  const std::vector<float> x = random_values(n, 17);
  std::vector<std::uint8_t> q1(quant_bytes(n, 128, 4)), q2(q1.size());
  quantize_groupwise(x.data(), n, 128, 4, q1.data());
  quantize_groupwise(x.data(), n, 128, 4, q2.data());
  EXPECT_EQ(q1, q2);
  std::vector<std::uint16_t> a(n), b(n);
  dequantize_groupwise(a.data(), DType::bf16, q1.data(), n, 128, 4);
  dequantize_groupwise(b.data(), DType::bf16, q2.data(), n, 128, 4);
  EXPECT_EQ(a, b);
}

TEST(Quantize, RefusesBadInput) {
  std::vector<float> x(64, 1.0f);
  std::vector<std::uint8_t> q(quant_bytes(64, 64, 8));
  x[3] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_THROW(quantize_groupwise(x.data(), 64, 64, 8, q.data()), Error);
  x[3] = std::numeric_limits<float>::infinity();
  EXPECT_THROW(quantize_groupwise(x.data(), 64, 64, 8, q.data()), Error);
  x[3] = 1.0f;
  EXPECT_THROW(quantize_groupwise(x.data(), 64, 32, 8, q.data()), Error);
  EXPECT_THROW(quantize_groupwise(x.data(), 64, 64, 3, q.data()), Error);
}

}  // namespace
}  // namespace strata::kernels::host
