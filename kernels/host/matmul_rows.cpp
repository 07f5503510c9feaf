#include "kernels/host/matmul_rows.h"

#include <array>
#include <cstddef>
#include <vector>

#include "kernels/host/kernel_impl.h"
#include "kernels/host/matmul.h"

namespace strata::kernels::host {
namespace {

constexpr int kLanes = 8;

// sum over c of x[c] * w[c], in kLanes fp32 lanes (lane j takes c = j mod kLanes), the lanes
// added in order: a fixed order the compiler may vectorize without reassociating.
float dot(const float* x, const float* w, int C) {
  std::array<float, kLanes> acc{};
  int c = 0;
  for (; c + kLanes <= C; c += kLanes) {
    for (int j = 0; j < kLanes; ++j) acc[static_cast<std::size_t>(j)] += x[c + j] * w[c + j];
  }
  for (int j = 0; c < C; ++c, ++j) acc[static_cast<std::size_t>(j)] += x[c] * w[c];
  float sum = 0.0f;
  for (float a : acc) sum += a;
  return sum;
}

}  // namespace

void matmul_rows_fwd(void* out, const void* inp, const void* weight, std::int64_t N, int C, int OC, DType dtype) {
  if (dtype == DType::f32 || N > kMatmulFewRows) {
    matmul_fwd(out, inp, weight, nullptr, N, C, OC, dtype);
    return;
  }
  if (N <= 0 || OC <= 0) return;
  const std::size_t Cs = static_cast<std::size_t>(C), OCs = static_cast<std::size_t>(OC);
  const std::size_t Ns = static_cast<std::size_t>(N);
  std::vector<float> x(Ns * Cs), y(Ns * OCs);
  detail::load_row(inp, dtype, 0, Ns * Cs, x.data());
#pragma omp parallel
  {
    std::vector<float> w(Cs);  // this thread's widened weight row
#pragma omp for schedule(static)
    for (std::int64_t oc = 0; oc < OC; ++oc) {
      detail::load_row(weight, dtype, static_cast<std::size_t>(oc) * Cs, Cs, w.data());
      for (std::size_t n = 0; n < Ns; ++n) {
        y[n * OCs + static_cast<std::size_t>(oc)] = dot(x.data() + n * Cs, w.data(), C);
      }
    }
  }
  detail::store_row(y.data(), out, dtype, 0, Ns * OCs);
}

}  // namespace strata::kernels::host
