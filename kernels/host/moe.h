#pragma once
// Mixture-of-experts plumbing (HF MixtralSparseMoeBlock / Qwen3MoeSparseMoeBlock): the router
// (softmax, top-k, optional renormalisation, the load-balancing statistics), the grouping of
// the (token, slot) pairs by expert, the gather of the tokens into expert order, and the
// weighted combine of the experts' outputs back into token order, each with its backward.
//
// One MoE layer, N tokens of width C, E experts, k of them per token:
//   moe_router_fwd   logits (N, E)  -> probs (N, E), idx (N, k), weights (N, k)
//   moe_sort         idx            -> offsets (E + 1), order (N k), position (N k)
//   moe_gather       x (N, C)       -> xs (N k, C): expert e's rows are [offsets[e], offsets[e+1])
//   (the experts' MLPs on their row ranges of xs: matmul / swiglu ops, by the caller)
//   moe_combine_fwd  ys (N k, C)    -> out (N, C) = sum_j rnd(weights[n, j]) ys[position[n k + j]]
// and backward: moe_combine_bwd (dys, dweights), the experts' backward (dxs), moe_scatter_add
// (dx += the gathered rows' gradients), moe_router_bwd (dlogits).
//
// Slot j of token n (0 <= j < k) is the pair n k + j; the pairs are sorted by expert, tokens
// ascending within an expert. Everything is deterministic (fixed-order sums, no atomics) and
// gives the same bits for any OpenMP thread count. fp32 arithmetic; results in dtype are
// rounded once unless said otherwise. N = 0 is a no-op for every op (moe_sort then sets
// offsets to zeros; nothing else is written, prob_sum included).
//
// E >= 1 and 1 <= k <= E are checked (a strata::Error: a bad model config); an expert index
// outside [0, E) in idx is a programming error (STRATA_ASSERT on the host).
#include <cstdint>

#include "core/dtype.h"

namespace strata::kernels::host {

// Router. logits (N, E) in dtype (the router matmul's output). probs (N, E) fp32 =
// softmax(logits) in fp32 (saved for backward). Per row, the k largest probs in descending
// order (ties: the lower expert index first; a NaN prob counts as -inf, so the k experts are
// always distinct and in range): idx (N, k) int32 their experts, weights (N, k) fp32 their
// probs, divided by their fp32 sum (in slot order) when `renormalize` (Qwen3-MoE's
// norm_topk_prob, Mixtral always). prob_sum (E) fp32, may be null: overwritten with the sum over
// the N rows of probs (fixed order: chunks of rows, chunks added in order), the router half of
// the load-balancing loss.
void moe_router_fwd(float* probs, std::int32_t* idx, float* weights, float* prob_sum,
                    const void* logits, std::int64_t N, int E, int k, bool renormalize,
                    DType dtype);

// Router backward, dlogits (N, E) overwritten. dweights (N, k) fp32 = dloss / dweights; daux
// (E) fp32 or null: dloss / dprobs[n, e] = daux[e] for every row (the load-balancing loss's
// gradient through prob_sum). With p = probs[n], S = sum of the k picked p (slot order):
//   dp[e] = daux[e] (or 0)
//   renormalize: dp[idx_j] += (dw_j - (sum_i dw_i p_idx_i) / S) / S;  else dp[idx_j] += dw_j
//   dlogits = p * (dp - sum_e dp_e p_e)
// in fp32 (the dot product in double), rounded once to dtype. The weights' rounding to dtype in
// moe_combine_fwd is straight-through.
void moe_router_bwd(void* dlogits, const float* dweights, const float* probs,
                    const std::int32_t* idx, const float* daux, std::int64_t N, int E, int k,
                    bool renormalize, DType dtype);

// Groups the N k pairs by expert: a stable counting sort. offsets (E + 1): expert e's sorted
// rows are [offsets[e], offsets[e + 1]) (offsets[0] = 0, offsets[E] = N k); order (N k):
// order[r] = n k + j of sorted row r (tokens ascending within an expert); position (N k):
// position[n k + j] = r, the inverse. N k must fit in int32.
void moe_sort(std::int32_t* offsets, std::int32_t* order, std::int32_t* position,
              const std::int32_t* idx, std::int64_t N, int E, int k);

// out (N k, C): row r = inp row order[r] / k, inp (N, C). Exact copies. out may not alias inp.
void moe_gather(void* out, const void* inp, const std::int32_t* order, std::int64_t N, int k,
                int C, DType dtype);

// out (N, C), overwritten: out[n] = sum over j = 0..k-1 of rnd(weights[n, j]) *
// y[position[n k + j]], y (N k, C) the experts' outputs in sorted order. rnd: the fp32 weight
// rounded to dtype first (HF casts the routing weights to the hidden dtype); the products and
// their sum in fp32, in slot order, rounded once. out may not alias y.
void moe_combine_fwd(void* out, const void* y, const float* weights,
                     const std::int32_t* position, std::int64_t N, int k, int C, DType dtype);

// moe_combine_fwd's backward, both overwritten: dy (N k, C) row position[n k + j] =
// rnd(rnd(weights[n, j]) * dout[n]); dweights (N, k) fp32 = dot(dout[n], y[position[n k + j]])
// summed in double, rounded to fp32 (the gradient of the unrounded weight: straight-through).
// dout (N, C).
void moe_combine_bwd(void* dy, float* dweights, const void* dout, const void* y,
                     const float* weights, const std::int32_t* position, std::int64_t N, int k,
                     int C, DType dtype);

// dinp (N, C) += sum over j = 0..k-1 of dx[position[n k + j]], dx (N k, C) the gathered rows'
// gradients: the k rows summed in fp32 in slot order, added to dinp once and rounded. No
// atomics (each token owns its row). dinp may not alias dx.
void moe_scatter_add(void* dinp, const void* dx, const std::int32_t* position, std::int64_t N,
                     int k, int C, DType dtype);

}  // namespace strata::kernels::host
