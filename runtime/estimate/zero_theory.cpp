#include "runtime/estimate/zero_theory.h"

#include <string>

#include "core/error.h"

namespace strata::runtime::estimate {

std::uint64_t zero_model_states_bytes(int stage, int world, std::uint64_t psi, int dtype_bytes) {
  if (stage < 0 || stage > 3) throw Error("ZeRO stage " + std::to_string(stage) + " does not exist", "stage", "use 0-3");
  if (world < 1) throw Error("a world of " + std::to_string(world) + " ranks", "world", "use 1 or more");
  const std::uint64_t d = static_cast<std::uint64_t>(dtype_bytes);
  const std::uint64_t n = stage == 0 ? 1 : static_cast<std::uint64_t>(world);
  STRATA_ASSERT(psi % n == 0, "zero_model_states_bytes: psi must be padded to the world");
  const std::uint64_t per_rank = psi / n;
  const std::uint64_t k = kAdamStateBytes;
  switch (stage) {
    case 0: return (2 * d + k) * psi;
    case 1: return 2 * d * psi + k * per_rank;
    case 2: return d * psi + (d + k) * per_rank;
    default: return (2 * d + k) * per_rank;
  }
}

double zero_collective_bytes(int stage, int world, std::uint64_t psi, int dtype_bytes) {
  if (world <= 1) return 0.0;
  const double factor = stage == 3 ? 3.0 : 2.0;
  return factor * static_cast<double>(psi) * dtype_bytes * (world - 1) / world;
}

}  // namespace strata::runtime::estimate
