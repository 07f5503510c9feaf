// strata serve: its flags into a serve::ServeOptions (serve/serve_run.h), then serve::run_serve.
#include <memory>
#include <optional>
#include <string>

#include "core/error.h"
#include "core/units.h"
#include "serve/serve_run.h"
#include "tools/commands.h"
#include "tools/device_flags.h"
#include "tools/moe_flags.h"

namespace strata::tools {

void add_serve_command(CLI::App& app) {
  auto o = std::make_shared<serve::ServeOptions>();
  auto device = std::make_shared<DeviceFlags>();
  auto max_body = std::make_shared<std::string>("4MiB");
  CLI::App* cmd = app.add_subcommand(
      "serve", "serve a model over HTTP with the OpenAI API (/v1/completions, /v1/chat/completions, streamed or "
               "not), batching concurrent requests continuously; layers that do not fit the device are streamed as "
               "in strata infer");
  add_device_flags(*cmd, *device);
  cmd->add_option("--model", o->model_path,
                  "a Hugging Face model folder (config.json, weights, tokenizer, chat template) or a config.json");
  cmd->add_option("--preset", o->preset, "a built-in model with random weights from --seed (for tests)");
  cmd->add_option("--seed", o->seed, "seed of a preset's random weights");
  cmd->add_option("--host", o->http.host, "address to listen on (default 127.0.0.1: this machine only)");
  cmd->add_option("--port", o->http.port, "TCP port (default 8000; 0 = any free port, printed at start)");
  cmd->add_option("--api-key", o->http.api_key,
                  "require 'Authorization: Bearer KEY' on every request but /health (default: none)");
  cmd->add_option("--served-model-name", o->served_name, "the model's name in /v1/models and replies (default: the folder's)");
  cmd->add_option("--max-batch", o->max_batch, "requests decoded together: the KV cache's rows (default 8)");
  cmd->add_option("--max-queue", o->max_queue, "requests waiting for a free row before new ones get 429 (default 64)");
  cmd->add_option("--ctx", o->context, "positions per request, prompt and completion (default min(model's longest, 4096))");
  cmd->add_option("--prefill-chunk", o->prefill_chunk,
                  "prompt tokens per prefill pass: the longest the running requests wait for a new one (default 512)");
  cmd->add_option("--max-prompt-tokens", o->http.max_prompt_tokens, "longest prompt accepted (default: --ctx less one)");
  cmd->add_option("--max-tokens", o->http.max_tokens, "largest max_tokens a request may ask for (default: --ctx)");
  cmd->add_option("--max-body", *max_body, "largest request body (default 4MiB; larger ones get 413)");
  cmd->add_option("--max-connections", o->http.max_connections, "connections served at once (default 64)");
  cmd->add_option("--drain-timeout", o->drain_seconds,
                  "seconds running requests have to finish after SIGTERM before they are cancelled (default 30)");
  cmd->add_option("--chat-template", o->chat_template_path,
                  "a Jinja chat template file to use instead of tokenizer_config.json's chat_template");
  cmd->add_option("--dtype", o->dtype, "auto (the config's bf16/fp16, else bf16 on cuda, fp32 on host), fp32, bf16, fp16")
      ->check(CLI::IsMember({"auto", "fp32", "bf16", "fp16"}));
  cmd->add_option("--kv-cache", o->kv_cache, "where the KV cache lives: auto (default), device, host (pinned host memory)")
      ->check(CLI::IsMember({"auto", "device", "host"}));
  cmd->add_option("--quantize", o->quantize, "int8 or int4: the streamed modules' weights group-wise quantized")
      ->check(CLI::IsMember({"none", "int8", "int4"}));
  cmd->add_option("--quantize-group", o->quantize_group, "elements per quantization scale: 64 or 128 (default)")
      ->check(CLI::IsMember({64, 128}));
  add_moe_flags(*cmd, o->moe_expert_cache_mb, o->moe_prefetch, o->moe_fetch, o->moe_cpu_experts, o->profile_path);
  cmd->callback([o, device, max_body] {
    o->config_path = device->config_path;
    o->device_kind = device->device;
    o->device_memory_bytes = device_memory_bytes(*device);
    const std::optional<std::uint64_t> body = parse_bytes(*max_body);
    if (!body || *body == 0) throw Error("--max-body " + *max_body + " is not a size such as 4MiB", "--max-body");
    o->http.max_body_bytes = static_cast<std::size_t>(*body);
    serve::run_serve(*o);
  });
}

}  // namespace strata::tools
