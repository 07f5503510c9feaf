// The NVMe swap ring on its own: windows come back with what was written, reads run ahead into
// the next queued module (not only within one), a barrier in the queue stops them, and a read
// of a module waits for that module's writes still in flight, and flush() waits for every
// request even after one of them failed.
#include <gtest/gtest.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <memory>
#include <thread>
#include <string>
#include <vector>

#include "core/units.h"
#include "runtime/config/config.h"
#include "runtime/device/device.h"
#include "runtime/tiers/tier_store.h"
#include "runtime/zero/swap_ring.h"
#include "tests/runtime/zero/engine_fixture.h"

using namespace strata;
using namespace strata::runtime;
using namespace strata::runtime::engine_test;

namespace {

constexpr std::size_t kWindow = 16'384;  // elements: one 64 KiB block of fp32

struct RingRun {
  explicit RingRun(const std::string& nvme, offload::CompletionHook hook = {}) {
    config::Config c = make_config(3, config::OffloadDevice::kNone, config::OffloadDevice::kNvme, nvme);
    device::DeviceOptions o;
    o.kind = "host";
    o.memory_bytes = 64 * kMiB;
    device = device::Device::create(o);
    init = device->create_stream("init");
    tiers::StoreSetup setup;
    // Three modules of two windows and a half each.
    for (int m = 0; m < 3; ++m) {
      setup.module_numels.push_back(2 * kWindow + kWindow / 2);
      setup.module_names.push_back("m" + std::to_string(m));
    }
    setup.io_completion_hook = std::move(hook);
    store = std::make_unique<tiers::TierStore>(c, setup, *device, *init);
    ring = std::make_unique<zero::SwapRing>(*store, 4, kWindow, /*pipeline_read=*/true, /*pipeline_write=*/true);
  }
  std::uint64_t bytes_read() const { return store->io().stats().bytes_read; }
  std::unique_ptr<device::Device> device;
  std::unique_ptr<device::Stream> init;
  std::unique_ptr<tiers::TierStore> store;
  std::unique_ptr<zero::SwapRing> ring;
};

// Every window of `module`, in order, through the ring; each element += `add`.
void update_module(RingRun& r, int module, float add, const zero::SwapRing::Upcoming& upcoming) {
  const std::size_t shard = r.store->state(module, tiers::StateKind::master).numel();
  for (std::size_t off = 0; off < shard; off += kWindow) {
    const std::size_t n = std::min(kWindow, shard - off);
    zero::SwapRing::Window w = r.ring->acquire(module, off, n, upcoming);
    for (std::size_t i = 0; i < n; ++i) {
      w.master[i] += add;
      w.exp_avg[i] += 2 * add;
      w.exp_avg_sq[i] += 3 * add;
    }
    r.ring->release(w);
  }
}

}  // namespace

TEST(SwapRing, WindowsRoundTripAcrossModulesAndSteps) {
  TempDir dir;
  RingRun r(dir.path());
  const std::vector<int> order = {0, 1, 2};
  for (int step = 0; step < 3; ++step) {
    for (std::size_t i = 0; i < order.size(); ++i) {
      // The modules queued after the running one.
      auto upcoming = [&](std::size_t k) { return i + 1 + k < order.size() ? order[i + 1 + k] : -1; };
      update_module(r, order[i], 1.0f + static_cast<float>(order[i]), upcoming);
    }
  }
  r.ring->flush();
  for (int m = 0; m < 3; ++m) {
    for (tiers::StateKind k : {tiers::StateKind::master, tiers::StateKind::exp_avg, tiers::StateKind::exp_avg_sq}) {
      const tiers::TierState& s = r.store->state(m, k);
      std::vector<float> v(s.numel());
      s.read(0, s.numel(), v.data(), *r.init);
      const float per_step = (1.0f + static_cast<float>(m)) *
                             (k == tiers::StateKind::master ? 1.0f : k == tiers::StateKind::exp_avg ? 2.0f : 3.0f);
      for (std::size_t i = 0; i < v.size(); ++i) {
        ASSERT_EQ(v[i], 3 * per_step) << "module " << m << " " << tiers::state_name(k) << " element " << i;
      }
    }
  }
}

TEST(SwapRing, ReadsAheadIntoTheNextQueuedModuleAndStopsAtABarrier) {
  TempDir dir;
  RingRun r(dir.path());
  const std::size_t window_bytes = kWindow * 4 * 3;  // one window of the three states
  // Module 0 (two and a half windows) with module 1 queued next: with 4 sets the ring keeps two
  // windows read ahead, so by module 0's last window module 1's first two are on their way.
  auto next_is_1 = [](std::size_t k) { return k == 0 ? 1 : -1; };
  const std::size_t shard = r.store->state(0, tiers::StateKind::master).numel();
  const std::uint64_t before = r.bytes_read();
  for (std::size_t off = 0; off < shard; off += kWindow) {
    zero::SwapRing::Window w = r.ring->acquire(0, off, std::min(kWindow, shard - off), next_is_1);
    r.ring->release(w);
  }
  r.store->io().wait_all();  // the engine counts bytes as reads complete
  EXPECT_EQ(r.bytes_read() - before, shard * 4 * 3 + 2 * window_bytes);
  const std::uint64_t before_module_1 = r.bytes_read();
  zero::SwapRing::Window w = r.ring->acquire(1, 0, kWindow, [](std::size_t) { return -1; });
  r.ring->release(w);
  r.store->io().wait_all();
  // Its first window was read ahead; acquiring it read only what the lookahead still lacked
  // (module 1's third window; nothing is queued after module 1).
  EXPECT_EQ(r.bytes_read() - before_module_1, (kWindow / 2) * 4 * 3);
  r.ring->flush();

  // A barrier (a checkpoint task) right after the running module: no read past it.
  auto barrier = [](std::size_t) { return -1; };
  const std::uint64_t before_barrier = r.bytes_read();
  for (std::size_t off = 0; off < shard; off += kWindow) {
    zero::SwapRing::Window x = r.ring->acquire(2, off, std::min(kWindow, shard - off), barrier);
    r.ring->release(x);
  }
  r.ring->flush();
  EXPECT_EQ(r.bytes_read() - before_barrier, shard * 4 * 3);  // module 2's states, nothing more
}

// Note [Drain everything, then report] (core/shutdown.h): a read that fails must not leave the
// other reads of the ring in flight once flush() has returned, since the ring's buffers are
// freed next (~SwapRing). Here the first read piece fails and every other one completes 20 ms
// late: flush() throws the EIO, and by then every piece the engine started has completed.
TEST(SwapRing, FlushWaitsForEveryRequestAfterOneFailed) {
  TempDir dir;
  std::atomic<bool> armed{false};
  std::atomic<bool> failed_one{false};
  std::atomic<std::uint64_t> completions{0};
  RingRun r(dir.path(), [&](const offload::Completion& c) {
    int result = c.result;
    if (armed.load() && c.op == offload::IoOp::kRead) {
      if (!failed_one.exchange(true)) {
        result = -EIO;
      } else {
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
    }
    completions.fetch_add(1);
    return result;
  });
  r.store->io().wait_all();  // the states' first writes
  armed = true;
  // Module 0's first window, with module 1 queued: the ring reads two windows ahead.
  EXPECT_THROW(r.ring->acquire(0, 0, kWindow, [](std::size_t k) { return k == 0 ? 1 : -1; }), Error);
  EXPECT_THROW(r.ring->flush(), Error);
  EXPECT_EQ(completions.load(), r.store->io().stats().pieces)
      << "flush() returned with pieces still in flight";
  EXPECT_TRUE(failed_one.load());
}
