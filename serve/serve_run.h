#pragma once
// One `strata serve` run: listen (answering /health "loading"), load the model as `strata infer`
// does (infer/server.h: the plan, the tiers, the weights), start the continuous batcher
// (serve/batcher.h), serve until SIGTERM or SIGINT, then drain: refuse new requests, let the
// running ones finish up to --drain-timeout, exit 0. tools/cmd_serve.cpp fills ServeOptions.
#include <cstdint>
#include <optional>
#include <string>

#include "serve/http_server.h"

namespace strata::serve {

struct ServeOptions {
  std::string model_path;         // --model DIR (weights, tokenizer, chat template) or config.json
  std::string preset;             // --preset NAME (random weights from --seed; for tests)
  std::string config_path;        // --config ds.json
  std::string device_kind;        // --device
  std::optional<std::uint64_t> device_memory_bytes;  // --device-memory
  std::string dtype = "auto";     // --dtype
  std::string kv_cache = "auto";  // --kv-cache auto|device|host
  std::string quantize;           // --quantize int8|int4
  int quantize_group = 128;       // --quantize-group
  std::int64_t moe_expert_cache_mb = -1;  // --moe-expert-cache-mb (-1 auto)
  std::string moe_prefetch = "off";       // --moe-prefetch on|off (infer/server.h)
  std::string moe_fetch = "routed";       // --moe-fetch routed|all (infer/server.h)
  std::string moe_cpu_experts = "off";    // --moe-cpu-experts off|on|auto (infer/server.h)
  std::string profile_path;               // --profile machine.json (for --moe-cpu-experts auto)
  std::string chat_template_path; // --chat-template FILE (a Jinja file): instead of the folder's
  std::string served_name;        // --served-model-name; "" = the folder's name (or the preset's)
  int max_batch = 8;              // --max-batch: requests decoded together
  int max_queue = 64;             // --max-queue: waiting requests before 429
  int context = 0;                // --ctx: positions per request; 0 = min(the model's longest, 4096)
  int prefill_chunk = 512;        // --prefill-chunk: prompt tokens per prefill pass
  double drain_seconds = 30;      // --drain-timeout
  std::uint64_t seed = 0;         // --seed: random weights of a preset
  HttpOptions http;               // --host --port --api-key --max-body --max-connections ...
};

// Returns 0 after a drain; throws strata::Error for bad input (model, flags, a taken port).
int run_serve(const ServeOptions& options);

}  // namespace strata::serve
