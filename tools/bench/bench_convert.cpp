// strata bench convert: the bulk dtype converters against the memory system.
//
// Each converter reads n source elements and writes n destination elements. The limit is a
// memcpy that moves the same bytes (read + write) in the same run, on the same number of
// threads; the ratio converter / memcpy is what to compare across machines. Buffers are far
// larger than the caches so that both sides stream from DRAM.
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <vector>

#include <fmt/format.h>

#include "core/cpu_features.h"
#include "core/dtype.h"
#include "core/units.h"
#include "kernels/host/cast.h"
#include "tools/bench/bench.h"

namespace strata::tools {
namespace {

// Best of `reps` runs, in seconds.
template <typename Fn>
double best_seconds(int reps, Fn&& fn) {
  double best = 1e30;
  for (int r = 0; r < reps; ++r) {
    auto t0 = std::chrono::steady_clock::now();
    fn();
    auto t1 = std::chrono::steady_clock::now();
    best = std::min(best, std::chrono::duration<double>(t1 - t0).count());
  }
  return best;
}

// memcpy of `bytes`, split across `threads` in equal contiguous chunks.
void parallel_copy(char* dst, const char* src, std::size_t bytes, int threads) {
#pragma omp parallel for num_threads(threads) schedule(static)
  for (int t = 0; t < threads; ++t) {
    std::size_t begin = bytes * t / threads;
    std::size_t end = bytes * (t + 1) / threads;
    std::memcpy(dst + begin, src + begin, end - begin);
  }
}

struct Pair {
  DType src;
  DType dst;
};

}  // namespace

void bench_convert(const BenchOptions& options) {
  const std::size_t n = options.elements != 0 ? options.elements : std::size_t{32} << 20;
  const int threads = options.threads > 0 ? options.threads : omp_get_max_threads();
  const Pair pairs[] = {{DType::f32, DType::bf16}, {DType::bf16, DType::f32},
                        {DType::f32, DType::f16},  {DType::f16, DType::f32}};
  std::vector<char> src(n * 4), dst(n * 4);
  // Finite values of every magnitude so that no special-case shortcut is measured.
  auto* f = reinterpret_cast<float*>(src.data());
  for (std::size_t i = 0; i < n; ++i) f[i] = static_cast<float>(i % 65521) * 0.37f - 9000.0f;
  std::memset(dst.data(), 1, dst.size());  // first touch

  std::printf("strata bench convert: %zu elements, best of %d, threads %d, CPU SIMD %s\n", n,
              options.reps, threads, std::string(simd_name(detected_simd())).c_str());
  std::printf("%-12s %-12s %8s %12s %12s %8s\n", "conversion", "variant", "threads", "GB/s",
              "memcpy GB/s", "ratio");
  for (const Pair& p : pairs) {
    const std::size_t bytes = n * (dtype_size(p.src) + dtype_size(p.dst));
    const std::string name = fmt::format("{}->{}", dtype_name(p.src), dtype_name(p.dst));
    // One thread: every SIMD variant this CPU has, against a one-thread memcpy.
    const double copy1 = best_seconds(options.reps, [&] { parallel_copy(dst.data(), src.data(), bytes / 2, 1); });
    for (int level = 0; level <= static_cast<int>(detected_simd()); ++level) {
      const auto simd = static_cast<SimdLevel>(level);
      const double t = best_seconds(options.reps, [&] {
        convert_with(simd, src.data(), p.src, dst.data(), p.dst, n);
      });
      std::printf("%-12s %-12s %8d %12.1f %12.1f %8.2f\n", name.c_str(),
                  std::string(simd_name(simd)).c_str(), 1, bytes / t / 1e9, bytes / copy1 / 1e9,
                  copy1 / t);
    }
    // All threads: the host cast kernel against an all-thread memcpy.
    const double copyn = best_seconds(options.reps, [&] { parallel_copy(dst.data(), src.data(), bytes / 2, threads); });
    const double t = best_seconds(options.reps, [&] { kernels::host::cast(src.data(), p.src, dst.data(), p.dst, n); });
    std::printf("%-12s %-12s %8d %12.1f %12.1f %8.2f\n", name.c_str(), "host cast", threads,
                bytes / t / 1e9, bytes / copyn / 1e9, copyn / t);
  }
}

}  // namespace strata::tools
