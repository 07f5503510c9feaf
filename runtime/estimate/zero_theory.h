#pragma once
// The ZeRO paper's accounting (Rajbhandari et al., 2020, sections 3 and 7), for the rows of
// `strata estimate` and the "bytes moved" report of `strata train`.
//
// Model states per rank, with Ψ parameters, d bytes per parameter in the compute dtype (2 for
// the paper's mixed precision) and K = 12 bytes of optimizer state per parameter (fp32 master,
// exp_avg, exp_avg_sq):
//   stage 0: (2d + K) Ψ          (parameters + gradients + optimizer states, replicated)
//   stage 1: 2d Ψ + K Ψ / N
//   stage 2: d Ψ + (d + K) Ψ / N
//   stage 3: (2d + K) Ψ / N
// strata pads every module to N equal shards (runtime/tiers/partition.h): the formulas here take
// Ψ as the padded count, so Ψ / N is exactly the elements of one rank's shards.
//
// Collective bytes each rank sends per step (a ring): 2 d Ψ (N-1)/N at stages 0-2 (reduce-scatter
// and all-gather, or an all-reduce), 3 d Ψ (N-1)/N at stage 3 (the parameters gathered twice, the
// gradients reduce-scattered once); 0 at one rank.
#include <cstdint>

namespace strata::runtime::estimate {

inline constexpr int kAdamStateBytes = 12;  // K

// Throws strata::Error for a stage outside 0-3 or world < 1; psi must be divisible by world at
// stages 1-3 (a padded count).
std::uint64_t zero_model_states_bytes(int stage, int world, std::uint64_t psi, int dtype_bytes);

// Collective bytes per rank and step: as above (a double: (N-1)/N is not whole).
double zero_collective_bytes(int stage, int world, std::uint64_t psi, int dtype_bytes);

}  // namespace strata::runtime::estimate
