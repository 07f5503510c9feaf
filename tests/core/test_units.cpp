// core/units.h: byte sizes as people write them.
#include "core/units.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <optional>

namespace strata {
namespace {

TEST(Units, ParsesSizesWithUnits) {
  EXPECT_EQ(parse_bytes("512MiB"), std::optional<std::uint64_t>(512 * kMiB));
  EXPECT_EQ(parse_bytes("2 GiB"), std::optional<std::uint64_t>(2 * kGiB));
  EXPECT_EQ(parse_bytes("1.5GB"), std::optional<std::uint64_t>(1'500'000'000));
  EXPECT_EQ(parse_bytes("4096"), std::optional<std::uint64_t>(4096));
  EXPECT_EQ(parse_bytes("0"), std::optional<std::uint64_t>(0));
  EXPECT_EQ(parse_bytes("7B"), std::optional<std::uint64_t>(7));
  EXPECT_EQ(parse_bytes("3kb"), std::optional<std::uint64_t>(3000));
  EXPECT_EQ(parse_bytes(" 8 kib "), std::optional<std::uint64_t>(8 * kKiB));
  EXPECT_EQ(parse_bytes("1.5 GiB"), std::optional<std::uint64_t>(3 * kGiB / 2));
  EXPECT_EQ(parse_bytes("2TiB"), std::optional<std::uint64_t>(2 * 1024 * kGiB));
  EXPECT_EQ(parse_bytes("1TB"), std::optional<std::uint64_t>(1'000'000'000'000));
  EXPECT_EQ(parse_bytes("16M"), std::optional<std::uint64_t>(16 * kMiB));  // bare letter: binary
}

TEST(Units, RejectsWhatIsNotASize) {
  for (const char* text : {"1.5B", "-1", "12XB", "", " ", "MiB", "1..5MB", "1.5.2MB", "0x10",
                           "1e3", "abc", "5 MiB x", "--1", "+1"}) {
    EXPECT_EQ(parse_bytes(text), std::nullopt) << "'" << text << "'";
  }
}

TEST(Units, RejectsOverflow) {
  EXPECT_EQ(parse_bytes("18446744073709551616"), std::nullopt);  // 2^64
  EXPECT_EQ(parse_bytes("16777216TiB"), std::nullopt);           // 2^64 bytes
  EXPECT_EQ(parse_bytes("20000000TB"), std::nullopt);            // 2e19 > 2^64
  EXPECT_EQ(parse_bytes("99999999999999999999999999"), std::nullopt);
  EXPECT_NE(parse_bytes("16000000TB"), std::nullopt);  // 1.6e19 < 2^64 - fits
}

TEST(Units, FormatsForReports) {
  EXPECT_EQ(format_bytes(0), "0 B");
  EXPECT_EQ(format_bytes(3), "3 B");
  EXPECT_EQ(format_bytes(1023), "1023 B");
  EXPECT_EQ(format_bytes(kKiB), "1.00 KiB");
  EXPECT_EQ(format_bytes(512 * kMiB), "512.00 MiB");
  EXPECT_EQ(format_bytes(3 * kGiB / 2), "1.50 GiB");
  // Round trip through the text, for values the two decimals hold exactly.
  for (std::uint64_t bytes : {std::uint64_t{kMiB}, std::uint64_t{3 * kGiB}, std::uint64_t{5 * kKiB / 4}}) {
    const auto parsed = parse_bytes(format_bytes(bytes));
    ASSERT_TRUE(parsed.has_value()) << format_bytes(bytes);
    EXPECT_EQ(*parsed, bytes) << format_bytes(bytes);
  }
}

}  // namespace
}  // namespace strata

namespace strata {
namespace {

TEST(Units, LargeIntegersAreExact) {
  EXPECT_EQ(parse_bytes("9007199254740993"), 9007199254740993ull);  // 2^53 + 1
  EXPECT_EQ(parse_bytes("18446744073709551615"), UINT64_MAX);
  EXPECT_EQ(parse_bytes("18446744073709551616"), std::nullopt);
  EXPECT_EQ(parse_bytes("16777216 TiB"), std::nullopt);  // 2^64 bytes
  EXPECT_EQ(parse_bytes("16777215 TiB"), 16777215ull << 40);
}

}  // namespace
}  // namespace strata
