#include "runtime/estimate/cpu_experts.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "kernels/host/matmul_rows.h"

namespace strata::runtime::estimate {

std::int64_t cpu_expert_max_rows(const MachineProfile& p, std::uint64_t expert_numel, int hidden,
                                 std::uint64_t elem_bytes) {
  if (p.cpu_matmul_bytes_per_s <= 0 || p.cpu_matmul_flops_per_s <= 0) {
    throw Error("the machine profile has no cpu_matmul_bytes_per_s / cpu_matmul_flops_per_s (written by an "
                "earlier strata)",
                "--profile", "measure it again with `strata bench machine --out FILE`, or give --moe-cpu-experts on|off");
  }
  const double W = static_cast<double>(expert_numel) * static_cast<double>(elem_bytes);
  const double copy = W / p.h2d_bytes_per_s;
  const double read = W / p.cpu_matmul_bytes_per_s;
  const double per_row_flops = 2.0 * static_cast<double>(expert_numel) / p.cpu_matmul_flops_per_s;
  const double row_bytes = static_cast<double>(hidden) * static_cast<double>(elem_bytes);
  const double per_row_link = row_bytes / p.d2h_bytes_per_s + row_bytes / p.h2d_bytes_per_s;
  // cpu(r) < copy  <=>  read + r link < copy  and  r (flops + link) < copy.
  if (read + per_row_link >= copy) return 0;
  const double by_read = (copy - read) / per_row_link;
  const double by_flops = copy / (per_row_flops + per_row_link);
  const double rows = std::min(by_read, by_flops);
  // Strictly less: a bound that is a whole number is one row too many.
  const double whole = std::min(std::ceil(rows) - 1.0, static_cast<double>(kernels::host::kMatmulFewRows));
  return static_cast<std::int64_t>(std::max(0.0, whole));
}

}  // namespace strata::runtime::estimate
