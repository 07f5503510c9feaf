// The grad helpers: choice of variant and the split over OpenMP threads. The kernels are in
// grad_ops_scalar.cpp, grad_ops_avx2.cpp and grad_ops_avx512.cpp.
//
// The squared norm is reduced over fixed chunks of kNormChunkNumel elements (absolute
// positions in the shard): each chunk's sum is defined exactly (grad_ops_impl.h), and the
// chunk sums are added in index order on the calling thread. Threads only decide who computes
// which chunk, so the result is the same bits for every thread count, not just for a given one.
#include <algorithm>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "cpu_adam/grad_ops.h"
#include "cpu_adam/grad_ops_impl.h"
#include "cpu_adam/parallel_impl.h"

namespace strata::cpu_adam {
namespace {

using detail::GradKind;
using detail::GradOpsKernels;

// 4096 elements: 16 KiB of fp32 grads per chunk; 256M grads give 64K partial sums (512 KiB).
constexpr std::size_t kNormChunkNumel = 4096;

const GradOpsKernels& kernels(SimdLevel simd) {
  STRATA_ASSERT(simd <= detected_simd(), "SIMD level above what this CPU supports");
#if defined(STRATA_X86_SIMD)
  switch (simd) {
    case SimdLevel::scalar: return detail::scalar_grad_ops();
    case SimdLevel::avx2: return detail::avx2_grad_ops();
    case SimdLevel::avx512:
    case SimdLevel::avx512_bf16: return detail::avx512_grad_ops();
  }
#endif
  return detail::scalar_grad_ops();
}

GradKind kind(DType dtype) {
  switch (dtype) {
    case DType::f32: return GradKind::f32;
    case DType::bf16: return GradKind::bf16;
    case DType::f16: return GradKind::f16;
  }
  STRATA_ASSERT(false, "grad dtype is not a DType");
}

const unsigned char* at(const void* grads, DType dtype, std::size_t i) {
  return static_cast<const unsigned char*>(grads) + dtype_size(dtype) * i;
}

}  // namespace

double grad_sq_norm(SimdLevel simd, int threads, const void* grads, DType dtype, std::size_t numel,
                    float scale) {
  const GradOpsKernels& k = kernels(simd);
  const GradKind gk = kind(dtype);
  if (numel == 0) return 0.0;
  STRATA_ASSERT(grads != nullptr, "grad_sq_norm: null grads with numel > 0");
  const std::size_t chunks = (numel + kNormChunkNumel - 1) / kNormChunkNumel;
  std::vector<double> partial(chunks);  // (chunks,)
  const int parts = detail::part_count(numel, detail::resolve_threads(threads));
  const auto parts_z = static_cast<std::size_t>(parts);
  detail::for_each_part(parts, [&](int part) {
    const auto p = static_cast<std::size_t>(part);
    for (std::size_t c = chunks * p / parts_z; c < chunks * (p + 1) / parts_z; ++c) {
      const std::size_t begin = c * kNormChunkNumel;
      const std::size_t n = std::min(kNormChunkNumel, numel - begin);
      partial[c] = k.sq_sum(at(grads, dtype, begin), gk, n, static_cast<double>(scale));
    }
  });
  double total = 0.0;
  for (const double s : partial) total += s;
  return total;
}

bool all_finite(SimdLevel simd, int threads, const void* grads, DType dtype, std::size_t numel) {
  const GradOpsKernels& k = kernels(simd);
  const GradKind gk = kind(dtype);
  if (numel == 0) return true;
  STRATA_ASSERT(grads != nullptr, "all_finite: null grads with numel > 0");
  const int parts = detail::part_count(numel, detail::resolve_threads(threads));
  std::vector<char> finite(static_cast<std::size_t>(parts), 1);
  detail::for_each_part(parts, [&](int part) {
    const detail::Range r = detail::part_range(numel, parts, part);
    finite[static_cast<std::size_t>(part)] = k.all_finite(at(grads, dtype, r.begin), gk, r.end - r.begin);
  });
  for (const char f : finite)
    if (!f) return false;
  return true;
}

namespace {

// Elements of a narrow accumulator widened at a time: 8 KiB of fp32, in L1 with the gradients
// and the accumulator's own 4 KiB.
constexpr std::size_t kWidenBlockNumel = 2048;

void accumulate_parts(SimdLevel simd, int threads, void* acc, DType acc_dtype, const void* grads, DType dtype,
                      std::size_t numel, bool first) {
  const GradOpsKernels& k = kernels(simd);
  const GradKind gk = kind(dtype);
  (void)kind(acc_dtype);  // asserts a DType
  if (numel == 0) return;
  STRATA_ASSERT(acc != nullptr && grads != nullptr, "accumulate_grads: null pointer with numel > 0");
  const std::size_t as = dtype_size(acc_dtype);
  const int parts = detail::part_count(numel, detail::resolve_threads(threads));
  detail::for_each_part(parts, [&](int part) {
    const detail::Range r = detail::part_range(numel, parts, part);
    unsigned char* a = static_cast<unsigned char*>(acc) + r.begin * as;
    if (acc_dtype == DType::f32) {
      k.accumulate(reinterpret_cast<float*>(a), at(grads, dtype, r.begin), gk, r.end - r.begin, first);
      return;
    }
    alignas(64) float wide[kWidenBlockNumel];
    for (std::size_t b = r.begin; b < r.end; b += kWidenBlockNumel) {
      const std::size_t n = std::min(kWidenBlockNumel, r.end - b);
      unsigned char* ab = static_cast<unsigned char*>(acc) + b * as;
      if (!first) convert_with(simd, ab, acc_dtype, wide, DType::f32, n);
      k.accumulate(wide, at(grads, dtype, b), gk, n, first);
      convert_with(simd, wide, DType::f32, ab, acc_dtype, n);
    }
  });
}

}  // namespace

void accumulate_grads(SimdLevel simd, int threads, float* acc, const void* grads, DType dtype,
                      std::size_t numel) {
  accumulate_parts(simd, threads, acc, DType::f32, grads, dtype, numel, false);
}

void store_first_grads(SimdLevel simd, int threads, float* acc, const void* grads, DType dtype,
                       std::size_t numel) {
  accumulate_parts(simd, threads, acc, DType::f32, grads, dtype, numel, true);
}

void accumulate_grads(SimdLevel simd, int threads, void* acc, DType acc_dtype, const void* grads, DType dtype,
                      std::size_t numel) {
  accumulate_parts(simd, threads, acc, acc_dtype, grads, dtype, numel, false);
}

void store_first_grads(SimdLevel simd, int threads, void* acc, DType acc_dtype, const void* grads,
                       DType dtype, std::size_t numel) {
  accumulate_parts(simd, threads, acc, acc_dtype, grads, dtype, numel, true);
}

}  // namespace strata::cpu_adam
