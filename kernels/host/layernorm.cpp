#include "kernels/host/layernorm.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <vector>

#include "kernels/host/elementwise.h"
#include "kernels/host/kernel_impl.h"

namespace strata::kernels::host {
namespace {

using detail::add_to_row;
using detail::load_row;
using detail::store_row;

constexpr int kColumnBlock = 64;  // columns per work item of the dweight / dbias sums

}  // namespace

void layernorm_fwd(void* out, float* mean, float* rstd, const void* inp, const void* weight,
                   const void* bias, std::int64_t N, int C, float eps, DType dtype) {
  const auto Cs = static_cast<std::size_t>(C);
  std::vector<float> w(Cs), b(Cs);
  load_row(weight, dtype, 0, Cs, w.data());
  load_row(bias, dtype, 0, Cs, b.data());
#pragma omp parallel
  {
    std::vector<float> x(Cs);
#pragma omp for schedule(static)
    for (std::int64_t n = 0; n < N; ++n) {
      const std::size_t row = static_cast<std::size_t>(n) * Cs;
      load_row(inp, dtype, row, Cs, x.data());
      // Two passes in double: the mean, then the biased variance around it.
      double sum = 0.0;
      for (std::size_t c = 0; c < Cs; ++c) sum += x[c];
      const auto m = static_cast<float>(sum / static_cast<double>(C));
      double sq = 0.0;
      for (std::size_t c = 0; c < Cs; ++c) {
        const double d = static_cast<double>(x[c]) - m;
        sq += d * d;
      }
      const auto s = static_cast<float>(1.0 / std::sqrt(sq / static_cast<double>(C) + eps));
      for (std::size_t c = 0; c < Cs; ++c) x[c] = (x[c] - m) * s * w[c] + b[c];
      store_row(x.data(), out, dtype, row, Cs);
      if (mean != nullptr) mean[n] = m;
      if (rstd != nullptr) rstd[n] = s;
    }
  }
}

void residual_layernorm_fwd(void* res_out, void* ln_out, float* mean, float* rstd, const void* a,
                            const void* b, const void* weight, const void* bias, std::int64_t N,
                            int C, float eps, DType dtype) {
  residual_fwd(res_out, a, b, N * static_cast<std::int64_t>(C), dtype);
  layernorm_fwd(ln_out, mean, rstd, res_out, weight, bias, N, C, eps, dtype);
}

void layernorm_bwd(void* dinp, void* dweight, void* dbias, const void* dout, const void* inp,
                   const void* weight, const float* mean, const float* rstd, std::int64_t N,
                   int C, DType dtype) {
  const auto Cs = static_cast<std::size_t>(C);
  std::vector<float> w(Cs);
  load_row(weight, dtype, 0, Cs, w.data());

  // dinp, row by row: with xhat = (x - mean) * rstd and g = dout * w,
  // dx = rstd * (g - mean(g) - xhat * mean(g * xhat)).
#pragma omp parallel
  {
    std::vector<float> x(Cs), d(Cs), acc(Cs);
#pragma omp for schedule(static)
    for (std::int64_t n = 0; n < N; ++n) {
      const std::size_t row = static_cast<std::size_t>(n) * Cs;
      load_row(inp, dtype, row, Cs, x.data());
      load_row(dout, dtype, row, Cs, d.data());
      load_row(dinp, dtype, row, Cs, acc.data());
      const float m = mean[n], s = rstd[n];
      double g_sum = 0.0, gx_sum = 0.0;
      for (std::size_t c = 0; c < Cs; ++c) {
        const float xhat = (x[c] - m) * s;
        const float g = d[c] * w[c];
        g_sum += g;
        gx_sum += static_cast<double>(g) * xhat;
      }
      const auto g_mean = static_cast<float>(g_sum / static_cast<double>(C));
      const auto gx_mean = static_cast<float>(gx_sum / static_cast<double>(C));
      for (std::size_t c = 0; c < Cs; ++c) {
        const float xhat = (x[c] - m) * s;
        acc[c] += s * (d[c] * w[c] - g_mean - xhat * gx_mean);
      }
      store_row(acc.data(), dinp, dtype, row, Cs);
    }
  }

  // dweight += sum_n dout * xhat, dbias += sum_n dout: blocks of columns, rows in order, so
  // the sums do not depend on the thread count.
  const int blocks = (C + kColumnBlock - 1) / kColumnBlock;
#pragma omp parallel
  {
    std::vector<float> x(kColumnBlock), d(kColumnBlock), dw(kColumnBlock), db(kColumnBlock),
        old(kColumnBlock);
#pragma omp for schedule(static)
    for (int blk = 0; blk < blocks; ++blk) {
      const auto c0 = static_cast<std::size_t>(blk) * kColumnBlock;
      const std::size_t len = std::min<std::size_t>(kColumnBlock, Cs - c0);
      std::fill(dw.begin(), dw.end(), 0.0f);
      std::fill(db.begin(), db.end(), 0.0f);
      for (std::int64_t n = 0; n < N; ++n) {
        const std::size_t row = static_cast<std::size_t>(n) * Cs + c0;
        load_row(inp, dtype, row, len, x.data());
        load_row(dout, dtype, row, len, d.data());
        const float m = mean[n], s = rstd[n];
        for (std::size_t c = 0; c < len; ++c) {
          dw[c] += d[c] * ((x[c] - m) * s);
          db[c] += d[c];
        }
      }
      // Add the step's sums to what the gradients held.
      add_to_row(dw.data(), dweight, dtype, c0, len, old.data());
      add_to_row(db.data(), dbias, dtype, c0, len, old.data());
    }
  }
}

}  // namespace strata::kernels::host
