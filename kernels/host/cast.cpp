#include "kernels/host/cast.h"

#include <omp.h>

#include <algorithm>
#include <cstdint>

namespace strata::kernels::host {
namespace {

// Elements per OpenMP work item: 1 MiB of fp32, large enough that the fork/join and the
// per-chunk call cost nothing next to the memory traffic, small enough to split a buffer of
// a few MiB across threads.
constexpr std::size_t kChunkNumel = std::size_t{1} << 18;

}  // namespace

void cast(const void* src, DType src_dtype, void* dst, DType dst_dtype, std::size_t n) {
  if (n == 0 || (src_dtype == dst_dtype && src == dst)) return;
  const std::size_t chunks = (n + kChunkNumel - 1) / kChunkNumel;
  const int threads = static_cast<int>(std::min<std::size_t>(chunks, omp_get_max_threads()));
  if (threads <= 1) {
    convert(src, src_dtype, dst, dst_dtype, n);
    return;
  }
  // Resolved here, not in the threads: active_simd() throws on a bad STRATA_SIMD, and an
  // exception must not escape an OpenMP region.
  const SimdLevel level = active_simd();
  const auto* s = static_cast<const unsigned char*>(src);
  auto* d = static_cast<unsigned char*>(dst);
  const std::size_t src_size = dtype_size(src_dtype), dst_size = dtype_size(dst_dtype);
  // schedule(static): each thread gets one contiguous run of chunks (sequential streams).
#pragma omp parallel for schedule(static) num_threads(threads)
  for (std::int64_t c = 0; c < static_cast<std::int64_t>(chunks); ++c) {
    const std::size_t begin = static_cast<std::size_t>(c) * kChunkNumel;
    const std::size_t count = std::min(kChunkNumel, n - begin);
    convert_with(level, s + begin * src_size, src_dtype, d + begin * dst_size, dst_dtype, count);
  }
}

}  // namespace strata::kernels::host
