#include "kernels/host/cross_entropy.h"

#include <cmath>
#include <cstddef>
#include <vector>

#include "core/error.h"
#include "kernels/host/kernel_impl.h"

namespace strata::kernels::host {
namespace {

using detail::load_row;
using detail::store_row;

// log(sum(exp(x))) of a row, with the max subtracted; the sum in double.
float logsumexp(const float* x, std::size_t V) {
  float mx = x[0];
  for (std::size_t v = 1; v < V; ++v) mx = std::max(mx, x[v]);
  double sum = 0.0;
  for (std::size_t v = 0; v < V; ++v) sum += std::exp(static_cast<double>(x[v] - mx));
  return mx + static_cast<float>(std::log(sum));
}

}  // namespace

void softmax_xent_fwd(float* losses, const void* logits, const std::int32_t* targets,
                      std::int64_t N, int V, int ld, DType dtype) {
  STRATA_ASSERT(V > 0 && ld >= V, "softmax_xent_fwd: need 0 < V <= ld");
  const auto Vs = static_cast<std::size_t>(V);
  const auto lds = static_cast<std::size_t>(ld);
#pragma omp parallel
  {
    std::vector<float> x(Vs);
#pragma omp for schedule(static)
    for (std::int64_t n = 0; n < N; ++n) {
      const std::int32_t target = targets[n];
      STRATA_ASSERT(target >= 0 && target < V, "target out of range");
      load_row(logits, dtype, static_cast<std::size_t>(n) * lds, Vs, x.data());
      losses[n] = logsumexp(x.data(), Vs) - x[static_cast<std::size_t>(target)];
    }
  }
}

void softmax_xent_bwd(void* dlogits, const void* logits, const std::int32_t* targets,
                      std::int64_t N, int V, int ld, float dloss, DType dtype) {
  STRATA_ASSERT(V > 0 && ld >= V, "softmax_xent_bwd: need 0 < V <= ld");
  const auto Vs = static_cast<std::size_t>(V);
  const auto lds = static_cast<std::size_t>(ld);
#pragma omp parallel
  {
    std::vector<float> x(lds, 0.0f);  // x[V:ld] stays 0: the padding's gradient
#pragma omp for schedule(static)
    for (std::int64_t n = 0; n < N; ++n) {
      const std::int32_t target = targets[n];
      STRATA_ASSERT(target >= 0 && target < V, "target out of range");
      const std::size_t row = static_cast<std::size_t>(n) * lds;
      load_row(logits, dtype, row, Vs, x.data());  // the whole row first: dlogits may alias
      const float lse = logsumexp(x.data(), Vs);
      for (std::size_t v = 0; v < Vs; ++v) {
        const float p = std::exp(x[v] - lse);
        x[v] = (p - (v == static_cast<std::size_t>(target) ? 1.0f : 0.0f)) * dloss;
      }
      store_row(x.data(), dlogits, dtype, row, lds);
    }
  }
}

}  // namespace strata::kernels::host
