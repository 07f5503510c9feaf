// HostBuffer and HostPool: aligned zeroed memory, the hard budget and its error, stats, the
// pin hook and the observers the I/O engine relies on to register pool buffers.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/error.h"
#include "core/units.h"
#include "offload/host_buffer.h"

namespace strata::offload {
namespace {

bool all_zero(const HostBuffer& b) {
  return std::all_of(b.data(), b.data() + b.capacity(), [](std::byte x) { return x == std::byte{0}; });
}

TEST(HostBuffer, AlignedZeroedAndRoundedUp) {
  for (std::size_t bytes : {std::size_t{1}, std::size_t{4095}, std::size_t{4096},
                            std::size_t{4097}, std::size_t{3} << 20}) {
    HostBuffer b = HostBuffer::allocate(bytes, "test");
    ASSERT_TRUE(b);
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(b.data()) % kDirectIoAlignment, 0u);
    EXPECT_EQ(b.size(), bytes);
    EXPECT_EQ(b.capacity() % kDirectIoAlignment, 0u);
    EXPECT_GE(b.capacity(), bytes);
    EXPECT_LT(b.capacity() - bytes, kDirectIoAlignment);
    EXPECT_TRUE(all_zero(b));
    EXPECT_FALSE(b.pooled());
    b.data()[bytes - 1] = std::byte{7};  // writable to the last byte
  }
}

// From 2 MiB up a buffer starts on a huge-page boundary (the THP hint is for whole 2 MiB pages);
// the capacity is still the request rounded to 4 KiB, and the memory is usable to its end.
TEST(HostBuffer, LargeBuffersStartOnA2MiBBoundary) {
  for (std::size_t bytes : {std::size_t{2} << 20, (std::size_t{5} << 20) + 123}) {
    HostBuffer b = HostBuffer::allocate(bytes, "large");
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(b.data()) % (std::size_t{2} << 20), 0u);
    EXPECT_LT(b.capacity() - bytes, kDirectIoAlignment);
    EXPECT_TRUE(all_zero(b));
    std::fill(b.data(), b.data() + b.capacity(), std::byte{1});
  }
}

TEST(HostBuffer, EmptyAndMove) {
  HostBuffer empty = HostBuffer::allocate(0, "nothing");
  EXPECT_FALSE(empty);
  EXPECT_EQ(empty.size(), 0u);

  HostBuffer a = HostBuffer::allocate(100, "a");
  std::byte* p = a.data();
  HostBuffer b = std::move(a);
  EXPECT_FALSE(a);  // NOLINT(bugprone-use-after-move): moved-from is documented as empty
  EXPECT_EQ(b.data(), p);
  HostBuffer c = HostBuffer::allocate(5000, "c");
  c = std::move(b);  // c's old memory is unmapped, b's moves in
  EXPECT_EQ(c.data(), p);
  EXPECT_EQ(c.capacity(), 4096u);
}

TEST(HostPool, BudgetErrorNamesTheBudgetAndItsKey) {
  HostPool pool(8 * kMiB);
  HostBuffer a = pool.allocate(7 * kMiB + kMiB / 2, "optimizer swap buffer");
  try {
    HostBuffer b = pool.allocate(2 * kMiB, "parameter staging");
    FAIL() << "allocation past the budget succeeded";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("pinned host"), std::string::npos) << msg;
    EXPECT_NE(msg.find("'parameter staging'"), std::string::npos) << msg;
    EXPECT_NE(msg.find(format_bytes(2 * kMiB)), std::string::npos) << msg;
    EXPECT_NE(msg.find("budget of " + format_bytes(8 * kMiB)), std::string::npos) << msg;
    EXPECT_NE(msg.find(format_bytes(7 * kMiB + kMiB / 2) + " in use"), std::string::npos) << msg;
    EXPECT_EQ(e.where(), "strata.pinned_memory");
    EXPECT_NE(e.hint().find("raise strata.pinned_memory"), std::string::npos) << e.hint();
  }
  // A failed allocation takes nothing from the budget.
  EXPECT_EQ(pool.stats().current_bytes, 7 * kMiB + kMiB / 2);
  HostBuffer c = pool.allocate(kMiB / 2, "fits exactly");
  EXPECT_EQ(pool.stats().current_bytes, 8 * kMiB);
}

TEST(HostPool, CustomNameAndKey) {
  HostPool pool(4096, {}, "swap staging", "offload.staging_bytes");
  try {
    pool.allocate(4097, "x");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("swap staging pool"), std::string::npos) << e.what();
    EXPECT_EQ(e.where(), "offload.staging_bytes");
  }
}

TEST(HostPool, StatsCurrentAndPeak) {
  HostPool pool(64 * kMiB);
  EXPECT_EQ(pool.stats().budget_bytes, 64 * kMiB);
  {
    HostBuffer a = pool.allocate(1, "a");  // counts its capacity, 4 KiB
    HostBuffer b = pool.allocate(kMiB, "b");
    EXPECT_TRUE(a.pooled());
    HostPoolStats s = pool.stats();
    EXPECT_EQ(s.current_bytes, 4096 + kMiB);
    EXPECT_EQ(s.buffers, 2u);
    EXPECT_EQ(s.peak_bytes, 4096 + kMiB);
    HostBuffer moved = std::move(b);
    EXPECT_EQ(pool.stats().buffers, 2u);
  }
  HostPoolStats s = pool.stats();
  EXPECT_EQ(s.current_bytes, 0u);
  EXPECT_EQ(s.buffers, 0u);
  EXPECT_EQ(s.peak_bytes, 4096 + kMiB);
  HostBuffer c = pool.allocate(2 * kMiB, "c");
  EXPECT_EQ(pool.stats().peak_bytes, 2 * kMiB);
}

TEST(HostPool, PinHookPinsAndUnpinsEveryBuffer) {
  std::mutex m;
  std::map<void*, std::size_t> pinned;
  int unpins = 0;
  PinHook hook;
  hook.pin = [&](void* p, std::size_t bytes) {
    std::lock_guard lock(m);
    pinned[p] = bytes;
  };
  hook.unpin = [&](void* p) {
    std::lock_guard lock(m);
    EXPECT_EQ(pinned.erase(p), 1u);
    ++unpins;
  };
  HostPool pool(16 * kMiB, hook);
  {
    HostBuffer a = pool.allocate(5000, "a");
    HostBuffer b = pool.allocate(kMiB, "b");
    ASSERT_EQ(pinned.size(), 2u);
    EXPECT_EQ(pinned.at(a.data()), 8192u);  // the whole capacity is pinned
    EXPECT_EQ(pinned.at(b.data()), kMiB);
    EXPECT_TRUE(all_zero(a));
  }
  EXPECT_TRUE(pinned.empty());
  EXPECT_EQ(unpins, 2);
}

// The touch hook sees each new buffer (its whole capacity) before the pin hook, and the time of
// both is counted.
TEST(HostPool, TouchHookRunsBeforePin) {
  std::vector<std::string> calls;
  PinHook hook;
  hook.touch = [&](void* p, std::size_t bytes) {
    calls.push_back("touch " + std::to_string(bytes));
    std::fill_n(static_cast<volatile char*>(p), 1, 0);
  };
  hook.pin = [&](void*, std::size_t bytes) { calls.push_back("pin " + std::to_string(bytes)); };
  HostPool pool(16 * kMiB, hook);
  HostBuffer a = pool.allocate(5000, "a");
  EXPECT_EQ(calls, (std::vector<std::string>{"touch 8192", "pin 8192"}));
  EXPECT_TRUE(all_zero(a));
  const HostPoolStats stats = pool.stats();
  EXPECT_GE(stats.touch_seconds, 0.0);
  EXPECT_GE(stats.pin_seconds, 0.0);
}

TEST(HostPool, FailingPinGivesTheBudgetBack) {
  PinHook hook;
  hook.pin = [](void*, std::size_t) { throw Error("cudaHostRegister failed", "test"); };
  HostPool pool(kMiB, hook);
  EXPECT_THROW(pool.allocate(4096, "x"), Error);
  EXPECT_EQ(pool.stats().current_bytes, 0u);
  EXPECT_EQ(pool.stats().buffers, 0u);
}

class RecordingObserver : public BufferObserver {
 public:
  void on_allocate(std::byte* data, std::size_t capacity) override {
    std::lock_guard lock(mutex);
    EXPECT_EQ(live.count(data), 0u);
    live[data] = capacity;
    ++allocated;
  }
  void on_release(std::byte* data, std::size_t capacity) noexcept override {
    std::lock_guard lock(mutex);
    EXPECT_EQ(live.at(data), capacity);
    // The memory must still be mapped and readable when the observer hears of its release.
    volatile std::byte first = data[0];
    (void)first;
    live.erase(data);
    ++released;
  }
  std::mutex mutex;
  std::map<std::byte*, std::size_t> live;
  int allocated = 0;
  int released = 0;
};

TEST(HostPool, ObserverHearsOfExistingNewAndReleasedBuffers) {
  HostPool pool(16 * kMiB);
  HostBuffer before = pool.allocate(4096, "before");
  RecordingObserver o;
  pool.add_observer(&o);
  EXPECT_EQ(o.allocated, 1);  // the buffer that existed already
  EXPECT_EQ(o.live.count(before.data()), 1u);
  {
    HostBuffer during = pool.allocate(10000, "during");
    EXPECT_EQ(o.allocated, 2);
    EXPECT_EQ(o.live.at(during.data()), 12288u);
  }
  EXPECT_EQ(o.released, 1);
  before = HostBuffer();
  EXPECT_EQ(o.released, 2);
  EXPECT_TRUE(o.live.empty());

  pool.remove_observer(&o);
  HostBuffer after = pool.allocate(4096, "after");
  EXPECT_EQ(o.allocated, 2);  // removed observers hear nothing
}

TEST(HostPool, ConcurrentAllocationsNeverOvershootTheBudget) {
  HostPool pool(40 * 4096);
  RecordingObserver o;
  pool.add_observer(&o);
  std::vector<std::thread> threads;
  std::atomic<int> refused{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 200; ++i) {
        std::vector<HostBuffer> held;
        for (int k = 0; k < 15; ++k) {
          try {
            held.push_back(pool.allocate(4096, "t"));
          } catch (const Error&) {
            ++refused;
          }
          EXPECT_LE(pool.stats().current_bytes, 40u * 4096);
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_LE(pool.stats().peak_bytes, 40u * 4096);
  EXPECT_EQ(pool.stats().current_bytes, 0u);
  EXPECT_EQ(o.allocated, o.released);
  pool.remove_observer(&o);
}

}  // namespace
}  // namespace strata::offload
