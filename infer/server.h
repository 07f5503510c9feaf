#pragma once
// A model ready to generate: the device, the inference engine with its plan, the weights loaded
// into their tiers, and the model over them. `strata infer` (infer_run.h) makes one;
// `strata bench infer` makes one per cell.
#include <cstdint>
#include <memory>
#include <string>

#include "core/dtype.h"
#include "infer/generator.h"
#include "models/model.h"
#include "models/model_spec.h"
#include "runtime/comm/comm.h"
#include "runtime/config/config.h"
#include "runtime/device/device.h"
#include "runtime/tiers/plan.h"
#include "runtime/trace/trace.h"
#include "runtime/zero/inference_engine.h"

namespace strata::infer {

struct ServerSetup {
  models::ModelSpecPtr spec;
  runtime::config::Config config;                 // resolved
  runtime::device::DeviceOptions device;          // tracer filled by the server
  std::string dtype = "auto";                     // auto | fp32 | bf16 | fp16
  int batch = 1;                                  // 0 = as many prompts as a quarter of the device holds
  // Where the KV cache lives: "device", "host" (pinned host memory, from the engine's pinned
  // pool, streamed per layer through 2 device slots: models/kv_cache.h) or "auto": the device when
  // the cache and the decoding scratch fit beside the smallest parameter working set
  // (tiers::inference_device_minimum_bytes), else pinned host.
  std::string kv_cache = "auto";
  std::size_t prompts = 1;                        // for batch 0: no more rows than prompts
  int prompt_T = 1;                               // the longest prompt
  int max_T = 1;                                  // positions in all (prompt + new tokens)
  std::string weights;                            // a model folder or safetensors; "" = init from seed
  std::uint64_t seed = 0;
  std::string trace_path;
  runtime::tiers::WeightQuant quant;              // streamed modules' storage (--quantize)
  // A mixture's expert cache on the device (runtime/zero/param_fetcher.h), in MiB: -1 (auto) the
  // transient device memory, evicted as needed; 0 none (--moe-expert-cache-mb).
  std::int64_t expert_cache_mb = -1;
  bool moe_lookahead = false;  // models::ModelOptions::moe_lookahead (--moe-prefetch on|off)
  bool moe_fetch_every_expert = false;  // models::ModelOptions::moe_fetch_every_expert (--moe-fetch all)
  // --moe-cpu-experts: off, on (every expert kept in pinned memory runs on the host where it lives)
  // or auto (those with few enough rows: every count on the host backend, the machine profile's
  // on cuda: runtime/estimate/cpu_experts.h); models::ModelOptions::moe_cpu_expert_rows.
  std::string moe_cpu_experts = "off";
  std::string profile_path;  // --profile: the machine profile auto reads (strata bench machine)
  int perplexity_window = 0;                      // > 0: sized for training-style forwards of this length
};

class Server {
 public:
  // Prints the plan (and the model) on stderr when `verbose`. Throws strata::Error for what does
  // not fit or cannot be read.
  Server(ServerSetup setup, bool verbose);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  const models::ModelSpec& spec() const { return *setup_.spec; }
  models::Model& model() { return *model_; }
  runtime::zero::InferenceEngine& engine() { return *engine_; }
  runtime::device::Device& device() { return *device_; }
  runtime::device::Stream& compute() { return *compute_; }
  DType dtype() const { return dtype_; }
  int batch() const { return batch_; }
  int max_T() const { return setup_.max_T; }
  // The options to make the KV cache with (Model::make_kv_cache): where the plan put it.
  models::KvCacheOptions kv_cache_options();
  // begin_pass / end_pass of the engine, for a Generator.
  PassHooks hooks();
  // The trace's last spans, then the file (when a path was given).
  void flush_trace();

 private:
  ServerSetup setup_;
  DType dtype_ = DType::f32;
  int batch_ = 1;
  models::KvPlacement kv_placement_ = models::KvPlacement::device;
  std::unique_ptr<runtime::trace::Tracer> tracer_;
  std::unique_ptr<runtime::device::Device> device_;
  std::unique_ptr<runtime::comm::Communicator> comm_;
  std::unique_ptr<runtime::device::Stream> compute_;
  std::unique_ptr<runtime::zero::InferenceEngine> engine_;
  std::unique_ptr<models::Model> model_;
};

// --quantize ("", none, int8, int4) and --quantize-group (64, 128) as the streamed modules'
// storage. Throws strata::Error naming the flag for any other value.
runtime::tiers::WeightQuant weight_quant(const std::string& quantize, int group);

// The config of an inference run: the file's (when given) with a batch size filled in for the
// resolver (the training keys mean nothing here), resolved for the model's width.
runtime::config::Config inference_config(const std::string& path, const models::ModelSpec& spec);

}  // namespace strata::infer
