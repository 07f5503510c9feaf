// A model ready to generate (server.h).
#include "infer/server.h"

#include <algorithm>
#include <cstdio>
#include <limits>
#include <vector>

#include <fmt/format.h>

#include "core/error.h"
#include "core/log.h"
#include "core/units.h"
#include "models/hf_weights.h"
#include "offload/aio_engine.h"
#include "offload/host_buffer.h"
#include "runtime/estimate/cpu_experts.h"
#include "runtime/tiers/plan.h"

namespace strata::infer {
namespace {

DType choose_dtype(const std::string& dtype, const runtime::config::Config& config, runtime::device::Backend backend) {
  if (dtype == "fp32") return DType::f32;
  if (dtype == "bf16") return DType::bf16;
  if (dtype == "fp16") return DType::f16;
  if (dtype != "auto") throw Error("--dtype " + dtype + " is not one of auto, fp32, bf16, fp16", "--dtype");
  if (config.bf16.enabled.value_or(false)) return DType::bf16;
  if (config.fp16.enabled.value_or(false)) return DType::f16;
  return backend == runtime::device::Backend::cuda ? DType::bf16 : DType::f32;
}

// As many prompts as take a quarter of the device budget in KV cache and scratch (the rest is for
// the resident modules and the streaming slots), at most 256 and at most the prompts.
int auto_batch(const models::ModelSpec& spec, const models::ModelOptions& options, std::size_t prompts, int prompt_T,
               int max_T, std::uint64_t device_budget) {
  const int most = static_cast<int>(std::clamp<std::size_t>(prompts, 1, 256));
  int batch = 1;
  while (batch < most && spec.inference_bytes(options, std::min(most, batch * 2), prompt_T, max_T) <= device_budget / 4) {
    batch = std::min(most, batch * 2);
  }
  return batch;
}

// --kv-cache: auto places the cache on the device when it fits there beside the least the
// parameters need (every module the config keeps on the device, else one streamed module at a
// time), else in pinned host memory.
models::KvPlacement choose_kv_placement(const std::string& kv_cache, const runtime::config::Config& config,
                                        const runtime::zero::EngineSetup& setup, const models::ModelSpec& spec,
                                        const models::ModelOptions& options, int batch, int prompt_T, int max_T,
                                        const runtime::device::Device& device) {
  if (kv_cache == "device") return models::KvPlacement::device;
  if (kv_cache == "host") return models::KvPlacement::host;
  if (kv_cache != "auto") throw Error("--kv-cache " + kv_cache + " is not one of auto, device, host", "--kv-cache");
  runtime::tiers::PlanInputs in;
  in.module_numels = setup.module_numels;
  in.module_names = setup.module_names;
  in.dtype = setup.dtype;
  in.optimizer = false;
  in.quant = setup.quant;
  in.activation_bytes = spec.inference_bytes(options, batch, prompt_T, max_T, models::KvPlacement::device);
  const runtime::device::ArenaStats arena = device.memory_stats();
  const std::uint64_t budget = arena.budget_bytes - arena.current_bytes;
  return runtime::tiers::inference_device_minimum_bytes(config, in) <= budget ? models::KvPlacement::device
                                                                               : models::KvPlacement::host;
}

}  // namespace

runtime::tiers::WeightQuant weight_quant(const std::string& quantize, int group) {
  runtime::tiers::WeightQuant q;
  if (quantize.empty() || quantize == "none") return q;
  if (quantize == "int8") {
    q.bits = 8;
  } else if (quantize == "int4") {
    q.bits = 4;
  } else {
    throw Error("--quantize " + quantize + " is not one of int8, int4", "--quantize");
  }
  if (group != 64 && group != 128) {
    throw Error("--quantize-group " + std::to_string(group) + " is not 64 or 128", "--quantize-group");
  }
  q.group = group;
  return q;
}

namespace {

// ModelOptions::moe_cpu_expert_rows from --moe-cpu-experts (ServerSetup::moe_cpu_experts).
// auto on the host backend is every row count: its device path copies the weight from host memory
// and then reads it there again, so reading it in place always saves the copy.
std::int64_t host_expert_rows(const std::string& mode, const std::string& profile_path, const models::ModelSpec& spec,
                              DType dtype, runtime::device::Backend backend) {
  constexpr std::int64_t kEvery = std::numeric_limits<std::int64_t>::max();
  if (mode != "off" && mode != "on" && mode != "auto") {
    throw Error("--moe-cpu-experts " + mode + " is not off, on or auto", "--moe-cpu-experts");
  }
  if (mode == "off" || !spec.expert_routing().moe()) return 0;
  if (mode == "on" || backend == runtime::device::Backend::host) return kEvery;
  if (profile_path.empty()) {
    throw Error("--moe-cpu-experts auto on a GPU decides by the machine's measured rates, and no --profile was given",
                "--profile",
                "run `strata bench machine --out machine.json` once on this machine and pass --profile "
                "machine.json, or give --moe-cpu-experts on or off");
  }
  const runtime::estimate::MachineProfile profile = runtime::estimate::read_machine_profile(profile_path);
  if (profile.backend != "cuda") {
    throw Error("the machine profile was measured on the " + profile.backend + " backend, and this run is on cuda",
                profile_path, "measure this machine's GPU: `strata bench machine --device cuda --out machine.json`");
  }
  if (profile.dtype != dtype_name(dtype)) {
    log::warn("{}: measured in {}, this run computes in {}: --moe-cpu-experts auto decides by those rates", profile_path,
              profile.dtype, dtype_name(dtype));
  }
  const models::ModelLayout layout = spec.layout();
  for (const models::ModuleLayout& m : layout.modules) {
    if (m.kind != models::ModuleKind::expert) continue;
    return runtime::estimate::cpu_expert_max_rows(profile, m.numel, spec.hidden_size(), dtype_size(dtype));
  }
  return 0;
}

}  // namespace

runtime::config::Config inference_config(const std::string& path, const models::ModelSpec& spec) {
  runtime::config::Config config;
  if (!path.empty()) config = runtime::config::load_config_file(path).config;
  if (!config.train_batch_size && !config.train_micro_batch_size_per_gpu) config.train_micro_batch_size_per_gpu = 1;
  runtime::config::ResolveInputs inputs;
  inputs.hidden_size = static_cast<std::uint64_t>(spec.hidden_size());
  return runtime::config::resolve_config(config, inputs);
}

Server::Server(ServerSetup setup, bool verbose) : setup_(std::move(setup)) {
  const models::ModelSpec& spec = *setup_.spec;
  if (setup_.batch < 0) throw Error("--batch must be positive", "--batch");
  tracer_ = std::make_unique<runtime::trace::Tracer>(setup_.trace_path, "strata infer", /*account_busy=*/true);
  setup_.device.tracer = tracer_.get();
  device_ = runtime::device::Device::create(setup_.device);
  comm_ = runtime::comm::create_communicator(*device_);
  if (setup_.moe_lookahead && comm_->world() > 1) {
    // Each rank would guess from its own tokens and fetch different experts ahead: the ranks'
    // fetches must be the same ones (Note [Experts on every rank] in runtime/zero/expert_union.h).
    throw Error(fmt::format("--moe-prefetch on guesses the next layer's experts from each rank's own tokens, and "
                            "{} ranks must fetch the same experts",
                            comm_->world()),
                "--moe-prefetch", "leave it off (the default) with several ranks");
  }
  compute_ = device_->create_stream("compute");

  models::ModelOptions options;
  dtype_ = choose_dtype(setup_.dtype, setup_.config, device_->backend());
  options.dtype = dtype_;
  options.vocab_multiple = models::vocab_multiple_for(device_->backend());
  options.moe_lookahead = setup_.moe_lookahead;
  options.moe_fetch_every_expert = setup_.moe_fetch_every_expert;
  options.moe_cpu_expert_rows =
      host_expert_rows(setup_.moe_cpu_experts, setup_.profile_path, spec, dtype_, device_->backend());
  batch_ = setup_.batch > 0 ? setup_.batch
                            : auto_batch(spec, options, setup_.prompts, setup_.prompt_T, setup_.max_T,
                                         device_->memory_stats().budget_bytes);

  const models::ModelLayout layout = spec.layout();
  runtime::zero::EngineSetup engine_setup;
  engine_setup.module_numels = layout.module_numels();
  engine_setup.module_names = layout.module_names();
  engine_setup.routed_modules = layout.routed_modules();
  if (setup_.expert_cache_mb >= 0) {
    engine_setup.expert_cache_bytes = static_cast<std::uint64_t>(setup_.expert_cache_mb) * kMiB;
  }
  engine_setup.dtype = dtype_;
  engine_setup.quant = setup_.quant;
  if (setup_.perplexity_window > 0) {  // training-style forwards: no KV cache
    kv_placement_ = models::KvPlacement::device;
    engine_setup.activation_bytes = spec.activation_bytes(options, 1, setup_.perplexity_window);
    engine_setup.activation_flags = "--perplexity-window (the tokens of one forward)";
  } else {
    kv_placement_ = choose_kv_placement(setup_.kv_cache, setup_.config, engine_setup, spec, options, batch_,
                                        setup_.prompt_T, setup_.max_T, *device_);
    engine_setup.activation_bytes =
        spec.inference_bytes(options, batch_, setup_.prompt_T, setup_.max_T, kv_placement_);
    engine_setup.kv_cache_pinned_bytes =
        models::KvCache::host_bytes(spec.kv_shape(), dtype_, batch_, setup_.max_T, kv_placement_);
  }
  engine_ = std::make_unique<runtime::zero::InferenceEngine>(setup_.config, engine_setup, *device_, *compute_, *comm_,
                                                             *tracer_);
  // The disk's read track (NVMe-streamed weights): the time reads were in flight, as strata
  // train's. The tracer is declared before the engine, so it outlives the engine's I/O threads.
  engine_->tiers().io().set_activity_hook([tracer = tracer_.get()](offload::IoOp op, std::int64_t start_ns,
                                                                    std::int64_t end_ns, std::uint64_t bytes) {
    if (op == offload::IoOp::kRead) tracer->record("read", runtime::trace::kNvmeReadTrack, start_ns, end_ns, bytes);
  });
  if (verbose) {
    std::fprintf(stderr, "model: %s; %s%s, batch %d, %d positions, device %s\n", spec.describe().c_str(),
                 std::string(dtype_name(dtype_)).c_str(),
                 setup_.quant.enabled() ? (", streamed weights " + setup_.quant.describe()).c_str() : "", batch_,
                 setup_.max_T, device_->name().c_str());
    if (engine_->resident_modules() == engine_->module_count()) {
      std::fprintf(stderr, "plan: every module resident on the device\n");
    } else {
      std::fprintf(stderr, "plan: %d of %d modules resident on the device, the others streamed through %s of slots\n",
                   engine_->resident_modules(), engine_->module_count(), format_bytes(engine_->slot_bytes()).c_str());
    }
    const models::KvShape kv = spec.kv_shape();
    if (kv_placement_ == models::KvPlacement::device) {
      std::fprintf(stderr, "KV cache: device, %s\n",
                   format_bytes(models::KvCache::bytes(kv, dtype_, batch_, setup_.max_T)).c_str());
    } else {
      std::fprintf(stderr, "KV cache: pinned host, %s, streamed per layer through 2 device slots of %s\n",
                   format_bytes(models::KvCache::host_bytes(kv, dtype_, batch_, setup_.max_T, kv_placement_)).c_str(),
                   format_bytes(models::KvCache::device_bytes(kv, dtype_, batch_, setup_.max_T, kv_placement_) / 2)
                       .c_str());
    }
    if (options.moe_cpu_expert_rows > 0) {
      std::fprintf(stderr, "experts the engine keeps in pinned memory, unquantized, run on the host with %s "
                           "(--moe-cpu-experts %s)\n",
                   options.moe_cpu_expert_rows == std::numeric_limits<std::int64_t>::max()
                       ? "any number of rows"
                       : fmt::format("at most {} row(s)", options.moe_cpu_expert_rows).c_str(),
                   setup_.moe_cpu_experts.c_str());
    }
    std::fprintf(stderr, "%s", engine_->plan().table(engine_->plan_inputs()).c_str());
  }

  // The weights, module by module (one module's fp32 values in memory at a time).
  std::unique_ptr<models::HfWeightsReader> reader;
  if (!setup_.weights.empty()) reader = std::make_unique<models::HfWeightsReader>(setup_.weights, spec);
  std::size_t most = 0;
  for (const models::ModuleLayout& m : layout.modules) most = std::max(most, m.numel);
  const offload::HostBuffer buffer = offload::HostBuffer::allocate(most * sizeof(float), "weights being loaded");
  auto* values = reinterpret_cast<float*>(buffer.data());
  for (std::size_t m = 0; m < layout.modules.size(); ++m) {
    if (reader) {
      reader->read_module(static_cast<int>(m), values);
    } else {
      spec.init_module(layout.modules[m], setup_.seed, values);
    }
    engine_->load_module(static_cast<int>(m), values);
  }
  model_ = spec.make_model(options, *device_, *compute_, *engine_);
}

Server::~Server() = default;

models::KvCacheOptions Server::kv_cache_options() {
  return {kv_placement_, kv_placement_ == models::KvPlacement::host ? &engine_->tiers().pinned() : nullptr};
}

PassHooks Server::hooks() {
  return PassHooks{[this] { engine_->begin_pass(); }, [this] { engine_->end_pass(); }};
}

void Server::flush_trace() {
  device_->flush_trace();
  tracer_->flush();
}

}  // namespace strata::infer
