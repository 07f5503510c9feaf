#include "infer/perplexity.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace strata::infer {

PerplexityResult evaluate_perplexity(models::Model& model, const std::vector<std::int32_t>& ids, int window,
                                     const PassHooks& hooks) {
  STRATA_ASSERT(window >= 1, "evaluate_perplexity: window must be positive");
  if (ids.size() < 2) throw Error("the text has fewer than 2 tokens: nothing to predict", "--perplexity");
  PerplexityResult r;
  double total = 0.0;
  for (std::size_t begin = 0; begin + 1 < ids.size(); begin += static_cast<std::size_t>(window)) {
    const int T = static_cast<int>(std::min<std::size_t>(static_cast<std::size_t>(window), ids.size() - 1 - begin));
    // inputs ids[begin, begin + T), targets ids[begin + 1, begin + T + 1)
    if (hooks.begin) hooks.begin();
    const float loss = model.forward(ids.data() + begin, ids.data() + begin + 1, 1, T, /*for_backward=*/false);
    if (hooks.end) hooks.end();
    total += static_cast<double>(loss) * T;
    r.tokens += static_cast<std::size_t>(T);
    ++r.windows;
  }
  r.mean_nll = total / static_cast<double>(r.tokens);
  r.perplexity = std::exp(r.mean_nll);
  return r;
}

}  // namespace strata::infer
