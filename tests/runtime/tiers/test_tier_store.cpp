// TierStore: the config's keys reach the pinned pool, the I/O engine and the swap space, the
// swap space exists only where the placement puts something on NVMe, and an out-of-memory
// report on the device lists the pinned and NVMe tiers.
#include <stdlib.h>

#include <filesystem>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "core/error.h"
#include "core/units.h"
#include "runtime/config/config.h"
#include "runtime/device/arena.h"
#include "runtime/device/device.h"
#include "runtime/tiers/io_options.h"
#include "runtime/tiers/plan.h"
#include "runtime/tiers/tier_store.h"

namespace strata::runtime {
namespace {

namespace fs = std::filesystem;

class TempDir {
 public:
  TempDir() {
    std::string templ = fs::temp_directory_path().string() + "/strata-tiers-test-XXXXXX";
    if (::mkdtemp(templ.data()) != nullptr) path_ = templ;
  }
  ~TempDir() {
    std::error_code ec;
    if (!path_.empty()) fs::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

config::Config resolved(config::Config c) {
  config::ResolveInputs in;
  in.host_memory_bytes = 8 * kGiB;
  in.cpu_count = 2;
  if (!c.train_micro_batch_size_per_gpu) c.train_micro_batch_size_per_gpu = std::uint64_t{1};
  return resolve_config(c, in);
}

std::unique_ptr<device::Device> host_device(std::uint64_t bytes) {
  device::DeviceOptions o;
  o.kind = "host";
  o.memory_bytes = bytes;
  return device::Device::create(o);
}

// A store of one small module "m0" (4096 elements, fp32) on `device`, parameters only (the
// tests count the pinned pool's use to the byte).
struct Store {
  Store(const config::Config& config, device::Device& device) : init(device.create_stream("init")) {
    tiers::StoreSetup setup;
    setup.module_numels = {4096};
    setup.module_names = {"m0"};
    setup.optimizer = false;
    store = std::make_unique<tiers::TierStore>(config, setup, device, *init);
  }
  std::unique_ptr<device::Stream> init;
  std::unique_ptr<tiers::TierStore> store;
};

TEST(TierStore, ConfigKeysBecomeOptions) {
  config::Config c;
  c.aio.block_size = 256 * kKiB;
  c.aio.queue_depth = 32;
  c.aio.intra_op_parallelism = 2;
  c.aio.single_submit = true;
  c.aio.overlap_events = false;
  c.strata.io_backend = config::IoBackend::kThreads;
  c.strata.io_uring_sqpoll = true;
  c.strata.checksum = true;
  c.strata.direct_io = config::DirectIoMode::kOff;
  offload::AioOptions a = tiers::aio_options(c);
  EXPECT_EQ(a.block_size, 256 * kKiB);
  EXPECT_EQ(a.queue_depth, 32u);
  EXPECT_EQ(a.parallelism, 2u);
  EXPECT_TRUE(a.single_submit);
  EXPECT_FALSE(a.overlap_events);
  EXPECT_TRUE(a.sqpoll);
  EXPECT_EQ(a.backend, offload::AioBackend::kThreads);
  offload::SwapOptions s = tiers::swap_options(c, {"/a", "/b"});
  EXPECT_EQ(s.paths, (std::vector<std::string>{"/a", "/b"}));
  EXPECT_EQ(s.block_size, 256 * kKiB);
  EXPECT_TRUE(s.checksum);
  EXPECT_EQ(s.direct, offload::DirectIo::kOff);
}

TEST(TierStore, NvmePathsComeFromTheNvmeSectionsOnlyEachOnce) {
  config::Config c;
  c.zero_optimization.stage = 3;
  c.zero_optimization.offload_param.device = config::OffloadDevice::kCpu;
  c.zero_optimization.offload_param.nvme_path = {"/ignored"};
  EXPECT_TRUE(tiers::nvme_paths(c).empty());
  c.zero_optimization.offload_param.device = config::OffloadDevice::kNvme;
  c.zero_optimization.offload_param.nvme_path = {"/n0", "/n1"};
  c.zero_optimization.offload_optimizer.device = config::OffloadDevice::kNvme;
  c.zero_optimization.offload_optimizer.nvme_path = {"/n1", "/n2"};
  EXPECT_EQ(tiers::nvme_paths(c), (std::vector<std::string>{"/n0", "/n1", "/n2"}));
}

TEST(TierStore, NoNvmeOffloadMeansNoSwapSpace) {
  config::Config c;
  c.strata.pinned_memory_bytes = 0;  // resolved below to host memory / 2
  c.strata.io_backend = config::IoBackend::kThreads;
  auto device = host_device(64 * kMiB);
  Store made(resolved(c), *device);
  tiers::TierStore& tiers = *made.store;
  EXPECT_EQ(tiers.swap(), nullptr);
  EXPECT_EQ(tiers.pinned().stats().budget_bytes, 4 * kGiB);
  EXPECT_EQ(tiers.io().backend_name(), "threads");
}

TEST(TierStore, TiersAppearInTheDevicesOutOfMemoryReport) {
  TempDir dir;
  ASSERT_FALSE(dir.path().empty());
  config::Config c;
  c.zero_optimization.stage = 3;
  c.zero_optimization.offload_optimizer.device = config::OffloadDevice::kNvme;
  c.zero_optimization.offload_optimizer.nvme_path = {dir.path()};
  c.strata.pinned_memory_bytes = 16 * kMiB;
  c.strata.direct_io = config::DirectIoMode::kAuto;
  c.aio.block_size = 64 * kKiB;  // small swap sets: the plan fits the 16 MiB pool
  auto device = host_device(8 * kMiB);
  Store made(resolved(c), *device);
  tiers::TierStore& tiers = *made.store;
  ASSERT_NE(tiers.swap(), nullptr);
  offload::HostBuffer b = tiers.pinned().allocate(3 * kMiB, "staging");
  offload::ExtentId e = tiers.swap()->allocate({"h.0", offload::StateKind::kExpAvg, 0}, 2 * kMiB);
  tiers.io().wait(tiers.swap()->write(e, b.data(), 2 * kMiB));

  try {
    device::DeviceBuffer too_big = device->allocate(9 * kMiB, "activations");
    FAIL() << "allocating past the budget must throw";
  } catch (const device::OutOfMemory& error) {
    const std::string what = error.what();
    EXPECT_NE(what.find("pinned host"), std::string::npos) << what;
    EXPECT_NE(what.find("3.00 MiB"), std::string::npos) << what;  // the pinned pool in use
    EXPECT_NE(what.find("16.00 MiB"), std::string::npos) << what;  // its budget
    EXPECT_NE(what.find("nvme"), std::string::npos) << what;
  }
}

TEST(TierStore, AMissingNvmeFolderIsAClearError) {
  config::Config c;
  c.zero_optimization.stage = 3;
  c.zero_optimization.offload_param.device = config::OffloadDevice::kNvme;
  c.zero_optimization.offload_param.nvme_path = {"/nonexistent/strata/nvme"};
  c.strata.pinned_memory_bytes = 16 * kMiB;
  auto device = host_device(8 * kMiB);
  try {
    Store made(resolved(c), *device);
    FAIL() << "a missing nvme_path must throw";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("/nonexistent/strata/nvme"), std::string::npos)
        << error.what();
  }
}

}  // namespace
}  // namespace strata::runtime
