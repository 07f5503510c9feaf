#include "kernels/host/matmul_rows.h"

#include <algorithm>
#include <array>
#include <cstddef>
#include <vector>

#include "core/cpu_features.h"
#include "core/error.h"
#include "kernels/host/kernel_impl.h"
#include "kernels/host/matmul_rows_impl.h"

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

constexpr int kChannelsPerItem = 16;  // output channels per OpenMP work item of a SIMD variant

detail::RowsFn simd_rows(SimdLevel level) {
#if defined(STRATA_X86_SIMD)
  if (level >= SimdLevel::avx2) return detail::avx2_rows();  // also for AVX-512: none of its own yet
#else
  (void)level;
#endif
  return nullptr;
}

detail::RowWeights row_weights(DType dtype) {
  switch (dtype) {
    case DType::f32: return detail::RowWeights::f32;
    case DType::bf16: return detail::RowWeights::bf16;
    case DType::f16: return detail::RowWeights::f16;
  }
  STRATA_ASSERT(false, "invalid DType");
}

// The portable kernel: eight fp32 lanes the compiler vectorizes for the baseline (SSE), a weight
// row widened into a buffer first.
void scalar_rows(float* y, const float* x, const void* weight, DType dtype, const float* bias, std::size_t N,
                 int C, std::int64_t OC) {
  const std::size_t Cs = static_cast<std::size_t>(C), OCs = static_cast<std::size_t>(OC);
  const bool f32 = dtype == DType::f32;
#pragma omp parallel
  {
    std::vector<float> w_row(f32 ? 0 : Cs);  // this thread's widened weight row
#pragma omp for schedule(static)
    for (std::int64_t oc = 0; oc < OC; ++oc) {
      const std::size_t at = static_cast<std::size_t>(oc) * Cs;
      const float* w = f32 ? static_cast<const float*>(weight) + at : w_row.data();
      if (!f32) detail::load_row(weight, dtype, at, Cs, w_row.data());
      for (std::size_t n = 0; n < N; ++n) {
        float v = dot(x + n * Cs, w, C);
        if (bias != nullptr) v += bias[static_cast<std::size_t>(oc)];
        y[n * OCs + static_cast<std::size_t>(oc)] = v;
      }
    }
  }
}

}  // namespace

// Note [Few-row matmuls]
// ~~~~~~~~~~~~~~~~~~~~~~
// With one row (a decoded token) a matmul is a matrix-vector product: its time is one read of
// the weight. OpenBLAS's sgemm (Debian 12's 0.3.21) packs the weight before it multiplies, and a
// bf16 / fp16 weight is first widened to fp32 (matmul_fwd, Note [Weights widened in panels] in
// matmul.cpp): two or three passes over the weight's bytes where one is the floor. Here each
// output channel's weight row is read where it lies, in its dtype, and dotted with every input
// row at once. Two kernels:
// - the portable one (above): eight fp32 lanes the compiler vectorizes for baseline x86-64
//   (SSE), each weight row widened into a small buffer first;
// - AVX2 + FMA + F16C where the CPU has them (matmul_rows_avx2.cpp): weights widened in
//   registers, tiles of four rows by two output channels (one or two rows by four), so that a
//   weight vector loaded once serves every row of the tile.
// Measured on the dev VM (2 vCPUs with AVX2; `strata bench machine --seconds 2`, (4096, 2048)
// weights read from memory, two runs each, STRATA_SIMD=scalar for the portable kernel in the same
// binary): at one row bf16 7.8-8.0 GB/s of weight portable against 12.1-13.7 with AVX2, fp32
// 14.9-17.4 against 21.8-22.5; at sixteen rows bf16 0.017-0.018 TFLOPS against 0.055, fp32
// 0.052-0.059 with AVX2 where the portable kernel hands sixteen rows to sgemm (0.044-0.048).
// So with AVX2 fp32 takes the row kernel up to kMatmulFewRows = 16 rows like bf16 / fp16; the
// portable kernel stops at kMatmulFewRowsPortableF32 = 4 in fp32 (sgemm's AVX kernels win past
// it). In bf16 the AVX2 kernel stayed ahead of the widened sgemm to about 64 rows in a kernel-only
// timing; the bound stays 16, the row count `--moe-cpu-experts` and `bench machine` describe. The
// sum order is fixed per output element for each kernel, so a sequence decoded alone or beside
// others gets the same bits (within the few-row range).
void matmul_rows_fwd_with(SimdLevel level, void* out, const void* inp, const void* weight, const void* bias,
                          std::int64_t N, int C, int OC, DType dtype) {
  STRATA_ASSERT(level <= detected_simd(), "this CPU does not support the requested SIMD level");
  if (N <= 0 || OC <= 0) return;
  const std::size_t Cs = static_cast<std::size_t>(C), OCs = static_cast<std::size_t>(OC);
  const std::size_t Ns = static_cast<std::size_t>(N);
  const bool f32 = dtype == DType::f32;
  std::vector<float> x_widened, y_widened, b(bias != nullptr ? OCs : 0);
  const float* x = detail::as_f32(inp, dtype, Ns * Cs, x_widened);
  if (!f32) y_widened.resize(Ns * OCs);
  float* y = f32 ? static_cast<float*>(out) : y_widened.data();
  if (bias != nullptr) detail::load_row(bias, dtype, 0, OCs, b.data());
  const float* bias_f32 = bias != nullptr ? b.data() : nullptr;
  if (const detail::RowsFn rows = simd_rows(level)) {
    const detail::RowWeights kind = row_weights(dtype);
    const int items = (OC + kChannelsPerItem - 1) / kChannelsPerItem;
#pragma omp parallel for schedule(static)
    for (int i = 0; i < items; ++i) {
      const int begin = i * kChannelsPerItem;
      rows(y, x, weight, kind, bias_f32, N, C, OC, begin, std::min(OC, begin + kChannelsPerItem));
    }
  } else {
    scalar_rows(y, x, weight, dtype, bias_f32, Ns, C, OC);
  }
  if (!f32) detail::store_row(y, out, dtype, 0, Ns * OCs);
}

std::int64_t matmul_few_rows(DType dtype) {
  if (dtype == DType::f32 && simd_rows(active_simd()) == nullptr) return kMatmulFewRowsPortableF32;
  return kMatmulFewRows;
}

void matmul_rows_fwd(void* out, const void* inp, const void* weight, const void* bias, std::int64_t N, int C, int OC,
                     DType dtype) {
  matmul_rows_fwd_with(active_simd(), out, inp, weight, bias, N, C, OC, dtype);
}

}  // namespace strata::kernels::host
