#pragma once
// `strata bench NAME`: benchmarks of the hot paths. Each prints its rate next to a limit
// measured in the same run (memory bandwidth, disk bandwidth, PCIe) and the ratio of the two.
#include <cstddef>
#include <string>

namespace strata::tools {

struct BenchOptions {
  std::size_t elements = 0;  // problem size; 0 = the benchmark's default
  int reps = 5;              // best of this many runs
  int threads = 0;           // 0 = OpenMP's default (the cores of the affinity mask)
};

void bench_convert(const BenchOptions& options);  // bench_convert.cpp

// `strata bench adam`: the CPU Adam step (cpu_adam/adam.h) against a memory-bound kernel with
// the same access pattern, and against torch.optim.AdamW when Debian's python3-torch is there.
struct AdamBenchOptions {
  std::string params = "16M,256M";   // parameter counts; K/M/G = 2^10/2^20/2^30
  std::string threads = "1,all";     // thread counts: N, all, or a range A..B (B may be all)
  std::string grads = "fp32,bf16";   // grad modes: fp32, or bf16 grads + bf16 params_out
  int reps = 0;                      // timed rounds per cell; 0 = by size (7 at 256M, up to 25 below)
  bool json = false;                 // one JSON object per cell on stdout, the table on stderr
  bool torch = true;                 // false: skip torch.optim.AdamW
  bool aligned = false;              // true: arrays at the same offset mod 2 MiB (not staggered)
  std::string python = "/usr/bin/python3";  // Debian's python3, the one with python3-torch
  std::string torch_script;          // empty: found next to the binary or in the source tree
};

void bench_adam(const AdamBenchOptions& options);  // bench_adam.cpp

}  // namespace strata::tools
