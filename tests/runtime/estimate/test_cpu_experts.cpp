// --moe-cpu-experts auto's rule (runtime/estimate/cpu_experts.h): the closed form against a search
// over row counts of the costs it compares, at shapes where each bound decides; at most
// kMatmulFewRows; 0 when the link copies faster than the host reads; a profile without the CPU
// matmul rates is refused.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <string>

#include "core/error.h"
#include "kernels/host/matmul_rows.h"
#include "runtime/estimate/cpu_experts.h"

namespace strata::runtime::estimate {
namespace {

MachineProfile profile(double h2d, double cpu_bytes, double cpu_flops) {
  MachineProfile p;
  p.h2d_bytes_per_s = h2d;
  p.d2h_bytes_per_s = h2d;
  p.cpu_matmul_bytes_per_s = cpu_bytes;
  p.cpu_matmul_flops_per_s = cpu_flops;
  return p;
}

// The largest r with cpu(r) < copy, by trying every r (the header's costs, written out).
std::int64_t searched(const MachineProfile& p, double bytes, double numel, int hidden, double es) {
  const double copy = bytes / p.h2d_bytes_per_s;
  std::int64_t best = 0;
  for (std::int64_t r = 1; r < 100000; ++r) {
    const double rd = static_cast<double>(r);
    const double cpu = std::max(bytes / p.cpu_matmul_bytes_per_s, 2.0 * numel * rd / p.cpu_matmul_flops_per_s) +
                       rd * hidden * es / p.d2h_bytes_per_s + rd * hidden * es / p.h2d_bytes_per_s;
    if (cpu < copy) best = r;
  }
  return std::min(best, kernels::host::kMatmulFewRows);
}

TEST(CpuExperts, TheRowLimitIsWhereTheHostStopsWinning) {
  // A Qwen3-30B-A3B expert in bf16: 3 x 2048 x 768 elements, rows of 2048.
  const std::uint64_t numel = 3ull * 2048 * 768, bytes = numel * 2;
  struct Case {
    MachineProfile p;
    const char* what;
  };
  for (const Case& c : {Case{profile(50e9, 100e9, 1e12), "flops decide"},
                        Case{profile(50e9, 60e9, 20e12), "the read decides, capped"},
                        Case{profile(25e9, 200e9, 4e12), "a slow link, capped"},
                        Case{profile(50e9, 50.3e9, 1.5e12), "the read decides"}}) {
    SCOPED_TRACE(c.what);
    const std::int64_t rows = cpu_expert_max_rows(c.p, numel, 2048, 2);
    EXPECT_GT(rows, 0);
    EXPECT_EQ(rows, searched(c.p, static_cast<double>(bytes), static_cast<double>(numel), 2048, 2.0));
  }
  // 50 GB/s over the link and 100 GB/s of host reads at 0.6 TFLOPS: 11 rows (by hand: copy
  // 188.7 us; 11 rows 173.0 + 1.8 us of flops and rows, 12 rows 188.7 + 2.0 us).
  EXPECT_EQ(cpu_expert_max_rows(profile(50e9, 100e9, 0.6e12), numel, 2048, 2), 11);
  // A faster link helps the copy: fewer rows. A host fast enough for more is capped.
  EXPECT_LT(cpu_expert_max_rows(profile(100e9, 100e9, 0.6e12), numel, 2048, 2),
            cpu_expert_max_rows(profile(50e9, 100e9, 0.6e12), numel, 2048, 2));
  EXPECT_EQ(cpu_expert_max_rows(profile(50e9, 100e9, 1e12), numel, 2048, 2), kernels::host::kMatmulFewRows);
}

TEST(CpuExperts, NeverWhenTheLinkCopiesFasterThanTheHostReads) {
  const std::uint64_t numel = 3ull * 4096 * 14336;
  EXPECT_EQ(cpu_expert_max_rows(profile(55e9, 40e9, 2e12), numel, 4096, 2), 0);
  EXPECT_EQ(cpu_expert_max_rows(profile(55e9, 55e9, 2e12), numel, 4096, 2), 0);
}

TEST(CpuExperts, AProfileWithoutTheCpuRatesIsRefused) {
  const std::uint64_t numel = 3ull * 64 * 96;
  try {
    cpu_expert_max_rows(profile(10e9, 0, 0), numel, 64, 4);
    ADD_FAILURE() << "accepted a profile without cpu_matmul rates";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("cpu_matmul_bytes_per_s"), std::string::npos) << what;
    EXPECT_NE(what.find("strata bench machine"), std::string::npos) << what;
  }
}

}  // namespace
}  // namespace strata::runtime::estimate
