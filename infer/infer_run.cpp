// One `strata infer` run (infer_run.h), in the order its parts depend on each other: the model,
// the tokenizer and the prompts, the config, the device, the inference engine and its plan, the
// weights, the model, the generation.
#include "infer/infer_run.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "core/error.h"
#include "core/log.h"
#include "core/units.h"
#include "infer/generator.h"
#include "infer/prompts.h"
#include "infer/server.h"
#include "infer/text_io.h"
#include "models/io/hf_checkpoint.h"
#include "models/registry.h"

namespace strata::infer {
namespace {

namespace fs = std::filesystem;

models::ModelSpecPtr load_model(const InferOptions& o) {
  if (!o.model_path.empty() && !o.preset.empty()) {
    throw Error("both --model and --preset were given", "--model", "give one of them");
  }
  if (!o.model_path.empty()) return models::model_from_path(o.model_path);
  if (!o.preset.empty()) return models::model_preset(o.preset);
  throw Error("no model was given", "--model", "give --model DIR (a Hugging Face model folder) or --preset NAME");
}

// The weights: the --model folder's when it has any; otherwise none (random, from --seed).
std::string weights_path(const InferOptions& o) {
  std::error_code ec;
  if (!o.model_path.empty() && fs::is_directory(o.model_path, ec) &&
      (fs::exists(fs::path(o.model_path) / models::kHfSingleFile, ec) ||
       fs::exists(fs::path(o.model_path) / models::kHfIndexFile, ec))) {
    return o.model_path;
  }
  return {};
}

std::vector<Prompt> load_prompts(const InferOptions& o, const TextCodec* codec, const models::ModelSpec& spec) {
  if (o.prompt.empty() == o.prompts_path.empty()) {
    throw Error(o.prompt.empty() ? "no prompt was given" : "both --prompt and --prompts were given", "--prompt",
                "give --prompt TEXT or --prompts FILE.jsonl");
  }
  std::vector<Prompt> prompts;
  std::string name = o.prompts_path;
  if (!o.prompt.empty()) {
    Prompt p;
    p.text = o.prompt;
    p.has_text = true;
    p.line = 1;
    prompts.push_back(std::move(p));
    name = "--prompt";
  } else {
    prompts = read_prompts(o.prompts_path);
  }
  for (Prompt& p : prompts) {
    if (!p.has_text) continue;
    if (codec == nullptr) {
      throw Error(fmt::format("prompt {} is text, but the model has no tokenizer", p.index), name,
                  "give a model folder with tokenizer.json (or vocab.json and merges.txt), or prompts as "
                  "{\"ids\": [...]} lines in --prompts");
    }
    p.ids = codec->encode(p.text);
    if (p.ids.empty()) throw Error(fmt::format("prompt {} has no tokens", p.index), name);
  }
  check_prompt_ids(prompts, spec.vocab_size(), name);
  return prompts;
}

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

}  // namespace

int run_inference(const InferOptions& o) {
  if (!o.quantize.empty()) {
    throw Error("--quantize " + o.quantize + " is not available yet", "--quantize",
                "serve the model in bf16 or fp16 (--dtype)");
  }
  validate(o.sampling);
  const auto start = std::chrono::steady_clock::now();
  const models::ModelSpecPtr spec = load_model(o);
  const std::unique_ptr<TextCodec> codec = o.model_path.empty() ? nullptr : load_text_codec(o.model_path);
  std::vector<Prompt> prompts = load_prompts(o, codec.get(), *spec);
  OutputWriter writer(o.output_path, prompts.size());

  ServerSetup setup;
  setup.spec = spec;
  setup.config = inference_config(o.config_path, *spec);
  setup.device.kind = !o.device_kind.empty() ? o.device_kind
                                             : std::string(runtime::config::to_string(setup.config.strata.device));
  setup.device.memory_bytes = o.device_memory_bytes.value_or(setup.config.strata.device_memory_bytes);
  setup.device.host_threads = static_cast<int>(setup.config.strata.cpu_threads);
  setup.dtype = o.dtype;
  setup.batch = o.batch;
  setup.kv_cache = o.kv_cache;
  setup.prompts = prompts.size();
  std::size_t longest = 0;
  for (const Prompt& p : prompts) longest = std::max(longest, p.ids.size());
  setup.prompt_T = static_cast<int>(longest);
  setup.max_T = std::min(spec->max_positions(), setup.prompt_T + o.max_new_tokens);
  setup.weights = weights_path(o);
  setup.seed = o.sampling.seed;
  setup.trace_path = o.trace_path;
  if (setup.weights.empty()) {
    log::warn("{} holds no weights: random weights from --seed {}", o.model_path.empty() ? o.preset : o.model_path,
              o.sampling.seed);
  }
  std::fprintf(stderr, "strata infer: %s, %zu prompt(s)\n", o.model_path.empty() ? o.preset.c_str() : o.model_path.c_str(),
               prompts.size());
  Server server(std::move(setup), /*verbose=*/true);
  std::fprintf(stderr, "ready in %.2f s\n", seconds_since(start));

  GenerateOptions gen;
  gen.max_new_tokens = o.max_new_tokens;
  gen.batch = server.batch();
  gen.sampling = o.sampling;
  gen.kv_cache = server.kv_cache_options();
  if (codec) gen.stop_ids = codec->stop_ids();
  for (int id : spec->stop_token_ids()) {
    if (std::find(gen.stop_ids.begin(), gen.stop_ids.end(), id) == gen.stop_ids.end()) gen.stop_ids.push_back(id);
  }
  Generator generator(server.model(), spec->vocab_size(), gen, server.max_T(), server.hooks());
  const bool show = o.progress && ::isatty(STDERR_FILENO) != 0;
  const auto t0 = std::chrono::steady_clock::now();
  const GenerateStats stats = generator.run(
      prompts,
      [&](Completion c) {
        if (codec) c.text = codec->decode(c.ids);
        writer.add(std::move(c));
      },
      [&](const GenerateStats& s) {
        if (!show) return;
        const double secs = seconds_since(t0);
        std::fprintf(stderr, "\r%zu/%zu prompts, %zu tokens, %.1f tokens/s   ", s.prompts, prompts.size(),
                     s.generated_tokens, secs > 0 ? static_cast<double>(s.generated_tokens) / secs : 0.0);
      });
  writer.finish();
  if (show) std::fprintf(stderr, "\n");
  server.flush_trace();
  const runtime::zero::EngineCounters c = server.engine().counters();
  const double total = stats.prefill_seconds + stats.decode_seconds;
  std::fprintf(stderr,
               "done: %zu prompt(s), %zu prompt tokens, %zu generated in %.2f s (prefill %.2f s, decoding %.2f s): "
               "%.1f tokens/s; %zu forward passes, %s host->device, %s read from NVMe, %llu module fetches\n",
               stats.prompts, stats.prompt_tokens, stats.generated_tokens, total, stats.prefill_seconds,
               stats.decode_seconds, total > 0 ? static_cast<double>(stats.generated_tokens) / total : 0.0,
               stats.passes, format_bytes(c.h2d_bytes).c_str(), format_bytes(c.nvme_read_bytes).c_str(),
               static_cast<unsigned long long>(c.fetches));
  return 0;
}

}  // namespace strata::infer
