// ExtentAllocator: first fit by address, unit alignment, coalescing with both neighbours,
// fragmentation, growth through the hook (and no change when the hook refuses).
#include <cstdint>
#include <random>
#include <stdexcept>
#include <vector>

#include <gtest/gtest.h>

#include "offload/extent_allocator.h"

namespace strata::offload {
namespace {

constexpr std::uint64_t kUnit = 4096;

TEST(ExtentAllocator, EmptyHasNothingToGive) {
  ExtentAllocator a(kUnit);
  EXPECT_EQ(a.capacity(), 0u);
  EXPECT_FALSE(a.allocate(kUnit).has_value());
  EXPECT_EQ(a.free_ranges(), 0u);
  EXPECT_EQ(a.capacity_to_fit(3 * kUnit), 3 * kUnit);
}

TEST(ExtentAllocator, FirstFitTakesTheLowestRangeThatFits) {
  ExtentAllocator a(kUnit, 10 * kUnit);
  EXPECT_EQ(*a.allocate(2 * kUnit), 0u);
  EXPECT_EQ(*a.allocate(3 * kUnit), 2 * kUnit);
  EXPECT_EQ(*a.allocate(1 * kUnit), 5 * kUnit);
  EXPECT_EQ(a.used_bytes(), 6 * kUnit);
  EXPECT_EQ(a.free_bytes(), 4 * kUnit);
  // Holes: [0, 2) and [5, 6) once those are freed; a 1-unit request takes the lowest hole.
  a.release(0, 2 * kUnit);
  a.release(5 * kUnit, kUnit);
  EXPECT_EQ(a.free_ranges(), 2u);  // [0,2) and [5,10) (merged with the tail)
  EXPECT_EQ(*a.allocate(kUnit), 0u);
  // A 3-unit request skips the 1-unit hole left at [1, 2) and lands at 5.
  EXPECT_EQ(*a.allocate(3 * kUnit), 5 * kUnit);
  EXPECT_EQ(*a.allocate(kUnit), 1 * kUnit);
  EXPECT_EQ(*a.allocate(2 * kUnit), 8 * kUnit);
  EXPECT_FALSE(a.allocate(kUnit).has_value());
  EXPECT_EQ(a.free_bytes(), 0u);
}

TEST(ExtentAllocator, OffsetsAreAlignedToTheUnit) {
  constexpr std::uint64_t unit = 1 << 20;
  ExtentAllocator a(unit, 64 * unit);
  std::mt19937_64 rng(7);
  std::vector<std::pair<std::uint64_t, std::uint64_t>> live;
  for (int i = 0; i < 500; ++i) {
    if (!live.empty() && rng() % 2 == 0) {
      std::size_t pick = rng() % live.size();
      a.release(live[pick].first, live[pick].second);
      live.erase(live.begin() + static_cast<std::ptrdiff_t>(pick));
      continue;
    }
    std::uint64_t bytes = (1 + rng() % 4) * unit;
    auto offset = a.allocate(bytes);
    if (!offset) continue;
    EXPECT_EQ(*offset % unit, 0u);
    EXPECT_LE(*offset + bytes, a.capacity());
    for (const auto& [o, n] : live) {
      EXPECT_TRUE(*offset + bytes <= o || o + n <= *offset) << "ranges overlap";
    }
    live.emplace_back(*offset, bytes);
  }
}

TEST(ExtentAllocator, ReleaseCoalescesWithBothNeighbours) {
  ExtentAllocator a(kUnit, 5 * kUnit);
  std::vector<std::uint64_t> at;
  for (int i = 0; i < 5; ++i) at.push_back(*a.allocate(kUnit));
  a.release(at[1], kUnit);
  a.release(at[3], kUnit);
  EXPECT_EQ(a.free_ranges(), 2u);
  EXPECT_EQ(a.largest_free_bytes(), kUnit);
  // [2] joins [1] on its left and [3] on its right: one range of 3 units.
  a.release(at[2], kUnit);
  EXPECT_EQ(a.free_ranges(), 1u);
  EXPECT_EQ(a.largest_free_bytes(), 3 * kUnit);
  EXPECT_EQ(*a.allocate(3 * kUnit), kUnit);
  a.release(kUnit, 3 * kUnit);
  // Left neighbour only, then right neighbour only.
  a.release(at[0], kUnit);
  EXPECT_EQ(a.free_ranges(), 1u);
  EXPECT_EQ(a.largest_free_bytes(), 4 * kUnit);
  a.release(at[4], kUnit);
  EXPECT_EQ(a.free_ranges(), 1u);
  EXPECT_EQ(a.largest_free_bytes(), 5 * kUnit);
  EXPECT_EQ(a.used_bytes(), 0u);
  EXPECT_EQ(a.tail_free_bytes(), 5 * kUnit);
}

TEST(ExtentAllocator, FragmentationIsVisibleAndHealsWhenAllIsReleased) {
  ExtentAllocator a(kUnit, 100 * kUnit);
  std::vector<std::uint64_t> at;
  for (int i = 0; i < 100; ++i) at.push_back(*a.allocate(kUnit));
  for (int i = 0; i < 100; i += 2) a.release(at[i], kUnit);
  EXPECT_EQ(a.free_ranges(), 50u);
  EXPECT_EQ(a.free_bytes(), 50 * kUnit);
  EXPECT_EQ(a.largest_free_bytes(), kUnit);
  // 50 units free but no two adjacent: a 2-unit request does not fit.
  EXPECT_FALSE(a.allocate(2 * kUnit).has_value());
  EXPECT_EQ(a.capacity_to_fit(2 * kUnit), 102 * kUnit);  // nothing free at the end
  for (int i = 1; i < 100; i += 2) a.release(at[i], kUnit);
  EXPECT_EQ(a.free_ranges(), 1u);
  EXPECT_EQ(a.largest_free_bytes(), 100 * kUnit);
}

TEST(ExtentAllocator, GrowthExtendsTheFreeRangeAtTheEnd) {
  ExtentAllocator a(kUnit, 4 * kUnit);
  EXPECT_EQ(*a.allocate(kUnit), 0u);  // [1, 4) free at the end
  std::vector<std::uint64_t> asked;
  auto grow = [&](std::uint64_t capacity) { asked.push_back(capacity); };
  // 5 units do not fit: the file grows by 2 units, the tail [1, 4) is reused.
  EXPECT_EQ(a.allocate(5 * kUnit, grow), kUnit);
  ASSERT_EQ(asked.size(), 1u);
  EXPECT_EQ(asked[0], 6 * kUnit);
  EXPECT_EQ(a.capacity(), 6 * kUnit);
  EXPECT_EQ(a.free_bytes(), 0u);
  // A fit needs no growth.
  a.release(0, kUnit);
  EXPECT_EQ(a.allocate(kUnit, grow), 0u);
  EXPECT_EQ(asked.size(), 1u);
  // Nothing free at the end: grow by the whole request.
  EXPECT_EQ(a.allocate(2 * kUnit, grow), 6 * kUnit);
  EXPECT_EQ(asked.back(), 8 * kUnit);
}

TEST(ExtentAllocator, ARefusedGrowthChangesNothing) {
  ExtentAllocator a(kUnit, 2 * kUnit);
  EXPECT_EQ(*a.allocate(kUnit), 0u);
  auto refuse = [](std::uint64_t) { throw std::runtime_error("ENOSPC"); };
  EXPECT_THROW(a.allocate(4 * kUnit, refuse), std::runtime_error);
  EXPECT_EQ(a.capacity(), 2 * kUnit);
  EXPECT_EQ(a.used_bytes(), kUnit);
  EXPECT_EQ(a.free_ranges(), 1u);
  EXPECT_EQ(a.used_ranges(), 1u);
}

TEST(ExtentAllocator, GrowAndShrinkAtTheEnd) {
  ExtentAllocator a(kUnit);
  a.grow_to(4 * kUnit);
  EXPECT_EQ(a.free_ranges(), 1u);
  EXPECT_EQ(*a.allocate(kUnit), 0u);
  a.grow_to(8 * kUnit);
  EXPECT_EQ(a.free_ranges(), 1u) << "growth merges with the free tail";
  EXPECT_EQ(a.tail_free_bytes(), 7 * kUnit);
  a.shrink_to(3 * kUnit);
  EXPECT_EQ(a.capacity(), 3 * kUnit);
  EXPECT_EQ(a.tail_free_bytes(), 2 * kUnit);
  a.shrink_to(kUnit);
  EXPECT_EQ(a.free_ranges(), 0u);
  EXPECT_EQ(a.tail_free_bytes(), 0u);
  EXPECT_FALSE(a.allocate(kUnit).has_value());
}

TEST(ExtentAllocatorDeathTest, ReleasingWhatWasNotAllocatedAborts) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  ExtentAllocator a(kUnit, 4 * kUnit);
  EXPECT_EQ(*a.allocate(2 * kUnit), 0u);
  EXPECT_DEATH(a.release(0, kUnit), "release");
  EXPECT_DEATH(a.release(2 * kUnit, kUnit), "release");
  EXPECT_DEATH((void)a.allocate(100), "multiples of the unit");
}

}  // namespace
}  // namespace strata::offload
