// The Adam step with AVX-512 plus AVX512-BF16: the kernel of adam_avx512_impl.h with the bf16
// params_out converted by vcvtneps2bf16 (identical bits to the integer rounding; the argument
// is at to_bf16_insn). Compiled with the flags of adam_avx512.cpp plus -mavx512bf16 and only
// called when the CPU has AVX512-BF16.
#define STRATA_ADAM_BF16_INSN 1
#include "cpu_adam/adam_avx512_impl.h"

namespace strata::cpu_adam::detail {

void adam_span_avx512_bf16(const AdamScalars& s, const AdamSpan& span) { run_span(s, span); }

}  // namespace strata::cpu_adam::detail
