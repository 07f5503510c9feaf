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
#include "infer/perplexity.h"
#include "infer/prompts.h"
#include "infer/text_io.h"
#include "models/hf_weights.h"
#include "models/io/hf_checkpoint.h"
#include "models/registry.h"
#include "offload/host_buffer.h"
#include "runtime/comm/comm.h"
#include "runtime/config/config.h"
#include "runtime/device/device.h"
#include "runtime/trace/trace.h"
#include "runtime/zero/inference_engine.h"

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

runtime::config::Config load_config(const InferOptions& o, const models::ModelSpec& spec) {
  runtime::config::Config config;
  if (!o.config_path.empty()) config = runtime::config::load_config_file(o.config_path).config;
  // The training keys mean nothing here; the resolver wants a batch size.
  if (!config.train_batch_size && !config.train_micro_batch_size_per_gpu) config.train_micro_batch_size_per_gpu = 1;
  runtime::config::ResolveInputs inputs;
  inputs.hidden_size = static_cast<std::uint64_t>(spec.hidden_size());
  return runtime::config::resolve_config(config, inputs);
}

DType choose_dtype(const InferOptions& o, const runtime::config::Config& config, runtime::device::Backend backend) {
  if (o.dtype == "fp32") return DType::f32;
  if (o.dtype == "bf16") return DType::bf16;
  if (o.dtype == "fp16") return DType::f16;
  if (o.dtype != "auto") throw Error("--dtype " + o.dtype + " is not one of auto, fp32, bf16, fp16", "--dtype");
  if (config.bf16.enabled.value_or(false)) return DType::bf16;
  if (config.fp16.enabled.value_or(false)) return DType::f16;
  return backend == runtime::device::Backend::cuda ? DType::bf16 : DType::f32;
}

// --batch, else as many prompts as take a quarter of the device budget in KV cache and scratch
// (the rest is for the resident modules and the streaming slots), at most 256.
int choose_batch(const InferOptions& o, const models::ModelSpec& spec, const models::ModelOptions& options,
                 std::size_t prompts, int prompt_T, int max_T, std::uint64_t device_budget) {
  if (o.batch < 0) throw Error("--batch must be positive", "--batch");
  if (o.batch > 0) return o.batch;
  const int most = static_cast<int>(std::min<std::size_t>(prompts, 256));
  int batch = 1;
  while (batch < most && spec.inference_bytes(options, batch * 2 > most ? most : batch * 2, prompt_T, max_T) <=
                             device_budget / 4) {
    batch = std::min(most, batch * 2);
  }
  return batch;
}

runtime::tiers::WeightQuant weight_quant(const InferOptions& o) {
  runtime::tiers::WeightQuant q;
  if (o.quantize.empty() || o.quantize == "none") return q;
  if (o.quantize == "int8") {
    q.bits = 8;
  } else if (o.quantize == "int4") {
    q.bits = 4;
  } else {
    throw Error("--quantize " + o.quantize + " is not one of int8, int4", "--quantize");
  }
  if (o.quantize_group != 64 && o.quantize_group != 128) {
    throw Error("--quantize-group " + std::to_string(o.quantize_group) + " is not 64 or 128", "--quantize-group");
  }
  q.group = o.quantize_group;
  return q;
}

// The --perplexity text's ids: the tokenizer's when the model folder has one, else its bytes
// (a byte-level model, vocabulary >= 256, as `strata train --text` trains).
std::vector<std::int32_t> perplexity_ids(const InferOptions& o, const TextCodec* codec, const models::ModelSpec& spec) {
  std::FILE* f = std::fopen(o.perplexity_path.c_str(), "rb");
  if (f == nullptr) throw Error("cannot open the text", o.perplexity_path, "give a readable file to --perplexity");
  std::string text;
  char buf[1 << 16];
  for (std::size_t n; (n = std::fread(buf, 1, sizeof buf, f)) > 0;) text.append(buf, n);
  const bool failed = std::ferror(f) != 0;
  std::fclose(f);
  if (failed) throw Error("cannot read the text", o.perplexity_path);
  if (codec != nullptr) return codec->encode(text);
  if (spec.vocab_size() < 256) {
    throw Error("the model has no tokenizer and a vocabulary under 256: its bytes cannot be its tokens",
                o.perplexity_path, "give a model folder with a tokenizer");
  }
  std::vector<std::int32_t> ids(text.size());
  for (std::size_t i = 0; i < text.size(); ++i) ids[i] = static_cast<unsigned char>(text[i]);
  return ids;
}

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

}  // namespace

int run_inference(const InferOptions& o) {
  const runtime::tiers::WeightQuant quant = weight_quant(o);
  validate(o.sampling);
  const auto start = std::chrono::steady_clock::now();
  const models::ModelSpecPtr spec = load_model(o);
  const std::unique_ptr<TextCodec> codec = o.model_path.empty() ? nullptr : load_text_codec(o.model_path);
  const bool perplexity = !o.perplexity_path.empty();
  std::vector<std::int32_t> text_ids;
  std::vector<Prompt> prompts;
  if (perplexity) {
    if (!o.prompt.empty() || !o.prompts_path.empty()) {
      throw Error("--perplexity reads a text, not prompts", "--perplexity", "give --perplexity or --prompt(s)");
    }
    text_ids = perplexity_ids(o, codec.get(), *spec);
    for (std::int32_t id : text_ids) {
      if (id < 0 || id >= spec->vocab_size()) {
        throw Error("token " + std::to_string(id) + " of the text is outside the vocabulary", o.perplexity_path);
      }
    }
  } else {
    prompts = load_prompts(o, codec.get(), *spec);
  }
  OutputWriter writer(perplexity ? std::string() : o.output_path, prompts.size());

  runtime::config::Config config = load_config(o, *spec);
  runtime::trace::Tracer tracer(o.trace_path, "strata infer", /*account_busy=*/true);
  runtime::device::DeviceOptions device_options;
  device_options.kind = !o.device_kind.empty() ? o.device_kind : std::string(runtime::config::to_string(config.strata.device));
  device_options.memory_bytes = o.device_memory_bytes.value_or(config.strata.device_memory_bytes);
  device_options.tracer = &tracer;
  device_options.host_threads = static_cast<int>(config.strata.cpu_threads);
  const std::unique_ptr<runtime::device::Device> device = runtime::device::Device::create(device_options);
  const std::unique_ptr<runtime::comm::Communicator> comm = runtime::comm::create_communicator(*device);
  const std::unique_ptr<runtime::device::Stream> compute = device->create_stream("compute");

  models::ModelOptions model_options;
  model_options.dtype = choose_dtype(o, config, device->backend());
  model_options.vocab_multiple = models::vocab_multiple_for(device->backend());
  std::size_t longest = 0;
  for (const Prompt& p : prompts) longest = std::max(longest, p.ids.size());
  const int prompt_T = static_cast<int>(longest);
  const int max_T = std::min(spec->max_positions(), prompt_T + o.max_new_tokens);
  if (o.perplexity_window < 0) throw Error("--perplexity-window must be positive", "--perplexity-window");
  const int window = o.perplexity_window > 0 ? std::min(o.perplexity_window, spec->max_positions())
                                             : std::min(256, spec->max_positions());
  const int batch = perplexity ? 1
                               : choose_batch(o, *spec, model_options, prompts.size(), prompt_T, max_T,
                                              device->memory_stats().budget_bytes);

  const models::ModelLayout layout = spec->layout();
  runtime::zero::EngineSetup setup;
  setup.module_numels = layout.module_numels();
  setup.module_names = layout.module_names();
  setup.dtype = model_options.dtype;
  setup.activation_bytes = perplexity ? spec->activation_bytes(model_options, 1, window)
                                      : spec->inference_bytes(model_options, batch, prompt_T, max_T);
  setup.quant = quant;
  runtime::zero::InferenceEngine engine(config, setup, *device, *compute, *comm, tracer);
  std::fprintf(stderr, "strata infer: %s (%s), %s%s, batch %d, %zu prompt(s), device %s\n",
               o.model_path.empty() ? o.preset.c_str() : o.model_path.c_str(), spec->describe().c_str(),
               std::string(dtype_name(model_options.dtype)).c_str(),
               quant.enabled() ? (", streamed weights " + quant.describe()).c_str() : "", batch, prompts.size(),
               device->name().c_str());
  if (engine.resident_modules() == engine.module_count()) {
    std::fprintf(stderr, "plan: every module resident on the device\n%s", engine.plan().table(engine.plan_inputs()).c_str());
  } else {
    std::fprintf(stderr, "plan: %d of %d modules resident on the device, the others streamed through %s of slots\n%s",
                 engine.resident_modules(), engine.module_count(), format_bytes(engine.slot_bytes()).c_str(),
                 engine.plan().table(engine.plan_inputs()).c_str());
  }

  // The weights, module by module (one module's fp32 values in memory at a time).
  const std::string weights = weights_path(o);
  {
    std::unique_ptr<models::HfWeightsReader> reader;
    if (!weights.empty()) {
      reader = std::make_unique<models::HfWeightsReader>(weights, *spec);
    } else {
      log::warn("{} holds no weights: random weights from --seed {}", o.model_path.empty() ? o.preset : o.model_path,
                o.sampling.seed);
    }
    std::size_t most = 0;
    for (const models::ModuleLayout& m : layout.modules) most = std::max(most, m.numel);
    const offload::HostBuffer buffer = offload::HostBuffer::allocate(most * sizeof(float), "weights being loaded");
    auto* values = reinterpret_cast<float*>(buffer.data());
    for (std::size_t m = 0; m < layout.modules.size(); ++m) {
      if (reader) {
        reader->read_module(static_cast<int>(m), values);
      } else {
        spec->init_module(layout.modules[m], o.sampling.seed, values);
      }
      engine.load_module(static_cast<int>(m), values);
    }
  }
  const std::unique_ptr<models::Model> model = spec->make_model(model_options, *device, *compute, engine);
  std::fprintf(stderr, "ready in %.2f s\n", seconds_since(start));

  if (perplexity) {
    const auto t0 = std::chrono::steady_clock::now();
    const runtime::zero::EngineCounters loaded = engine.counters();  // the weights' load moved bytes too
    const PerplexityResult r = evaluate_perplexity(*model, text_ids, window,
                                                   PassHooks{[&] { engine.begin_pass(); }, [&] { engine.end_pass(); }});
    runtime::zero::EngineCounters c = engine.counters();
    c.h2d_bytes -= loaded.h2d_bytes;
    c.nvme_read_bytes -= loaded.nvme_read_bytes;
    // One JSON line on stdout; bytes streamed per forward pass = per decoded token when generating.
    std::printf("{\"tokens\": %zu, \"windows\": %zu, \"window\": %d, \"mean_nll\": %.6f, \"perplexity\": %.6f, "
                "\"dtype\": \"%s\", \"quantize\": \"%s\", \"h2d_bytes\": %llu, \"nvme_read_bytes\": %llu, "
                "\"streamed_bytes_per_pass\": %llu, \"seconds\": %.3f}\n",
                r.tokens, r.windows, window, r.mean_nll, r.perplexity, std::string(dtype_name(model_options.dtype)).c_str(),
                quant.enabled() ? quant.describe().c_str() : "none", static_cast<unsigned long long>(c.h2d_bytes),
                static_cast<unsigned long long>(c.nvme_read_bytes),
                static_cast<unsigned long long>(r.windows ? c.h2d_bytes / r.windows : 0), seconds_since(t0));
    std::fflush(stdout);
    return 0;
  }

  GenerateOptions gen;
  gen.max_new_tokens = o.max_new_tokens;
  gen.batch = batch;
  gen.sampling = o.sampling;
  if (codec) gen.stop_ids = codec->stop_ids();
  for (int id : spec->stop_token_ids()) {
    if (std::find(gen.stop_ids.begin(), gen.stop_ids.end(), id) == gen.stop_ids.end()) gen.stop_ids.push_back(id);
  }
  Generator generator(*model, spec->vocab_size(), gen, max_T,
                      PassHooks{[&] { engine.begin_pass(); }, [&] { engine.end_pass(); }});
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
  device->flush_trace();
  tracer.flush();
  const runtime::zero::EngineCounters c = engine.counters();
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
