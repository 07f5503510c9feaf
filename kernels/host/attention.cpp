#include "kernels/host/attention.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <string>
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

// Rows [0, rows) of one head of sequence b from a (B, T, stride) array, the head's hs channels
// starting at channel col.
void gather(HeadRows& dst, const void* src, DType dtype, int b, int T, int rows,
            std::size_t stride, std::size_t col, std::size_t hs) {
  dst.hs = hs;
  dst.data.resize(static_cast<std::size_t>(rows) * hs);
  for (int t = 0; t < rows; ++t) {
    const std::size_t off = (static_cast<std::size_t>(b) * T + t) * stride + col;
    load_row(src, dtype, off, hs, dst.row(static_cast<std::size_t>(t)));
  }
}

// The inverse of gather.
void scatter(const HeadRows& src, void* dst, DType dtype, int b, int T, std::size_t stride,
             std::size_t col, std::size_t hs) {
  for (int t = 0; t < T; ++t) {
    const std::size_t off = (static_cast<std::size_t>(b) * T + t) * stride + col;
    store_row(src.row(static_cast<std::size_t>(t)), dst, dtype, off, hs);
  }
}

// The channel layout of one token of qkv, (NH + 2 NKV) hs channels: [q | k | v].
struct Heads {
  std::size_t NH, NKV, hs;
  Heads(int nh, int nkv, int head_size, const char* op)
      : NH(static_cast<std::size_t>(nh)), NKV(static_cast<std::size_t>(nkv)),
        hs(static_cast<std::size_t>(head_size)) {
    if (nh <= 0 || nkv <= 0 || head_size <= 0 || nh % nkv != 0)
      throw Error("attention: " + std::to_string(nh) + " query heads, " + std::to_string(nkv) +
                      " key/value heads, head size " + std::to_string(head_size) +
                      ": the heads must be positive and NH a multiple of NKV",
                  std::string("kernels::host::") + op,
                  "check n_head / n_kv_head in the model config");
  }
  std::size_t group() const { return NH / NKV; }      // query heads per key/value head
  std::size_t row() const { return (NH + 2 * NKV) * hs; }  // channels per token of qkv
  std::size_t q_col(std::size_t h) const { return h * hs; }
  std::size_t k_col(std::size_t g) const { return (NH + g) * hs; }
  std::size_t v_col(std::size_t g) const { return (NH + NKV + g) * hs; }
  std::size_t kv_of(std::size_t h) const { return h / group(); }
};

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

void attention_fwd(void* out, float* lse, const void* qkv, int B, int T, int NH, int NKV, int hs,
                   DType dtype) {
  const Heads H(NH, NKV, hs, "attention_fwd");
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  const int BH = B * NH;
#pragma omp parallel
  {
    HeadRows Q, K, V, O;
    std::vector<float> scores(static_cast<std::size_t>(T));
#pragma omp for schedule(dynamic, 1)
    for (int bh = 0; bh < BH; ++bh) {
      const int b = bh / NH;
      const auto h = static_cast<std::size_t>(bh % NH);
      gather(Q, qkv, dtype, b, T, T, H.row(), H.q_col(h), H.hs);
      gather(K, qkv, dtype, b, T, T, H.row(), H.k_col(H.kv_of(h)), H.hs);
      gather(V, qkv, dtype, b, T, T, H.row(), H.v_col(H.kv_of(h)), H.hs);
      O.hs = H.hs;
      O.data.resize(static_cast<std::size_t>(T) * H.hs);
      for (int t = 0; t < T; ++t) {
        const auto ts = static_cast<std::size_t>(t);
        const float l = attend(Q.row(ts), K, V, ts + 1, scale, scores.data(), O.row(ts));
        if (lse != nullptr) lse[static_cast<std::size_t>(bh) * static_cast<std::size_t>(T) + ts] = l;
      }
      scatter(O, out, dtype, b, T, H.NH * H.hs, H.q_col(h), H.hs);
    }
  }
}

void attention_bwd(void* dqkv, const void* dout, const void* qkv, const void* out,
                   const float* lse, int B, int T, int NH, int NKV, int hs, DType dtype) {
  const Heads H(NH, NKV, hs, "attention_bwd");
  STRATA_ASSERT(lse != nullptr || B * T == 0, "attention_bwd needs the forward's lse");
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  const std::size_t C = H.NH * H.hs;  // channels of out and dout
  const int BG = B * NKV;
  // Per (b, query head h), with P recomputed from the lse: for query t and key j <= t,
  //   dV[j] += P[t,j] dO[t];  dP = dO[t].V[j];  dS = P[t,j] (dP - D[t]),  D[t] = dO[t].O[t];
  //   dQ[t] += dS K[j] scale;  dK[j] += dS Q[t] scale.
  // A work item is (b, key/value head g): it runs the group's query heads in order and
  // accumulates dK and dV over them in fp32, so it owns its channels of dqkv (no two threads
  // write the same element) and the summation order is fixed.
#pragma omp parallel
  {
    HeadRows Q, K, V, O, dO, dQ, dK, dV;
#pragma omp for schedule(dynamic, 1)
    for (int bg = 0; bg < BG; ++bg) {
      const int b = bg / NKV;
      const auto g = static_cast<std::size_t>(bg % NKV);
      gather(K, qkv, dtype, b, T, T, H.row(), H.k_col(g), H.hs);
      gather(V, qkv, dtype, b, T, T, H.row(), H.v_col(g), H.hs);
      for (HeadRows* a : {&dK, &dV}) {
        a->hs = H.hs;
        a->data.assign(static_cast<std::size_t>(T) * H.hs, 0.0f);
      }
      for (std::size_t h = g * H.group(); h < (g + 1) * H.group(); ++h) {
        gather(Q, qkv, dtype, b, T, T, H.row(), H.q_col(h), H.hs);
        gather(O, out, dtype, b, T, T, C, H.q_col(h), H.hs);
        gather(dO, dout, dtype, b, T, T, C, H.q_col(h), H.hs);
        dQ.hs = H.hs;
        dQ.data.assign(static_cast<std::size_t>(T) * H.hs, 0.0f);
        const float* lse_bh = lse + (static_cast<std::size_t>(b) * H.NH + h) * static_cast<std::size_t>(T);
        for (int t = 0; t < T; ++t) {
          const auto ts = static_cast<std::size_t>(t);
          const float l = lse_bh[ts];
          const float* q = Q.row(ts);
          const float* go = dO.row(ts);
          const float D = dot(go, O.row(ts), H.hs);
          float* gq = dQ.row(ts);
          for (std::size_t j = 0; j <= ts; ++j) {
            const float p = std::exp(dot(q, K.row(j), H.hs) * scale - l);
            const float dp = dot(go, V.row(j), H.hs);
            const float ds = p * (dp - D) * scale;
            float* gv = dV.row(j);
            float* gk = dK.row(j);
            const float* k = K.row(j);
            for (std::size_t d = 0; d < H.hs; ++d) {
              gv[d] += p * go[d];
              gq[d] += ds * k[d];
              gk[d] += ds * q[d];
            }
          }
        }
        scatter(dQ, dqkv, dtype, b, T, H.row(), H.q_col(h), H.hs);
      }
      scatter(dK, dqkv, dtype, b, T, H.row(), H.k_col(g), H.hs);
      scatter(dV, dqkv, dtype, b, T, H.row(), H.v_col(g), H.hs);
    }
  }
}

void attention_decode(void* out, void* k_cache, void* v_cache, const void* qkv, int B,
                      int T_new, int past, int max_T, int NH, int NKV, int hs, DType dtype) {
  const Heads H(NH, NKV, hs, "attention_decode");
  STRATA_ASSERT(past >= 0 && T_new >= 0 && past + T_new <= max_T, "KV cache overflow");
  const std::size_t es = dtype_size(dtype);
  const std::size_t kv_row = H.NKV * H.hs;  // channels per position of a cache
  // Append the new keys and values: cache[b, past + t, :] = k / v of new token t.
  for (int b = 0; b < B; ++b) {
    for (int t = 0; t < T_new; ++t) {
      const std::size_t src = (static_cast<std::size_t>(b) * T_new + t) * H.row();
      const std::size_t dst = (static_cast<std::size_t>(b) * max_T + past + t) * kv_row;
      const auto* s = static_cast<const std::byte*>(qkv);
      std::copy_n(s + (src + H.k_col(0)) * es, kv_row * es, static_cast<std::byte*>(k_cache) + dst * es);
      std::copy_n(s + (src + H.v_col(0)) * es, kv_row * es, static_cast<std::byte*>(v_cache) + dst * es);
    }
  }
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  const int total = past + T_new;
  const int BH = B * NH;
#pragma omp parallel
  {
    HeadRows Q, K, V, O;
    std::vector<float> scores(static_cast<std::size_t>(total));
#pragma omp for schedule(dynamic, 1)
    for (int bh = 0; bh < BH; ++bh) {
      const int b = bh / NH;
      const auto h = static_cast<std::size_t>(bh % NH);
      gather(Q, qkv, dtype, b, T_new, T_new, H.row(), H.q_col(h), H.hs);
      // The caches are (B, max_T, NKV hs): rows [0, total) of sequence b, head kv_of(h).
      gather(K, k_cache, dtype, b, max_T, total, kv_row, H.kv_of(h) * H.hs, H.hs);
      gather(V, v_cache, dtype, b, max_T, total, kv_row, H.kv_of(h) * H.hs, H.hs);
      O.hs = H.hs;
      O.data.resize(static_cast<std::size_t>(T_new) * H.hs);
      for (int t = 0; t < T_new; ++t) {
        const auto ts = static_cast<std::size_t>(t);
        attend(Q.row(ts), K, V, static_cast<std::size_t>(past + t) + 1, scale, scores.data(), O.row(ts));
      }
      scatter(O, out, dtype, b, T_new, H.NH * H.hs, H.q_col(h), H.hs);
    }
  }
}

}  // namespace strata::kernels::host
