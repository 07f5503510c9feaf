#include "runtime/estimate/estimate.h"

#include <sys/stat.h>
#include <sys/statvfs.h>

#include <algorithm>

#include "core/error.h"
#include "core/units.h"
#include "runtime/estimate/zero_theory.h"
#include "runtime/tiers/plan.h"

namespace strata::runtime::estimate {
namespace {

using config::OffloadDevice;
using tiers::Tier;

// The plan inputs the tier store makes of the model at `world` ranks (tier_store.cpp), without
// the budgets (the tier store reads them from the device, the pinned pool and the NVMe folders).
tiers::PlanInputs plan_inputs(const config::Config& config, const EstimateModel& model, DType dtype,
                              std::uint64_t activation_bytes, int world) {
  tiers::PlanInputs in;
  in.module_numels = model.module_numels;
  in.module_names = model.module_names;
  in.routed_modules = model.routed_modules;
  in.world = world;
  in.dtype = dtype;
  in.grad_dtype = config::to_dtype(config.data_types.grad_accum_dtype);
  in.activation_bytes = activation_bytes;
  in.nvme_block_bytes = config.aio.block_size;
  in.nvme_paths = tiers::nvme_paths(config);
  return in;
}

// "device: short by 1.2 GiB (needs 3.2 GiB, has 2 GiB)" for each tier that does not fit, and
// what would make it fit.
std::string advice_for(const EstimateRow& row, const Budgets& b) {
  std::string out;
  const std::pair<Tier, std::uint64_t> tiers[] = {{Tier::device, b.device}, {Tier::pinned, b.pinned}, {Tier::nvme, b.nvme}};
  for (const auto& [tier, have] : tiers) {
    const std::uint64_t need = row.need[static_cast<int>(tier)];
    if (need <= have || (tier == Tier::nvme && need == 0)) continue;
    if (!out.empty()) out += "; ";
    out += std::string(tiers::tier_name(tier)) + " short by " + format_bytes(need - have) + " (needs " +
           format_bytes(need) + ", has " + format_bytes(have) + ")";
  }
  if (out.empty()) return out;
  const Placement& p = row.placement;
  if (row.need[0] > b.device) {
    if (p.stage < 3) out += ": a higher stage or more offload, more ranks, a smaller micro-batch or activation checkpointing";
    else if (p.param == OffloadDevice::kNone) out += ": offload the parameters (offload_param), or a smaller micro-batch";
    else out += ": a smaller micro-batch, --seq-len or activation checkpointing, or a larger device";
  } else if (row.need[1] > b.pinned) {
    out += ": offload to nvme instead of cpu, or raise strata.pinned_memory";
    if (b.ranks_per_node > 1) out += " (or --pinned-memory, the node's), or put fewer ranks on a node";
  } else {
    out += ": free space in nvme_path or add folders on other drives";
    if (b.ranks_per_node > 1) out += ", or put fewer ranks on a node";
  }
  return out;
}

}  // namespace

std::string Placement::label() const { return tiers::placement_label(stage, param, optimizer); }

int sequence_length(const EstimateInputs& in) {
  return in.seq_len > 0 ? in.seq_len : std::min(in.model.max_positions, 1024);
}

std::vector<Placement> all_placements() {
  std::vector<Placement> out;
  const OffloadDevice devices[] = {OffloadDevice::kNone, OffloadDevice::kCpu, OffloadDevice::kNvme};
  out.push_back({0, OffloadDevice::kNone, OffloadDevice::kNone});
  for (int stage = 1; stage <= 2; ++stage) {
    for (OffloadDevice o : devices) out.push_back({stage, OffloadDevice::kNone, o});
  }
  for (OffloadDevice param : devices) {
    for (OffloadDevice o : devices) {
      // Offloaded parameters need an offloaded optimizer (tiers/plan.h).
      if (param != OffloadDevice::kNone && o == OffloadDevice::kNone) continue;
      out.push_back({3, param, o});
    }
  }
  return out;
}

std::uint64_t EstimateRow::device_use_bytes() const {
  return std::max(need[static_cast<int>(Tier::device)], bytes.tier_bytes(Tier::device));
}

int ranks_per_node(int world, int flag, int gpus, std::string* source) {
  int per_node = flag;
  std::string why = "--ranks-per-node";
  if (per_node <= 0) {
    per_node = gpus > 0 ? gpus : kDefaultRanksPerNode;
    why = gpus > 0 ? "the GPUs found" : "the default";
  }
  if (world < per_node) why = "all " + std::to_string(world) + " on one node, at most " + std::to_string(per_node);
  if (source) *source = why;
  return std::max(1, std::min(world, per_node));
}

std::uint64_t free_nvme_bytes(const std::vector<std::string>& paths) {
  std::vector<dev_t> seen;
  std::uint64_t sum = 0;
  for (const std::string& p : paths) {
    struct stat st {};
    struct statvfs fs {};
    if (::stat(p.c_str(), &st) != 0 || ::statvfs(p.c_str(), &fs) != 0) continue;
    if (std::find(seen.begin(), seen.end(), st.st_dev) != seen.end()) continue;
    seen.push_back(st.st_dev);
    sum += static_cast<std::uint64_t>(fs.f_bavail) * fs.f_frsize;
  }
  return sum;
}

config::Config placement_config(const EstimateInputs& in, const Placement& p) {
  config::Config c = in.config;
  config::ZeroConfig& z = c.zero_optimization;
  z.stage = p.stage;
  z.offload_param.device = p.param;
  z.offload_optimizer.device = p.optimizer;
  if (p.param == OffloadDevice::kNvme && z.offload_param.nvme_path.empty()) z.offload_param.nvme_path = {in.nvme_path};
  if (p.optimizer == OffloadDevice::kNvme && z.offload_optimizer.nvme_path.empty()) {
    z.offload_optimizer.nvme_path = {in.nvme_path};
  }
  // No batch size at all: the inputs' micro-batch. With train_batch_size alone, resolution
  // derives the micro-batch as the run would.
  const auto given = [](const auto& size) { return size && !size->is_auto(); };
  if (!given(c.train_micro_batch_size_per_gpu) && !given(c.train_batch_size)) {
    c.train_micro_batch_size_per_gpu = static_cast<std::uint64_t>(in.batch);
    c.train_batch_size.reset();
  }
  config::ResolveInputs resolve;
  resolve.world_size = static_cast<std::uint32_t>(in.world);
  resolve.hidden_size = static_cast<std::uint64_t>(in.model.hidden_size);
  return config::resolve_config(c, resolve);
}

EstimateRow estimate_row(const EstimateInputs& in, const Placement& p, const config::Config& resolved) {
  EstimateRow row;
  row.placement = p;
  row.world = in.world;
  const int B = static_cast<int>(resolved.train_micro_batch_size_per_gpu->value());
  const int T = sequence_length(in);
  const int gas = static_cast<int>(resolved.gradient_accumulation_steps->value());
  const DType dtype = config::compute_dtype(resolved);
  tiers::PlanInputs pin = plan_inputs(
      resolved, in.model, dtype, in.model.activation_bytes(dtype, in.activation_checkpointing, in.backend, B, T), in.world);
  pin.device_budget_bytes = in.budgets.device;
  pin.pinned_budget_bytes = in.budgets.pinned;
  pin.nvme_free_bytes = in.budgets.nvme;
  const tiers::ZeroPlan plan = tiers::compute_plan(resolved, pin);
  row.bytes = tiers::footprint(plan, pin);
  tiers::PlanInputs at_least = pin;
  at_least.device_budget_bytes = 0;  // no room beside the minimum: the transient buffers at theirs
  row.minimum = tiers::footprint(plan, at_least);
  row.model_states_bytes = row.bytes.model_states_bytes();
  for (const tiers::ModulePlan& mp : plan.modules) row.psi_padded += mp.part.padded_numel;
  const int ds = static_cast<int>(dtype_size(dtype));
  row.formula_bytes = zero_model_states_bytes(p.stage, in.world, row.psi_padded, ds);
  row.collective_bytes = zero_collective_bytes(p.stage, in.world, row.psi_padded, ds);
  for (Tier t : {Tier::device, Tier::pinned, Tier::nvme}) row.need[static_cast<int>(t)] = plan.needed(t);
  row.fits = tiers::fits(plan, pin);
  if (!row.fits) row.advice = advice_for(row, in.budgets);
  if (in.profile) {
    const double tokens = static_cast<double>(B) * T * gas;
    // Layers: the modules less the embedding, the head and the experts. Flops: a mixture's
    // token reads its active parameters; its experts are fetched at the micro-batch's expected
    // share (moe_traffic.h).
    const MoeRouting& moe = in.model.routing;
    int layers = static_cast<int>(in.model.module_numels.size()) - 2;
    for (char routed : in.model.routed_modules) layers -= routed != 0 ? 1 : 0;
    const double params = static_cast<double>(moe.moe() ? moe.active_params : in.model.num_params);
    const ModelShape shape{params, layers, in.model.hidden_size, T};
    const double routed_share =
        moe.moe() ? expected_experts(moe.experts, moe.per_token, static_cast<double>(B) * T) / moe.experts : 1.0;
    const StepWork work = step_work(plan, pin, gas, shape, tokens, in.activation_checkpointing, routed_share);
    row.step = predict_step(work, *in.profile, in.backend == device::Backend::host);
  }
  return row;
}

Estimate make_estimate(const EstimateInputs& in, const std::vector<Placement>& placements) {
  Estimate out;
  out.resolved_base = placement_config(in, {in.config.zero_optimization.stage, OffloadDevice::kNone, OffloadDevice::kNone});
  out.batch = static_cast<int>(out.resolved_base.train_micro_batch_size_per_gpu->value());
  out.seq_len = sequence_length(in);
  out.gas = static_cast<int>(out.resolved_base.gradient_accumulation_steps->value());
  out.dtype = config::compute_dtype(out.resolved_base);
  for (const Placement& p : placements) {
    try {
      out.rows.push_back(estimate_row(in, p, placement_config(in, p)));
    } catch (const Error& e) {
      EstimateRow row;
      row.placement = p;
      row.world = in.world;
      row.error = e.what();
      out.rows.push_back(std::move(row));
    }
  }
  return out;
}

}  // namespace strata::runtime::estimate
