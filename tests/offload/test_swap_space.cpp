// SwapSpace: round trips of random bytes for awkward sizes on one and three paths, ranged
// transfers, the free list, keys, range errors, checksums (corruption is caught with them and
// not without), stale-folder reclaim, and removal at exit. Every case runs on both engine
// backends (io_uring skips where it is unavailable) and with buffered and O_DIRECT files.
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "core/error.h"
#include "offload/aio_engine.h"
#include "offload/host_buffer.h"
#include "offload/probe.h"
#include "offload/swap_space.h"
#include "tests/offload/offload_test_util.h"

namespace strata::offload {
namespace {

namespace fs = std::filesystem;
using testing::TempDir;
using testing::fill_random;

constexpr std::size_t kBlock = 64 * 1024;  // swap block_size: small, so that sizes stay small

struct Config {
  AioBackend backend;
  DirectIo direct;
};

std::string config_name(const ::testing::TestParamInfo<Config>& info) {
  std::string b = info.param.backend == AioBackend::kIoUring ? "IoUring" : "Threads";
  return b + (info.param.direct == DirectIo::kOff ? "Buffered" : "Direct");
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// Writes random bytes of the extent's whole size and reads them back through fresh buffers.
void round_trip(SwapSpace& swap, ExtentId id, std::uint64_t seed) {
  const std::size_t bytes = swap.extent_bytes(id);
  HostBuffer src = HostBuffer::allocate(bytes, "test source");
  HostBuffer dst = HostBuffer::allocate(bytes, "test destination");
  fill_random(src.bytes(), seed);
  swap.engine().wait(swap.write(id, src.data(), bytes));
  swap.engine().wait(swap.read(id, dst.data(), bytes));
  ASSERT_EQ(std::memcmp(src.data(), dst.data(), bytes), 0)
      << swap.extent_key(id).name() << " of " << bytes << " bytes";
}

// XORs one byte of a file through a descriptor of our own (not the swap space's).
void flip_byte(const std::string& file, std::uint64_t offset) {
  int fd = ::open(file.c_str(), O_RDWR | O_CLOEXEC);
  ASSERT_GE(fd, 0) << file;
  unsigned char c = 0;
  ASSERT_EQ(::pread(fd, &c, 1, static_cast<off_t>(offset)), 1);
  c ^= 0x5a;
  ASSERT_EQ(::pwrite(fd, &c, 1, static_cast<off_t>(offset)), 1);
  ::close(fd);
}

std::size_t entries_in(const std::string& dir) {
  std::size_t n = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator(dir)) ++n;
  return n;
}

class SwapSpaceTest : public ::testing::TestWithParam<Config> {
 protected:
  void SetUp() override {
    if (GetParam().backend == AioBackend::kIoUring) {
      IoUringProbe probe = probe_io_uring();
      if (!probe.works) GTEST_SKIP() << "io_uring unavailable: " << probe.reason;
    }
    AioOptions o;
    o.block_size = 32 * 1024;  // smaller than the swap block: extents cross engine pieces
    o.queue_depth = 16;
    o.parallelism = 2;
    o.backend = GetParam().backend;
    engine_ = std::make_unique<AioEngine>(o);
  }

  SwapOptions options(std::vector<std::string> paths, bool checksum = false) {
    SwapOptions o;
    o.paths = std::move(paths);
    o.block_size = kBlock;
    o.checksum = checksum;
    o.direct = GetParam().direct;
    return o;
  }

  // Directness as promised: kAuto gives O_DIRECT wherever the probe says it works.
  void expect_directness(const SwapSpace& swap) {
    for (const SwapPathStats& p : swap.stats().paths) {
      if (GetParam().direct == DirectIo::kOff) {
        EXPECT_FALSE(p.direct) << p.path;
      } else {
        EXPECT_EQ(p.direct, probe_o_direct(p.path).works) << p.path;
      }
    }
  }

  std::unique_ptr<AioEngine> engine_;
};

const std::vector<std::uint64_t> kSizes = {
    1, 100, 4095, 4096, 4097, kBlock - 1, kBlock, kBlock + 1, 3 * kBlock, 5 * kBlock + 4099,
    7 * kBlock + 1};

TEST_P(SwapSpaceTest, RoundTripsOnOnePath) {
  TempDir dir;
  for (bool checksum : {false, true}) {
    SwapSpace swap(options({dir.path()}, checksum), *engine_);
    expect_directness(swap);
    std::uint64_t seed = 1;
    for (std::uint64_t bytes : kSizes) {
      ExtentId id = swap.allocate({"m" + std::to_string(seed), StateKind::kParam, 0}, bytes);
      EXPECT_EQ(swap.extent_bytes(id), bytes);
      round_trip(swap, id, seed++);
    }
    SwapStats s = swap.stats();
    EXPECT_EQ(s.extents, kSizes.size());
    std::uint64_t aligned = 0;
    for (std::uint64_t bytes : kSizes) aligned += (bytes + kBlock - 1) / kBlock * kBlock;
    EXPECT_EQ(s.used_bytes, aligned);
    EXPECT_EQ(s.paths[0].used_bytes, aligned);
    EXPECT_GE(s.file_bytes, aligned);
  }
}

TEST_P(SwapSpaceTest, StripesOverThreePaths) {
  TempDir d0, d1, d2;
  SwapSpace swap(options({d0.path(), d1.path(), d2.path()}, true), *engine_);
  expect_directness(swap);
  auto used = [&] {
    std::vector<std::uint64_t> u;
    for (const auto& p : swap.stats().paths) u.push_back(p.used_bytes);
    return u;
  };

  // 10 blocks + 7 bytes over 3 paths: parts of 4 blocks (10.x / 3 rounded up), so 4 + 4 + 3
  // blocks (the last holds 2 blocks + 7 bytes), first part on path 0.
  ExtentId big = swap.allocate({"big", StateKind::kMaster, 0}, 10 * kBlock + 7);
  EXPECT_EQ(used(), (std::vector<std::uint64_t>{4 * kBlock, 4 * kBlock, 3 * kBlock}));
  round_trip(swap, big, 11);

  // Small extents rotate their (only) part over the paths: 1, 2, 0.
  ExtentId s1 = swap.allocate({"s1", StateKind::kParam, 0}, 1);
  EXPECT_EQ(used(), (std::vector<std::uint64_t>{4 * kBlock, 5 * kBlock, 3 * kBlock}));
  ExtentId s2 = swap.allocate({"s2", StateKind::kParam, 0}, kBlock);
  EXPECT_EQ(used(), (std::vector<std::uint64_t>{4 * kBlock, 5 * kBlock, 4 * kBlock}));
  ExtentId s3 = swap.allocate({"s3", StateKind::kParam, 0}, 4097);
  EXPECT_EQ(used(), (std::vector<std::uint64_t>{5 * kBlock, 5 * kBlock, 4 * kBlock}));
  // Two blocks: two parts, from path 1.
  ExtentId two = swap.allocate({"two", StateKind::kGrad, 0}, 2 * kBlock);
  EXPECT_EQ(used(), (std::vector<std::uint64_t>{5 * kBlock, 6 * kBlock, 5 * kBlock}));
  std::uint64_t seed = 20;
  for (ExtentId id : {s1, s2, s3, two}) round_trip(swap, id, seed++);
  for (std::uint64_t bytes : kSizes) {
    ExtentId id = swap.allocate({"k" + std::to_string(seed), StateKind::kOther, 1}, bytes);
    round_trip(swap, id, seed++);
  }
  for (const auto& p : swap.stats().paths) {
    EXPECT_GE(p.file_bytes, p.used_bytes);
    EXPECT_EQ(fs::file_size(p.run_dir + "/swap.bin"), p.file_bytes) << p.path;
  }
  round_trip(swap, big, 12);  // the later extents did not overwrite it
}

TEST_P(SwapSpaceTest, RangedTransfersAtBlockOffsets) {
  TempDir d0, d1;
  SwapSpace swap(options({d0.path(), d1.path()}, true), *engine_);
  const std::size_t bytes = 5 * kBlock + 1234;
  ExtentId id = swap.allocate({"h.3", StateKind::kExpAvg, 2}, bytes);
  HostBuffer whole = HostBuffer::allocate(bytes, "whole");
  fill_random(whole.bytes(), 1);
  swap.engine().wait(swap.write(id, whole.data(), bytes));

  // Rewrite block 1 and the range from block 4 to the end (which ends in the unaligned tail).
  HostBuffer patch = HostBuffer::allocate(kBlock, "patch");
  fill_random(patch.bytes(), 2);
  swap.engine().wait(swap.write(id, patch.data(), kBlock, kBlock));
  std::memcpy(whole.data() + kBlock, patch.data(), kBlock);
  const std::size_t tail_bytes = bytes - 4 * kBlock;
  HostBuffer tail = HostBuffer::allocate(tail_bytes, "tail");
  fill_random(tail.bytes(), 3);
  swap.engine().wait(swap.write(id, tail.data(), tail_bytes, 4 * kBlock));
  std::memcpy(whole.data() + 4 * kBlock, tail.data(), tail_bytes);

  // Read back in ranges: each block alone, two blocks at a time, and the end alone.
  HostBuffer got = HostBuffer::allocate(bytes, "got");
  for (std::size_t b = 0; b < 5; ++b) {
    swap.engine().wait(swap.read(id, got.data(), kBlock, b * kBlock));
    EXPECT_EQ(std::memcmp(got.data(), whole.data() + b * kBlock, kBlock), 0) << "block " << b;
  }
  swap.engine().wait(swap.read(id, got.data(), 2 * kBlock, 2 * kBlock));
  EXPECT_EQ(std::memcmp(got.data(), whole.data() + 2 * kBlock, 2 * kBlock), 0);
  const std::size_t end_bytes = bytes - 5 * kBlock;
  std::memset(got.data(), 0xee, got.size());
  swap.engine().wait(swap.read(id, got.data(), end_bytes, 5 * kBlock));
  EXPECT_EQ(std::memcmp(got.data(), whole.data() + 5 * kBlock, end_bytes), 0);
  // The caller's buffer past the range is untouched: no padding is ever written into it.
  EXPECT_EQ(static_cast<unsigned char>(got.data()[end_bytes]), 0xee);
  swap.engine().wait(swap.read(id, got.data(), bytes));
  EXPECT_EQ(std::memcmp(got.data(), whole.data(), bytes), 0);
  EXPECT_FALSE(swap.read(id, got.data(), 0, kBlock)) << "an empty range gives an empty handle";
}

TEST_P(SwapSpaceTest, ReleasedSpaceIsReused) {
  TempDir dir;
  SwapSpace swap(options({dir.path()}), *engine_);
  ExtentId a = swap.allocate({"a", StateKind::kParam, 0}, 3 * kBlock);
  ExtentId b = swap.allocate({"b", StateKind::kParam, 0}, 2 * kBlock);
  round_trip(swap, a, 1);
  round_trip(swap, b, 2);
  const SwapStats before = swap.stats();
  EXPECT_EQ(before.used_bytes, 5 * kBlock);
  swap.release(a);
  EXPECT_EQ(swap.stats().used_bytes, 2 * kBlock);
  EXPECT_EQ(swap.stats().extents, 1u);
  // Two extents fit in a's hole (first fit): the file does not grow.
  ExtentId c = swap.allocate({"c", StateKind::kParam, 0}, 2 * kBlock);
  ExtentId d = swap.allocate({"d", StateKind::kParam, 0}, kBlock - 5);
  SwapStats after = swap.stats();
  EXPECT_EQ(after.file_bytes, before.file_bytes);
  EXPECT_EQ(after.used_bytes, 5 * kBlock);
  EXPECT_EQ(after.peak_bytes, 5 * kBlock);
  round_trip(swap, c, 3);
  round_trip(swap, d, 4);
  round_trip(swap, b, 5);
  swap.release(b);
  swap.release(c);
  swap.release(d);
  EXPECT_EQ(swap.stats().used_bytes, 0u);
  EXPECT_EQ(swap.stats().peak_bytes, 5 * kBlock);
}

TEST_P(SwapSpaceTest, KeysAreUniqueAndFound) {
  TempDir dir;
  SwapSpace swap(options({dir.path()}), *engine_);
  const ExtentKey key{"h.3", StateKind::kExpAvgSq, 1};
  EXPECT_EQ(key.name(), "h.3/exp_avg_sq/rank1");
  EXPECT_FALSE(swap.find(key).has_value());
  ExtentId id = swap.allocate(key, 1000);
  ASSERT_TRUE(swap.find(key).has_value());
  EXPECT_EQ(*swap.find(key), id);
  EXPECT_EQ(swap.extent_key(id), key);
  EXPECT_FALSE(swap.find({"h.3", StateKind::kExpAvg, 1}).has_value());
  EXPECT_FALSE(swap.find({"h.3", StateKind::kExpAvgSq, 0}).has_value());
  try {
    swap.allocate(key, 5);
    FAIL() << "a second extent with the same key must be refused";
  } catch (const Error& e) {
    EXPECT_TRUE(contains(e.what(), "h.3/exp_avg_sq/rank1")) << e.what();
    EXPECT_TRUE(contains(e.what(), "already")) << e.what();
  }
  EXPECT_THROW(swap.allocate({"zero", StateKind::kOther, 0}, 0), Error);
  swap.release(id);
  EXPECT_FALSE(swap.find(key).has_value());
  ExtentId again = swap.allocate(key, 5);
  EXPECT_EQ(*swap.find(key), again);
}

TEST_P(SwapSpaceTest, RangesPastTheEndNameTheExtent) {
  TempDir dir;
  SwapSpace swap(options({dir.path()}), *engine_);
  ExtentId id = swap.allocate({"wte", StateKind::kParam, 0}, kBlock + 10);
  HostBuffer buf = HostBuffer::allocate(3 * kBlock, "buf");
  try {
    swap.read(id, buf.data(), 2 * kBlock, 0);
    FAIL() << "a read past the end must throw";
  } catch (const Error& e) {
    EXPECT_TRUE(contains(e.what(), "wte/param/rank0")) << e.what();
    EXPECT_TRUE(contains(e.what(), "past the end")) << e.what();
  }
  EXPECT_THROW(swap.read(id, buf.data(), 11, kBlock), Error);
  EXPECT_THROW(swap.write(id, buf.data(), kBlock, 2 * kBlock), Error);
  // Misaligned ranges and buffers are refused too.
  EXPECT_THROW(swap.read(id, buf.data(), 10, 4096), Error);
  EXPECT_THROW(swap.read(id, buf.data(), 100, 0), Error);
  EXPECT_THROW(swap.write(id, buf.data() + 8, kBlock, 0), Error);
  // The exact end is fine.
  swap.engine().wait(swap.write(id, buf.data(), 10, kBlock));
}

// The first extent of a fresh swap space starts at offset 0 of path 0's swap.bin.
TEST_P(SwapSpaceTest, ChecksumCatchesCorruption) {
  TempDir dir;
  SwapSpace swap(options({dir.path()}, true), *engine_);
  const std::size_t bytes = 3 * kBlock + 77;
  ExtentId id = swap.allocate({"h.0", StateKind::kMaster, 3}, bytes);
  HostBuffer src = HostBuffer::allocate(bytes, "src");
  HostBuffer dst = HostBuffer::allocate(bytes, "dst");
  fill_random(src.bytes(), 9);
  swap.engine().wait(swap.write(id, src.data(), bytes));
  const std::string file = swap.stats().paths[0].run_dir + "/swap.bin";
  flip_byte(file, 2 * kBlock + 5);
  try {
    swap.engine().wait(swap.read(id, dst.data(), bytes));
    FAIL() << "a corrupted block must fail the read";
  } catch (const Error& e) {
    EXPECT_TRUE(contains(e.what(), "h.0/master/rank3")) << e.what();
    EXPECT_TRUE(contains(e.what(), "checksum")) << e.what();
    EXPECT_TRUE(contains(e.what(), "block 2")) << e.what();
    EXPECT_TRUE(contains(e.what(), file)) << e.what();
    EXPECT_TRUE(contains(e.what(), "offset " + std::to_string(2 * kBlock))) << e.what();
  }
  // The other blocks read fine, and the tail block is verified too.
  swap.engine().wait(swap.read(id, dst.data(), 2 * kBlock));
  EXPECT_EQ(std::memcmp(dst.data(), src.data(), 2 * kBlock), 0);
  flip_byte(file, 3 * kBlock + 76);
  EXPECT_THROW(swap.engine().wait(swap.read(id, dst.data(), 77, 3 * kBlock)), Error);
  // Rewriting the block heals it.
  swap.engine().wait(swap.write(id, src.data(), bytes));
  swap.engine().wait(swap.read(id, dst.data(), bytes));
  EXPECT_EQ(std::memcmp(dst.data(), src.data(), bytes), 0);
}

TEST_P(SwapSpaceTest, WithoutChecksumCorruptionGoesUnnoticed) {
  TempDir dir;
  SwapSpace swap(options({dir.path()}, false), *engine_);
  const std::size_t bytes = 3 * kBlock + 77;
  ExtentId id = swap.allocate({"h.0", StateKind::kMaster, 3}, bytes);
  HostBuffer src = HostBuffer::allocate(bytes, "src");
  HostBuffer dst = HostBuffer::allocate(bytes, "dst");
  fill_random(src.bytes(), 9);
  swap.engine().wait(swap.write(id, src.data(), bytes));
  flip_byte(swap.stats().paths[0].run_dir + "/swap.bin", 2 * kBlock + 5);
  EXPECT_NO_THROW(swap.engine().wait(swap.read(id, dst.data(), bytes)));
  EXPECT_NE(std::memcmp(dst.data(), src.data(), bytes), 0);
  EXPECT_EQ(dst.data()[2 * kBlock + 5], src.data()[2 * kBlock + 5] ^ std::byte{0x5a});
}

TEST_P(SwapSpaceTest, ReadOfANeverWrittenBlockFailsWithChecksum) {
  TempDir dir;
  SwapSpace swap(options({dir.path()}, true), *engine_);
  ExtentId id = swap.allocate({"ln_f", StateKind::kGrad, 0}, 2 * kBlock);
  HostBuffer buf = HostBuffer::allocate(2 * kBlock, "buf");
  swap.engine().wait(swap.write(id, buf.data(), kBlock));  // block 0 only
  swap.engine().wait(swap.read(id, buf.data(), kBlock));
  try {
    swap.engine().wait(swap.read(id, buf.data(), 2 * kBlock));
    FAIL() << "block 1 was never written";
  } catch (const Error& e) {
    EXPECT_TRUE(contains(e.what(), "ln_f/grad/rank0")) << e.what();
    EXPECT_TRUE(contains(e.what(), "never written")) << e.what();
    EXPECT_TRUE(contains(e.what(), "block 1")) << e.what();
  }
}

// A fake run folder as a crashed run leaves it: a lock file nobody holds, and some data.
std::string make_run_folder(const std::string& parent, const std::string& name,
                            std::size_t data_bytes) {
  const std::string dir = parent + "/" + name;
  fs::create_directory(dir);
  std::ofstream(dir + "/lock").put('x');
  std::ofstream data(dir + "/swap.bin", std::ios::binary);
  std::string bytes(data_bytes, 'd');
  data.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  return dir;
}

TEST_P(SwapSpaceTest, StaleFoldersAreReclaimedAndLiveOnesLeftAlone) {
  TempDir dir;
  const std::string stale = make_run_folder(dir.path(), "strata-swap-otherhost-4242-0badf00d",
                                            1 << 20);
  const std::string live = make_run_folder(dir.path(), "strata-swap-otherhost-4243-0000cafe",
                                           4096);
  const std::string unrelated = dir.path() + "/my-notes";
  fs::create_directory(unrelated);
  // flock belongs to an open file description: this one conflicts with the swap space's own
  // open of the same file, as another process's would.
  int held = ::open((live + "/lock").c_str(), O_RDONLY | O_CLOEXEC);
  ASSERT_GE(held, 0);
  ASSERT_EQ(::flock(held, LOCK_EX | LOCK_NB), 0);
  {
    SwapSpace swap(options({dir.path()}), *engine_);
    EXPECT_FALSE(fs::exists(stale));
    EXPECT_TRUE(fs::exists(live + "/swap.bin"));
    EXPECT_TRUE(fs::exists(unrelated));
    EXPECT_GE(swap.stats().stale_reclaimed_bytes, 1u << 20);
  }
  ::close(held);
  EXPECT_TRUE(fs::exists(live)) << "a live run's folder is never touched";
  // Unlocked now: the next swap space reclaims it.
  SwapSpace again(options({dir.path()}), *engine_);
  EXPECT_FALSE(fs::exists(live));
  EXPECT_GT(again.stats().stale_reclaimed_bytes, 0u);
  // A second swap space on the same path (another run) leaves the first one's folder alone.
  SwapSpace second(options({dir.path()}), *engine_);
  EXPECT_EQ(second.stats().stale_reclaimed_bytes, 0u);
  EXPECT_TRUE(fs::exists(again.stats().paths[0].run_dir + "/swap.bin"));
}

// Hidden folders: a run that crashed while making its folder. Removed once older than the
// grace period (a folder being made right now is young), never while young.
TEST_P(SwapSpaceTest, OldHiddenFoldersAreReclaimedYoungOnesNot) {
  TempDir dir;
  const std::string old_dir =
      make_run_folder(dir.path(), ".strata-swap-otherhost-17-00000001.tmp", 8192);
  const std::string young = make_run_folder(dir.path(), ".strata-swap-otherhost-18-00000002.tmp",
                                            8192);
  fs::remove(young + "/lock");  // as just after mkdir
  const struct timespec two_hours_ago[2] = {{::time(nullptr) - 7200, 0},
                                            {::time(nullptr) - 7200, 0}};
  ASSERT_EQ(::utimensat(AT_FDCWD, old_dir.c_str(), two_hours_ago, 0), 0);
  SwapSpace swap(options({dir.path()}), *engine_);
  EXPECT_FALSE(fs::exists(old_dir));
  EXPECT_TRUE(fs::exists(young));
  EXPECT_GE(swap.stats().stale_reclaimed_bytes, 8192u);
}

// A reclaim killed while it removed a stale folder leaves `.<name>.<tag>.removing` with its lock
// free (the lock file goes last): not a folder being made, so it is removed at once, however
// young (tests/soak met one, whose swap.bin then outlived the next run by a minute). One whose
// lock is held (a reclaim at work) is left, and one without a lock keeps the minute of grace.
TEST_P(SwapSpaceTest, AKilledReclaimsFolderIsRemovedAtOnce) {
  TempDir dir;
  const std::string killed = make_run_folder(
      dir.path(), ".strata-swap-otherhost-19-00000003.0badf00d.removing", 1 << 20);
  const std::string working = make_run_folder(
      dir.path(), ".strata-swap-otherhost-20-00000004.0000cafe.removing", 8192);
  const std::string lockless = make_run_folder(
      dir.path(), ".strata-swap-otherhost-21-00000005.12345678.removing", 8192);
  fs::remove(lockless + "/lock");
  int held = ::open((working + "/lock").c_str(), O_RDONLY | O_CLOEXEC);
  ASSERT_GE(held, 0);
  ASSERT_EQ(::flock(held, LOCK_EX | LOCK_NB), 0);
  {
    SwapSpace swap(options({dir.path()}), *engine_);
    EXPECT_FALSE(fs::exists(killed));
    EXPECT_TRUE(fs::exists(working + "/swap.bin"));
    EXPECT_TRUE(fs::exists(lockless + "/swap.bin"));
    EXPECT_GE(swap.stats().stale_reclaimed_bytes, 1u << 20);
  }
  ::close(held);
}

TEST_P(SwapSpaceTest, CleanExitRemovesTheRunFolders) {
  TempDir d0, d1;
  std::vector<std::string> run_dirs;
  HostBuffer buf = HostBuffer::allocate(3 * kBlock + 1, "buf");  // outlives the swap space
  {
    SwapOptions o = options({d0.path(), d1.path()});
    o.reserve_bytes = 4 * kBlock;
    SwapSpace swap(o, *engine_);
    SwapStats s = swap.stats();
    ASSERT_EQ(s.paths.size(), 2u);
    EXPECT_EQ(s.file_bytes, 4 * kBlock);
    for (const SwapPathStats& p : s.paths) {
      EXPECT_EQ(fs::path(p.run_dir).parent_path(), fs::path(p.path));
      EXPECT_EQ(fs::path(p.run_dir).filename().string().rfind("strata-swap-", 0), 0u) << p.run_dir;
      EXPECT_TRUE(fs::exists(p.run_dir + "/lock"));
      EXPECT_TRUE(fs::exists(p.run_dir + "/swap.bin"));
      EXPECT_EQ(p.file_bytes, 2 * kBlock);
      EXPECT_GT(p.free_bytes, 0u);
      run_dirs.push_back(p.run_dir);
    }
    EXPECT_EQ(entries_in(d0.path()), 1u) << "nothing but the run folder (no hidden leftovers)";
    ExtentId id = swap.allocate({"x", StateKind::kParam, 0}, 3 * kBlock + 1);
    swap.write(id, buf.data(), buf.size());  // not waited for: the destructor waits
  }
  for (const std::string& d : run_dirs) EXPECT_FALSE(fs::exists(d)) << d;
  EXPECT_EQ(entries_in(d0.path()), 0u);
  EXPECT_EQ(entries_in(d1.path()), 0u);
}

INSTANTIATE_TEST_SUITE_P(Engines, SwapSpaceTest,
                         ::testing::Values(Config{AioBackend::kThreads, DirectIo::kOff},
                                           Config{AioBackend::kThreads, DirectIo::kAuto},
                                           Config{AioBackend::kIoUring, DirectIo::kOff},
                                           Config{AioBackend::kIoUring, DirectIo::kAuto}),
                         config_name);

}  // namespace
}  // namespace strata::offload
