// The parameter fetcher on its own (host backend, no update gate): a gather fetched ahead of its
// NVMe read waits for the read on the staged H2D stream, and nothing else waits with it
// (Note [Staged copies] in runtime/zero/param_fetcher.cpp); a module needed now while every
// staging buffer holds a read fetched ahead keeps those reads (none is read twice); a hinted
// module that found every staging buffer busy is read before the trace's next module (Note
// [Hinted reads first]); hinted reads run side by side (Note [Free staging buffers]).
#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <cstring>
#include <future>
#include <initializer_list>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "offload/aio_engine.h"
#include "runtime/comm/comm.h"
#include "runtime/device/device.h"
#include "runtime/tiers/tier_store.h"
#include "runtime/zero/engine_streams.h"
#include "runtime/zero/param_fetcher.h"
#include "runtime/zero/state_load.h"
#include "tests/runtime/zero/engine_fixture.h"
#include "tests/runtime/zero/span_watch.h"

using namespace strata;
using namespace strata::runtime;
using namespace strata::runtime::engine_test;

namespace {

// A completion hook for a disk that is slow for as long as the test says: once held, every read
// completion waits until let go, but for those of one module (the one the test needs now). With
// aio.block_size over the largest shard, each shard lies in a block of its own (swap extents
// are rounded up to blocks), so a piece's offset names its module.
class SlowReads {
 public:
  // Holds every read from now on but those in the block of `block_bytes` at `offset`.
  void hold_all_but(std::uint64_t offset, std::uint64_t block_bytes) {
    std::lock_guard lock(mutex_);
    held_ = true;
    block_bytes_ = block_bytes;
    spared_ = offset / block_bytes;
  }
  void let_go() {
    {
      std::lock_guard lock(mutex_);
      held_ = false;
    }
    cv_.notify_all();
  }
  // The offsets of the reads completed so far, in completion order.
  std::vector<std::uint64_t> offsets() {
    std::lock_guard lock(mutex_);
    return offsets_;
  }
  offload::CompletionHook hook() {
    return [this](const offload::Completion& c) {
      if (c.op == offload::IoOp::kRead) {
        std::unique_lock lock(mutex_);
        cv_.wait(lock, [&] { return !held_ || c.offset / block_bytes_ == spared_; });
        offsets_.push_back(c.offset);
      }
      return c.result;
    };
  }

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  bool held_ = false;
  std::uint64_t block_bytes_ = 1;
  std::uint64_t spared_ = 0;  // block index
  std::vector<std::uint64_t> offsets_;
};

// Polls `event` for up to `limit`: whether its work completed by then.
bool completes_within(const device::Event& event, std::chrono::milliseconds limit) {
  const auto end = std::chrono::steady_clock::now() + limit;
  while (!event.query()) {
    if (std::chrono::steady_clock::now() > end) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

std::vector<float> initial_values(int m) {
  std::vector<float> v(module_numel(m));
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = 0.01f * static_cast<float>((i * 7 + m) % 101) - 0.5f;
  return v;
}

// Everything a fetcher borrows, in construction order (destroyed the other way).
struct FetcherRun {
  // routed[m]: module m is a routed module (a mixture's expert: off the trace, fetched on demand
  // or on a hint); none when empty.
  FetcherRun(const config::Config& config, offload::CompletionHook hook, std::vector<char> routed = {},
             trace::Tracer* tracer = nullptr) {
    device::DeviceOptions o;
    o.tracer = tracer;
    o.kind = "host";
    o.memory_bytes = config.strata.device_memory_bytes;
    device = device::Device::create(o);
    comm::CommOptions co;
    co.backend = comm::CommBackend::single;
    comm = create_communicator(*device, co);
    compute = device->create_stream("compute");
    streams = std::make_unique<zero::EngineStreams>(*device);
    tiers::StoreSetup setup;
    for (int m = 0; m < kModules; ++m) {
      setup.module_numels.push_back(module_numel(m));
      setup.module_names.push_back("m" + std::to_string(m));
    }
    setup.io_completion_hook = std::move(hook);
    setup.routed_modules = std::move(routed);
    store = std::make_unique<tiers::TierStore>(config, setup, *device, *streams->optim);
    for (int m = 0; m < kModules; ++m) {
      const std::vector<float> v = initial_values(m);
      zero::load_params(*store, m, v.data(), *streams->copy_in);
    }
    streams->copy_in->synchronize();
    fetcher = std::make_unique<zero::ParamFetcher>(config, *store, *device, *compute, *streams, *comm,
                                                   /*gate=*/nullptr, /*activation_bytes=*/0);
  }

  std::unique_ptr<device::Device> device;
  std::unique_ptr<comm::Communicator> comm;
  std::unique_ptr<device::Stream> compute;
  std::unique_ptr<zero::EngineStreams> streams;
  std::unique_ptr<tiers::TierStore> store;
  std::unique_ptr<zero::ParamFetcher> fetcher;
};

// The module's gathered parameters are its initial values, bit for bit.
void expect_initial(const params::ModuleView& v, int m) {
  if (v.ready) v.ready->synchronize();
  const std::vector<float> want = initial_values(m);
  ASSERT_EQ(v.numel, want.size());
  EXPECT_EQ(std::memcmp(v.data, want.data(), want.size() * 4), 0) << "module " << m;
}

// Every module is read from NVMe. In step 2 the disk holds every read but module 0's: the
// fetcher gathers module 0 on demand, then reads modules 1.. ahead and gathers module 1 ahead of
// its read, so the staged stream waits, and module 1's ready event with it. Work enqueued on the
// H2D stream after that (the updater's new parameters of resident modules, their `updated`
// events) completes all the same. On one shared H2D stream it waited for the disk.
TEST(ParamFetcher, ASlowNvmeReadHoldsOnlyTheStagedStream) {
  TempDir dir;
  config::Config config = make_config(3, config::OffloadDevice::kNvme, config::OffloadDevice::kCpu, dir.path());
  config.aio.block_size = kMiB;  // a block per shard
  SlowReads disk;
  FetcherRun run(config, disk.hook());
  for (int m = 0; m < kModules; ++m) {
    ASSERT_FALSE(run.store->plan().modules[static_cast<std::size_t>(m)].resident);
    ASSERT_TRUE(run.store->state(m, tiers::StateKind::param).needs_staging());
  }
  zero::ParamFetcher& f = *run.fetcher;

  // Step 1 records the trace; every read completes.
  f.begin_step();
  for (int m = 0; m < kModules; ++m) {
    expect_initial(f.acquire(m), m);
    f.release(m);
  }
  f.end_step();
  // Step 1 read on demand, one module after the other: module 0's read came first.
  const std::vector<std::uint64_t> offsets = disk.offsets();
  ASSERT_GE(offsets.size(), static_cast<std::size_t>(kModules));

  disk.hold_all_but(offsets[0], config.aio.block_size);
  f.begin_step();
  const params::ModuleView v0 = f.acquire(0);  // on demand; then modules 1.. are fetched ahead
  expect_initial(v0, 0);
  const params::ModuleView v1 = f.acquire(1);  // gathered ahead: waits on its `ready`
  ASSERT_NE(v1.ready, nullptr);
  EXPECT_GT(f.counters().prefetched, 0u);
  const bool waiting = !completes_within(*v1.ready, std::chrono::milliseconds(100));

  std::unique_ptr<device::Event> probe = run.device->create_event();
  probe->record(*run.streams->copy_in);
  // Returns as soon as the probe completes; the limit only ends a run where copy_in waits for
  // the held read (which never completes before let_go): long, so a loaded machine cannot fail it.
  const bool copy_in_free = completes_within(*probe, std::chrono::seconds(30));
  disk.let_go();
  EXPECT_TRUE(waiting) << "module 1's copy did not wait for its read (the test holds no read)";
  EXPECT_TRUE(copy_in_free) << "the H2D stream waited for an NVMe read fetched ahead";

  expect_initial(v1, 1);
  f.release(1);
  f.release(0);
  for (int m = 2; m < kModules; ++m) {
    expect_initial(f.acquire(m), m);
    f.release(m);
  }
  f.end_step();
  run.device->synchronize();
}

// Two staging buffers, and a prefetch bucket that lets one module at a time be gathered ahead.
config::Config two_staging_buffers(const std::string& nvme) {
  config::Config config = make_config(3, config::OffloadDevice::kNvme, config::OffloadDevice::kCpu, nvme);
  config.zero_optimization.offload_param.buffer_count = 2;
  config.zero_optimization.stage3_prefetch_bucket_size = std::uint64_t{1};
  return config;
}

// Acquires module m (checking its values) and releases it.
void take(zero::ParamFetcher& f, int m) {
  expect_initial(f.acquire(m), m);
  f.release(m);
}

// routed[m] for FetcherRun: the modules given are a mixture's experts.
std::vector<char> routed_modules(std::initializer_list<int> modules) {
  std::vector<char> routed(kModules, 0);
  for (int m : modules) routed[static_cast<std::size_t>(m)] = 1;
  return routed;
}

// One step acquiring every module in order: the trace (the modules not routed).
void record_trace(zero::ParamFetcher& f) {
  f.begin_step();
  for (int m = 0; m < kModules; ++m) take(f, m);
  f.end_step();
}

// Modules 2 and 3 routed (layer 1's experts, after block 1), two staging buffers: the next step
// acquires 0, so the trace's reads of 1 (gathered ahead), 4 and 5 hold both buffers; then 2 and 3
// are hinted and wait for a buffer.
void hint_layer_one_behind_the_trace(zero::ParamFetcher& f) {
  f.begin_step();
  take(f, 0);
  ASSERT_TRUE(f.fetched(4));
  ASSERT_TRUE(f.fetched(5));
  f.hint(2);
  f.hint(3);
  ASSERT_FALSE(f.fetched(2));
  ASSERT_FALSE(f.fetched(3));
}

// Bytes the swap space has read so far.
std::uint64_t bytes_read(const FetcherRun& run) { return run.store->swap()->engine().stats().bytes_read; }

// Two staging buffers, and a prefetch bucket that lets a hint gather nothing but the first: after
// hints of modules 0, 1 and 2, module 0 is gathered and 1 and 2 hold both staging buffers with
// their reads. Module 3 is then needed now. Every module acquired once must read each module
// once, as acquiring them in order does (the control): the reads of 1 and 2 are kept (1, the
// oldest, gathered ahead to free its buffer), not dropped and read again.
TEST(ParamFetcher, ANeededModuleKeepsTheReadsFetchedAhead) {
  TempDir dir;
  const config::Config config = two_staging_buffers(dir.path());
  std::uint64_t control = 0;
  {
    FetcherRun run(config, {});
    ASSERT_EQ(run.store->plan().param_staging_buffers, 2);
    const std::uint64_t start = bytes_read(run);
    run.fetcher->begin_step();
    for (int m = 0; m < kModules; ++m) {
      expect_initial(run.fetcher->acquire(m), m);
      run.fetcher->release(m);
    }
    run.fetcher->end_step();
    control = bytes_read(run) - start;
  }
  FetcherRun run(config, {});
  zero::ParamFetcher& f = *run.fetcher;
  const std::uint64_t start = bytes_read(run);
  f.begin_step();
  for (int m : {0, 1, 2}) f.hint(m);
  EXPECT_EQ(f.counters().prefetched, 1u) << "the test needs modules 1 and 2 reading, not gathered";
  expect_initial(f.acquire(3), 3);  // on demand, both staging buffers busy
  f.release(3);
  for (int m : {0, 1, 2, 4, 5}) {
    expect_initial(f.acquire(m), m);
    f.release(m);
  }
  f.end_step();
  run.device->synchronize();
  EXPECT_EQ(bytes_read(run) - start, control) << "a read fetched ahead was dropped and read again";
  EXPECT_EQ(f.counters().prefetched, 2u);  // module 1 gathered ahead to free its buffer
}

// Modules 0-4 are the trace, module 5 is routed (an expert); two staging buffers, and a prefetch
// bucket that lets one module at a time be gathered ahead. In the second step, after acquiring 0
// and releasing it, modules 2 and 3 hold both staging buffers with reads along the trace; then
// module 5 is hinted (its router picked it): no buffer is free, so it waits. The next buffer to
// free (module 2's, gathered ahead at acquire(1)) must go to module 5, not to module 4's read.
TEST(ParamFetcher, AHintedModuleIsReadBeforeTheTracesNext) {
  TempDir dir;
  const config::Config config = two_staging_buffers(dir.path());
  const std::vector<char> routed = routed_modules({5});
  FetcherRun run(config, {}, routed);
  zero::ParamFetcher& f = *run.fetcher;
  record_trace(f);  // 0..4

  f.begin_step();
  take(f, 0);
  ASSERT_TRUE(f.fetched(2));
  ASSERT_TRUE(f.fetched(3)) << "the test needs both staging buffers reading along the trace";
  f.hint(5);
  EXPECT_FALSE(f.fetched(5));
  take(f, 1);
  EXPECT_TRUE(f.fetched(5)) << "the hinted module did not get the staging buffer that freed";
  EXPECT_FALSE(f.fetched(4)) << "the trace's next read went before the hinted module";
  for (int m : {5, 2, 3, 4}) take(f, m);
  f.end_step();
  run.device->synchronize();
}

// Modules 2 and 3 are routed (layer 1's experts, after block 1). Hinted while both staging buffers
// hold reads along the trace, they wait; then the pass moves on to block 4 without acquiring them
// (the lookahead's wrong guesses): their hints are stale and must never be read.
TEST(ParamFetcher, HintsOfAPassedLayerAreNotRead) {
  TempDir dir;
  const config::Config config = two_staging_buffers(dir.path());
  const std::vector<char> routed = routed_modules({2, 3});
  FetcherRun run(config, {}, routed);
  zero::ParamFetcher& f = *run.fetcher;
  record_trace(f);  // 0, 1, 4, 5
  ASSERT_NO_FATAL_FAILURE(hint_layer_one_behind_the_trace(f));
  take(f, 4);  // a later layer's block: the hints of layer 1 are stale
  EXPECT_FALSE(f.fetched(2)) << "a stale hint was read";
  EXPECT_FALSE(f.fetched(3)) << "a stale hint was read";
  take(f, 5);
  EXPECT_FALSE(f.fetched(2));
  EXPECT_FALSE(f.fetched(3));
  f.end_step();
  run.device->synchronize();
}

// Modules 2 and 3 are routed (layer 1's experts), hinted while both staging buffers hold reads
// along the trace. Module 3's hint is withdrawn (the lookahead guessed it and the router did not
// pick it: ParamProvider::cancel_prefetch): when acquiring 2 frees a buffer, 3 must not be read.
// The control run keeps the hint: 3 is read then, so the setup does free a buffer for it.
TEST(ParamFetcher, AWithdrawnHintIsNotRead) {
  TempDir dir;
  const config::Config config = two_staging_buffers(dir.path());
  const std::vector<char> routed = routed_modules({2, 3});
  for (const bool withdraw : {false, true}) {
    FetcherRun run(config, {}, routed);
    zero::ParamFetcher& f = *run.fetcher;
    record_trace(f);  // 0, 1, 4, 5
    ASSERT_NO_FATAL_FAILURE(hint_layer_one_behind_the_trace(f));
    if (withdraw) f.unhint(3);
    take(f, 2);  // on demand: a buffer frees, then 2's after its copy
    EXPECT_EQ(f.fetched(3), !withdraw) << (withdraw ? "a withdrawn hint was read" : "the control read nothing");
    for (int m : {1, 4, 5}) take(f, m);
    f.end_step();
    run.device->synchronize();
  }
}

// Modules 2 and 3 are routed (a layer's experts); three staging buffers. The disk holds every
// read. Module 2 is hinted: its read starts and it is gathered ahead, its copy waiting on the
// staged stream for the read. Module 3 is hinted next: its read must start at once, into another
// buffer, side by side with 2's. Taking 2's buffer (not busy once its copy is enqueued), the hint
// waited on the host for 2's copy, that is for 2's read: here until the disk is let go.
TEST(ParamFetcher, HintedReadsRunSideBySide) {
  TempDir dir;
  config::Config config = make_config(3, config::OffloadDevice::kNvme, config::OffloadDevice::kCpu, dir.path());
  config.zero_optimization.offload_param.buffer_count = 3;
  config.aio.block_size = kMiB;  // a block per shard
  const std::vector<char> routed = routed_modules({2, 3});
  SlowReads disk;
  FetcherRun run(config, disk.hook(), routed);
  zero::ParamFetcher& f = *run.fetcher;
  record_trace(f);  // 0, 1, 4, 5
  run.device->synchronize();

  f.begin_step();
  disk.hold_all_but(std::uint64_t{1} << 40, config.aio.block_size);  // no read is spared
  struct LetGo {  // a failed assertion below must not leave the disk held (the teardown waits)
    SlowReads& disk;
    ~LetGo() { disk.let_go(); }
  } let_go{disk};
  f.hint(2);
  ASSERT_EQ(f.counters().prefetched, 1u) << "the test needs module 2 gathered ahead of its read";
  std::future<void> second = std::async(std::launch::async, [&f] { f.hint(3); });
  const bool side_by_side = second.wait_for(std::chrono::seconds(10)) == std::future_status::ready;
  disk.let_go();
  second.get();
  EXPECT_TRUE(side_by_side) << "the second hinted read waited for the first";
  EXPECT_TRUE(f.fetched(3));
  for (int m : {0, 1, 2, 3, 4, 5}) take(f, m);
  f.end_step();
  run.device->synchronize();
}

// Module 2 is routed and hinted with a staging buffer free: read and gathered ahead. Its hint is
// then withdrawn (the lookahead's wrong guess): it gives its gathered buffer (and prefetch budget)
// back at once, and counts as fetched and never used.
TEST(ParamFetcher, AWithdrawnFetchedGuessGivesItsMemoryBack) {
  TempDir dir;
  const config::Config config = two_staging_buffers(dir.path());
  const std::vector<char> routed = routed_modules({2});
  FetcherRun run(config, {}, routed);
  zero::ParamFetcher& f = *run.fetcher;
  record_trace(f);
  run.device->synchronize();

  f.begin_step();
  f.hint(2);
  ASSERT_EQ(f.counters().prefetched, 1u) << "the test needs module 2 gathered ahead";
  f.unhint(2);
  EXPECT_FALSE(f.fetched(2)) << "the withdrawn guess still holds its buffer";
  EXPECT_EQ(f.counters().unused_fetches, 1u);
  EXPECT_EQ(f.counters().unused_read_bytes, module_numel(2) * 4);
  for (int m : {0, 1, 3, 4, 5}) take(f, m);
  f.end_step();
  run.device->synchronize();
}

// A staged shard is read in parts, and each part goes up as soon as it is read
// (Note [Reads in parts] in runtime/zero/param_fetcher.cpp): with the disk holding every block of
// routed module 2 but its first (aio.block_size 64 KiB: three parts of a shard), a hint of module
// 2 copies that first part while the rest is still being read. Read in one piece, nothing would
// go up before the whole shard had been read, and the hold would run out. Then every module's
// values are right.
TEST(ParamFetcher, AStagedShardGoesUpPartByPartAsItIsRead) {
  TempDir dir;
  config::Config config = make_config(3, config::OffloadDevice::kNvme, config::OffloadDevice::kCpu, dir.path());
  ASSERT_EQ(config.aio.block_size, 65'536u);
  ASSERT_GT(module_numel(2) * 4, 2 * config.aio.block_size) << "the test needs a shard of three blocks";
  // A ring per request: a held part's completion never sits in front of the first part's in one
  // thread's batch of completions.
  config.aio.intra_op_parallelism = 4;
  const std::vector<char> routed = routed_modules({2});
  SlowReads disk;
  trace::Tracer tracer(dir.path() + "/trace.json");
  SpanWatch watch(tracer);
  FetcherRun run(config, disk.hook(), routed, &tracer);
  zero::ParamFetcher& f = *run.fetcher;
  record_trace(f);  // 0, 1, 3, 4, 5 (2 is routed)
  take(f, 2);       // 2 read once on demand too: every module's blocks have been seen
  run.device->synchronize();
  // The swap's extents follow the modules, three blocks each: module 2's first block is the
  // seventh block the disk has served (a shard's tail, past its last whole 4 KiB, is read apart).
  std::vector<std::uint64_t> offsets;
  for (std::uint64_t o : disk.offsets()) {
    if (o % config.aio.block_size == 0) offsets.push_back(o);
  }
  std::sort(offsets.begin(), offsets.end());
  offsets.erase(std::unique(offsets.begin(), offsets.end()), offsets.end());
  ASSERT_EQ(offsets.size(), static_cast<std::size_t>(3 * kModules));

  f.begin_step();
  disk.hold_all_but(offsets[6], config.aio.block_size);
  struct LetGo {  // a failed assertion below must not leave the disk held (the teardown waits)
    SlowReads& disk;
    ~LetGo() { disk.let_go(); }
  } let_go{disk};
  watch.arm();
  f.hint(2);
  ASSERT_EQ(f.counters().prefetched, 1u) << "module 2 was not gathered ahead of its read";
  EXPECT_TRUE(watch.wait_for(copy_on("h2d nvme", config.aio.block_size)))
      << "module 2's first part did not go up while the rest of its shard was held on the disk";
  // And only that part: the second waits for its own read.
  EXPECT_FALSE(watch.wait_for_bytes("h2d nvme", 2 * config.aio.block_size, std::chrono::seconds(1)))
      << "module 2's second part went up before it was read";
  disk.let_go();
  for (int m : {0, 1, 2, 3, 4, 5}) take(f, m);
  f.end_step();
  run.device->synchronize();
}

// Parts of several swap blocks: with aio.block_size 4 KiB a shard of 41 blocks or more is read
// in 16 parts or fewer of three blocks each, the last one short; every module's values are right
// whether read ahead (along the trace) or on demand (the routed module).
TEST(ParamFetcher, PartsOfSeveralBlocksKeepTheValues) {
  TempDir dir;
  config::Config config = make_config(3, config::OffloadDevice::kNvme, config::OffloadDevice::kCpu, dir.path());
  config.aio.block_size = 4096;
  ASSERT_GT(module_numel(0) * 4, 16 * config.aio.block_size) << "the test needs more blocks than parts";
  const std::vector<char> routed = routed_modules({2});
  FetcherRun run(config, {}, routed);
  zero::ParamFetcher& f = *run.fetcher;
  for (int step = 0; step < 2; ++step) {  // the first records the trace, the second reads ahead
    f.begin_step();
    for (int m : {0, 1, 2, 3, 4, 5}) take(f, m);
    f.end_step();
  }
  EXPECT_GT(f.counters().prefetched, 0u);
  run.device->synchronize();
}

}  // namespace
