#pragma once
// SwiGLU, the LLaMA family's MLP activation: out = silu(gate) * up, silu(x) = x sigmoid(x).
//
// gate_up (N, 2F) is the output of the fused gate_proj / up_proj matmul: row n holds
// [gate (F) | up (F)]. Math in fp32, the result rounded once. (HF rounds silu(gate) to the
// model dtype before the multiply: in bf16 the two differ by about an ulp of the output.)
#include <cstdint>

#include "core/dtype.h"

namespace strata::kernels::host {

// out (N, F) = silu(gate) * up. out may not alias gate_up.
void swiglu_fwd(void* out, const void* gate_up, std::int64_t N, int F, DType dtype);

// dgate_up (N, 2F), overwritten: [dgate | dup] with, s = sigmoid(gate),
//   dgate = dout * up * s (1 + gate (1 - s)),   dup = dout * silu(gate).
// dout (N, F). dgate_up may alias gate_up (each element pair is read before it is written).
void swiglu_bwd(void* dgate_up, const void* gate_up, const void* dout, std::int64_t N, int F,
                DType dtype);

}  // namespace strata::kernels::host
