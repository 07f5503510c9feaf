// Many threads submitting at once: hundreds of handles in flight, reads and writes mixed on
// disjoint regions, waits and polls from threads that did not submit, wait_all; pool buffers
// allocated and released (registered and unregistered with the rings) while I/O runs.
// Also built and run under ThreadSanitizer (the tsan preset runs the concurrency label).
#include <fcntl.h>
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "core/error.h"
#include "core/units.h"
#include "offload/aio_engine.h"
#include "offload/probe.h"
#include "tests/offload/offload_test_util.h"

namespace strata::offload {
namespace {

using testing::fill_random;
using testing::TempDir;

constexpr std::size_t kBlock = 16 * kKiB;
constexpr std::size_t kSlotBytes = 3 * kBlock;  // each slot: up to three pieces
constexpr int kThreads = 8;
constexpr int kSlots = 60;  // per thread: 480 requests in flight at the peak

std::uint64_t seed_of(int thread, int slot, int round) {
  return (static_cast<std::uint64_t>(thread) << 32) ^ (static_cast<std::uint64_t>(slot) << 8) ^
         static_cast<std::uint64_t>(round);
}

class AioConcurrencyTest : public ::testing::TestWithParam<AioBackend> {
 protected:
  void SetUp() override {
    if (GetParam() == AioBackend::kIoUring) {
      IoUringProbe p = probe_io_uring();
      if (!p.works) GTEST_SKIP() << "io_uring unavailable: " << p.reason;
    }
    ASSERT_FALSE(dir_.path().empty());
  }
  AioOptions options() const {
    AioOptions o;
    o.block_size = kBlock;
    o.queue_depth = 8;
    o.parallelism = 2;
    o.backend = GetParam();
    return o;
  }
  TempDir dir_;
};

// Handles shared with an observer thread that polls and waits on requests it did not submit.
struct SharedHandles {
  std::mutex mutex;
  std::vector<AioHandle> handles;
  void add(const AioHandle& h) {
    std::lock_guard lock(mutex);
    handles.push_back(h);
  }
};

TEST_P(AioConcurrencyTest, ManyThreadsManyHandles) {
  AioEngine engine(options());
  AioFile files[2] = {AioFile::open(dir_.path() + "/a", O_RDWR | O_CREAT, DirectIo::kOff),
                      AioFile::open(dir_.path() + "/b", O_RDWR | O_CREAT, DirectIo::kOff)};
  const FileId ids[2] = {engine.add_file(files[0]), engine.add_file(files[1])};

  SharedHandles shared;
  std::atomic<bool> stop_observer{false};
  std::atomic<int> observed{0};
  std::thread observer([&] {
    std::mt19937 rng(7);
    while (!stop_observer.load()) {
      AioHandle h;
      {
        std::lock_guard lock(shared.mutex);
        if (!shared.handles.empty()) h = shared.handles[rng() % shared.handles.size()];
      }
      if (!h) {
        std::this_thread::yield();
        continue;
      }
      if (rng() % 2 == 0) {
        engine.wait(h);
        EXPECT_TRUE(engine.poll(h));
      } else {
        (void)engine.poll(h);
      }
      ++observed;
    }
  });

  std::atomic<int> mismatches{0};
  auto worker = [&](int t) {
    const FileId f = ids[t % 2];
    std::mt19937 rng(static_cast<unsigned>(t));
    std::vector<std::size_t> sizes(kSlots);
    for (auto& s : sizes) s = 1 + rng() % kSlotBytes;
    auto offset = [&](int s) { return static_cast<std::uint64_t>(t * kSlots + s) * kSlotBytes; };
    std::vector<std::vector<std::byte>> data(kSlots), back(kSlots);

    // Round 1: every slot written, all handles in flight at once.
    std::vector<AioHandle> handles;
    for (int s = 0; s < kSlots; ++s) {
      data[s].resize(sizes[s]);
      fill_random(data[s], seed_of(t, s, 1));
      handles.push_back(engine.write(f, offset(s), data[s].data(), sizes[s]));
      shared.add(handles.back());
    }
    for (auto& h : handles) engine.wait(h);

    // Round 2: even slots read back while odd slots are rewritten.
    handles.clear();
    for (int s = 0; s < kSlots; ++s) {
      back[s].assign(sizes[s], std::byte{0});
      if (s % 2 == 0) {
        handles.push_back(engine.read(f, offset(s), back[s].data(), sizes[s]));
      } else {
        fill_random(data[s], seed_of(t, s, 2));
        handles.push_back(engine.write(f, offset(s), data[s].data(), sizes[s]));
      }
      shared.add(handles.back());
    }
    for (auto& h : handles) engine.wait(h);

    // Round 3: odd slots read back.
    handles.clear();
    for (int s = 1; s < kSlots; s += 2) {
      handles.push_back(engine.read(f, offset(s), back[s].data(), sizes[s]));
    }
    for (auto& h : handles) engine.wait(h);
    for (int s = 0; s < kSlots; ++s) {
      if (back[s] != data[s]) ++mismatches;
    }
  };
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) threads.emplace_back(worker, t);
  for (auto& th : threads) th.join();
  engine.wait_all();
  stop_observer = true;
  observer.join();

  EXPECT_EQ(mismatches.load(), 0);
  const AioStats s = engine.stats();
  EXPECT_EQ(s.requests, static_cast<std::uint64_t>(kThreads) * (kSlots * 2 + kSlots / 2));
  EXPECT_GT(s.bytes_read, 0u);
  EXPECT_GT(observed.load(), 0);
  engine.remove_file(ids[0]);
  engine.remove_file(ids[1]);
}

TEST_P(AioConcurrencyTest, PoolBuffersComeAndGoWhileIoRuns) {
  HostPool pool(256 * kMiB);
  AioEngine engine(options(), &pool);
  AioFile file = AioFile::open(dir_.path() + "/pool", O_RDWR | O_CREAT, DirectIo::kOff);
  const FileId f = engine.add_file(file);
  std::atomic<int> mismatches{0};
  auto worker = [&](int t) {
    std::mt19937 rng(static_cast<unsigned>(100 + t));
    for (int i = 0; i < 40; ++i) {
      const std::size_t bytes = 1 + rng() % (4 * kBlock);
      // Fresh buffers every round: each allocation and release goes through the rings'
      // registration commands while the other threads' transfers are in flight.
      HostBuffer src = pool.allocate(bytes, "src");
      HostBuffer dst = pool.allocate(bytes, "dst");
      fill_random(src.bytes(), seed_of(t, i, 3));
      const std::uint64_t offset = static_cast<std::uint64_t>(t) * 4 * kBlock;
      engine.wait(engine.write(f, offset, src.data(), bytes));
      engine.wait(engine.read(f, offset, dst.data(), bytes));
      if (std::memcmp(src.data(), dst.data(), bytes) != 0) ++mismatches;
    }
  };
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) threads.emplace_back(worker, t);
  for (auto& th : threads) th.join();
  engine.wait_all();
  EXPECT_EQ(mismatches.load(), 0);
  EXPECT_EQ(pool.stats().buffers, 0u);
  if (GetParam() == AioBackend::kIoUring) {
    EXPECT_GT(engine.stats().fixed_pieces, 0u);
  }
}

TEST_P(AioConcurrencyTest, DestructorDrainsRequestsNobodyWaitedFor) {
  TempDir& dir = dir_;
  std::vector<std::vector<std::byte>> data(64, std::vector<std::byte>(kSlotBytes));
  AioFile file = AioFile::open(dir.path() + "/drain", O_RDWR | O_CREAT, DirectIo::kOff);
  std::atomic<int> completed{0};
  {
    AioEngine engine(options());
    const FileId f = engine.add_file(file);
    for (std::size_t i = 0; i < data.size(); ++i) {
      fill_random(data[i], i);
      const IoSegment seg{f, i * kSlotBytes, data[i].data(), kSlotBytes};
      engine.submit(IoOp::kWrite, {&seg, 1}, [&] { ++completed; });  // handle dropped
    }
  }  // ~AioEngine waits for every request
  EXPECT_EQ(completed.load(), 64);
  EXPECT_EQ(file.size_bytes(), 64 * kSlotBytes);
}

// With IORING_SETUP_SQPOLL the kernel's SQ thread frees SQ entries only at the end of a
// submission batch, after the pieces it issued may already have completed (page-cache reads and
// writes complete inline). A CQE that was reaped therefore does not prove its SQ entry is free:
// the lane must wait for room instead of asserting "SQ full".
TEST(AioConcurrencySqpoll, ManyThreadsOnASmallSqpollRing) {
  IoUringProbe probe = probe_io_uring();
  if (!probe.works) GTEST_SKIP() << "io_uring unavailable: " << probe.reason;
  TempDir dir;
  AioOptions o;
  o.block_size = 4 * kKiB;
  o.queue_depth = 3;
  o.parallelism = 1;
  o.sqpoll = true;
  o.backend = AioBackend::kIoUring;
  AioEngine engine(o);
  AioFile file = AioFile::open(dir.path() + "/sqpoll", O_RDWR | O_CREAT, DirectIo::kOff);
  const FileId f = engine.add_file(file);
  std::atomic<int> mismatches{0};
  auto worker = [&](int t) {
    std::vector<std::byte> src(8 * 4 * kKiB), dst(src.size());
    for (int i = 0; i < 200; ++i) {
      fill_random(src, seed_of(t, i, 9));
      const std::uint64_t offset = static_cast<std::uint64_t>(t) * src.size();
      engine.wait(engine.write(f, offset, src.data(), src.size()));
      engine.wait(engine.read(f, offset, dst.data(), dst.size()));
      if (std::memcmp(src.data(), dst.data(), src.size()) != 0) ++mismatches;
    }
  };
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) threads.emplace_back(worker, t);
  for (auto& th : threads) th.join();
  engine.wait_all();
  EXPECT_EQ(mismatches.load(), 0);
  engine.remove_file(f);
}

// Short-lived files, added, written on one ring, removed and closed, from several threads at
// once with four rings: every ring registers each file while it is still open (add_file waits
// for them), so no registration fails. Before that wait, a ring with no pieces of a file applied
// its registration whenever it next woke, after the close: EBADF ("cannot register a file") in
// about one NVMe run in five.
TEST_P(AioConcurrencyTest, FilesAddedAndClosedQuicklyAreRegisteredWhileOpen) {
  AioOptions o = options();
  o.parallelism = 4;
  AioEngine engine(o);
  HostBuffer block = HostBuffer::allocate(kBlock, "block");
  fill_random(block.bytes(), 3);
  auto worker = [&](int t) {
    for (int i = 0; i < 100; ++i) {
      AioFile file = AioFile::open(dir_.path() + "/short-" + std::to_string(t) + "-" + std::to_string(i),
                                   O_RDWR | O_CREAT, DirectIo::kOff);
      const FileId id = engine.add_file(file);
      if (i % 2 == 0) engine.wait(engine.write(id, 0, block.data(), kBlock));
      engine.remove_file(id);
    }  // closed here: right after remove_file
  };
  std::vector<std::thread> threads;
  for (int t = 0; t < 3; ++t) threads.emplace_back(worker, t);
  for (auto& th : threads) th.join();
  EXPECT_EQ(engine.stats().file_registration_failures, 0u);
}

INSTANTIATE_TEST_SUITE_P(Backends, AioConcurrencyTest,
                         ::testing::Values(AioBackend::kIoUring, AioBackend::kThreads),
                         [](const ::testing::TestParamInfo<AioBackend>& p) {
                           return std::string(p.param == AioBackend::kIoUring ? "IoUring"
                                                                              : "Threads");
                         });

}  // namespace
}  // namespace strata::offload
