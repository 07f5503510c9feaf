#pragma once
// The plan made at start: where every model state of this rank lives, and whether it fits.
// This file is the one reader of the config's placement keys (zero_optimization.stage,
// offload_param.*, offload_optimizer.*, stage3_param_persistence_threshold); the tier store
// (tier_store.h) allocates what it decides.
//
// From the module sizes, the ZeRO stage, the tiers the config names, the model's activation
// bytes for the micro-batch and the budgets (device arena, pinned host pool, free NVMe space),
// the plan decides:
//  - which modules are resident on the device (stage 0-2: all; stage 3: those at or under
//    stage3_param_persistence_threshold, and every module when parameters are not offloaded and
//    there is one rank) and where each other parameter shard lives (device, pinned, nvme);
//  - where each module's optimizer states (fp32 master, exp_avg, exp_avg_sq, and the fp32
//    gradient accumulator) live: offload_optimizer.device, with offload_optimizer.ratio of the
//    elements (whole modules, from the first) offloaded and the rest on the device;
//  - the staging buffers (NVMe parameter reads, gradient D2H, optimizer swap sub-groups);
//  - the bytes each tier needs, the minimum (one module computing at a time) and the working
//    set that lets fetches run ahead.
// make_plan throws strata::Error with a per-tier table (needed vs available) and what to change
// when the minimum does not fit.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "runtime/config/config.h"
#include "runtime/tiers/partition.h"
#include "runtime/tiers/tier.h"

namespace strata::runtime::tiers {

// Device memory left outside the engine's regions for small scratch buffers (loss and norm
// all-reduces, gathering masters for --save).
inline constexpr std::uint64_t kDeviceScratchBytes = std::uint64_t{1} << 20;

// Inference only: the storage format of the streamed modules' parameter shards
// (kernels/host/quantize.h: group-wise symmetric INT8 / INT4 with bf16 scales). Resident modules
// keep the compute dtype. bits 0 = unquantized.
struct WeightQuant {
  int bits = 0;      // 8 or 4; 0 = off
  int group = 128;   // 64 or 128
  bool enabled() const { return bits != 0; }
  std::string describe() const;  // "int8, group 128, bf16 scales"
};

struct PlanInputs {
  std::vector<std::size_t> module_numels;
  std::vector<std::string> module_names;
  // routed_modules[m]: module m is acquired only when the model's router picks it (a mixture's
  // expert), not in every pass; the fetcher keeps it off the prefetch trace (fetched on demand
  // or on a hint) so that a pass moves only the experts it uses. Empty: none.
  std::vector<char> routed_modules;
  bool routed(int m) const {
    return static_cast<std::size_t>(m) < routed_modules.size() && routed_modules[static_cast<std::size_t>(m)] != 0;
  }
  int world = 1;
  DType dtype = DType::f32;
  DType grad_dtype = DType::f32;       // the gradient accumulators' (data_types.grad_accum_dtype)
  std::uint64_t activation_bytes = 0;  // the model's reserve() for the micro-batch
  // Inference: a KV cache in pinned host memory (models/kv_cache.h), taken from the pinned pool;
  // its device slots are in activation_bytes.
  std::uint64_t kv_cache_pinned_bytes = 0;
  // Inference: the flags that shrink activation_bytes, named when the device does not fit
  // (empty: generation's "--batch or --max-new-tokens (the KV cache)").
  std::string activation_flags;
  std::uint64_t device_budget_bytes = 0;
  std::uint64_t pinned_budget_bytes = 0;
  std::uint64_t nvme_free_bytes = 0;   // over the nvme_path folders' file systems (each once)
  std::vector<std::string> nvme_paths; // named in the error when NVMe does not fit
  std::size_t nvme_block_bytes = offload::kDefaultBlockBytes;  // aio.block_size
  // Inference (make_inference_plan): no optimizer states, no gradients; `keep_resident[m]` keeps
  // module m's full parameters on the device whatever the config offloads (empty: none).
  bool optimizer = true;
  std::vector<char> keep_resident;
  WeightQuant quant;  // inference only
};

struct ModulePlan {
  ModulePartition part;
  bool resident = false;        // full parameters kept on the device for the whole run
  Tier param_tier = Tier::device;  // of the shard, when not resident
  Tier optimizer_tier = Tier::device;
  // Transient device buffers (gathered parameters, gradient buffers) come from one of two
  // regions: 0 for modules over half the size of the largest, 1 for the others. Buffers of one
  // region have similar sizes, so a small buffer held long (the tied embedding's gradient in a
  // model with a small vocabulary) never splits the space the large ones need.
  int size_class = 0;
  // The parameter state's bytes: this rank's shard (shard_numel elements of the compute dtype,
  // or, quantized, its packed values and scales), and what a fetch gathers on the device
  // (padded_numel elements, or the quantized bytes: quantization needs one shard).
  bool quantized = false;       // a streamed module of an inference plan with quant enabled
  std::uint64_t shard_bytes = 0;
  std::uint64_t gathered_bytes = 0;
};

struct PlanLine {
  Tier tier = Tier::device;
  StateClass kind = StateClass::buffers;
  std::string what;
  std::uint64_t bytes = 0;
  bool headroom = false;  // kept free for short-lived buffers, not allocated up front
};

struct ZeroPlan {
  int stage = 0;
  int shards = 1;  // ranks the states are split between (1 at stage 0)
  std::vector<ModulePlan> modules;
  std::size_t optimizer_chunk_numel = 0;  // NVMe optimizer swap: elements per sub-group read
  int optimizer_swap_buffers = 0;         // sets of (master, exp_avg, exp_avg_sq) pinned buffers
  int param_staging_buffers = 0;          // pinned buffers for NVMe parameter reads
  std::size_t max_shard_numel = 0;
  std::vector<PlanLine> lines;            // every allocation the plan counts (the device's
                                          // transient buffers at their minimum)
  std::uint64_t device_minimum_bytes = 0; // resident + activations + the smallest working set
  std::uint64_t class_minimum_bytes[2] = {0, 0};  // per size class: the smallest region that works
  std::uint64_t class_total_bytes[2] = {0, 0};    // per size class: parameters + gradients
  std::uint64_t needed(Tier tier) const;  // sum of lines (device: the minimum)
  // "tier | needed | available" table with the lines.
  std::string table(const PlanInputs& inputs) const;
};

ZeroPlan make_plan(const config::Config& config, const PlanInputs& inputs);

// The plan without the check that it fits the budgets (strata estimate shows every cell, also
// those that do not fit). Throws for configs that cannot work at any budget.
ZeroPlan compute_plan(const config::Config& config, const PlanInputs& inputs);
// Throws strata::Error with plan.table() and what to change when the plan does not fit the
// budgets of `inputs`.
void check_fits(const ZeroPlan& plan, const PlanInputs& inputs);
// Whether each tier's need fits its budget (no throw).
bool fits(const ZeroPlan& plan, const PlanInputs& inputs);

// The two regions of transient device buffers (gathered parameters, gradient buffers, reduce
// buckets) the parameter fetcher carves from the device (ParamFetcher::make_pools), given the
// bytes the device has left once everything else is allocated: each class's minimum, plus the
// rest in proportion to the classes' sizes, but never more than a class can use at once (every
// module's buffers together, class_total_bytes, beside its minimum). Both 0 when `left` is below
// the minimums (the fetcher then refuses to start).
struct TransientPools {
  std::uint64_t bytes[2] = {0, 0};
  std::uint64_t total() const { return bytes[0] + bytes[1]; }
};
TransientPools transient_pools(const ZeroPlan& plan, std::uint64_t left);
// The device bytes allocated before the fetcher's pools (resident parameters, device shards and
// optimizer states) that ParamFetcher::make_pools finds in the arena, plus what it holds back for
// the activations and scratch: the device's `left` is the budget minus this.
std::uint64_t device_bytes_beside_pools(const ZeroPlan& plan, const PlanInputs& inputs);

// The plan of an inference run (inputs.optimizer false): parameters only. Streamed modules
// (offload_param.device cpu or nvme, at any stage) are fetched ahead through up to K =
// offload_param.buffer_count device slots of the largest streamed module; what fits the device
// budget beside those slots stays resident, greedily: the embedding, the head, then the blocks in
// forward order (each resident module is one fetch less per forward pass). Throws like make_plan
// when even the minimum does not fit. With inputs.quant, every streamed module is quantized
// (ModulePlan::quantized; its shard_bytes / gathered_bytes are the packed values and scales), and
// the device also holds kDequantBuffers buffers to dequantize into; several ranks are refused.
ZeroPlan make_inference_plan(const config::Config& config, const PlanInputs& inputs);

// The least device memory an inference run needs (inputs.optimizer false): what the config keeps
// on the device, inputs.activation_bytes and one streamed module at a time, with nothing kept
// resident by choice. Budgets are not checked. strata infer places the KV cache on the device when
// it fits this way (infer/server.cpp), else in pinned host memory.
std::uint64_t inference_device_minimum_bytes(const config::Config& config, const PlanInputs& inputs);

// Device bytes the streamed modules' K slots take in `plan` (K x the largest streamed module's
// gathered bytes: quantized when the plan quantizes).
std::uint64_t inference_slot_bytes(const config::Config& config, const ZeroPlan& plan);
// Quantized plans: the device buffers the streamed modules are dequantized into before the model
// reads them (kDequantBuffers of the largest streamed module in the compute dtype); 0 otherwise.
inline constexpr int kDequantBuffers = 2;
std::uint64_t dequant_buffer_bytes(const ZeroPlan& plan, DType dtype);

// The NVMe folders the plan's states may use: offload_param's then
// offload_optimizer's, each once, in order; empty when neither section offloads to NVMe.
std::vector<std::string> nvme_paths(const config::Config& config);

}  // namespace strata::runtime::tiers
