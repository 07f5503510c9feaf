#include "kernels/host/rmsnorm.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <vector>

#include "core/error.h"
#include "kernels/host/kernel_impl.h"

namespace strata::kernels::host {
namespace {

using detail::add_to_row;
using detail::load_row;
using detail::round_to;
using detail::store_row;

constexpr int kColumnBlock = 64;  // columns per work item of the dweight sums

}  // namespace

void rmsnorm_fwd(void* out, float* rstd, const void* inp, const void* weight, std::int64_t N,
                 int C, float eps, DType dtype) {
  STRATA_ASSERT(N >= 0 && C >= 0);
  if (N == 0 || C == 0) return;
  const auto Cs = static_cast<std::size_t>(C);
  std::vector<float> w(Cs);
  load_row(weight, dtype, 0, Cs, w.data());
#pragma omp parallel
  {
    std::vector<float> x(Cs);
#pragma omp for schedule(static)
    for (std::int64_t n = 0; n < N; ++n) {
      const std::size_t row = static_cast<std::size_t>(n) * Cs;
      load_row(inp, dtype, row, Cs, x.data());
      double sq = 0.0;
      for (std::size_t c = 0; c < Cs; ++c) sq += static_cast<double>(x[c]) * x[c];
      const auto s = static_cast<float>(1.0 / std::sqrt(sq / static_cast<double>(C) + eps));
      // HF: the normalised value in the storage dtype, then times the weight.
      for (std::size_t c = 0; c < Cs; ++c) x[c] = w[c] * round_to(x[c] * s, dtype);
      store_row(x.data(), out, dtype, row, Cs);
      if (rstd != nullptr) rstd[n] = s;
    }
  }
}

void rmsnorm_bwd(void* dinp, void* dweight, const void* dout, const void* inp,
                 const void* weight, const float* rstd, std::int64_t N, int C, DType dtype) {
  STRATA_ASSERT(N >= 0 && C >= 0);
  if (N == 0 || C == 0) return;
  const auto Cs = static_cast<std::size_t>(C);

  // dinp, row by row: dx = rstd * (g - xhat * mean(g * xhat)), g = dout * w.
  if (dinp != nullptr) {
    std::vector<float> w(Cs);
    load_row(weight, dtype, 0, Cs, w.data());
#pragma omp parallel
    {
      std::vector<float> x(Cs), d(Cs), acc(Cs);
#pragma omp for schedule(static)
      for (std::int64_t n = 0; n < N; ++n) {
        const std::size_t row = static_cast<std::size_t>(n) * Cs;
        load_row(inp, dtype, row, Cs, x.data());
        load_row(dout, dtype, row, Cs, d.data());
        load_row(dinp, dtype, row, Cs, acc.data());
        const float s = rstd[n];
        double gx_sum = 0.0;
        for (std::size_t c = 0; c < Cs; ++c)
          gx_sum += static_cast<double>(d[c] * w[c]) * (x[c] * s);
        const auto gx_mean = static_cast<float>(gx_sum / static_cast<double>(C));
        for (std::size_t c = 0; c < Cs; ++c)
          acc[c] += s * (d[c] * w[c] - (x[c] * s) * gx_mean);
        store_row(acc.data(), dinp, dtype, row, Cs);
      }
    }
  }
  if (dweight == nullptr) return;

  // dweight += sum_n dout * rnd(xhat): blocks of columns, rows in order, so the sums do not
  // depend on the thread count.
  const int blocks = (C + kColumnBlock - 1) / kColumnBlock;
#pragma omp parallel
  {
    std::vector<float> x(kColumnBlock), d(kColumnBlock), dw(kColumnBlock), old(kColumnBlock);
#pragma omp for schedule(static)
    for (int blk = 0; blk < blocks; ++blk) {
      const auto c0 = static_cast<std::size_t>(blk) * kColumnBlock;
      const std::size_t len = std::min<std::size_t>(kColumnBlock, Cs - c0);
      std::fill(dw.begin(), dw.end(), 0.0f);
      for (std::int64_t n = 0; n < N; ++n) {
        const std::size_t row = static_cast<std::size_t>(n) * Cs + c0;
        load_row(inp, dtype, row, len, x.data());
        load_row(dout, dtype, row, len, d.data());
        const float s = rstd[n];
        for (std::size_t c = 0; c < len; ++c) dw[c] += d[c] * round_to(x[c] * s, dtype);
      }
      add_to_row(dw.data(), dweight, dtype, c0, len, old.data());
    }
  }
}

}  // namespace strata::kernels::host
