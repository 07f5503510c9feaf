// SwapSpace from many threads at once: each allocates, writes, reads back, verifies and
// releases its own extents (checksums on, two paths, so the free lists, the file growth, the
// key map and the checksum records are all shared), while another thread reads stats and
// looks keys up. Also run under ThreadSanitizer (the tsan preset).
#include <atomic>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "offload/aio_engine.h"
#include "offload/host_buffer.h"
#include "offload/probe.h"
#include "offload/swap_space.h"
#include "tests/offload/offload_test_util.h"

namespace strata::offload {
namespace {

using testing::TempDir;
using testing::fill_random;

constexpr std::size_t kBlock = 64 * 1024;
constexpr int kThreads = 4;
constexpr int kRounds = 24;

void run_workers(AioBackend backend) {
  AioOptions ao;
  ao.block_size = 32 * 1024;
  ao.queue_depth = 16;
  ao.parallelism = 2;
  ao.backend = backend;
  AioEngine engine(ao);
  TempDir d0, d1;
  SwapOptions so;
  so.paths = {d0.path(), d1.path()};
  so.block_size = kBlock;
  so.checksum = true;
  SwapSpace swap(so, engine);

  std::atomic<int> failures{0};
  std::atomic<bool> done{false};
  auto worker = [&](int t) {
    std::mt19937_64 rng(1000 + t);
    // Sizes from one byte to several blocks with odd tails; a few extents kept alive across
    // rounds so that holes and reuse happen while other threads allocate.
    std::vector<std::pair<ExtentId, std::vector<std::byte>>> kept;
    for (int r = 0; r < kRounds; ++r) {
      const std::size_t bytes = 1 + rng() % (5 * kBlock);
      const ExtentKey key{"t" + std::to_string(t) + ".r" + std::to_string(r), StateKind::kParam, t};
      ExtentId id = swap.allocate(key, bytes);
      HostBuffer src = HostBuffer::allocate(bytes, "src");
      HostBuffer dst = HostBuffer::allocate(bytes, "dst");
      fill_random(src.bytes(), rng());
      // Two halves at a block boundary as separate writes in flight together, then one read.
      const std::size_t half = bytes > kBlock ? (bytes / 2) / kBlock * kBlock : 0;
      AioHandle w1 = half > 0 ? swap.write(id, src.data(), half, 0) : AioHandle{};
      AioHandle w2 = swap.write(id, src.data() + half, bytes - half, half);
      engine.wait(w1);
      engine.wait(w2);
      engine.wait(swap.read(id, dst.data(), bytes));
      if (std::memcmp(src.data(), dst.data(), bytes) != 0) failures.fetch_add(1);
      if (swap.find(key) != id) failures.fetch_add(1);
      if (r % 3 == 0) {
        kept.emplace_back(id, std::vector<std::byte>(src.data(), src.data() + bytes));
      } else {
        swap.release(id);
      }
      if (kept.size() > 3) {
        // Re-read an older extent: nobody overwrote it meanwhile.
        auto& [old_id, expect] = kept.front();
        HostBuffer again = HostBuffer::allocate(expect.size(), "again");
        engine.wait(swap.read(old_id, again.data(), expect.size()));
        if (std::memcmp(again.data(), expect.data(), expect.size()) != 0) failures.fetch_add(1);
        swap.release(old_id);
        kept.erase(kept.begin());
      }
    }
    for (auto& [id, expect] : kept) swap.release(id);
  };
  std::thread observer([&] {
    while (!done.load()) {
      SwapStats s = swap.stats();
      if (s.used_bytes > s.file_bytes) failures.fetch_add(1);
      (void)swap.find({"t0.r0", StateKind::kParam, 0});
      std::this_thread::yield();
    }
  });
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) threads.emplace_back(worker, t);
  for (auto& th : threads) th.join();
  done.store(true);
  observer.join();
  EXPECT_EQ(failures.load(), 0);
  SwapStats s = swap.stats();
  EXPECT_EQ(s.extents, 0u);
  EXPECT_EQ(s.used_bytes, 0u);
  EXPECT_GT(s.peak_bytes, 0u);
  EXPECT_LE(s.peak_bytes, s.file_bytes);
}

TEST(SwapConcurrency, ThreadsBackend) { run_workers(AioBackend::kThreads); }

TEST(SwapConcurrency, IoUringBackend) {
  IoUringProbe probe = probe_io_uring();
  if (!probe.works) GTEST_SKIP() << "io_uring unavailable: " << probe.reason;
  run_workers(AioBackend::kIoUring);
}

}  // namespace
}  // namespace strata::offload
