// The Adam step with AVX-512 F/BW/VL/DQ (the kernel is in adam_avx512_impl.h). Compiled with
// -mavx512f -mavx512bw -mavx512vl -mavx512dq -ffp-contract=off and only called when the CPU
// has them. bf16 params_out are rounded on the integer bits.
#include "cpu_adam/adam_avx512_impl.h"

namespace strata::cpu_adam::detail {

void adam_span_avx512(const AdamScalars& s, const AdamSpan& span) { run_span(s, span); }

}  // namespace strata::cpu_adam::detail
