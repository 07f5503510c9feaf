#pragma once
// Perplexity of a model on a fixed text (`strata infer --perplexity FILE`): the quality measure
// of weight quantization against the unquantized model (docs/benchmarks.md). The token ids are
// cut into consecutive windows of `window` + 1 tokens overlapping by one (each window predicts
// its last `window` tokens from the ones before, with no context from the previous window);
// the model's forward pass gives each window's mean cross-entropy.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "infer/generator.h"
#include "models/model.h"

namespace strata::infer {

struct PerplexityResult {
  std::size_t tokens = 0;   // predicted tokens
  std::size_t windows = 0;  // forward passes
  double mean_nll = 0.0;    // nats per token
  double perplexity = 0.0;  // exp(mean_nll)
};

// ids: at least 2 tokens in [0, vocab). window: positions per forward pass (>= 1, at most the
// model's longest sequence). Throws strata::Error for too few tokens.
PerplexityResult evaluate_perplexity(models::Model& model, const std::vector<std::int32_t>& ids, int window,
                                     const PassHooks& hooks = {});

}  // namespace strata::infer
