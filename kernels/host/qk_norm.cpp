#include "kernels/host/qk_norm.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>
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

// Rows per work item of the backward: each chunk sums its rows' weight gradients in row order
// into its own partial, and the partials are added in chunk order, so the sums depend on N
// only, never on the thread count.
constexpr std::int64_t kRowChunk = 32;

void check_heads(int NH, int NKV, int hs, const char* op) {
  if (NH <= 0 || NKV <= 0 || hs <= 0)
    throw Error("qk_rmsnorm: " + std::to_string(NH) + " query heads, " + std::to_string(NKV) +
                    " key/value heads, head size " + std::to_string(hs) +
                    ": all must be positive",
                std::string("kernels::host::") + op,
                "check num_attention_heads / num_key_value_heads / head_dim in the model config");
}

}  // namespace

void qk_rmsnorm_fwd(void* out, float* rstd, const void* qkv, const void* q_weight,
                    const void* k_weight, std::int64_t N, int NH, int NKV, int hs, float eps,
                    DType dtype) {
  check_heads(NH, NKV, hs, "qk_rmsnorm_fwd");
  STRATA_ASSERT(N >= 0);
  if (N == 0) return;
  STRATA_ASSERT(out != nullptr && qkv != nullptr && q_weight != nullptr && k_weight != nullptr);
  const auto hss = static_cast<std::size_t>(hs);
  const std::size_t heads = static_cast<std::size_t>(NH) + static_cast<std::size_t>(NKV);
  const std::size_t qk = heads * hss;                                     // normalised part
  const std::size_t row = qk + static_cast<std::size_t>(NKV) * hss;       // the whole row
  const std::size_t es = dtype_size(dtype);
  std::vector<float> wq(hss), wk(hss);
  load_row(q_weight, dtype, 0, hss, wq.data());
  load_row(k_weight, dtype, 0, hss, wk.data());
#pragma omp parallel
  {
    std::vector<float> x(qk);
#pragma omp for schedule(static)
    for (std::int64_t n = 0; n < N; ++n) {
      const std::size_t base = static_cast<std::size_t>(n) * row;
      load_row(qkv, dtype, base, qk, x.data());
      for (std::size_t h = 0; h < heads; ++h) {
        float* v = x.data() + h * hss;
        const float* w = h < static_cast<std::size_t>(NH) ? wq.data() : wk.data();
        double sq = 0.0;
        for (std::size_t c = 0; c < hss; ++c) sq += static_cast<double>(v[c]) * v[c];
        const auto s = static_cast<float>(1.0 / std::sqrt(sq / static_cast<double>(hs) + eps));
        // HF: the normalised value in the storage dtype, then times the weight.
        for (std::size_t c = 0; c < hss; ++c) v[c] = w[c] * round_to(v[c] * s, dtype);
        if (rstd != nullptr) rstd[static_cast<std::size_t>(n) * heads + h] = s;
      }
      store_row(x.data(), out, dtype, base, qk);
      if (out != qkv)  // v: the same bytes
        std::memcpy(static_cast<unsigned char*>(out) + (base + qk) * es,
                    static_cast<const unsigned char*>(qkv) + (base + qk) * es, (row - qk) * es);
    }
  }
}

void qk_rmsnorm_bwd(void* dqkv, void* dq_weight, void* dk_weight, const void* qkv,
                    const void* q_weight, const void* k_weight, const float* rstd, std::int64_t N,
                    int NH, int NKV, int hs, DType dtype) {
  check_heads(NH, NKV, hs, "qk_rmsnorm_bwd");
  STRATA_ASSERT(N >= 0);
  if (N == 0) return;
  STRATA_ASSERT(dqkv != nullptr && qkv != nullptr && q_weight != nullptr &&
                k_weight != nullptr && rstd != nullptr);
  const auto hss = static_cast<std::size_t>(hs);
  const auto nq = static_cast<std::size_t>(NH);
  const std::size_t heads = nq + static_cast<std::size_t>(NKV);
  const std::size_t qk = heads * hss;
  const std::size_t row = qk + static_cast<std::size_t>(NKV) * hss;
  std::vector<float> wq(hss), wk(hss);
  load_row(q_weight, dtype, 0, hss, wq.data());
  load_row(k_weight, dtype, 0, hss, wk.data());

  // partial[chunk] = [dq_weight (hs) | dk_weight (hs)] summed over the chunk's rows (in row
  // order, heads in order within a row).
  const bool want_dw = dq_weight != nullptr || dk_weight != nullptr;
  const std::int64_t chunks = (N + kRowChunk - 1) / kRowChunk;
  std::vector<float> partial(want_dw ? static_cast<std::size_t>(chunks) * 2 * hss : 0);
#pragma omp parallel
  {
    std::vector<float> x(qk), d(qk);
#pragma omp for schedule(static)
    for (std::int64_t chunk = 0; chunk < chunks; ++chunk) {
      float* dw = want_dw ? partial.data() + static_cast<std::size_t>(chunk) * 2 * hss : nullptr;
      if (dw != nullptr) std::fill(dw, dw + 2 * hss, 0.0f);
      const std::int64_t end = std::min(N, (chunk + 1) * kRowChunk);
      for (std::int64_t n = chunk * kRowChunk; n < end; ++n) {
        const std::size_t base = static_cast<std::size_t>(n) * row;
        load_row(qkv, dtype, base, qk, x.data());
        load_row(dqkv, dtype, base, qk, d.data());
        for (std::size_t h = 0; h < heads; ++h) {
          const bool is_q = h < nq;
          const float* w = is_q ? wq.data() : wk.data();
          const float s = rstd[static_cast<std::size_t>(n) * heads + h];
          float* xv = x.data() + h * hss;
          float* dv = d.data() + h * hss;
          if (dw != nullptr) {
            float* acc = dw + (is_q ? 0 : hss);
            for (std::size_t c = 0; c < hss; ++c) acc[c] += dv[c] * round_to(xv[c] * s, dtype);
          }
          double gx_sum = 0.0;
          for (std::size_t c = 0; c < hss; ++c)
            gx_sum += static_cast<double>(dv[c] * w[c]) * (xv[c] * s);
          const auto gx_mean = static_cast<float>(gx_sum / static_cast<double>(hs));
          for (std::size_t c = 0; c < hss; ++c) dv[c] = s * (dv[c] * w[c] - (xv[c] * s) * gx_mean);
        }
        store_row(d.data(), dqkv, dtype, base, qk);
      }
    }
  }
  if (!want_dw) return;

  // The chunks' partials in chunk order, then one addition to each weight gradient.
  std::vector<float> sum(2 * hss, 0.0f), tmp(hss);
  for (std::int64_t chunk = 0; chunk < chunks; ++chunk) {
    const float* p = partial.data() + static_cast<std::size_t>(chunk) * 2 * hss;
    for (std::size_t c = 0; c < 2 * hss; ++c) sum[c] += p[c];
  }
  if (dq_weight != nullptr) add_to_row(sum.data(), dq_weight, dtype, 0, hss, tmp.data());
  if (dk_weight != nullptr) add_to_row(sum.data() + hss, dk_weight, dtype, 0, hss, tmp.data());
}

}  // namespace strata::kernels::host
