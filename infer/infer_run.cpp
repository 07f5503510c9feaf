// One `strata infer` run (infer_run.h), in the order its parts depend on each other: the model,
// the tokenizer and the prompts, the config, the device, the inference engine and its plan, the
// weights, the model, the generation.
#include "infer/infer_run.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "core/error.h"
#include "core/log.h"
#include "core/units.h"
#include "infer/generator.h"
#include "infer/perplexity.h"
#include "infer/prompts.h"
#include "infer/server.h"
#include "infer/text_io.h"
#include "models/hf_weights.h"
#include "models/registry.h"
#include "runtime/device/device_config.h"

namespace strata::infer {
namespace {

// "; experts: 93.1% on the device (1234 hits, 91 fetched, 12 computed on the host); 40 fetched
// ahead and not used (180 MiB)" for a mixture of experts, else "".
std::string expert_cache_line(const runtime::zero::EngineCounters& c) {
  const std::uint64_t n = c.expert_hits + c.expert_misses;
  if (n + c.expert_host == 0) return "";
  return fmt::format("; experts: {:.1f}% on the device ({} hits, {} fetched){}{}",
                     n > 0 ? 100.0 * static_cast<double>(c.expert_hits) / static_cast<double>(n) : 0.0, c.expert_hits,
                     c.expert_misses,
                     c.expert_host > 0 ? fmt::format(", {} computed on the host", c.expert_host) : std::string(),
                     c.unused_fetches > 0
                         ? fmt::format("; {} fetched ahead and not used ({})", c.unused_fetches,
                                       format_bytes(std::max(c.unused_read_bytes, c.unused_h2d_bytes)))
                         : std::string());
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
      throw Error(fmt::format("prompt {} is text, but the model has no tokenizer and a vocabulary under 256 (its "
                              "bytes cannot be its tokens)",
                              p.index),
                  name, "give a model folder with tokenizer.json (or vocab.json and merges.txt), or prompts as "
                        "{\"ids\": [...]} lines in --prompts");
    }
    p.ids = codec->encode(p.text);
    if (p.ids.empty()) throw Error(fmt::format("prompt {} has no tokens", p.index), name);
  }
  check_prompt_ids(prompts, spec.vocab_size(), name);
  return prompts;
}

// The --perplexity text's ids: the tokenizer's when the model folder has one, else its bytes
// (a byte-level model, vocabulary >= 256, as `strata train --text` trains).
std::vector<std::int32_t> perplexity_ids(const InferOptions& o, const TextCodec* codec) {
  std::FILE* f = std::fopen(o.perplexity_path.c_str(), "rb");
  if (f == nullptr) throw Error("cannot open the text", o.perplexity_path, "give a readable file to --perplexity");
  std::string text;
  char buf[1 << 16];
  for (std::size_t n; (n = std::fread(buf, 1, sizeof buf, f)) > 0;) text.append(buf, n);
  const bool failed = std::ferror(f) != 0;
  std::fclose(f);
  if (failed) throw Error("cannot read the text", o.perplexity_path);
  if (codec == nullptr) {
    throw Error("the model has no tokenizer and a vocabulary under 256: its bytes cannot be its tokens",
                o.perplexity_path, "give a model folder with a tokenizer");
  }
  return codec->encode(text);
}

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

}  // namespace

int run_inference(const InferOptions& o) {
  const runtime::tiers::WeightQuant quant = weight_quant(o.quantize, o.quantize_group);
  validate(o.sampling);
  const auto start = std::chrono::steady_clock::now();
  const models::ModelSpecPtr spec = models::model_from_flags(o.model_path, o.preset);
  std::unique_ptr<TextCodec> codec = o.model_path.empty() ? nullptr : load_text_codec(o.model_path);
  if (codec == nullptr && spec->vocab_size() >= 256) {
    // No tokenizer: the model was trained on text's bytes (`strata train --text`), so its text
    // is read and written as bytes, and the run says so. (Under 256 ids: token ids only.)
    codec = TextCodec::bytes();
    std::fprintf(stderr, "strata infer: the model has no tokenizer: text in and out as bytes (ids 0..255), as "
                         "strata train --text trained it\n");
  }
  const bool perplexity = !o.perplexity_path.empty();
  std::vector<std::int32_t> text_ids;
  std::vector<Prompt> prompts;
  if (perplexity) {
    if (!o.prompt.empty() || !o.prompts_path.empty()) {
      throw Error("--perplexity reads a text, not prompts", "--perplexity", "give --perplexity or --prompt(s)");
    }
    text_ids = perplexity_ids(o, codec.get());
    for (std::int32_t id : text_ids) {
      if (id < 0 || id >= spec->vocab_size()) {
        throw Error("token " + std::to_string(id) + " of the text is outside the vocabulary", o.perplexity_path);
      }
    }
  } else {
    prompts = load_prompts(o, codec.get(), *spec);
  }
  OutputWriter writer(perplexity ? std::string() : o.output_path, prompts.size());
  if (o.perplexity_window < 0) throw Error("--perplexity-window must be positive", "--perplexity-window");
  const int window = o.perplexity_window > 0 ? std::min(o.perplexity_window, spec->max_positions())
                                             : std::min(256, spec->max_positions());

  ServerSetup setup;
  setup.spec = spec;
  setup.config = inference_config(o.config_path, *spec);
  setup.device = runtime::device::device_options(setup.config, o.device_kind, o.device_memory_bytes);
  setup.dtype = o.dtype;
  setup.batch = o.batch;
  setup.kv_cache = o.kv_cache;
  setup.prompts = prompts.size();
  std::size_t longest = 0;
  for (const Prompt& p : prompts) longest = std::max(longest, p.ids.size());
  setup.prompt_T = static_cast<int>(longest);
  setup.max_T = std::min(spec->max_positions(), setup.prompt_T + o.max_new_tokens);
  setup.weights = models::has_hf_weights(o.model_path) ? o.model_path : std::string();
  setup.seed = o.sampling.seed;
  setup.trace_path = o.trace_path;
  setup.quant = quant;
  setup.expert_cache_mb = o.moe_expert_cache_mb;
  setup.moe_lookahead = o.moe_prefetch == "on";
  setup.moe_fetch_every_expert = o.moe_fetch == "all";
  setup.moe_cpu_experts = o.moe_cpu_experts;
  setup.profile_path = o.profile_path;
  if (perplexity) {
    setup.batch = 1;
    setup.perplexity_window = window;
  }
  if (setup.weights.empty()) {
    log::warn("{} holds no weights: random weights from --seed {}", o.model_path.empty() ? o.preset : o.model_path,
              o.sampling.seed);
  }
  std::fprintf(stderr, "strata infer: %s, %zu prompt(s)\n", o.model_path.empty() ? o.preset.c_str() : o.model_path.c_str(),
               prompts.size());
  Server server(std::move(setup), /*verbose=*/true);
  std::fprintf(stderr, "ready in %.2f s\n", seconds_since(start));

  if (perplexity) {
    const auto t0 = std::chrono::steady_clock::now();
    runtime::zero::InferenceEngine& engine = server.engine();
    const runtime::zero::EngineCounters loaded = engine.counters();  // the weights' load moved bytes too
    const PerplexityResult r = evaluate_perplexity(server.model(), text_ids, window, server.hooks());
    runtime::zero::EngineCounters c = engine.counters();
    c.h2d_bytes -= loaded.h2d_bytes;
    c.nvme_read_bytes -= loaded.nvme_read_bytes;
    // One JSON line on stdout; bytes streamed per forward pass = per decoded token when generating.
    std::printf("{\"tokens\": %zu, \"windows\": %zu, \"window\": %d, \"mean_nll\": %.6f, \"perplexity\": %.6f, "
                "\"dtype\": \"%s\", \"quantize\": \"%s\", \"h2d_bytes\": %llu, \"nvme_read_bytes\": %llu, "
                "\"streamed_bytes_per_pass\": %llu, \"seconds\": %.3f}\n",
                r.tokens, r.windows, window, r.mean_nll, r.perplexity, std::string(dtype_name(server.dtype())).c_str(),
                quant.enabled() ? quant.describe().c_str() : "none", static_cast<unsigned long long>(c.h2d_bytes),
                static_cast<unsigned long long>(c.nvme_read_bytes),
                static_cast<unsigned long long>(r.windows ? c.h2d_bytes / r.windows : 0), seconds_since(t0));
    std::fflush(stdout);
    return 0;
  }

  GenerateOptions gen;
  gen.max_new_tokens = o.max_new_tokens;
  gen.batch = server.batch();
  gen.sampling = o.sampling;
  gen.kv_cache = server.kv_cache_options();
  gen.stop_ids = generation_stop_ids(codec.get(), spec->stop_token_ids());
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
               "%.1f tokens/s; %zu forward passes, %s host->device, %s read from NVMe, %llu module fetches%s\n",
               stats.prompts, stats.prompt_tokens, stats.generated_tokens, total, stats.prefill_seconds,
               stats.decode_seconds, total > 0 ? static_cast<double>(stats.generated_tokens) / total : 0.0,
               stats.passes, format_bytes(c.h2d_bytes).c_str(), format_bytes(c.nvme_read_bytes).c_str(),
               static_cast<unsigned long long>(c.fetches), expert_cache_line(c).c_str());
  return 0;
}

}  // namespace strata::infer
