#pragma once
// Internal to cpu_adam: what each SIMD variant of the grad helpers provides. The same rules
// as adam_impl.h (no inline functions here; variant files keep their code in an anonymous
// namespace and fall back to the scalar kernels).
//
// The sum of squares of one chunk has one definition, which every variant computes exactly:
// element j of the chunk is widened to double and multiplied by the scale (exact: two 24-bit
// significands fit in 53 bits), squared (rounded) and added (rounded, no FMA) to lane j % 16;
// lanes start at +0. The 16 lanes are then combined by a fixed tree:
//   s[j] = l[j] + l[j + 8]  (j < 8);  t[j] = s[j] + s[j + 4]  (j < 4);
//   u[j] = t[j] + t[j + 2]  (j < 2);  result = u[0] + u[1].
// (That is what an 8-wide double register pair does; a 4-wide one gets the same tree.)
#include <cstddef>

#include "cpu_adam/adam_impl.h"

namespace strata::cpu_adam::detail {

struct GradOpsKernels {
  // The chunk sum above over grads[0, n).
  double (*sq_sum)(const void* grads, GradKind kind, std::size_t n, double scale);
  // False when any of grads[0, n) is Inf or NaN.
  bool (*all_finite)(const void* grads, GradKind kind, std::size_t n);
  // acc[i] = acc[i] + float(grads[i]) (one rounding); with `first`, acc[i] = 0.0f + float(grads[i])
  // without reading acc: bitwise what accumulating into zeros gives (-0 becomes +0).
  void (*accumulate)(float* acc, const void* grads, GradKind kind, std::size_t n, bool first);
};

const GradOpsKernels& scalar_grad_ops();  // grad_ops_scalar.cpp
#if defined(STRATA_X86_SIMD)
const GradOpsKernels& avx2_grad_ops();    // grad_ops_avx2.cpp
const GradOpsKernels& avx512_grad_ops();  // grad_ops_avx512.cpp
#endif

}  // namespace strata::cpu_adam::detail
