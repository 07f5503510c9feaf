#include "runtime/estimate/moe_traffic.h"

#include <cmath>

#include "core/error.h"

namespace strata::runtime::estimate {

double expected_experts(int experts, int per_token, double tokens) {
  if (experts <= 0 || tokens <= 0) return 0.0;
  STRATA_ASSERT(per_token >= 1 && per_token <= experts, "expected_experts: k outside 1..E");
  const double E = experts;
  // k/E and 1 - k/E are exact in binary when E is a power of two (8, 16, 64, 128: the presets'),
  // so one token gives k exactly there, and within an ulp otherwise.
  return E * (1.0 - std::pow(1.0 - static_cast<double>(per_token) / E, tokens));
}

MoeBytes moe_bytes(const std::vector<std::size_t>& numels, const std::vector<char>& routed, const MoeRouting& routing,
                   DType dtype) {
  MoeBytes b;
  const std::uint64_t ds = dtype_size(dtype);
  for (std::size_t m = 0; m < numels.size(); ++m) {
    const bool expert = m < routed.size() && routed[m] != 0;
    (expert ? b.expert_bytes : b.non_expert_bytes) += static_cast<std::uint64_t>(numels[m]) * ds;
  }
  const std::uint64_t count = static_cast<std::uint64_t>(routing.sparse_layers) * static_cast<std::uint64_t>(routing.experts);
  if (count > 0) b.one_expert_bytes = b.expert_bytes / count;
  return b;
}

DecodeTraffic decode_traffic(const MoeRouting& routing, const MoeBytes& bytes, int batch) {
  STRATA_ASSERT(batch >= 1, "decode_traffic: batch below 1");
  DecodeTraffic t;
  t.batch = batch;
  t.experts_per_layer = expected_experts(routing.experts, routing.per_token, batch);
  const double share = routing.moe() ? t.experts_per_layer / routing.experts : 1.0;
  t.step_bytes = static_cast<double>(bytes.non_expert_bytes) + share * static_cast<double>(bytes.expert_bytes);
  t.dense_step_bytes = static_cast<double>(bytes.non_expert_bytes + bytes.expert_bytes);
  t.token_bytes = t.step_bytes / batch;
  t.dense_token_bytes = t.dense_step_bytes / batch;
  return t;
}

TrainTraffic train_traffic(const MoeRouting& routing, const MoeBytes& bytes, int B, int T) {
  STRATA_ASSERT(B >= 1 && T >= 1, "train_traffic: an empty micro-batch");
  TrainTraffic t;
  t.tokens = static_cast<double>(B) * T;
  t.experts_per_layer = expected_experts(routing.experts, routing.per_token, t.tokens);
  const double share = routing.moe() ? t.experts_per_layer / routing.experts : 1.0;
  t.all_expert_bytes = 2.0 * static_cast<double>(bytes.expert_bytes);
  t.expert_bytes = share * t.all_expert_bytes;
  return t;
}

}  // namespace strata::runtime::estimate
