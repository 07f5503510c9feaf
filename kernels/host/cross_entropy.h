#pragma once
// Softmax + cross-entropy over the vocabulary (the LM loss), forward and backward.
#include <cstdint>

#include "core/dtype.h"

namespace strata::kernels::host {

// Rows of logits are `ld` >= V elements apart: the first V columns are the vocabulary, the
// ld - V after them are padding (an LM head padded to an aligned width) that takes no part in
// the softmax.

// losses[n] = logsumexp(logits[n,:V]) - logits[n, targets[n]] (fp32), logits (N,ld) in dtype,
// targets (N) int32 in [0, V). Softmax in fp32 with the row max subtracted.
void softmax_xent_fwd(float* losses, const void* logits, const std::int32_t* targets,
                      std::int64_t N, int V, int ld, DType dtype);

// dlogits[n,:V] = (softmax(logits[n,:V]) - onehot(targets[n])) * dloss and dlogits[n,V:ld] = 0
// (overwritten), where dloss is d(total)/d(losses[n]) for every n: 1/N for the mean loss (times
// the loss scale with fp16). dlogits may alias logits (in place: the logits are not needed
// afterwards).
void softmax_xent_bwd(void* dlogits, const void* logits, const std::int32_t* targets,
                      std::int64_t N, int V, int ld, float dloss, DType dtype);

}  // namespace strata::kernels::host
