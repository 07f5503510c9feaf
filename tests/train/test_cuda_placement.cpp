// Placement invariance on the cuda device: the tiny preset trained 3 steps at stage 3 with the
// parameters and optimizer states in pinned host memory, then on NVMe, gives byte-identical
// saved weights (both update with the CPU Adam; only where the states live differs). The host
// backend's placement tests (tests/train, train_placement_*) prove the same on the host device.
// Exits 77 (skipped) where no GPU is usable.
#include <gtest/gtest.h>

#include <fstream>
#include <iterator>
#include <string>

#include "tests/train/trace_run_util.h"

namespace strata::train {
namespace {

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in.good()) << path;
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

TEST(CudaPlacement, CpuAndNvmeStatesGiveIdenticalWeights) {
  if (!test::have_text()) GTEST_SKIP() << test::text_path() << " is missing";
  test::TempDir tmp;
  ASSERT_FALSE(tmp.path().empty());
  const std::string cpu = tmp.path() + "/cpu.safetensors", nvme = tmp.path() + "/nvme.safetensors";
  const test::TracedRun a = test::traced_run(tmp.path() + "/cpu", "cpu", "cuda", 3, cpu);
  const test::TracedRun b = test::traced_run(tmp.path() + "/nvme", "nvme", "cuda", 3, nvme);
  ASSERT_EQ(a.metrics.size(), 3u);
  ASSERT_EQ(b.metrics.size(), 3u);
  for (std::size_t i = 0; i < a.metrics.size(); ++i) {
    EXPECT_EQ(a.metrics[i].at("loss"), b.metrics[i].at("loss")) << "step " << i + 1;
    EXPECT_EQ(a.metrics[i].at("grad_norm"), b.metrics[i].at("grad_norm")) << "step " << i + 1;
  }
  const std::string wa = read_bytes(cpu), wb = read_bytes(nvme);
  ASSERT_GT(wa.size(), 1000u);
  EXPECT_TRUE(wa == wb) << "the cpu and nvme runs saved different weights";
  // The NVMe run did read and write its states on the disk.
  EXPECT_GT(b.metrics.back().at("bytes").at("nvme_read").get<std::uint64_t>(), 0u);
}

}  // namespace
}  // namespace strata::train
