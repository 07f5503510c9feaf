#pragma once
// What a mixture of experts moves (models/moe/moe_mlp.h: an expert is its own module, acquired
// only when a token was routed to it): the expected weight bytes of a decoding step for a batch,
// and the experts a training micro-batch fetches, beside what moving every expert would cost.
//
// Note [Expected distinct experts]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A sparse layer's router sends each token to k of its E experts. If each token's k experts are
// a uniformly random k-subset and tokens are independent, expert e is missed by one token with
// probability C(E-1, k) / C(E, k) = 1 - k/E, by all b tokens with (1 - k/E)^b, so the expected
// number of distinct experts the layer acquires for b tokens is
//     D(b) = E (1 - (1 - k/E)^b):   D(1) = k, D increasing in b, D(b) -> E as b grows.
// That is exact under uniform independent routing. For any other routing distribution with the
// tokens still independent, with p_e the chance a token picks e (sum_e p_e = k), the expectation
// is sum_e (1 - (1 - p_e)^b), which is concave in p and so largest at p_e = k/E (Jensen): skew
// (popular experts) only lowers it, and D(b) is the most any independent-token router can
// expect. Tokens that are not independent are outside the bound: correlated ones (a sequence
// reusing its experts) pick fewer, but a router that spreads tokens on purpose can pick more, up
// to min(E, k b). So the numbers here are what uniform routing gives, and an upper bound for
// real routers only when their tokens are independent.
//
// Bytes are the modules' numel (alignment gaps included) in the compute dtype: what a fetch
// gathers on the device. The decoding step counts every module streamed (offload_param with
// nothing kept resident): its non-expert modules whole, each sparse layer's experts at D(b)/E;
// "every expert" is the dense way (DeepSpeed ZeRO-Inference streams each layer whole). A
// training micro-batch of B x T tokens fetches D(B T) experts a sparse layer in forward and again
// in backward; at training sizes D(B T) is E to within rounding, so the saving is decoding's.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/dtype.h"

namespace strata::runtime::estimate {

// A mixture of experts' routing, as models::ExpertRouting says it (runtime/ sees no models/).
struct MoeRouting {
  int experts = 0;                 // E per sparse layer; 0: a dense model
  int per_token = 0;               // k
  int sparse_layers = 0;
  std::int64_t active_params = 0;  // what one token's forward reads (num_params when dense)
  bool moe() const { return experts > 0; }
};

// D(tokens) = E (1 - (1 - k/E)^tokens) (Note [Expected distinct experts]). 0 for E = 0.
double expected_experts(int experts, int per_token, double tokens);

// A model's weight bytes in one dtype, experts apart.
struct MoeBytes {
  std::uint64_t non_expert_bytes = 0;  // every module that is not routed
  std::uint64_t expert_bytes = 0;      // every expert of every sparse layer
  std::uint64_t one_expert_bytes = 0;  // expert_bytes / (sparse layers x E): one expert's
};
// `routed[m]`: module m is an expert (ModelLayout::routed_modules; empty: none).
MoeBytes moe_bytes(const std::vector<std::size_t>& module_numels, const std::vector<char>& routed,
                   const MoeRouting& routing, DType dtype);

// One decoding step of `batch` sequences (one token each), every module streamed.
struct DecodeTraffic {
  int batch = 0;
  double experts_per_layer = 0;  // D(batch)
  double step_bytes = 0;         // non-expert bytes + D(batch) / E of the expert bytes
  double token_bytes = 0;        // step_bytes / batch
  double dense_step_bytes = 0;   // every expert streamed
  double dense_token_bytes = 0;
};
DecodeTraffic decode_traffic(const MoeRouting& routing, const MoeBytes& bytes, int batch);

// The experts one training micro-batch of B x T tokens fetches (forward, and again in backward).
struct TrainTraffic {
  double tokens = 0;               // B x T
  double experts_per_layer = 0;    // D(B T), in each of forward and backward
  double expert_bytes = 0;         // 2 x D(B T) / E of the expert bytes
  double all_expert_bytes = 0;     // 2 x the expert bytes: every expert fetched both times
  double fraction() const { return all_expert_bytes > 0 ? expert_bytes / all_expert_bytes : 1.0; }
};
TrainTraffic train_traffic(const MoeRouting& routing, const MoeBytes& bytes, int B, int T);

}  // namespace strata::runtime::estimate
