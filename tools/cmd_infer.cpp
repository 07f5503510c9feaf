// strata infer: its flags into an infer::InferOptions (infer/infer_run.h), then
// infer::run_inference.
#include <memory>
#include <string>

#include "infer/infer_run.h"
#include "tools/commands.h"
#include "tools/device_flags.h"
#include "tools/moe_flags.h"

namespace strata::tools {

void add_infer_command(CLI::App& app) {
  auto o = std::make_shared<infer::InferOptions>();
  auto device = std::make_shared<DeviceFlags>();
  CLI::App* cmd = app.add_subcommand(
      "infer", "generate text with a GPT-2 or LLaMA-family model; layers that do not fit the device are streamed "
               "from pinned host memory or NVMe (ZeRO-Inference: zero_optimization.offload_param in --config)");
  add_device_flags(*cmd, *device);
  cmd->add_option("--model", o->model_path,
                  "a Hugging Face model folder (config.json, its weights and tokenizer) or a config.json");
  cmd->add_option("--preset", o->preset, "a built-in model with random weights from --seed");
  cmd->add_option("--prompt", o->prompt, "one prompt (text; needs the folder's tokenizer)");
  cmd->add_option("--prompts", o->prompts_path,
                  "prompts, one JSON object per line: {\"prompt\": \"text\"} or {\"ids\": [...]}");
  cmd->add_option("--output", o->output_path,
                  "write one JSON line per prompt here (index, ids, text, finish_reason); default stdout");
  cmd->add_option("--max-new-tokens", o->max_new_tokens, "tokens to generate per prompt at most (default 128)");
  cmd->add_option("--batch", o->batch,
                  "prompts decoded together (default: as many as a quarter of the device memory holds, at most 256)");
  cmd->add_option("--temperature", o->sampling.temperature, "0 (default) = greedy");
  cmd->add_option("--top-k", o->sampling.top_k, "keep the k most likely tokens (0 = off)");
  cmd->add_option("--top-p", o->sampling.top_p, "keep the nucleus of this probability (1 = off)");
  cmd->add_option("--seed", o->sampling.seed, "seed of the sampling (and of random weights)");
  cmd->add_option("--dtype", o->dtype, "auto (the config's bf16/fp16, else bf16 on cuda, fp32 on host), fp32, bf16, fp16")
      ->check(CLI::IsMember({"auto", "fp32", "bf16", "fp16"}));
  cmd->add_option("--kv-cache", o->kv_cache,
                  "where the KV cache lives: auto (default: the device when it fits beside the smallest parameter "
                  "working set, else pinned host), device, host (pinned host memory, streamed per layer)")
      ->check(CLI::IsMember({"auto", "device", "host"}));
  cmd->add_option("--quantize", o->quantize,
                  "int8 or int4: the streamed modules' weights group-wise quantized (bf16 scales), dequantized on "
                  "the device before use; resident modules stay in --dtype")
      ->check(CLI::IsMember({"none", "int8", "int4"}));
  cmd->add_option("--quantize-group", o->quantize_group, "elements per quantization scale: 64 or 128 (default)")
      ->check(CLI::IsMember({64, 128}));
  add_moe_flags(*cmd, o->moe_expert_cache_mb, o->moe_prefetch, o->moe_fetch, o->moe_cpu_experts, o->profile_path);
  cmd->add_option("--perplexity", o->perplexity_path,
                  "instead of generating, print the perplexity of this text (its tokens, or its bytes for a "
                  "byte-level model) as one JSON line");
  cmd->add_option("--perplexity-window", o->perplexity_window,
                  "positions per forward pass for --perplexity (default min(256, the model's longest))");
  cmd->add_option("--trace", o->trace_path, "write a Chrome trace of every stream here");
  cmd->callback([o, device] {
    o->config_path = device->config_path;
    o->device_kind = device->device;
    o->device_memory_bytes = device_memory_bytes(*device);
    infer::run_inference(*o);
  });
}

}  // namespace strata::tools
