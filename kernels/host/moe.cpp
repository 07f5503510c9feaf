#include "kernels/host/moe.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "core/error.h"
#include "kernels/host/kernel_impl.h"

namespace strata::kernels::host {
namespace {

using detail::add_to_row;
using detail::load_row;
using detail::round_to;
using detail::store_row;

// Rows per partial of prob_sum: the chunks' sums are added in chunk order, so the result
// depends on N only, never on the thread count.
constexpr std::int64_t kRowChunk = 256;

void check_experts(int E, int k, const char* op) {
  if (E < 1 || k < 1 || k > E)
    throw Error("moe: " + std::to_string(E) + " experts, " + std::to_string(k) +
                    " per token: need 1 <= k <= E",
                std::string("kernels::host::") + op,
                "check num_local_experts / num_experts and num_experts_per_tok in the model config");
}

// The selection key of a prob: NaN sorts below everything, so the order (key descending, then
// index ascending) is a strict total order and the top k are k distinct experts.
float select_key(float p) { return std::isnan(p) ? -std::numeric_limits<float>::infinity() : p; }

// True when expert (ka, a) comes before (kb, b) in the order of the picks.
bool ranks_before(float ka, int a, float kb, int b) { return ka > kb || (ka == kb && a < b); }

}  // namespace

void moe_router_fwd(float* probs, std::int32_t* idx, float* weights, float* prob_sum,
                    const void* logits, std::int64_t N, int E, int k, bool renormalize,
                    DType dtype) {
  check_experts(E, k, "moe_router_fwd");
  STRATA_ASSERT(N >= 0);
  if (N == 0) return;
  STRATA_ASSERT(probs != nullptr && idx != nullptr && weights != nullptr && logits != nullptr);
  const auto Es = static_cast<std::size_t>(E);
  const auto ks = static_cast<std::size_t>(k);
#pragma omp parallel
  {
    std::vector<float> x(Es);
    std::vector<char> taken(Es);
#pragma omp for schedule(static)
    for (std::int64_t n = 0; n < N; ++n) {
      load_row(logits, dtype, static_cast<std::size_t>(n) * Es, Es, x.data());
      float m = -std::numeric_limits<float>::infinity();
      for (std::size_t e = 0; e < Es; ++e) m = std::max(m, x[e]);
      float sum = 0.0f;
      for (std::size_t e = 0; e < Es; ++e) {
        x[e] = std::exp(x[e] - m);
        sum += x[e];
      }
      float* p = probs + static_cast<std::size_t>(n) * Es;
      for (std::size_t e = 0; e < Es; ++e) p[e] = x[e] / sum;

      // k passes of an arg-max over the experts not yet taken.
      std::fill(taken.begin(), taken.end(), char{0});
      std::int32_t* row_idx = idx + static_cast<std::size_t>(n) * ks;
      float* row_w = weights + static_cast<std::size_t>(n) * ks;
      float picked_sum = 0.0f;
      for (std::size_t j = 0; j < ks; ++j) {
        int best = -1;
        float best_key = 0.0f;
        for (int e = 0; e < E; ++e) {
          if (taken[static_cast<std::size_t>(e)] != 0) continue;
          const float key = select_key(p[e]);
          if (best < 0 || ranks_before(key, e, best_key, best)) {
            best = e;
            best_key = key;
          }
        }
        taken[static_cast<std::size_t>(best)] = 1;
        row_idx[j] = best;
        row_w[j] = p[best];
        picked_sum += p[best];
      }
      if (renormalize)
        for (std::size_t j = 0; j < ks; ++j) row_w[j] /= picked_sum;
    }
  }
  if (prob_sum == nullptr) return;

  // Column sums of probs: fp32 per chunk of rows (rows in order), chunks added in order.
  const std::int64_t chunks = (N + kRowChunk - 1) / kRowChunk;
  std::vector<float> partial(static_cast<std::size_t>(chunks) * Es, 0.0f);
#pragma omp parallel for schedule(static)
  for (std::int64_t chunk = 0; chunk < chunks; ++chunk) {
    float* acc = partial.data() + static_cast<std::size_t>(chunk) * Es;
    const std::int64_t end = std::min(N, (chunk + 1) * kRowChunk);
    for (std::int64_t n = chunk * kRowChunk; n < end; ++n) {
      const float* p = probs + static_cast<std::size_t>(n) * Es;
      for (std::size_t e = 0; e < Es; ++e) acc[e] += p[e];
    }
  }
  std::fill(prob_sum, prob_sum + Es, 0.0f);
  for (std::int64_t chunk = 0; chunk < chunks; ++chunk)
    for (std::size_t e = 0; e < Es; ++e) prob_sum[e] += partial[static_cast<std::size_t>(chunk) * Es + e];
}

void moe_router_bwd(void* dlogits, const float* dweights, const float* probs,
                    const std::int32_t* idx, const float* daux, std::int64_t N, int E, int k,
                    bool renormalize, DType dtype) {
  check_experts(E, k, "moe_router_bwd");
  STRATA_ASSERT(N >= 0);
  if (N == 0) return;
  STRATA_ASSERT(dlogits != nullptr && dweights != nullptr && probs != nullptr && idx != nullptr);
  const auto Es = static_cast<std::size_t>(E);
  const auto ks = static_cast<std::size_t>(k);
#pragma omp parallel
  {
    std::vector<float> dp(Es);
#pragma omp for schedule(static)
    for (std::int64_t n = 0; n < N; ++n) {
      const float* p = probs + static_cast<std::size_t>(n) * Es;
      const std::int32_t* row_idx = idx + static_cast<std::size_t>(n) * ks;
      const float* dw = dweights + static_cast<std::size_t>(n) * ks;
      for (std::size_t e = 0; e < Es; ++e) dp[e] = daux != nullptr ? daux[e] : 0.0f;
      if (renormalize) {
        float S = 0.0f, dwp = 0.0f;
        for (std::size_t j = 0; j < ks; ++j) {
          STRATA_ASSERT(row_idx[j] >= 0 && row_idx[j] < E, "moe_router_bwd: expert out of range");
          S += p[row_idx[j]];
          dwp += dw[j] * p[row_idx[j]];
        }
        const float c = dwp / S;
        for (std::size_t j = 0; j < ks; ++j) dp[static_cast<std::size_t>(row_idx[j])] += (dw[j] - c) / S;
      } else {
        for (std::size_t j = 0; j < ks; ++j) {
          STRATA_ASSERT(row_idx[j] >= 0 && row_idx[j] < E, "moe_router_bwd: expert out of range");
          dp[static_cast<std::size_t>(row_idx[j])] += dw[j];
        }
      }
      double dot = 0.0;
      for (std::size_t e = 0; e < Es; ++e) dot += static_cast<double>(dp[e]) * p[e];
      const auto dotf = static_cast<float>(dot);
      for (std::size_t e = 0; e < Es; ++e) dp[e] = p[e] * (dp[e] - dotf);
      store_row(dp.data(), dlogits, dtype, static_cast<std::size_t>(n) * Es, Es);
    }
  }
}

void moe_sort(std::int32_t* offsets, std::int32_t* order, std::int32_t* position,
              const std::int32_t* idx, std::int64_t N, int E, int k) {
  check_experts(E, k, "moe_sort");
  STRATA_ASSERT(N >= 0 && offsets != nullptr);
  std::fill(offsets, offsets + E + 1, 0);
  if (N == 0) return;
  STRATA_ASSERT(N * k <= INT32_MAX, "moe_sort: N k does not fit in int32");
  STRATA_ASSERT(order != nullptr && position != nullptr && idx != nullptr);
  const std::int64_t pairs = N * k;
  // Counting sort, serial: a pass to count, a prefix sum, a stable pass to place. Memory-bound
  // and linear; a few milliseconds for millions of pairs.
  for (std::int64_t i = 0; i < pairs; ++i) {
    const std::int32_t e = idx[i];
    STRATA_ASSERT(e >= 0 && e < E, "moe_sort: expert index out of range");
    ++offsets[e + 1];
  }
  for (int e = 0; e < E; ++e) offsets[e + 1] += offsets[e];
  std::vector<std::int32_t> next(offsets, offsets + E);
  for (std::int64_t i = 0; i < pairs; ++i) {
    const std::int32_t r = next[static_cast<std::size_t>(idx[i])]++;
    order[r] = static_cast<std::int32_t>(i);
    position[i] = r;
  }
}

void moe_gather(void* out, const void* inp, const std::int32_t* order, std::int64_t N, int k,
                int C, DType dtype) {
  STRATA_ASSERT(N >= 0 && k >= 1 && C >= 0);
  if (N == 0 || C == 0) return;
  STRATA_ASSERT(out != nullptr && inp != nullptr && order != nullptr);
  const std::size_t row_bytes = static_cast<std::size_t>(C) * dtype_size(dtype);
  const std::int64_t pairs = N * k;
  const auto* src = static_cast<const unsigned char*>(inp);
  auto* dst = static_cast<unsigned char*>(out);
#pragma omp parallel for schedule(static)
  for (std::int64_t r = 0; r < pairs; ++r) {
    const std::int32_t pair = order[r];
    STRATA_ASSERT(pair >= 0 && pair < pairs, "moe_gather: order out of range");
    std::memcpy(dst + static_cast<std::size_t>(r) * row_bytes,
                src + static_cast<std::size_t>(pair / k) * row_bytes, row_bytes);
  }
}

void moe_combine_fwd(void* out, const void* y, const float* weights,
                     const std::int32_t* position, std::int64_t N, int k, int C, DType dtype) {
  STRATA_ASSERT(N >= 0 && k >= 1 && C >= 0);
  if (N == 0 || C == 0) return;
  STRATA_ASSERT(out != nullptr && y != nullptr && weights != nullptr && position != nullptr);
  const auto Cs = static_cast<std::size_t>(C);
  const auto ks = static_cast<std::size_t>(k);
  const std::int64_t pairs = N * k;
#pragma omp parallel
  {
    std::vector<float> acc(Cs), yr(Cs);
#pragma omp for schedule(static)
    for (std::int64_t n = 0; n < N; ++n) {
      std::fill(acc.begin(), acc.end(), 0.0f);
      for (std::size_t j = 0; j < ks; ++j) {
        const std::size_t pair = static_cast<std::size_t>(n) * ks + j;
        const std::int32_t r = position[pair];
        STRATA_ASSERT(r >= 0 && r < pairs, "moe_combine_fwd: position out of range");
        const float w = round_to(weights[pair], dtype);
        load_row(y, dtype, static_cast<std::size_t>(r) * Cs, Cs, yr.data());
        for (std::size_t c = 0; c < Cs; ++c) acc[c] += w * yr[c];
      }
      store_row(acc.data(), out, dtype, static_cast<std::size_t>(n) * Cs, Cs);
    }
  }
}

void moe_combine_bwd(void* dy, float* dweights, const void* dout, const void* y,
                     const float* weights, const std::int32_t* position, std::int64_t N, int k,
                     int C, DType dtype) {
  STRATA_ASSERT(N >= 0 && k >= 1 && C >= 0);
  if (N == 0) return;
  STRATA_ASSERT(dy != nullptr && dweights != nullptr && dout != nullptr && y != nullptr &&
                weights != nullptr && position != nullptr);
  const auto Cs = static_cast<std::size_t>(C);
  const auto ks = static_cast<std::size_t>(k);
  const std::int64_t pairs = N * k;
#pragma omp parallel
  {
    std::vector<float> d(Cs), yr(Cs), g(Cs);
#pragma omp for schedule(static)
    for (std::int64_t n = 0; n < N; ++n) {
      load_row(dout, dtype, static_cast<std::size_t>(n) * Cs, Cs, d.data());
      for (std::size_t j = 0; j < ks; ++j) {
        const std::size_t pair = static_cast<std::size_t>(n) * ks + j;
        const std::int32_t r = position[pair];
        STRATA_ASSERT(r >= 0 && r < pairs, "moe_combine_bwd: position out of range");
        const std::size_t row = static_cast<std::size_t>(r) * Cs;
        load_row(y, dtype, row, Cs, yr.data());
        double dot = 0.0;
        for (std::size_t c = 0; c < Cs; ++c) dot += static_cast<double>(d[c]) * yr[c];
        dweights[pair] = static_cast<float>(dot);
        const float w = round_to(weights[pair], dtype);
        for (std::size_t c = 0; c < Cs; ++c) g[c] = w * d[c];
        store_row(g.data(), dy, dtype, row, Cs);
      }
    }
  }
}

void moe_scatter_add(void* dinp, const void* dx, const std::int32_t* position, std::int64_t N,
                     int k, int C, DType dtype) {
  STRATA_ASSERT(N >= 0 && k >= 1 && C >= 0);
  if (N == 0 || C == 0) return;
  STRATA_ASSERT(dinp != nullptr && dx != nullptr && position != nullptr);
  const auto Cs = static_cast<std::size_t>(C);
  const auto ks = static_cast<std::size_t>(k);
  const std::int64_t pairs = N * k;
#pragma omp parallel
  {
    std::vector<float> acc(Cs), xr(Cs), tmp(Cs);
#pragma omp for schedule(static)
    for (std::int64_t n = 0; n < N; ++n) {
      std::fill(acc.begin(), acc.end(), 0.0f);
      for (std::size_t j = 0; j < ks; ++j) {
        const std::int32_t r = position[static_cast<std::size_t>(n) * ks + j];
        STRATA_ASSERT(r >= 0 && r < pairs, "moe_scatter_add: position out of range");
        load_row(dx, dtype, static_cast<std::size_t>(r) * Cs, Cs, xr.data());
        for (std::size_t c = 0; c < Cs; ++c) acc[c] += xr[c];
      }
      add_to_row(acc.data(), dinp, dtype, static_cast<std::size_t>(n) * Cs, Cs, tmp.data());
    }
  }
}

}  // namespace strata::kernels::host
