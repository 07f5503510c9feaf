#include "kernels/host/embedding.h"

#include <algorithm>
#include <cstddef>
#include <numeric>
#include <vector>

#include "core/error.h"
#include "kernels/host/kernel_impl.h"

namespace strata::kernels::host {

using detail::load_row;
using detail::store_row;

void embedding_fwd(void* out, const std::int32_t* tokens, const void* wte, const void* wpe,
                   int B, int T, int C, int pos_offset, DType dtype) {
  const auto Cs = static_cast<std::size_t>(C);
  const std::int64_t BT = static_cast<std::int64_t>(B) * T;
#pragma omp parallel
  {
    std::vector<float> a(Cs), p(Cs);
#pragma omp for schedule(static)
    for (std::int64_t bt = 0; bt < BT; ++bt) {
      const std::int64_t t = bt % T;
      const std::int32_t tok = tokens[bt];
      STRATA_ASSERT(tok >= 0, "negative token");
      load_row(wte, dtype, static_cast<std::size_t>(tok) * Cs, Cs, a.data());
      if (wpe != nullptr) {
        load_row(wpe, dtype, static_cast<std::size_t>(pos_offset + t) * Cs, Cs, p.data());
        for (std::size_t c = 0; c < Cs; ++c) a[c] += p[c];
      }
      store_row(a.data(), out, dtype, static_cast<std::size_t>(bt) * Cs, Cs);
    }
  }
}

void embedding_bwd(void* dwte, void* dwpe, const void* dout, const std::int32_t* tokens, int B,
                   int T, int C, DType dtype) {
  const auto Cs = static_cast<std::size_t>(C);
  const std::int64_t BT = static_cast<std::int64_t>(B) * T;

  // dwpe[t] += dout[0,t] + dout[1,t] + ...: one position per iteration, b in order.
  if (dwpe != nullptr) {
#pragma omp parallel
    {
      std::vector<float> acc(Cs), row(Cs);
#pragma omp for schedule(static)
      for (int t = 0; t < T; ++t) {
        load_row(dwpe, dtype, static_cast<std::size_t>(t) * Cs, Cs, acc.data());
        for (int b = 0; b < B; ++b) {
          load_row(dout, dtype, (static_cast<std::size_t>(b) * T + t) * Cs, Cs, row.data());
          for (std::size_t c = 0; c < Cs; ++c) acc[c] += row[c];
        }
        store_row(acc.data(), dwpe, dtype, static_cast<std::size_t>(t) * Cs, Cs);
      }
    }
  }
  if (dwte == nullptr) return;

  // dwte: positions grouped by token (a stable sort keeps them in (b, t) order), so that each
  // token's row is widened once, accumulated in fp32 in (b, t) order and rounded once; tokens
  // are independent, so any thread count gives the same bits.
  std::vector<std::int64_t> order(static_cast<std::size_t>(BT));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](std::int64_t x, std::int64_t y) { return tokens[x] < tokens[y]; });
  std::vector<std::int64_t> starts;  // where each token's group begins in `order`
  for (std::int64_t i = 0; i < BT; ++i) {
    if (i == 0 || tokens[order[static_cast<std::size_t>(i)]] != tokens[order[static_cast<std::size_t>(i - 1)]]) {
      starts.push_back(i);
    }
  }
  starts.push_back(BT);
  const auto groups = static_cast<std::int64_t>(starts.size()) - 1;
#pragma omp parallel
  {
    std::vector<float> acc(Cs), row(Cs);
#pragma omp for schedule(dynamic, 16)
    for (std::int64_t g = 0; g < groups; ++g) {
      const std::int64_t first = starts[static_cast<std::size_t>(g)];
      const std::int64_t last = starts[static_cast<std::size_t>(g) + 1];
      const auto tok = static_cast<std::size_t>(tokens[order[static_cast<std::size_t>(first)]]);
      load_row(dwte, dtype, tok * Cs, Cs, acc.data());
      for (std::int64_t i = first; i < last; ++i) {
        load_row(dout, dtype, static_cast<std::size_t>(order[static_cast<std::size_t>(i)]) * Cs, Cs,
                 row.data());
        for (std::size_t c = 0; c < Cs; ++c) acc[c] += row[c];
      }
      store_row(acc.data(), dwte, dtype, tok * Cs, Cs);
    }
  }
}

}  // namespace strata::kernels::host
