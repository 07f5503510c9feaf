#include "kernels/host/elementwise.h"

#include <algorithm>
#include <cmath>
#include <cstddef>

#include "kernels/host/kernel_impl.h"

namespace strata::kernels::host {
namespace {

using detail::load_row;
using detail::store_row;

constexpr std::int64_t kChunk = 4096;      // elements per work item
constexpr float kGeluScale = 0.7978845608028654f;  // sqrt(2 / pi)
constexpr float kGeluCube = 0.044715f;

// Runs fn(x, y, out, n) on fp32 chunks of up to kChunk elements of the inputs; out may alias
// either input (each chunk is read completely before it is written).
template <typename Fn>
void chunked(void* out, const void* x, const void* y, std::int64_t n, DType dtype, Fn fn) {
  const std::int64_t chunks = (n + kChunk - 1) / kChunk;
#pragma omp parallel
  {
    float a[kChunk], b[kChunk], r[kChunk];
#pragma omp for schedule(static)
    for (std::int64_t k = 0; k < chunks; ++k) {
      const auto begin = static_cast<std::size_t>(k * kChunk);
      const auto len = static_cast<std::size_t>(std::min(kChunk, n - k * kChunk));
      load_row(x, dtype, begin, len, a);
      if (y != nullptr) load_row(y, dtype, begin, len, b);
      fn(a, b, r, len);
      store_row(r, out, dtype, begin, len);
    }
  }
}

}  // namespace

void gelu_fwd(void* out, const void* inp, std::int64_t n, DType dtype) {
  chunked(out, inp, nullptr, n, dtype, [](const float* x, const float*, float* r, std::size_t len) {
    for (std::size_t i = 0; i < len; ++i) {
      const float v = x[i];
      const float u = kGeluScale * (v + kGeluCube * v * v * v);
      r[i] = 0.5f * v * (1.0f + std::tanh(u));
    }
  });
}

void gelu_bwd(void* dinp, const void* inp, const void* dout, std::int64_t n, DType dtype) {
  chunked(dinp, inp, dout, n, dtype, [](const float* x, const float* d, float* r, std::size_t len) {
    for (std::size_t i = 0; i < len; ++i) {
      const float v = x[i];
      const float u = kGeluScale * (v + kGeluCube * v * v * v);
      const float th = std::tanh(u);
      const float sech2 = 1.0f - th * th;
      const float du = kGeluScale * (1.0f + 3.0f * kGeluCube * v * v);
      r[i] = d[i] * (0.5f * (1.0f + th) + 0.5f * v * sech2 * du);
    }
  });
}

void residual_fwd(void* out, const void* a, const void* b, std::int64_t n, DType dtype) {
  chunked(out, a, b, n, dtype, [](const float* x, const float* y, float* r, std::size_t len) {
    for (std::size_t i = 0; i < len; ++i) r[i] = x[i] + y[i];
  });
}

}  // namespace strata::kernels::host
