#include "runtime/estimate/step_model.h"

#include <algorithm>
#include <cmath>

namespace strata::runtime::estimate {

StepWork step_work(const tiers::ZeroPlan& plan, const tiers::PlanInputs& in, int micro_batches, const ModelShape& model,
                   double tokens, bool activation_checkpointing, double routed_share) {
  StepWork w;
  w.hidden = model.hidden;
  w.model_flops =
      model_step_flops(model.params, model.layers, model.hidden, model.seq_len, tokens, activation_checkpointing);
  const double ds = static_cast<double>(dtype_size(in.dtype));
  const double gas = micro_batches;
  for (std::size_t m = 0; m < plan.modules.size(); ++m) {
    const tiers::ModulePlan& mp = plan.modules[m];
    const double fetches = in.routed(static_cast<int>(m)) ? routed_share : 1.0;
    const double shard = static_cast<double>(mp.part.shard_numel);
    const bool streamed = !mp.resident && mp.param_tier != tiers::Tier::device;
    const bool offloaded_optimizer = mp.optimizer_tier != tiers::Tier::device;
    if (streamed) {
      const double fetched = 2.0 * gas * fetches * static_cast<double>(mp.shard_bytes);
      w.h2d_bytes += fetched;
      if (mp.param_tier == tiers::Tier::nvme) {
        w.disk_read_bytes += fetched;
        w.disk_write_bytes += static_cast<double>(mp.shard_bytes);
      }
    }
    if (!offloaded_optimizer) continue;
    w.d2h_bytes += gas * shard * ds;
    if (!streamed) w.h2d_bytes += shard * ds;
    w.cpu_adam_elements += shard;
    if (mp.optimizer_tier == tiers::Tier::nvme) {
      w.disk_read_bytes += 12.0 * shard;
      w.disk_write_bytes += 12.0 * shard;
    }
  }
  return w;
}

double compute_rate(const MachineProfile& p, int hidden) {
  const std::vector<StepPoint>& s = p.step_points;
  if (s.empty()) return p.step_flops_per_s;
  if (hidden <= s.front().hidden) return s.front().flops_per_s;
  if (hidden >= s.back().hidden) return s.back().flops_per_s;
  std::size_t i = 1;
  while (s[i].hidden < hidden) ++i;
  const double t = std::log(static_cast<double>(hidden) / s[i - 1].hidden) /
                   std::log(static_cast<double>(s[i].hidden) / s[i - 1].hidden);
  return s[i - 1].flops_per_s + t * (s[i].flops_per_s - s[i - 1].flops_per_s);
}

StepPrediction predict_step(const StepWork& w, const MachineProfile& p, bool host_backend) {
  StepPrediction out;
  auto ms = [](double amount, double rate) { return rate > 0 ? amount / rate * 1e3 : 0.0; };
  const double compute = ms(w.model_flops, compute_rate(p, w.hidden));
  const double h2d = ms(w.h2d_bytes, p.h2d_bytes_per_s);
  const double d2h = ms(w.d2h_bytes, p.d2h_bytes_per_s);
  const double adam = ms(w.cpu_adam_elements, p.cpu_adam_elements_per_s);
  const double disk = ms(w.disk_read_bytes, p.disk_read_bytes_per_s) + ms(w.disk_write_bytes, p.disk_write_bytes_per_s);
  out.resource_ms = {{"compute", compute}, {"h2d", h2d}, {"d2h", d2h}, {"cpu adam", adam}, {"disk", disk}};
  if (host_backend) {
    const double cpu = compute + h2d + d2h + adam;
    out.step_ms = std::max(cpu, disk);
    if (disk > cpu) {
      out.bottleneck = "disk";
    } else {
      // The largest of the CPU's shares names it.
      auto it = std::max_element(out.resource_ms.begin(), out.resource_ms.end() - 1,
                                 [](const auto& a, const auto& b) { return a.second < b.second; });
      out.bottleneck = it->first;
    }
    return out;
  }
  auto it = std::max_element(out.resource_ms.begin(), out.resource_ms.end(),
                             [](const auto& a, const auto& b) { return a.second < b.second; });
  out.step_ms = it->second;
  out.bottleneck = it->first;
  return out;
}

}  // namespace strata::runtime::estimate
