#pragma once
// Internal to cpu_adam: what each SIMD variant of the Adam step provides.
//
// Each variant lives in its own file compiled with its own -m flags (adam_avx2.cpp,
// adam_avx512.cpp, adam_avx512_bf16.cpp; cpu_adam/CMakeLists.txt). Like core/dtype_impl.h,
// this header has no inline functions and includes no strata header that has some: an inline
// function emitted from a file built with -mavx512f could be the copy the linker keeps and
// run on a CPU without AVX-512. The variant files keep their code in an anonymous namespace
// and call the scalar kernel (adam_scalar.cpp, baseline x86-64) where they need a fallback.
//
// Bits: every variant performs the same IEEE operations in the same order, without FMA
// (cpu_adam is compiled with -ffp-contract=off), and sqrt / division are correctly rounded
// everywhere, so all variants give identical bits for the same inputs.
#include <cstddef>
#include <cstdint>

#include "cpu_adam/adam_scalars.h"

namespace strata::cpu_adam::detail {

// The element types a kernel reads and writes (mirrors DType without including dtype.h).
enum class GradKind : std::uint8_t { f32, bf16, f16 };
enum class OutKind : std::uint8_t { none, bf16, f16 };

// The per-step scalars: cpu_adam/adam_scalars.h (computed by adam_scalars(), adam.cpp).

// A contiguous run of one shard: element i of every array belongs to the same parameter.
// Borrowed pointers, any alignment; grads and params_out are in their kinds' element sizes.
// The step reads params_in / exp_avg_in / exp_avg_sq_in and writes params / exp_avg /
// exp_avg_sq: the same arrays for an update in place, or another set (out of place).
struct AdamSpan {
  float* params;
  const void* grads;
  float* exp_avg;
  float* exp_avg_sq;
  const float* params_in;
  const float* exp_avg_in;
  const float* exp_avg_sq_in;
  void* params_out;  // null when out == none
  std::size_t numel;
  GradKind grad;
  OutKind out;
};

using AdamSpanFn = void (*)(const AdamScalars& s, const AdamSpan& span);

void adam_span_scalar(const AdamScalars& s, const AdamSpan& span);  // adam_scalar.cpp
#if defined(STRATA_X86_SIMD)
void adam_span_avx2(const AdamScalars& s, const AdamSpan& span);         // adam_avx2.cpp
void adam_span_avx512(const AdamScalars& s, const AdamSpan& span);       // adam_avx512.cpp
void adam_span_avx512_bf16(const AdamScalars& s, const AdamSpan& span);  // adam_avx512_bf16.cpp
#endif

}  // namespace strata::cpu_adam::detail
