#pragma once
// `strata bench NAME`: benchmarks of the hot paths. Each prints its rate next to a limit
// measured in the same run (memory bandwidth, disk bandwidth, PCIe) and the ratio of the two.
#include <cstddef>

namespace strata::tools {

struct BenchOptions {
  std::size_t elements = 0;  // problem size; 0 = the benchmark's default
  int reps = 5;              // best of this many runs
  int threads = 0;           // 0 = OpenMP's default (the cores of the affinity mask)
};

void bench_convert(const BenchOptions& options);  // bench_convert.cpp

}  // namespace strata::tools
