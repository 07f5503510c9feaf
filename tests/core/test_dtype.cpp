// The scalar conversions of core/dtype.h against an independent reference: exhaustive for
// the 16-bit -> fp32 direction, edge cases and millions of random / structured inputs for
// the rounding direction. test_dtype_simd.cpp checks that every SIMD variant agrees.
#include "core/dtype.h"

#include <gtest/gtest.h>

#include <cmath>

#include "core/error.h"
#include "tests/core/fp_reference.h"

namespace strata {
namespace {

using test::bits_of;
using test::float_of;
using test::kBf16;
using test::kFp16;

TEST(DType, NamesSizesAndParsing) {
  EXPECT_EQ(dtype_size(DType::f32), 4u);
  EXPECT_EQ(dtype_size(DType::f16), 2u);
  EXPECT_EQ(dtype_size(DType::bf16), 2u);
  EXPECT_EQ(dtype_name(DType::f32), "fp32");
  EXPECT_EQ(dtype_name(DType::f16), "fp16");
  EXPECT_EQ(dtype_name(DType::bf16), "bf16");
  for (const char* s : {"fp32", "float32", "f32", "FP32"}) EXPECT_EQ(parse_dtype(s), DType::f32) << s;
  for (const char* s : {"fp16", "float16", "half", "f16"}) EXPECT_EQ(parse_dtype(s), DType::f16) << s;
  for (const char* s : {"bf16", "bfloat16", "BF16"}) EXPECT_EQ(parse_dtype(s), DType::bf16) << s;
  for (const char* s : {"", "fp8", "float", "bf16 ", "int8", "fp64"}) {
    EXPECT_THROW(parse_dtype(s), Error) << "'" << s << "'";
  }
  try {
    parse_dtype("fp8");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("fp8"), std::string::npos) << e.what();
  }
}

// Every fp16 pattern widened, checked against the fields decoded with ldexp.
TEST(DType, Fp16ToFp32ExhaustiveMatchesReference) {
  for (std::uint32_t i = 0; i < 65536; ++i) {
    const auto h = static_cast<std::uint16_t>(i);
    const float f = fp16_to_fp32(h);
    const double ref = kFp16.decode(h);
    ASSERT_EQ(std::signbit(f), (h & 0x8000) != 0) << std::hex << h;
    if (std::isnan(ref)) {
      // As vcvtph2ps: quiet bit set, the 10-bit payload moved to the top of the mantissa.
      const std::uint32_t expected = ((h & 0x8000u) << 16) | 0x7FC00000u | ((h & 0x3FFu) << 13);
      ASSERT_EQ(bits_of(f), expected) << std::hex << h;
    } else {
      ASSERT_EQ(static_cast<double>(f), ref) << std::hex << h;  // also +-Inf, +-0
    }
  }
}

TEST(DType, Bf16ToFp32ExhaustiveMatchesReference) {
  for (std::uint32_t i = 0; i < 65536; ++i) {
    const auto h = static_cast<std::uint16_t>(i);
    const float f = bf16_to_fp32(h);
    const double ref = kBf16.decode(h);
    ASSERT_EQ(std::signbit(f), (h & 0x8000) != 0) << std::hex << h;
    if (std::isnan(ref)) {
      ASSERT_EQ(bits_of(f), std::uint32_t{h} << 16) << std::hex << h;  // widening only
    } else {
      ASSERT_EQ(static_cast<double>(f), ref) << std::hex << h;
    }
  }
}

// half -> fp32 -> half is the identity, for every non-NaN pattern and every quiet NaN.
TEST(DType, RoundTripIsIdentity) {
  for (std::uint32_t i = 0; i < 65536; ++i) {
    const auto h = static_cast<std::uint16_t>(i);
    if (!kFp16.is_nan(h) || (h & kFp16.quiet_bit()))
      ASSERT_EQ(fp32_to_fp16(fp16_to_fp32(h)), h) << std::hex << h;
    else  // a signalling NaN comes back quiet, payload kept
      ASSERT_EQ(fp32_to_fp16(fp16_to_fp32(h)), h | kFp16.quiet_bit()) << std::hex << h;
    if (!kBf16.is_nan(h) || (h & kBf16.quiet_bit()))
      ASSERT_EQ(fp32_to_bf16(bf16_to_fp32(h)), h) << std::hex << h;
    else
      ASSERT_EQ(fp32_to_bf16(bf16_to_fp32(h)), h | kBf16.quiet_bit()) << std::hex << h;
  }
}

struct Case {
  std::uint32_t in;
  std::uint16_t out;
};

TEST(DType, Fp32ToBf16EdgeCases) {
  const Case cases[] = {
      {0x3F800000, 0x3F80},  // 1.0
      {0x3F808000, 0x3F80},  // tie, kept part even: down
      {0x3F818000, 0x3F82},  // tie, kept part odd: up to even
      {0x3F808001, 0x3F81},  // just above the tie: up
      {0x3F807FFF, 0x3F80},  // just below the tie: down
      {0xBF818000, 0xBF82},  // negative tie
      {0x3FFFFFFF, 0x4000},  // rounds up into the next binade
      {0x7F7F7FFF, 0x7F7F},  // largest bf16 stays
      {0x7F7F8000, 0x7F80},  // tie above the largest bf16 (odd): Inf
      {0x7F7FFFFF, 0x7F80},  // fp32 max: Inf
      {0xFF7FFFFF, 0xFF80},  // -fp32 max: -Inf
      {0x00000001, 0x0000},  // smallest fp32 subnormal: +0
      {0x80000001, 0x8000},  // -0
      {0x00008000, 0x0000},  // tie at half the smallest bf16 subnormal: even (0)
      {0x00008001, 0x0001},  // smallest bf16 subnormal (vcvtneps2bf16 would flush it)
      {0x00018000, 0x0002},  // subnormal tie, odd: up
      {0x807FFFFF, 0x8080},  // largest fp32 subnormal rounds up to the smallest normal
      {0x00000000, 0x0000},  {0x80000000, 0x8000},  // +-0
      {0x7F800000, 0x7F80},  {0xFF800000, 0xFF80},  // +-Inf
      {0x7FC00000, 0x7FC0},  {0xFFC00000, 0xFFC0},  // quiet NaN
      {0x7F800001, 0x7FC0},  {0xFF800001, 0xFFC0},  // signalling NaN, payload only in low bits
      {0x7FA00000, 0x7FE0},  {0xFF810000, 0xFFC1},  // signalling NaN, top payload kept
      {0x7FFFFFFF, 0x7FFF},  {0x7F80FFFF, 0x7FC0},  // would round into Inf if treated as a number
  };
  for (const Case& c : cases) {
    EXPECT_EQ(fp32_to_bf16(float_of(c.in)), c.out) << std::hex << "0x" << c.in;
    EXPECT_TRUE(test::is_rne(kBf16, float_of(c.in), c.out));  // the checker agrees
  }
}

TEST(DType, Fp32ToFp16EdgeCases) {
  const Case cases[] = {
      {0x3F800000, 0x3C00},  // 1.0
      {0x3F801000, 0x3C00},  // 1 + 2^-11: tie, down to even
      {0x3F803000, 0x3C02},  // 1 + 3 * 2^-11: tie, up to even
      {0x3F801001, 0x3C01},  // just above a tie
      {0xBFC00000, 0xBE00},  // -1.5
      {0x3FFFFFFF, 0x4000},  // rounds up into the next binade
      {0x477FE000, 0x7BFF},  // 65504, largest fp16
      {0x477FEFFF, 0x7BFF},  // just below 65520
      {0x477FF000, 0x7C00},  // 65520: tie above the largest (odd): Inf
      {0xC77FF000, 0xFC00},  // -65520: -Inf
      {0x47800000, 0x7C00},  // 65536
      {0x7F7FFFFF, 0x7C00},  // fp32 max
      {0x33800000, 0x0001},  // 2^-24, smallest fp16 subnormal
      {0x33000000, 0x0000},  // 2^-25: tie, to even (0)
      {0xB3000000, 0x8000},  // -2^-25: -0
      {0x33000001, 0x0001},  // just above 2^-25
      {0x33C00000, 0x0002},  // 1.5 * 2^-24: tie, up to even
      {0x32800000, 0x0000},  // 2^-26
      {0x387FC000, 0x03FF},  // largest subnormal
      {0x387FE000, 0x0400},  // tie above the largest subnormal (odd): smallest normal
      {0x387FDFFF, 0x03FF},
      {0x38800000, 0x0400},  // 2^-14, smallest normal
      {0x00000001, 0x0000},  {0x80000001, 0x8000},  // fp32 subnormals
      {0x00000000, 0x0000},  {0x80000000, 0x8000},  // +-0
      {0x7F800000, 0x7C00},  {0xFF800000, 0xFC00},  // +-Inf
      {0x7FC00000, 0x7E00},  {0xFFC00000, 0xFE00},  // quiet NaN
      {0x7F800001, 0x7E00},  {0xFF800001, 0xFE00},  // signalling NaN: quiet
      {0x7F802000, 0x7E01},  {0x7FBFE000, 0x7FFF},  // top 10 payload bits kept
      {0x7FFFFFFF, 0x7FFF},  {0xFFFFFFFF, 0xFFFF},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(fp32_to_fp16(float_of(c.in)), c.out) << std::hex << "0x" << c.in;
    EXPECT_TRUE(test::is_rne(kFp16, float_of(c.in), c.out));
  }
}

// The checker itself must reject what a wrong implementation would produce.
TEST(DType, CheckerRejectsWrongRounding) {
  EXPECT_FALSE(test::is_rne(kBf16, float_of(0x3F80C000), 0x3F80));  // truncation
  EXPECT_FALSE(test::is_rne(kBf16, float_of(0x3F818000), 0x3F81));  // tie not to even
  EXPECT_FALSE(test::is_rne(kBf16, float_of(0x3F808000), 0x3F81));  // tie away from zero
  EXPECT_FALSE(test::is_rne(kBf16, float_of(0x7F800001), 0x7F80));  // NaN -> Inf
  EXPECT_FALSE(test::is_rne(kBf16, float_of(0x7FA00000), 0x7FC0));  // payload lost
  EXPECT_FALSE(test::is_rne(kBf16, float_of(0x7F7FFFFF), 0x7F7F));  // no overflow
  EXPECT_FALSE(test::is_rne(kBf16, float_of(0x00008001), 0x0000));  // subnormal flushed
  EXPECT_FALSE(test::is_rne(kBf16, float_of(0x80000001), 0x0000));  // sign lost
  EXPECT_FALSE(test::is_rne(kFp16, float_of(0x477FEFFF), 0x7C00));  // early overflow
  EXPECT_FALSE(test::is_rne(kFp16, float_of(0x33000001), 0x0000));  // subnormal truncated
  EXPECT_FALSE(test::is_rne(kFp16, float_of(0x7F800001), 0x7C01));  // NaN not quiet
  EXPECT_FALSE(test::is_rne(kFp16, float_of(0x3F800000), 0x7E00));  // number -> NaN
}

// Property check on millions of inputs: every result is the nearest value, ties to even.
TEST(DType, RoundingIsNearestEvenOnRandomAndSweeps) {
  constexpr std::uint64_t kSeed = 0x5EED'D7E5;
  std::vector<float> inputs = test::random_fp32(std::size_t{3} << 20, kSeed);
  for (float f : test::edge_fp32()) inputs.push_back(f);
  std::size_t checked = 0;
  for (float f : inputs) {
    ASSERT_TRUE(test::is_rne(kBf16, f, fp32_to_bf16(f)));
    ASSERT_TRUE(test::is_rne(kFp16, f, fp32_to_fp16(f)));
    ++checked;
  }
  // Every fp16 rounding case (13 dropped bits) and every bf16 one (16 dropped bits).
  for (float f : test::tie_sweep_fp32(13)) ASSERT_TRUE(test::is_rne(kFp16, f, fp32_to_fp16(f)));
  for (float f : test::tie_sweep_fp32(16)) ASSERT_TRUE(test::is_rne(kBf16, f, fp32_to_bf16(f)));
  EXPECT_GT(checked, std::size_t{3} << 20);
}

// fp16 <-> bf16 round once, through the exact fp32.
TEST(DType, Fp16Bf16CrossConversionsRoundOnce) {
  for (std::uint32_t i = 0; i < 65536; ++i) {
    const auto h = static_cast<std::uint16_t>(i);
    std::uint16_t out = 0;
    fp16_to_bf16(&h, &out, 1);
    ASSERT_TRUE(test::is_rne(kBf16, fp16_to_fp32(h), out)) << std::hex << h;
    bf16_to_fp16(&h, &out, 1);
    ASSERT_TRUE(test::is_rne(kFp16, bf16_to_fp32(h), out)) << std::hex << h;
  }
}

}  // namespace
}  // namespace strata
