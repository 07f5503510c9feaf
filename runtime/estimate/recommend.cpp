#include "runtime/estimate/recommend.h"

#include <algorithm>
#include <optional>

#include <fmt/format.h>

#include "core/error.h"
#include "core/units.h"

namespace strata::runtime::estimate {
namespace {

using config::OffloadDevice;

int tier_cost(OffloadDevice d) { return d == OffloadDevice::kNone ? 0 : d == OffloadDevice::kCpu ? 1 : 2; }

std::optional<std::uint64_t> given(const std::optional<config::AutoOr<std::uint64_t>>& key) {
  if (!key || key->is_auto()) return std::nullopt;
  return key->value();
}

// The global batch per rank the config fixes: train_batch_size / world, or micro-batch x
// accumulation (1 when not given); nullopt when it gives no micro-batch nor train_batch_size.
std::optional<std::uint64_t> fixed_per_rank(const EstimateInputs& in) {
  const config::Config& c = in.config;
  const std::uint64_t world = static_cast<std::uint64_t>(in.world);
  if (const std::optional<std::uint64_t> global = given(c.train_batch_size)) {
    if (*global % world != 0) {
      throw Error("train_batch_size " + std::to_string(*global) + " does not divide over " + std::to_string(in.world) +
                      " ranks",
                  "train_batch_size", "give a multiple of the number of ranks");
    }
    return *global / world;
  }
  if (const std::optional<std::uint64_t> micro = given(c.train_micro_batch_size_per_gpu)) {
    return *micro * given(c.gradient_accumulation_steps).value_or(1);
  }
  return std::nullopt;
}

// The micro-batches (with their accumulation steps) the config leaves open. A global batch it
// fixes is kept: the micro-batch may be traded for accumulation (the powers of two dividing the
// global batch per rank, and the config's own micro-batch, none larger than it), never the
// global batch. Without one, 1 to 64 at the config's accumulation (1 when not given).
std::vector<std::pair<int, int>> micro_batches(const EstimateInputs& in) {
  const config::Config& c = in.config;
  const std::optional<std::uint64_t> micro = given(c.train_micro_batch_size_per_gpu);
  std::vector<std::pair<int, int>> out;
  const std::optional<std::uint64_t> per_rank = fixed_per_rank(in);
  if (!per_rank) {
    const int gas = static_cast<int>(given(c.gradient_accumulation_steps).value_or(1));
    for (int m = 1; m <= 64; m *= 2) out.push_back({m, gas});
    return out;
  }
  const std::uint64_t cap = micro ? std::min(*micro, *per_rank) : *per_rank;
  for (std::uint64_t m = 1; m <= cap; m *= 2) {
    if (*per_rank % m == 0) out.push_back({static_cast<int>(m), static_cast<int>(*per_rank / m)});
  }
  if (micro && *micro <= *per_rank && *per_rank % *micro == 0 && (*micro & (*micro - 1)) != 0) {
    out.push_back({static_cast<int>(*micro), static_cast<int>(*per_rank / *micro)});
  }
  return out;
}

// Best first.
bool better(const Candidate& a, const Candidate& b, bool profiled) {
  if (profiled && a.score != b.score) return a.score > b.score;
  const int ca = tier_cost(a.placement.param) * 3 + tier_cost(a.placement.optimizer);
  const int cb = tier_cost(b.placement.param) * 3 + tier_cost(b.placement.optimizer);
  if (ca != cb) return ca < cb;
  if (a.ratio != b.ratio) return a.ratio < b.ratio;  // more of the optimizer on the device
  if (a.micro_batch != b.micro_batch) return a.micro_batch > b.micro_batch;
  if (a.param_buffers + a.optimizer_buffers != b.param_buffers + b.optimizer_buffers) {
    return a.param_buffers + a.optimizer_buffers > b.param_buffers + b.optimizer_buffers;
  }
  return a.placement.stage < b.placement.stage;
}

// `in` with the candidate's micro-batch, accumulation, offload ratio and buffer counts.
EstimateInputs candidate_inputs(const EstimateInputs& in, const Candidate& c) {
  EstimateInputs cell = in;
  config::Config& config = cell.config;
  config.train_micro_batch_size_per_gpu = static_cast<std::uint64_t>(c.micro_batch);
  config.gradient_accumulation_steps = static_cast<std::uint64_t>(c.gas);
  config.train_batch_size.reset();
  config.zero_optimization.offload_optimizer.ratio = c.ratio;
  config.zero_optimization.offload_param.buffer_count = c.param_buffers;
  config.zero_optimization.offload_optimizer.buffer_count = c.optimizer_buffers;
  cell.batch = c.micro_batch;
  return cell;
}

std::string tokens_text(double t) { return t >= 1e4 ? fmt::format("{:.1f}k", t / 1e3) : fmt::format("{:.0f}", t); }

// What the pick did to the batch of the config, and why: the global batch kept (with the
// micro-batch traded for accumulation, and the reason, when the config's micro-batch was not
// taken), or picked when the config left it open.
std::string batch_why(const EstimateInputs& in, const Recommendation& r, bool profiled) {
  const config::Config& c = in.config;
  const Candidate& pick = r.pick;
  const std::uint64_t global =
      static_cast<std::uint64_t>(pick.micro_batch) * static_cast<std::uint64_t>(pick.gas) * static_cast<std::uint64_t>(in.world);
  const std::string took = fmt::format("micro-batch {} x {} accumulation x {} rank(s)", pick.micro_batch, pick.gas, in.world);
  const std::optional<std::uint64_t> per_rank = fixed_per_rank(in);
  if (!per_rank) {
    return fmt::format("no global batch given (neither train_batch_size nor a micro-batch): picked {} = "
                       "global batch {}.",
                       took, global);
  }
  const std::optional<std::uint64_t> train = given(c.train_batch_size);
  const std::optional<std::uint64_t> micro = given(c.train_micro_batch_size_per_gpu);
  const std::optional<std::uint64_t> accum = given(c.gradient_accumulation_steps);
  const std::string whose = train ? fmt::format("train_batch_size {}", *train)
                                  : fmt::format("micro-batch {} x {} accumulation x {} rank(s)", *micro,
                                                accum.value_or(1), in.world);
  std::string out = fmt::format("global batch {} kept (given as {}): {}", global, whose, took);
  if (!micro || static_cast<std::uint64_t>(pick.micro_batch) == *micro) return out + ".";
  // The config's micro-batch was traded for accumulation: say what it would have cost.
  const Candidate* own = nullptr;
  for (const Candidate& f : r.fitting) {
    if (static_cast<std::uint64_t>(f.micro_batch) == *micro) {
      own = &f;
      break;  // best first
    }
  }
  out += fmt::format(", instead of the given micro-batch {} x {} accumulation: ", *micro,
                     *per_rank / *micro);
  if (own == nullptr) return out + fmt::format("micro-batch {} fits no placement on this machine.", *micro);
  if (profiled && own->score > 0) {
    return out + fmt::format("its best plan, {}, is predicted at {} tokens/s against {}.", own->label(),
                             tokens_text(own->score), tokens_text(pick.score));
  }
  return out + fmt::format("with it the least offloaded plan that fits is {}, more offloaded than {}.", own->label(),
                           pick.label());
}

}  // namespace

std::string Candidate::label() const {
  std::string s = placement.label();
  if (ratio < 1.0) s += fmt::format(" (ratio {:.2f})", ratio);
  if (placement.param == config::OffloadDevice::kNvme || placement.optimizer == config::OffloadDevice::kNvme) {
    s += fmt::format(", NVMe buffers {}/{}", param_buffers, optimizer_buffers);
  }
  s += fmt::format(", micro-batch {}", micro_batch);
  if (gas > 1) s += fmt::format(" x {} accumulation", gas);
  return s;
}

Recommendation recommend(const EstimateInputs& in, bool nvme_allowed) {
  const bool profiled = in.profile.has_value();
  Recommendation out;
  Candidate closest;
  double closest_short = -1;
  const std::vector<std::pair<int, int>> batches = micro_batches(in);
  for (const Placement& p : all_placements()) {
    if (!nvme_allowed && (p.param == OffloadDevice::kNvme || p.optimizer == OffloadDevice::kNvme)) continue;
    std::vector<double> ratios = {1.0};
    if (p.stage == 3 && p.param == OffloadDevice::kNone && p.optimizer != OffloadDevice::kNone) {
      ratios = {1.0, 0.75, 0.5, 0.25};
    }
    const config::ZeroConfig& z = in.config.zero_optimization;
    std::vector<std::pair<std::uint64_t, std::uint64_t>> buffers = {
        {z.offload_param.buffer_count, z.offload_optimizer.buffer_count}};
    const bool nvme = p.param == OffloadDevice::kNvme || p.optimizer == OffloadDevice::kNvme;
    if (nvme && buffers.front() != std::pair<std::uint64_t, std::uint64_t>{2, 3}) buffers.push_back({2, 3});
    for (const auto& [param_buffers, optimizer_buffers] : buffers) {
      for (double ratio : ratios) {
        for (const auto& [micro, gas] : batches) {
          Candidate c;
          c.placement = p;
          c.ratio = ratio;
          c.param_buffers = param_buffers;
          c.optimizer_buffers = optimizer_buffers;
          c.micro_batch = micro;
          c.gas = gas;
          const EstimateInputs cell = candidate_inputs(in, c);
          try {
            c.row = estimate_row(cell, p, placement_config(cell, p));
          } catch (const Error&) {
            continue;  // a config this cell cannot have (e.g. a staging buffer too small)
          }
          ++out.considered;
          if (!c.row.fits) {
            // The closest miss: the least short on its shortest tier, relative to the budget.
            const std::uint64_t budget[] = {in.budgets.device, in.budgets.pinned, in.budgets.nvme};
            double worst = 0;
            for (int t = 0; t < 3; ++t) {
              if (c.row.need[t] > budget[t] && budget[t] > 0) {
                worst = std::max(worst, static_cast<double>(c.row.need[t]) / static_cast<double>(budget[t]));
              }
            }
            if (closest_short < 0 || worst < closest_short) {
              closest_short = worst;
              closest = c;
            }
            continue;
          }
          if (c.row.step) {
            const int T = sequence_length(in);
            c.score = static_cast<double>(micro) * T * gas * in.world / (c.row.step->step_ms / 1e3);
          }
          out.fitting.push_back(std::move(c));
        }
      }
    }
  }
  if (out.fitting.empty()) {
    throw Error("no stage, placement or micro-batch fits this machine's budgets (" + std::to_string(out.considered) +
                    " planned); the closest, " + closest.label() + ": " + closest.row.advice,
                "--config auto", "give a larger device or pinned budget, more ranks, a shorter --seq-len, "
                                 "--activation-checkpointing, or an nvme_path to offload to NVMe");
  }
  std::stable_sort(out.fitting.begin(), out.fitting.end(),
                   [&](const Candidate& a, const Candidate& b) { return better(a, b, profiled); });
  out.pick = out.fitting.front();
  const EstimateInputs cell = candidate_inputs(in, out.pick);
  out.config = placement_config(cell, out.pick.placement);
  const EstimateRow& r = out.pick.row;
  const Budgets& b = in.budgets;
  const std::string node =
      b.ranks_per_node > 1 ? fmt::format(", each rank's share of {} ranks a node", b.ranks_per_node) : "";
  out.why = fmt::format("{} of {} candidates fit (device {}, pinned {}, nvme {} free{}). Picked {}: ", out.fitting.size(),
                        out.considered, format_bytes(b.device), format_bytes(b.pinned), format_bytes(b.nvme), node,
                        out.pick.label());
  const std::uint64_t use = r.device_use_bytes();
  out.why += fmt::format("needs device {}{}, pinned {}, nvme {}", format_bytes(r.need[0]),
                         use > r.need[0] ? fmt::format(" (grows to {} with this budget)", format_bytes(use)) : "",
                         format_bytes(r.need[1]), format_bytes(r.need[2]));
  if (profiled && r.step) {
    out.why += fmt::format("; predicted {} ms a step, {} tokens/s, bound by {}", static_cast<int>(r.step->step_ms + 0.5),
                           tokens_text(out.pick.score), r.step->bottleneck);
    if (out.fitting.size() > 1) {
      const Candidate& next = out.fitting[1];
      out.why += fmt::format(" (the next best, {}: {} tokens/s)", next.label(), tokens_text(next.score));
    }
  } else {
    out.why += "; without a machine profile (--profile, from strata bench machine) the least offloaded plan that "
               "fits, with the largest micro-batch";
  }
  out.why += ".";
  out.batch_why = batch_why(in, out, profiled);
  return out;
}

bool names_nvme(const config::Config& config) {
  const config::ZeroConfig& z = config.zero_optimization;
  return !z.offload_param.nvme_path.empty() || !z.offload_optimizer.nvme_path.empty();
}

AutoPlan auto_plan(EstimateInputs in, const config::Config& base) {
  const config::ZeroConfig& z = in.config.zero_optimization;
  const bool nvme = names_nvme(in.config);
  if (nvme) in.nvme_path = !z.offload_optimizer.nvme_path.empty() ? z.offload_optimizer.nvme_path.front()
                                                                   : z.offload_param.nvme_path.front();
  AutoPlan out;
  out.recommendation = recommend(in, nvme);
  // The pick's placement and batch sizes over `base`.
  const config::Config& pick = out.recommendation.config;
  out.config = base;
  config::ZeroConfig& c = out.config.zero_optimization;
  const config::ZeroConfig& p = pick.zero_optimization;
  c.stage = p.stage;
  c.offload_param.device = p.offload_param.device;
  c.offload_param.nvme_path = p.offload_param.nvme_path;
  c.offload_param.buffer_count = p.offload_param.buffer_count;
  c.offload_optimizer.device = p.offload_optimizer.device;
  c.offload_optimizer.nvme_path = p.offload_optimizer.nvme_path;
  c.offload_optimizer.buffer_count = p.offload_optimizer.buffer_count;
  c.offload_optimizer.ratio = p.offload_optimizer.ratio;
  out.config.train_batch_size = pick.train_batch_size;
  out.config.train_micro_batch_size_per_gpu = pick.train_micro_batch_size_per_gpu;
  out.config.gradient_accumulation_steps = pick.gradient_accumulation_steps;
  if (out.config.strata.pinned_memory_bytes == 0 && in.budgets.ranks_per_node > 1) {
    out.config.strata.pinned_memory_bytes = in.budgets.pinned;
  }
  return out;
}

}  // namespace strata::runtime::estimate
