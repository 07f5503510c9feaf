#include "runtime/tiers/plan.h"

#include <algorithm>
#include <cstdio>

#include "core/error.h"
#include "core/units.h"
#include "kernels/host/quantize.h"
#include "runtime/device/arena.h"

namespace strata::runtime::tiers {
namespace {

std::uint64_t round_up(std::uint64_t v, std::uint64_t a) { return (v + a - 1) / a * a; }

// Pinned buffers are whole pages (offload/host_buffer.h).
std::uint64_t pinned_bytes(std::uint64_t v) { return round_up(v, 4096); }

}  // namespace


std::vector<std::string> nvme_paths(const config::Config& config) {
  const config::ZeroConfig& z = config.zero_optimization;
  std::vector<std::string> paths;
  auto add = [&](config::OffloadDevice device, const std::vector<std::string>& section_paths) {
    if (device != config::OffloadDevice::kNvme) return;
    for (const std::string& p : section_paths) {
      if (std::find(paths.begin(), paths.end(), p) == paths.end()) paths.push_back(p);
    }
  };
  add(z.offload_param.device, z.offload_param.nvme_path);
  add(z.offload_optimizer.device, z.offload_optimizer.nvme_path);
  return paths;
}

std::string WeightQuant::describe() const {
  return "int" + std::to_string(bits) + ", group " + std::to_string(group) + ", bf16 scales";
}

std::uint64_t ZeroPlan::needed(Tier tier) const {
  if (tier == Tier::device) return device_minimum_bytes;
  std::uint64_t sum = 0;
  for (const PlanLine& l : lines)
    if (l.tier == tier) sum += l.bytes;
  return sum;
}

std::string ZeroPlan::table(const PlanInputs& in) const {
  std::string out;
  char buf[256];
  std::snprintf(buf, sizeof buf, "  %-12s %14s %14s\n", "tier", "needed", "available");
  out += buf;
  const std::pair<Tier, std::uint64_t> rows[] = {{Tier::device, in.device_budget_bytes},
                                                 {Tier::pinned, in.pinned_budget_bytes},
                                                 {Tier::nvme, in.nvme_free_bytes}};
  for (const auto& [tier, avail] : rows) {
    const std::uint64_t need = needed(tier);
    if (tier == Tier::nvme && need == 0) continue;
    std::snprintf(buf, sizeof buf, "  %-12s %14s %14s%s", tier_name(tier), format_bytes(need).c_str(),
                  format_bytes(avail).c_str(), need > avail ? "   <- does not fit" : "");
    out += buf;
    if (tier == Tier::nvme && !in.nvme_paths.empty()) {
      out += "   (free in";
      for (const std::string& p : in.nvme_paths) out += " " + p;
      out += ")";
    }
    out += "\n";
  }
  out += "  of which:\n";
  for (const PlanLine& l : lines) {
    std::snprintf(buf, sizeof buf, "    %-12s %14s  %s\n", tier_name(l.tier), format_bytes(l.bytes).c_str(),
                  l.what.c_str());
    out += buf;
  }
  return out;
}

namespace {

// compute_plan's passes, numbered in the order they run. Each decides one thing and writes it
// into the plan (or hands its sums on to the later passes); the plan's lines come out in the
// order the tables print them: device, pinned host, NVMe.

// What pass 3 sums over the modules for the tier lines: bytes, unless named otherwise.
struct StateBytes {
  std::uint64_t resident_full = 0, dev_shards = 0, pin_shards = 0, nvme_shards = 0;
  // Optimizer states (fp32 master, exp_avg, exp_avg_sq) and the gradient accumulators (fp32, or
  // data_types.grad_accum_dtype), per tier.
  std::uint64_t opt_dev = 0, opt_pin = 0, opt_nvme = 0, acc_dev = 0, acc_pin = 0, acc_host = 0;
  std::size_t max_nvme_param_shard = 0, max_offloaded_shard = 0;  // elements
  std::uint64_t max_nvme_param_bytes = 0;
  int nvme_param_modules = 0;
};

void add_line(ZeroPlan& plan, Tier t, StateClass kind, std::string what, std::uint64_t bytes) {
  if (bytes > 0) plan.lines.push_back({t, kind, std::move(what), bytes, false});
}

// The streamed shards' format: the compute dtype, or the quantized one.
std::string shard_format(const PlanInputs& in) {
  return in.quant.enabled() ? in.quant.describe() : std::string(dtype_name(in.dtype));
}

std::string accumulators_name(const PlanInputs& in) {
  return std::string(dtype_name(in.grad_dtype)) + " gradient accumulators";
}

// Pass 1 decides nothing: it refuses weight quantization where no budget makes it work (in
// training, in a format the kernels lack, over several ranks).
void check_quantization(const PlanInputs& in) {
  if (!in.quant.enabled()) return;
  if (in.optimizer) throw Error("weight quantization is for inference only", "--quantize");
  if (!kernels::host::quant_format_valid(in.quant.bits, in.quant.group)) {
    throw Error("weight quantization int" + std::to_string(in.quant.bits) + " with group size " +
                    std::to_string(in.quant.group) + " is not supported",
                "--quantize", "use int8 or int4, with --quantize-group 64 or 128");
  }
  if (in.world > 1) {
    throw Error("weight quantization with " + std::to_string(in.world) + " ranks is not supported",
                "--quantize", "serve a quantized model on one rank, or unquantized on several");
  }
}

// Pass 2 decides where each module lives: resident on the device or its shard's tier, the tier
// of its optimizer states (offload_optimizer.ratio of the elements, whole modules from the
// first), whether its shard is quantized, and its shard's and gathered bytes.
void place_modules(const config::Config& config, const PlanInputs& in, ZeroPlan& plan) {
  const config::ZeroConfig& z = config.zero_optimization;
  const std::size_t ds = dtype_size(in.dtype);
  // Inference streams parameters at any stage: there is nothing else to shard.
  const Tier param_tier = z.stage == 3 || !in.optimizer ? placement_tier(z.offload_param.device) : Tier::device;
  const Tier opt_tier = in.optimizer ? placement_tier(z.offload_optimizer.device) : Tier::device;
  const std::uint64_t persistence =
      config::value_or_default(z, &config::ZeroConfig::stage3_param_persistence_threshold);
  std::uint64_t total_numel = 0;
  for (std::size_t n : in.module_numels) total_numel += n;
  const double ratio = opt_tier == Tier::device ? 0.0 : z.offload_optimizer.ratio;
  std::uint64_t offloaded = 0;
  for (std::size_t m = 0; m < in.module_numels.size(); ++m) {
    ModulePlan mp;
    mp.part = partition_module(in.module_numels[m], plan.shards);
    mp.param_tier = param_tier;
    mp.resident = in.optimizer ? z.stage < 3 || in.module_numels[m] <= persistence ||
                                     (param_tier == Tier::device && plan.shards == 1)
                               : param_tier == Tier::device || (m < in.keep_resident.size() && in.keep_resident[m]);
    const bool offload = opt_tier != Tier::device &&
                         static_cast<double>(offloaded) < ratio * static_cast<double>(total_numel);
    mp.optimizer_tier = offload ? opt_tier : Tier::device;
    if (offload) offloaded += in.module_numels[m];
    if (in.optimizer && mp.optimizer_tier == Tier::device && !mp.resident && mp.param_tier != Tier::device) {
      throw Error("module " + in.module_names[m] + " would keep its optimizer states on the device while its "
                  "parameters are offloaded to " + tier_name(mp.param_tier),
                  "zero_optimization.offload_optimizer",
                  "offload the optimizer too (offload_optimizer.device \"cpu\" or \"nvme\", ratio 1) "
                  "whenever offload_param.device is \"cpu\" or \"nvme\"");
    }
    // Quantization is a storage format of the streamed shards; resident modules stay in the
    // compute dtype.
    mp.quantized = in.quant.enabled() && !mp.resident;
    if (mp.quantized) {
      mp.shard_bytes = kernels::host::quant_bytes(mp.part.padded_numel, in.quant.group, in.quant.bits);
      mp.gathered_bytes = mp.shard_bytes;
    } else {
      mp.shard_bytes = mp.part.shard_numel * ds;
      mp.gathered_bytes = mp.part.padded_numel * ds;
    }
    plan.max_shard_numel = std::max(plan.max_shard_numel, mp.part.shard_numel);
    plan.modules.push_back(mp);
  }
}

// Pass 3 decides nothing: it sums the bytes of each kind of state per tier, as pass 2 placed
// them (pinned buffers are whole pages, NVMe extents whole blocks).
StateBytes sum_states(const PlanInputs& in, const ZeroPlan& plan) {
  const std::size_t ds = dtype_size(in.dtype);
  const std::uint64_t gs = dtype_size(in.grad_dtype);
  StateBytes b;
  for (const ModulePlan& mp : plan.modules) {
    const std::uint64_t sh = mp.part.shard_numel;
    if (mp.resident) {
      b.resident_full += mp.part.padded_numel * ds;
    } else if (mp.param_tier == Tier::device) {
      b.dev_shards += mp.shard_bytes;
    } else if (mp.param_tier == Tier::pinned) {
      b.pin_shards += pinned_bytes(mp.shard_bytes);
    } else {
      b.nvme_shards += round_up(mp.shard_bytes, in.nvme_block_bytes);
      b.max_nvme_param_shard = std::max<std::size_t>(b.max_nvme_param_shard, sh);
      b.max_nvme_param_bytes = std::max(b.max_nvme_param_bytes, mp.shard_bytes);
      ++b.nvme_param_modules;
    }
    if (!in.optimizer) continue;
    switch (mp.optimizer_tier) {
      case Tier::device:
        b.opt_dev += sh * 12;
        b.acc_dev += sh * gs;
        break;
      case Tier::pinned:
        b.opt_pin += pinned_bytes(sh * 4) * 3;
        b.acc_pin += pinned_bytes(sh * gs);
        break;
      case Tier::nvme:
        b.opt_nvme += round_up(sh * 4, in.nvme_block_bytes) * 3;
        b.acc_host += pinned_bytes(sh * gs);
        break;
    }
    if (mp.optimizer_tier != Tier::device) b.max_offloaded_shard = std::max<std::size_t>(b.max_offloaded_shard, sh);
  }
  return b;
}

// Pass 4 decides the device's lines for the states that stay for the whole run: resident
// parameters, parameter shards, optimizer states, accumulators, and the model's activations.
void device_state_lines(const PlanInputs& in, const StateBytes& b, ZeroPlan& plan) {
  using SC = StateClass;
  add_line(plan, Tier::device, SC::parameters,
           "parameters kept on the device (" + std::string(dtype_name(in.dtype)) + ")", b.resident_full);
  add_line(plan, Tier::device, SC::parameters, "parameter shards (" + shard_format(in) + ")", b.dev_shards);
  add_line(plan, Tier::device, SC::optimizer_states, "optimizer states: fp32 master, exp_avg, exp_avg_sq", b.opt_dev);
  add_line(plan, Tier::device, SC::gradients, accumulators_name(in), b.acc_dev);
  add_line(plan, Tier::device, SC::activations,
           in.optimizer                     ? "activations, logits and scratch of the micro-batch"
           : in.kv_cache_pinned_bytes > 0 ? "KV cache's 2 device slots and decoding scratch of the batch"
                                            : "the model's activations (KV cache and decoding scratch, or --perplexity's forward)",
           in.activation_bytes);
}

// Pass 5 decides the transient device buffers' two size classes (ModulePlan::size_class), each
// class's total and the smallest region that works for it; returns the two minimums' sum.
// Transient buffers: gathered parameters of modules not resident, and every module's gradient
// buffer during backward. Module 0 (the tied embedding) keeps its gradient buffer for the whole
// backward; a routed module (an expert) is held together with its block (the last module before
// it that is not routed).
std::uint64_t size_transient_regions(const config::Config& config, const PlanInputs& in, ZeroPlan& plan) {
  const config::ZeroConfig& z = config.zero_optimization;
  const std::size_t ds = dtype_size(in.dtype);
  auto gathered = [&](std::size_t m) -> std::uint64_t {
    return plan.modules[m].resident ? 0 : plan.modules[m].gathered_bytes;
  };
  auto grad = [&](std::size_t m) -> std::uint64_t {
    return in.optimizer ? plan.modules[m].part.padded_numel * ds : 0;
  };
  // Size classes, and the smallest region each needs: module 0's gradient is held for the
  // whole backward (with its parameters during the LM head's backward); any other module holds
  // its parameters and its gradient together.
  // (Inference has no gradients: the classes go by the parameters' size.)
  // (Quantized modules: their gathered bytes.)
  auto size = [&](std::size_t m) -> std::uint64_t {
    return plan.modules[m].quantized ? plan.modules[m].gathered_bytes : plan.modules[m].part.padded_numel * ds;
  };
  std::uint64_t largest = 0;
  for (std::size_t m = 0; m < plan.modules.size(); ++m) largest = std::max(largest, size(m));
  for (std::size_t m = 0; m < plan.modules.size(); ++m) {
    ModulePlan& mp = plan.modules[m];
    mp.size_class = 2 * size(m) > largest ? 0 : 1;
    plan.class_total_bytes[mp.size_class] += gathered(m) + grad(m);
  }
  const int c0 = plan.modules[0].size_class;
  // With several ranks at stage >= 1, a module over reduce_bucket_size elements is reduced
  // through a bucket buffer of that size next to its gradient.
  const std::uint64_t bucket_numel =
      std::max<std::uint64_t>(config::value_or_default(z, &config::ZeroConfig::reduce_bucket_size),
                              static_cast<std::uint64_t>(in.world));
  auto bucket = [&](std::size_t m) -> std::uint64_t {
    const ModulePartition& p = plan.modules[m].part;
    if (plan.shards == 1 || p.padded_numel <= bucket_numel) return 0;
    return bucket_numel / static_cast<std::uint64_t>(in.world) * static_cast<std::uint64_t>(in.world) * ds +
           device::Arena::kAlignment;
  };
  std::uint64_t widest[2] = {0, 0};
  auto held = [&](std::size_t m) { return gathered(m) + grad(m) + bucket(m) + 2 * device::Arena::kAlignment; };
  std::size_t block = 0;  // the last module that is not routed
  for (std::size_t m = 1; m < plan.modules.size(); ++m) {
    const int c = plan.modules[m].size_class;
    widest[c] = std::max(widest[c], held(m));
    if (!in.routed(static_cast<int>(m))) {
      block = m;
    } else if (block > 0 && plan.modules[block].size_class == c) {
      // A routed module (an expert) is held with its layer's block, the module before it.
      widest[c] = std::max(widest[c], held(block) + held(m));
    }
  }
  for (int c = 0; c < 2; ++c) {
    std::uint64_t held0 = c == c0 ? grad(0) + device::Arena::kAlignment : 0;
    std::uint64_t need = held0 + widest[c];
    if (c == c0) need = std::max(need, gathered(0) + grad(0) + bucket(0) + 2 * device::Arena::kAlignment);
    plan.class_minimum_bytes[c] = need;
  }
  return plan.class_minimum_bytes[0] + plan.class_minimum_bytes[1];
}

// Pass 6 decides the device's buffer lines (the transient regions at their minimum, the
// dequantization buffers, the scratch kept free) and the device's minimum: every device line.
void device_buffer_lines(const PlanInputs& in, const StateBytes& b, std::uint64_t minimum_working, ZeroPlan& plan) {
  using SC = StateClass;
  add_line(plan, Tier::device, SC::buffers,
           in.optimizer ? "gathered parameters and gradient buffers (one module at a time, minimum)"
                        : "gathered parameters (one module at a time, minimum)",
           minimum_working);
  const std::uint64_t dequant = dequant_buffer_bytes(plan, in.dtype);
  add_line(plan, Tier::device, SC::buffers,
           "dequantized parameters (" + std::to_string(kDequantBuffers) + " buffers of the largest streamed module, " +
               std::string(dtype_name(in.dtype)) + ")",
           dequant);
  plan.lines.push_back({Tier::device, SC::buffers, "scratch for collectives and reports", kDeviceScratchBytes, true});
  plan.device_minimum_bytes = b.resident_full + b.dev_shards + b.opt_dev + b.acc_dev + in.activation_bytes +
                              minimum_working + dequant + kDeviceScratchBytes;
}

// Pass 7 decides the pinned host memory: its state lines, and its staging buffers with their
// counts (NVMe parameter reads, gradient D2H, the optimizer's swap sub-groups and their size,
// updated parameters). Refuses a parameter shard larger than an NVMe staging buffer.
void pinned_lines(const config::Config& config, const PlanInputs& in, const StateBytes& b, ZeroPlan& plan) {
  using SC = StateClass;
  const config::ZeroConfig& z = config.zero_optimization;
  const std::size_t ds = dtype_size(in.dtype);
  add_line(plan, Tier::pinned, SC::parameters, "parameter shards (" + shard_format(in) + ")", b.pin_shards);
  add_line(plan, Tier::pinned, SC::activations, "KV cache (streamed per layer through 2 device slots)",
           in.kv_cache_pinned_bytes);
  if (b.nvme_param_modules > 0 && b.max_nvme_param_shard > z.offload_param.buffer_size) {
    throw Error("a parameter shard of " + std::to_string(b.max_nvme_param_shard) +
                    " elements does not fit in an NVMe staging buffer of offload_param.buffer_size = " +
                    std::to_string(z.offload_param.buffer_size) + " elements",
                "zero_optimization.offload_param.buffer_size",
                "raise buffer_size to at least " + std::to_string(b.max_nvme_param_shard) +
                    " (the largest module's shard) or use more ranks");
  }
  if (b.nvme_param_modules > 0) {
    plan.param_staging_buffers = static_cast<int>(std::clamp<std::uint64_t>(
        z.offload_param.buffer_count, 2, static_cast<std::uint64_t>(b.nvme_param_modules) + 1));
    add_line(plan, Tier::pinned, SC::buffers, "NVMe parameter read buffers (offload_param.buffer_count)",
             pinned_bytes(b.max_nvme_param_bytes) * static_cast<std::uint64_t>(plan.param_staging_buffers));
  }
  add_line(plan, Tier::pinned, SC::optimizer_states, "optimizer states: fp32 master, exp_avg, exp_avg_sq", b.opt_pin);
  add_line(plan, Tier::pinned, SC::gradients, accumulators_name(in), b.acc_pin + b.acc_host);
  if (b.max_offloaded_shard > 0) {
    add_line(plan, Tier::pinned, SC::buffers, "gradient D2H staging (2 buffers)",
             2 * pinned_bytes(b.max_offloaded_shard * ds));
  }
  if (b.opt_nvme > 0) {
    // Chunk offsets stay block-aligned in fp32 states and in 2-byte parameters alike.
    const std::size_t block_numel = in.nvme_block_bytes / 2;
    std::size_t chunk = std::min<std::size_t>(z.sub_group_size, plan.max_shard_numel);
    chunk = (chunk + block_numel - 1) / block_numel * block_numel;
    plan.optimizer_chunk_numel = chunk;
    plan.optimizer_swap_buffers = static_cast<int>(std::max<std::uint64_t>(3, z.offload_optimizer.buffer_count));
    add_line(plan, Tier::pinned, SC::buffers,
             "optimizer swap buffers (offload_optimizer.buffer_count x master, exp_avg, exp_avg_sq)",
             pinned_bytes(chunk * 4) * 3 * static_cast<std::uint64_t>(plan.optimizer_swap_buffers));
  }
  const bool host_param_out = in.optimizer && (b.max_offloaded_shard > 0 || b.nvme_param_modules > 0);
  if (host_param_out) {
    const std::size_t chunk = plan.optimizer_chunk_numel ? plan.optimizer_chunk_numel : plan.max_shard_numel;
    add_line(plan, Tier::pinned, SC::buffers, "updated parameter staging (2 buffers)", 2 * pinned_bytes(chunk * ds));
  }
}

// Pass 8 decides the NVMe lines: parameter shards and optimizer states.
void nvme_lines(const PlanInputs& in, const StateBytes& b, ZeroPlan& plan) {
  using SC = StateClass;
  add_line(plan, Tier::nvme, SC::parameters,
           in.quant.enabled() ? "parameter shards (" + shard_format(in) + ")" : "parameter shards", b.nvme_shards);
  add_line(plan, Tier::nvme, SC::optimizer_states, "optimizer states: fp32 master, exp_avg, exp_avg_sq", b.opt_nvme);
}

}  // namespace

ZeroPlan compute_plan(const config::Config& config, const PlanInputs& in) {
  const config::ZeroConfig& z = config.zero_optimization;
  STRATA_ASSERT(in.module_numels.size() == in.module_names.size() && !in.module_numels.empty(),
                "plan inputs: one name per module");
  ZeroPlan plan;
  plan.stage = z.stage;
  plan.shards = z.stage >= 1 ? in.world : 1;
  check_quantization(in);                                                // 1. refusals
  place_modules(config, in, plan);                                       // 2. each module's tiers
  const StateBytes bytes = sum_states(in, plan);                         // 3. sums per tier
  device_state_lines(in, bytes, plan);                                   // 4. device: states
  const std::uint64_t working = size_transient_regions(config, in, plan);  // 5. transient regions
  device_buffer_lines(in, bytes, working, plan);                         // 6. device: buffers, minimum
  pinned_lines(config, in, bytes, plan);                                 // 7. pinned host
  nvme_lines(in, bytes, plan);                                           // 8. NVMe
  return plan;
}

namespace {

struct TierFits {
  bool device, pinned, nvme;
};
TierFits tier_fits(const ZeroPlan& plan, const PlanInputs& in) {
  return {plan.needed(Tier::device) <= in.device_budget_bytes, plan.needed(Tier::pinned) <= in.pinned_budget_bytes,
          plan.needed(Tier::nvme) <= in.nvme_free_bytes || plan.needed(Tier::nvme) == 0};
}

}  // namespace

bool fits(const ZeroPlan& plan, const PlanInputs& in) {
  const TierFits f = tier_fits(plan, in);
  return f.device && f.pinned && f.nvme;
}

void check_fits(const ZeroPlan& plan, const PlanInputs& in) {
  const auto [device_fits, pinned_fits, nvme_fits] = tier_fits(plan, in);
  if (!device_fits || !pinned_fits || !nvme_fits) {
    std::string hint;
    if (!device_fits && in.optimizer)
      hint += "device: raise strata.device_memory (--device-memory), offload more (offload_optimizer.device "
              "cpu or nvme; at stage 3 offload_param.device cpu or nvme), or shrink the micro-batch "
              "(train_micro_batch_size_per_gpu, --seq-len) or use --activation-checkpointing. ";
    if (!device_fits && !in.optimizer)
      hint += "device: raise --device-memory, stream the parameters (zero_optimization.stage 3 with "
              "offload_param.device cpu or nvme), or lower " +
              (in.activation_flags.empty() ? std::string("--batch or --max-new-tokens (the KV cache)")
                                           : in.activation_flags) + ". ";
    if (!pinned_fits)
      hint += "pinned host: raise strata.pinned_memory, or offload to nvme instead of cpu. ";
    if (!pinned_fits && in.kv_cache_pinned_bytes > 0)
      hint += "The KV cache in pinned host memory: lower --batch or --max-new-tokens, or place it on the device "
              "(--kv-cache device). ";
    if (!nvme_fits) {
      std::string folders;
      for (const std::string& p : in.nvme_paths) folders += (folders.empty() ? "" : ", ") + p;
      hint += "nvme: free " +
              format_bytes(plan.needed(Tier::nvme) - std::min(plan.needed(Tier::nvme), in.nvme_free_bytes)) +
              " more in nvme_path (" + folders + ") or add folders on other drives. ";
    }
    throw Error("the model's states do not fit in this run's memory budgets:\n" + plan.table(in),
                "zero_optimization", hint);
  }
}

TransientPools transient_pools(const ZeroPlan& plan, std::uint64_t left) {
  TransientPools pools;
  const std::uint64_t need = plan.class_minimum_bytes[0] + plan.class_minimum_bytes[1];
  if (left < need) return pools;
  const std::uint64_t extra = left - need;
  const double total = static_cast<double>(plan.class_total_bytes[0] + plan.class_total_bytes[1]);
  for (int c = 0; c < 2; ++c) {
    std::uint64_t bytes = plan.class_minimum_bytes[c];
    if (total > 0 && plan.class_minimum_bytes[c] > 0) {
      const auto share = static_cast<std::uint64_t>(static_cast<double>(extra) *
                                                    (static_cast<double>(plan.class_total_bytes[c]) / total));
      bytes += std::min(share, plan.class_total_bytes[c]);
    }
    pools.bytes[c] = bytes / device::Arena::kAlignment * device::Arena::kAlignment;
  }
  return pools;
}

std::uint64_t device_bytes_beside_pools(const ZeroPlan& plan, const PlanInputs& in) {
  std::uint64_t held = in.activation_bytes + kDeviceScratchBytes + 4 * device::Arena::kAlignment;
  for (const PlanLine& l : plan.lines) {
    if (l.tier == Tier::device && (l.kind == StateClass::parameters || l.kind == StateClass::optimizer_states ||
                                   l.kind == StateClass::gradients)) {
      held += l.bytes;
    }
  }
  return held;
}

ZeroPlan make_plan(const config::Config& config, const PlanInputs& in) {
  ZeroPlan plan = compute_plan(config, in);
  check_fits(plan, in);
  return plan;
}

std::uint64_t inference_slot_bytes(const config::Config& config, const ZeroPlan& plan) {
  std::uint64_t largest = 0;
  for (const ModulePlan& mp : plan.modules) {
    if (!mp.resident) largest = std::max<std::uint64_t>(largest, mp.gathered_bytes);
  }
  const std::uint64_t k = std::max<std::uint64_t>(2, config.zero_optimization.offload_param.buffer_count);
  return k * (largest + device::Arena::kAlignment);
}

std::uint64_t dequant_buffer_bytes(const ZeroPlan& plan, DType dtype) {
  std::uint64_t largest = 0;
  for (const ModulePlan& mp : plan.modules) {
    if (mp.quantized) largest = std::max<std::uint64_t>(largest, mp.part.padded_numel * dtype_size(dtype));
  }
  return largest == 0 ? 0 : kDequantBuffers * (largest + device::Arena::kAlignment);
}

std::uint64_t inference_device_minimum_bytes(const config::Config& config, const PlanInputs& inputs) {
  STRATA_ASSERT(!inputs.optimizer, "inference_device_minimum_bytes: inputs.optimizer must be false");
  PlanInputs in = inputs;
  in.keep_resident.clear();
  return compute_plan(config, in).device_minimum_bytes;
}

ZeroPlan make_inference_plan(const config::Config& config, const PlanInputs& inputs) {
  STRATA_ASSERT(!inputs.optimizer, "make_inference_plan: inputs.optimizer must be false");
  PlanInputs in = inputs;
  in.keep_resident.assign(in.module_numels.size(), 0);
  ZeroPlan plan = compute_plan(config, in);
  // Greedy: the embedding, the head, then the blocks in forward order, while the device keeps
  // room for the streamed modules' K slots beside what is resident. Routed modules (a mixture's
  // experts) come last and all together: resident when every one of them fits, else none, and
  // the device memory left is the fetcher's expert cache (param_fetcher.h), which keeps the
  // experts the router actually picks rather than a fixed few.
  const std::size_t M = in.module_numels.size();
  auto try_resident = [&](const std::vector<std::size_t>& modules) {
    std::vector<char> before = in.keep_resident;
    for (std::size_t m : modules) in.keep_resident[m] = 1;
    ZeroPlan candidate = compute_plan(config, in);
    const bool all_resident = std::all_of(candidate.modules.begin(), candidate.modules.end(),
                                          [](const ModulePlan& mp) { return mp.resident; });
    const std::uint64_t slots = all_resident ? 0 : inference_slot_bytes(config, candidate);
    if (candidate.device_minimum_bytes + slots <= in.device_budget_bytes) {
      plan = std::move(candidate);
    } else {
      in.keep_resident = std::move(before);
    }
  };
  std::vector<std::size_t> order;
  order.push_back(0);
  if (M > 1) order.push_back(M - 1);
  std::vector<std::size_t> routed;
  for (std::size_t m = 1; m + 1 < M; ++m) (in.routed(static_cast<int>(m)) ? routed : order).push_back(m);
  for (std::size_t m : order) {
    if (!plan.modules[m].resident) try_resident({m});
  }
  if (!routed.empty()) try_resident(routed);
  check_fits(plan, in);
  return plan;
}

}  // namespace strata::runtime::tiers
