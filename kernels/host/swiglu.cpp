#include "kernels/host/swiglu.h"

#include <cmath>
#include <cstddef>
#include <vector>

#include "core/error.h"
#include "kernels/host/kernel_impl.h"

namespace strata::kernels::host {
namespace {

using detail::load_row;
using detail::store_row;

float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }

}  // namespace

void swiglu_fwd(void* out, const void* gate_up, std::int64_t N, int F, DType dtype) {
  STRATA_ASSERT(N >= 0 && F >= 0);
  if (N == 0 || F == 0) return;
  const auto Fs = static_cast<std::size_t>(F);
#pragma omp parallel
  {
    std::vector<float> gu(2 * Fs), y(Fs);
#pragma omp for schedule(static)
    for (std::int64_t n = 0; n < N; ++n) {
      load_row(gate_up, dtype, static_cast<std::size_t>(n) * 2 * Fs, 2 * Fs, gu.data());
      for (std::size_t f = 0; f < Fs; ++f) {
        const float g = gu[f];
        y[f] = g * sigmoid(g) * gu[Fs + f];
      }
      store_row(y.data(), out, dtype, static_cast<std::size_t>(n) * Fs, Fs);
    }
  }
}

void swiglu_bwd(void* dgate_up, const void* gate_up, const void* dout, std::int64_t N, int F,
                DType dtype) {
  STRATA_ASSERT(N >= 0 && F >= 0);
  if (N == 0 || F == 0) return;
  const auto Fs = static_cast<std::size_t>(F);
#pragma omp parallel
  {
    std::vector<float> gu(2 * Fs), d(Fs), r(2 * Fs);
#pragma omp for schedule(static)
    for (std::int64_t n = 0; n < N; ++n) {
      load_row(gate_up, dtype, static_cast<std::size_t>(n) * 2 * Fs, 2 * Fs, gu.data());
      load_row(dout, dtype, static_cast<std::size_t>(n) * Fs, Fs, d.data());
      for (std::size_t f = 0; f < Fs; ++f) {
        const float g = gu[f], u = gu[Fs + f], s = sigmoid(g);
        r[f] = d[f] * u * (s * (1.0f + g * (1.0f - s)));
        r[Fs + f] = d[f] * (g * s);
      }
      store_row(r.data(), dgate_up, dtype, static_cast<std::size_t>(n) * 2 * Fs, 2 * Fs);
    }
  }
}

}  // namespace strata::kernels::host
