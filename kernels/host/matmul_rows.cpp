#include "kernels/host/matmul_rows.h"

#include <array>
#include <cstddef>
#include <vector>

#include "kernels/host/kernel_impl.h"

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

// Note [Few-row matmuls]
// ~~~~~~~~~~~~~~~~~~~~~~
// With one row (a decoded token) a matmul is a matrix-vector product: its time is one read of
// the weight. OpenBLAS's sgemm (Debian 12's 0.3.21) packs the weight before it multiplies, and a
// bf16 / fp16 weight is first widened into a new fp32 copy of all of it (matmul_fwd): two or
// three passes over the weight's bytes and an allocation, where one pass is the floor. Here each
// output channel's weight row is read where it lies (fp32) or widened into a small buffer, and
// dotted with every input row at once. Measured on the dev VM (2 vCPUs; medians of 30 calls, one
// run each, a (2816, 512) weight as llama-bytes-30m's gate|up): fp32 0.14 ms at one row against
// sgemm's 0.59, 0.48 against 0.80 at four, even at six to eight, so fp32 stops at
// kMatmulFewRowsF32 = 4 (the kernel is plain SSE: sgemm's AVX kernels win on more rows). In bf16
// the widened copy is a fresh allocation of the whole weight per call: 0.28 against 7.7 ms at one
// row, 2.1 against 8.3 at sixteen, so bf16 / fp16 keep the row kernel to
// kMatmulFewRows = 16. The kernel's sum order is fixed per output element, so a sequence decoded
// alone or beside others gets the same bits (within the few-row range).
void matmul_rows_fwd(void* out, const void* inp, const void* weight, const void* bias, std::int64_t N, int C, int OC,
                     DType dtype) {
  if (N <= 0 || OC <= 0) return;
  const std::size_t Cs = static_cast<std::size_t>(C), OCs = static_cast<std::size_t>(OC);
  const std::size_t Ns = static_cast<std::size_t>(N);
  const bool f32 = dtype == DType::f32;
  std::vector<float> x_widened, y_widened, b(bias != nullptr ? OCs : 0);
  const float* x = detail::as_f32(inp, dtype, Ns * Cs, x_widened);
  if (!f32) y_widened.resize(Ns * OCs);
  float* y = f32 ? static_cast<float*>(out) : y_widened.data();
  if (bias != nullptr) detail::load_row(bias, dtype, 0, OCs, b.data());
#pragma omp parallel
  {
    std::vector<float> w_row(f32 ? 0 : Cs);  // this thread's widened weight row
#pragma omp for schedule(static)
    for (std::int64_t oc = 0; oc < OC; ++oc) {
      const std::size_t at = static_cast<std::size_t>(oc) * Cs;
      const float* w = f32 ? static_cast<const float*>(weight) + at : w_row.data();
      if (!f32) detail::load_row(weight, dtype, at, Cs, w_row.data());
      for (std::size_t n = 0; n < Ns; ++n) {
        float v = dot(x + n * Cs, w, C);
        if (bias != nullptr) v += b[static_cast<std::size_t>(oc)];
        y[n * OCs + static_cast<std::size_t>(oc)] = v;
      }
    }
  }
  if (!f32) detail::store_row(y, out, dtype, 0, Ns * OCs);
}

}  // namespace strata::kernels::host
