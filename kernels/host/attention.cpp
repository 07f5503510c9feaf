#include "kernels/host/attention.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <vector>

#include "core/error.h"
#include "kernels/host/kernel_impl.h"

namespace strata::kernels::host {
namespace {

using detail::load_row;
using detail::store_row;

// One head of one sequence, widened to fp32: rows of hs values.
struct HeadRows {
  std::vector<float> data;
  std::size_t hs = 0;
  const float* row(std::size_t t) const { return data.data() + t * hs; }
  float* row(std::size_t t) { return data.data() + t * hs; }
};

// Rows [0, T) of head h of sequence b from a (B, T, stride) array; `part` selects q (0), k (1)
// or v (2) of qkv (stride 3C), or the only part of a (B, T, C) array (stride C, part 0).
void gather(HeadRows& dst, const void* src, DType dtype, int b, int T, std::size_t stride,
            int part, int h, std::size_t C, std::size_t hs) {
  dst.hs = hs;
  dst.data.resize(static_cast<std::size_t>(T) * hs);
  for (int t = 0; t < T; ++t) {
    const std::size_t off = (static_cast<std::size_t>(b) * T + t) * stride +
                            static_cast<std::size_t>(part) * C + static_cast<std::size_t>(h) * hs;
    load_row(src, dtype, off, hs, dst.row(static_cast<std::size_t>(t)));
  }
}

// The inverse of gather.
void scatter(const HeadRows& src, void* dst, DType dtype, int b, int T, std::size_t stride,
             int part, int h, std::size_t C, std::size_t hs) {
  for (int t = 0; t < T; ++t) {
    const std::size_t off = (static_cast<std::size_t>(b) * T + t) * stride +
                            static_cast<std::size_t>(part) * C + static_cast<std::size_t>(h) * hs;
    store_row(src.row(static_cast<std::size_t>(t)), dst, dtype, off, hs);
  }
}

// a . b in fp32 with kLanes independent partial sums (lane k sums the elements i = k mod
// kLanes, in order), combined pairwise: a fixed order, so the bits do not depend on the build's
// SIMD width, yet the compiler can map the lanes onto vector registers (a single running sum
// is a dependency chain it may not reorder).
constexpr std::size_t kLanes = 8;
float dot(const float* a, const float* b, std::size_t n) {
  float acc[kLanes] = {};
  std::size_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (std::size_t k = 0; k < kLanes; ++k) acc[k] += a[i + k] * b[i + k];
  }
  for (std::size_t k = 0; i < n; ++i, ++k) acc[k] += a[i] * b[i];
  return ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
}

// One query row against keys [0, n_keys): out = softmax(q.k * scale) v; returns the lse.
// `scores` has room for n_keys. The forward and the decoding path both call this, so they
// agree bit for bit.
float attend(const float* q, const HeadRows& K, const HeadRows& V, std::size_t n_keys, float scale,
             float* scores, float* out) {
  const std::size_t hs = K.hs;
  float mx = -INFINITY;
  for (std::size_t j = 0; j < n_keys; ++j) {
    scores[j] = dot(q, K.row(j), hs) * scale;
    mx = std::max(mx, scores[j]);
  }
  double sum = 0.0;
  for (std::size_t j = 0; j < n_keys; ++j) {
    scores[j] = std::exp(scores[j] - mx);
    sum += scores[j];
  }
  const auto inv = static_cast<float>(1.0 / sum);
  std::fill(out, out + hs, 0.0f);
  for (std::size_t j = 0; j < n_keys; ++j) {
    const float p = scores[j] * inv;
    const float* v = V.row(j);
    for (std::size_t d = 0; d < hs; ++d) out[d] += p * v[d];
  }
  return mx + static_cast<float>(std::log(sum));
}

}  // namespace

void attention_fwd(void* out, float* lse, const void* qkv, int B, int T, int C, int NH,
                   DType dtype) {
  STRATA_ASSERT(NH > 0 && C % NH == 0, "C must be a multiple of NH");
  const auto Cs = static_cast<std::size_t>(C);
  const std::size_t hs = Cs / static_cast<std::size_t>(NH);
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  const int BH = B * NH;
#pragma omp parallel
  {
    HeadRows Q, K, V, O;
    std::vector<float> scores(static_cast<std::size_t>(T));
#pragma omp for schedule(dynamic, 1)
    for (int bh = 0; bh < BH; ++bh) {
      const int b = bh / NH, h = bh % NH;
      gather(Q, qkv, dtype, b, T, 3 * Cs, 0, h, Cs, hs);
      gather(K, qkv, dtype, b, T, 3 * Cs, 1, h, Cs, hs);
      gather(V, qkv, dtype, b, T, 3 * Cs, 2, h, Cs, hs);
      O.hs = hs;
      O.data.resize(static_cast<std::size_t>(T) * hs);
      for (int t = 0; t < T; ++t) {
        const auto ts = static_cast<std::size_t>(t);
        const float l = attend(Q.row(ts), K, V, ts + 1, scale, scores.data(), O.row(ts));
        if (lse != nullptr) lse[static_cast<std::size_t>(bh) * static_cast<std::size_t>(T) + ts] = l;
      }
      scatter(O, out, dtype, b, T, Cs, 0, h, Cs, hs);
    }
  }
}

void attention_bwd(void* dqkv, const void* dout, const void* qkv, const void* out,
                   const float* lse, int B, int T, int C, int NH, DType dtype) {
  STRATA_ASSERT(NH > 0 && C % NH == 0, "C must be a multiple of NH");
  STRATA_ASSERT(lse != nullptr || B * T == 0, "attention_bwd needs the forward's lse");
  const auto Cs = static_cast<std::size_t>(C);
  const std::size_t hs = Cs / static_cast<std::size_t>(NH);
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  const int BH = B * NH;
  // Per (b, h), with P recomputed from the lse: for query t and key j <= t,
  //   dV[j] += P[t,j] dO[t];  dP = dO[t].V[j];  dS = P[t,j] (dP - D[t]),  D[t] = dO[t].O[t];
  //   dQ[t] += dS K[j] scale;  dK[j] += dS Q[t] scale.
  // Each (b, h) owns its channels of dqkv: no two threads write the same element.
#pragma omp parallel
  {
    HeadRows Q, K, V, O, dO, dQ, dK, dV;
#pragma omp for schedule(dynamic, 1)
    for (int bh = 0; bh < BH; ++bh) {
      const int b = bh / NH, h = bh % NH;
      gather(Q, qkv, dtype, b, T, 3 * Cs, 0, h, Cs, hs);
      gather(K, qkv, dtype, b, T, 3 * Cs, 1, h, Cs, hs);
      gather(V, qkv, dtype, b, T, 3 * Cs, 2, h, Cs, hs);
      gather(O, out, dtype, b, T, Cs, 0, h, Cs, hs);
      gather(dO, dout, dtype, b, T, Cs, 0, h, Cs, hs);
      for (HeadRows* g : {&dQ, &dK, &dV}) {
        g->hs = hs;
        g->data.assign(static_cast<std::size_t>(T) * hs, 0.0f);
      }
      for (int t = 0; t < T; ++t) {
        const auto ts = static_cast<std::size_t>(t);
        const float l = lse[static_cast<std::size_t>(bh) * static_cast<std::size_t>(T) + ts];
        const float* q = Q.row(ts);
        const float* go = dO.row(ts);
        const float D = dot(go, O.row(ts), hs);
        float* gq = dQ.row(ts);
        for (std::size_t j = 0; j <= ts; ++j) {
          const float p = std::exp(dot(q, K.row(j), hs) * scale - l);
          const float dp = dot(go, V.row(j), hs);
          const float ds = p * (dp - D) * scale;
          float* gv = dV.row(j);
          float* gk = dK.row(j);
          const float* k = K.row(j);
          for (std::size_t d = 0; d < hs; ++d) {
            gv[d] += p * go[d];
            gq[d] += ds * k[d];
            gk[d] += ds * q[d];
          }
        }
      }
      scatter(dQ, dqkv, dtype, b, T, 3 * Cs, 0, h, Cs, hs);
      scatter(dK, dqkv, dtype, b, T, 3 * Cs, 1, h, Cs, hs);
      scatter(dV, dqkv, dtype, b, T, 3 * Cs, 2, h, Cs, hs);
    }
  }
}

void attention_decode(void* out, void* k_cache, void* v_cache, const void* qkv, int B,
                      int T_new, int past, int max_T, int C, int NH, DType dtype) {
  STRATA_ASSERT(NH > 0 && C % NH == 0, "C must be a multiple of NH");
  STRATA_ASSERT(past >= 0 && T_new >= 0 && past + T_new <= max_T, "KV cache overflow");
  const auto Cs = static_cast<std::size_t>(C);
  const std::size_t es = dtype_size(dtype);
  // Append the new keys and values: cache[b, past + t, :] = k / v of new token t.
  for (int b = 0; b < B; ++b) {
    for (int t = 0; t < T_new; ++t) {
      const std::size_t src = (static_cast<std::size_t>(b) * T_new + t) * 3 * Cs;
      const std::size_t dst = (static_cast<std::size_t>(b) * max_T + past + t) * Cs;
      const auto* s = static_cast<const std::byte*>(qkv);
      std::copy_n(s + (src + Cs) * es, Cs * es, static_cast<std::byte*>(k_cache) + dst * es);
      std::copy_n(s + (src + 2 * Cs) * es, Cs * es, static_cast<std::byte*>(v_cache) + dst * es);
    }
  }
  const std::size_t hs = Cs / static_cast<std::size_t>(NH);
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  const int total = past + T_new;
  const int BH = B * NH;
#pragma omp parallel
  {
    HeadRows Q, K, V, O;
    std::vector<float> scores(static_cast<std::size_t>(total));
#pragma omp for schedule(dynamic, 1)
    for (int bh = 0; bh < BH; ++bh) {
      const int b = bh / NH, h = bh % NH;
      gather(Q, qkv, dtype, b, T_new, 3 * Cs, 0, h, Cs, hs);
      // The cache is (B, max_T, C): rows [0, total) of sequence b.
      K.hs = V.hs = hs;
      K.data.resize(static_cast<std::size_t>(total) * hs);
      V.data.resize(static_cast<std::size_t>(total) * hs);
      for (int t = 0; t < total; ++t) {
        const std::size_t off = (static_cast<std::size_t>(b) * max_T + t) * Cs + static_cast<std::size_t>(h) * hs;
        load_row(k_cache, dtype, off, hs, K.row(static_cast<std::size_t>(t)));
        load_row(v_cache, dtype, off, hs, V.row(static_cast<std::size_t>(t)));
      }
      O.hs = hs;
      O.data.resize(static_cast<std::size_t>(T_new) * hs);
      for (int t = 0; t < T_new; ++t) {
        const auto ts = static_cast<std::size_t>(t);
        attend(Q.row(ts), K, V, static_cast<std::size_t>(past + t) + 1, scale, scores.data(), O.row(ts));
      }
      scatter(O, out, dtype, b, T_new, Cs, 0, h, Cs, hs);
    }
  }
}

}  // namespace strata::kernels::host
