#pragma once
// Element-wise ops: GELU (the tanh approximation, GPT-2's "gelu_new") and the residual add.
#include <cstdint>

#include "core/dtype.h"

namespace strata::kernels::host {

// out = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), n elements; out may alias inp.
void gelu_fwd(void* out, const void* inp, std::int64_t n, DType dtype);

// dinp = dout * gelu'(inp) (overwritten), n elements; dinp may alias dout.
void gelu_bwd(void* dinp, const void* inp, const void* dout, std::int64_t n, DType dtype);

// out = a + b, n elements; out may alias a or b.
void residual_fwd(void* out, const void* a, const void* b, std::int64_t n, DType dtype);

}  // namespace strata::kernels::host
