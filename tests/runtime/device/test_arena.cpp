// The device arena: hard budget, informative out-of-memory report, stats, best fit and
// coalescing, alignment.
#include <gtest/gtest.h>

#include <cstdint>
#include <algorithm>
#include <cstring>
#include <random>
#include <stdexcept>
#include <vector>

#include "runtime/device/device.h"

namespace strata::runtime {
namespace {

TEST(Arena, BudgetIsHardAndOomReportNamesRequestAndTiers) {
  auto device = device::Device::create({.kind = "host", .memory_bytes = 1 << 20});
  device->add_tier([] { return device::TierUsage{"pinned host", 3 << 20, 5 << 20, 8 << 20}; });
  device::DeviceBuffer a = device->allocate(600 << 10, "activations");
  try {
    device::DeviceBuffer b = device->allocate(600 << 10, "block 7 params");
    FAIL() << "allocation past the budget succeeded";
  } catch (const device::OutOfMemory& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("block 7 params"), std::string::npos) << msg;
    EXPECT_NE(msg.find("600.00 KiB"), std::string::npos) << msg;  // the request
    EXPECT_NE(msg.find("budget would be exceeded"), std::string::npos) << msg;
    EXPECT_NE(msg.find("1.00 MiB"), std::string::npos) << msg;    // device budget
    EXPECT_NE(msg.find("pinned host"), std::string::npos) << msg;  // the other tier
    EXPECT_NE(msg.find("8.00 MiB"), std::string::npos) << msg;
    EXPECT_NE(msg.find("What to do"), std::string::npos) << msg;
    EXPECT_EQ(e.requested_bytes(), 600u << 10);
  }
  device::ArenaStats s = device->memory_stats();
  EXPECT_EQ(s.current_bytes, 600u << 10);
  EXPECT_EQ(s.live_allocations, 1u);
  EXPECT_EQ(s.allocations, 1u);
  EXPECT_EQ(s.budget_bytes, 1u << 20);
}

TEST(Arena, StatsTrackCurrentPeakAndCount) {
  auto device = device::Device::create({.kind = "host", .memory_bytes = 1 << 20});
  {
    device::DeviceBuffer a = device->allocate(1000, "a");  // rounds up to 1024
    device::DeviceBuffer b = device->allocate(256, "b");
    EXPECT_EQ(device->memory_stats().current_bytes, 1024u + 256u);
    EXPECT_EQ(a.bytes(), 1000u);
  }
  device::ArenaStats s = device->memory_stats();
  EXPECT_EQ(s.current_bytes, 0u);
  EXPECT_EQ(s.peak_bytes, 1280u);
  EXPECT_EQ(s.allocations, 2u);
  EXPECT_EQ(s.live_allocations, 0u);
  EXPECT_EQ(s.largest_free_bytes, 1u << 20);
}

TEST(Arena, FragmentationIsReportedAndFreedNeighboursCoalesce) {
  auto device = device::Device::create({.kind = "host", .memory_bytes = 4096});
  std::vector<device::DeviceBuffer> blocks;
  for (int i = 0; i < 16; ++i) blocks.push_back(device->allocate(256, "slot"));
  EXPECT_THROW(device->allocate(1, "one more"), device::OutOfMemory);
  // Free every other block: 2 KiB free, but no 512-byte hole.
  for (int i = 0; i < 16; i += 2) blocks[i].reset();
  try {
    device->allocate(512, "wide");
    FAIL() << "a 512-byte block fit into 256-byte holes";
  } catch (const device::OutOfMemory& e) {
    EXPECT_NE(std::string(e.what()).find("fragmented"), std::string::npos) << e.what();
  }
  // Freeing the rest must coalesce everything back into one block of the whole budget.
  blocks.clear();
  device::DeviceBuffer all = device->allocate(4096, "everything");
  EXPECT_FALSE(all.empty());
}

TEST(Arena, AlignedDistinctAndWritable) {
  auto device = device::Device::create({.kind = "host", .memory_bytes = 8 << 20});
  std::mt19937 rng(7);
  std::vector<device::DeviceBuffer> live;
  for (int i = 0; i < 2000; ++i) {
    if (!live.empty() && rng() % 3 == 0) {
      live.erase(live.begin() + rng() % live.size());
      continue;
    }
    std::size_t bytes = 1 + rng() % 20000;
    live.push_back(device->allocate(bytes, "random"));
    auto p = reinterpret_cast<std::uintptr_t>(live.back().data());
    ASSERT_EQ(p % device::Arena::kAlignment, 0u);
    std::memset(live.back().data(), i & 0xff, bytes);
  }
  // No two live buffers overlap.
  std::vector<std::pair<std::uintptr_t, std::uintptr_t>> spans;
  for (auto& b : live) {
    auto p = reinterpret_cast<std::uintptr_t>(b.data());
    spans.emplace_back(p, p + b.bytes());
  }
  std::sort(spans.begin(), spans.end());
  for (std::size_t i = 1; i < spans.size(); ++i) ASSERT_LE(spans[i - 1].second, spans[i].first);
  EXPECT_TRUE(device->allocate(0, "nothing").empty());
}

TEST(Arena, HugeRequestsDoNotWrapAround) {
  auto device = device::Device::create({.kind = "host", .memory_bytes = 1 << 20});
  EXPECT_THROW(device->allocate(SIZE_MAX, "negative size cast to size_t"), device::OutOfMemory);
  EXPECT_THROW(device->allocate(SIZE_MAX - 100, "almost"), device::OutOfMemory);
  EXPECT_EQ(device->memory_stats().live_allocations, 0u);
  EXPECT_FALSE(device->allocate(1 << 20, "whole budget").empty());
}

TEST(Arena, TierReportsRunOutsideTheArenaLockAndMayFail) {
  auto device = device::Device::create({.kind = "host", .memory_bytes = 1 << 20});
  device::Device* d = device.get();
  // A tier whose report reads the device arena (as a pool that compares itself with it
  // might): deadlocks if reports are called with the arena's lock held.
  device->add_tier([d] { return device::TierUsage{"mirror", d->memory_stats().current_bytes, 0, 0}; });
  device->add_tier([]() -> device::TierUsage { throw std::runtime_error("nvme tier gone"); });
  try {
    device->allocate(2 << 20, "too big");
    FAIL();
  } catch (const device::OutOfMemory& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("mirror"), std::string::npos) << msg;
    EXPECT_NE(msg.find("nvme tier gone"), std::string::npos) << msg;
  }
}

TEST(Arena, MovedBufferFreesOnce) {
  auto device = device::Device::create({.kind = "host", .memory_bytes = 1 << 20});
  device::DeviceBuffer a = device->allocate(4096, "a");
  device::DeviceBuffer b = std::move(a);
  EXPECT_TRUE(a.empty());  // NOLINT(bugprone-use-after-move): the moved-from state is specified
  EXPECT_EQ(device->memory_stats().live_allocations, 1u);
  b = device::DeviceBuffer();
  EXPECT_EQ(device->memory_stats().live_allocations, 0u);
}

TEST(Device, UnknownKindAndMissingCudaAreClearErrors) {
  try {
    device::Device::create({.kind = "tpu"});
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("tpu"), std::string::npos);
  }
  if (!device::cuda_availability().devices.empty()) GTEST_SKIP() << "a GPU is present";
  try {
    device::Device::create({.kind = "cuda"});
    FAIL() << "cuda device created without a GPU";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("strata.device to \"host\""), std::string::npos) << e.what();
  }
  EXPECT_EQ(device::Device::create({.kind = "auto"})->backend(), device::Backend::host);
}

}  // namespace
}  // namespace strata::runtime
