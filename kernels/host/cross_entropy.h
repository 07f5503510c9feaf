#pragma once
// Softmax + cross-entropy over the vocabulary (the LM loss), forward and backward.
#include <cstdint>

#include "core/dtype.h"

namespace strata::kernels::host {

// losses[n] = logsumexp(logits[n,:]) - logits[n, targets[n]] (fp32), logits (N,V) in dtype,
// targets (N) int32 in [0, V). Softmax in fp32 with the row max subtracted.
void softmax_xent_fwd(float* losses, const void* logits, const std::int32_t* targets,
                      std::int64_t N, int V, DType dtype);

// dlogits[n,:] = (softmax(logits[n,:]) - onehot(targets[n])) * dloss (overwritten), where
// dloss is d(total)/d(losses[n]) for every n: 1/N for the mean loss (times the loss scale
// with fp16). dlogits may alias logits (in place: the logits are not needed afterwards).
void softmax_xent_bwd(void* dlogits, const void* logits, const std::int32_t* targets,
                      std::int64_t N, int V, float dloss, DType dtype);

}  // namespace strata::kernels::host
