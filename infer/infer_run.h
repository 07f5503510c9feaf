#pragma once
// One `strata infer` run: a model (a Hugging Face folder, a config.json or a preset) served from
// its tiers — what fits the device stays there, the rest is streamed layer by layer from pinned
// host memory or NVMe (runtime/zero/inference_engine.h) — generating for a batch of prompts.
// tools/cmd_infer.cpp fills InferOptions from its flags.
#include <cstdint>
#include <optional>
#include <string>

#include "infer/sampler.h"

namespace strata::infer {

struct InferOptions {
  std::string model_path;      // --model DIR (weights and tokenizer when present) or config.json
  std::string preset;          // --preset NAME (random weights from --seed)
  std::string config_path;     // --config ds.json (optional): offload_param, aio, strata.*, bf16
  std::string device_kind;     // --device; "" = strata.device
  std::optional<std::uint64_t> device_memory_bytes;  // --device-memory
  std::string prompt;          // --prompt TEXT (one prompt; needs a tokenizer)
  std::string prompts_path;    // --prompts FILE.jsonl
  std::string output_path;     // --output out.jsonl; "" = stdout
  int max_new_tokens = 128;    // --max-new-tokens
  int batch = 0;               // --batch; 0 = chosen from the device memory (see infer_run.cpp)
  SamplingOptions sampling;    // --temperature --top-k --top-p --seed
  std::string dtype = "auto";  // --dtype auto|fp32|bf16|fp16 (auto: the config's, else bf16 on cuda, fp32 on host)
  std::string kv_cache = "auto";  // --kv-cache auto|device|host (infer/server.h)
  std::string quantize;        // --quantize int8|int4: streamed modules' weights (resident ones stay in dtype)
  int quantize_group = 128;    // --quantize-group 64|128
  std::int64_t moe_expert_cache_mb = -1;  // --moe-expert-cache-mb (infer/server.h; -1 auto)
  std::string moe_prefetch = "off";       // --moe-prefetch on|off (infer/server.h)
  std::string moe_fetch = "routed";       // --moe-fetch routed|all (infer/server.h)
  std::string moe_cpu_experts = "off";    // --moe-cpu-experts off|on|auto (infer/server.h)
  std::string profile_path;               // --profile machine.json (for --moe-cpu-experts auto)
  std::string perplexity_path; // --perplexity FILE: report the text's perplexity instead of generating
  int perplexity_window = 0;   // --perplexity-window; 0 = min(256, the model's longest sequence)
  std::string trace_path;      // --trace t.json
  bool progress = true;        // a progress line on stderr when it is a terminal
};

// Returns 0; throws strata::Error for bad input (model, config, prompts, budgets).
int run_inference(const InferOptions& options);

}  // namespace strata::infer
