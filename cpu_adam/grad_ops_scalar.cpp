// The portable grad helpers (grad_ops_impl.h gives the exact definitions every variant
// follows). Compiled for the baseline; the SIMD variants call these for their tails.
#include <cstring>

#include "core/dtype.h"
#include "cpu_adam/grad_ops_impl.h"

namespace strata::cpu_adam::detail {
namespace {

float load(const unsigned char* grads, GradKind kind, std::size_t i) {
  if (kind == GradKind::f32) {
    float f;
    std::memcpy(&f, grads + 4 * i, 4);
    return f;
  }
  std::uint16_t h;
  std::memcpy(&h, grads + 2 * i, 2);
  return kind == GradKind::bf16 ? bf16_to_fp32(h) : fp16_to_fp32(h);
}

double sq_sum(const void* grads, GradKind kind, std::size_t n, double scale) {
  const auto* g = static_cast<const unsigned char*>(grads);
  double l[16] = {};
  for (std::size_t i = 0; i < n; ++i) {
    const double d = static_cast<double>(load(g, kind, i)) * scale;
    l[i % 16] = l[i % 16] + d * d;
  }
  double s[8], t[4];
  for (int j = 0; j < 8; ++j) s[j] = l[j] + l[j + 8];
  for (int j = 0; j < 4; ++j) t[j] = s[j] + s[j + 4];
  const double u0 = t[0] + t[2];
  const double u1 = t[1] + t[3];
  return u0 + u1;
}

bool all_finite(const void* grads, GradKind kind, std::size_t n) {
  const auto* g = static_cast<const unsigned char*>(grads);
  if (kind == GradKind::f32) {
    for (std::size_t i = 0; i < n; ++i) {
      std::uint32_t x;
      std::memcpy(&x, g + 4 * i, 4);
      if ((x & 0x7F800000u) == 0x7F800000u) return false;
    }
    return true;
  }
  const std::uint16_t exponent = kind == GradKind::bf16 ? 0x7F80 : 0x7C00;
  for (std::size_t i = 0; i < n; ++i) {
    std::uint16_t h;
    std::memcpy(&h, g + 2 * i, 2);
    if ((h & exponent) == exponent) return false;
  }
  return true;
}

void accumulate(float* acc, const void* grads, GradKind kind, std::size_t n, bool first) {
  const auto* g = static_cast<const unsigned char*>(grads);
  if (first) {
    for (std::size_t i = 0; i < n; ++i) acc[i] = 0.0f + load(g, kind, i);
    return;
  }
  for (std::size_t i = 0; i < n; ++i) acc[i] = acc[i] + load(g, kind, i);
}

constexpr GradOpsKernels kScalar = {sq_sum, all_finite, accumulate};

}  // namespace

const GradOpsKernels& scalar_grad_ops() { return kScalar; }

}  // namespace strata::cpu_adam::detail
