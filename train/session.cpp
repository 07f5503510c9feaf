// The setup of a training run, in the order its parts depend on each other: config, device,
// communicator, tiers, data, engine, model.
#include "train/session.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/log.h"
#include "core/units.h"
#include "models/registry.h"
#include "models/text_tokens.h"
#include "models/tokenizer_files.h"
#include "offload/fault_injection.h"
#include "runtime/device/device_config.h"
#include "train/run_plan.h"

namespace strata::train {
namespace {

// --data: the token file. --text: tokenized with the --model folder's tokenizer when it has one
// (models/text_tokens.h: in parallel on strata.cpu_threads threads, the same ids as the whole
// text at once), else its bytes (a preset, a config.json, a folder without a tokenizer). Rank 0
// says in one line which it used.
models::TokenData load_data(const TrainOptions& o, const models::ModelSpec& spec, int threads, bool rank0) {
  if (!o.data_path.empty() && !o.text_path.empty()) {
    throw Error("both --data and --text were given", "--data", "give one of them");
  }
  if (!o.data_path.empty()) return models::read_token_file(o.data_path);
  if (o.text_path.empty()) {
    throw Error("no training data was given", "--data", "give --data tokens.bin (llm.c format) or --text FILE");
  }
  const std::optional<models::Tokenizer> tokenizer = models::training_tokenizer(o.model_path, spec.vocab_size());
  if (!tokenizer) {
    models::TokenData bytes = models::read_bytes_as_tokens(o.text_path);
    if (rank0) {
      std::fprintf(stderr, "strata train: --text %s: its %zu bytes as tokens (vocabulary 256: %s has no tokenizer)\n",
                   o.text_path.c_str(), bytes.size(),
                   o.model_path.empty() ? ("the preset " + o.preset).c_str() : o.model_path.c_str());
    }
    return bytes;
  }
  models::TextTokensOptions options;
  options.threads = threads;
  const auto start = std::chrono::steady_clock::now();
  models::TokenData tokens = models::tokenize_files(*tokenizer, {o.text_path}, options);
  if (tokens.size() == 0) {
    throw Error("the text file gives no tokens", o.text_path, "train on a file with text in it");
  }
  if (rank0) {
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::error_code ec;
    const auto bytes = std::filesystem::file_size(o.text_path, ec);
    std::fprintf(stderr,
                 "strata train: --text %s: %zu tokens from the model's tokenizer (%s, %d ids) of %s in %.2f s on %d "
                 "threads\n",
                 o.text_path.c_str(), tokens.size(), tokenizer->source().c_str(), tokenizer->vocab_size(),
                 format_bytes(ec ? 0 : bytes).c_str(), seconds, threads);
  }
  return tokens;
}

// Resolution fills every "auto" of a training run (flags, HF's defaults, the model's hidden size,
// --steps); one left is a bug of that code, said plainly rather than run with a guess.
void check_resolved(const runtime::config::Config& config) {
  const std::vector<std::string> unresolved = runtime::config::unresolved_auto_keys(config);
  if (!unresolved.empty()) {
    std::string keys;
    for (const std::string& k : unresolved) keys += (keys.empty() ? "" : ", ") + k;
    throw Error("these config values are still \"auto\": " + keys, unresolved.front(),
                "give numbers for them (in the file or with --set)");
  }
}

// The resolved config: on the console with --verbose; else in the run's folder (a quiet start:
// the console keeps the plan, progress and the report), with one line saying where.
void show_config(const TrainOptions& o, const runtime::config::Config& config) {
  if (o.verbose) {
    runtime::config::log_config(config);
    return;
  }
  const std::string folder = !o.metrics_path.empty() ? std::filesystem::path(o.metrics_path).parent_path().string()
                                                     : o.checkpoint_dir;
  if (folder.empty() && o.metrics_path.empty()) {
    std::fprintf(stderr, "strata train: --verbose prints the resolved config (strata config FILE does too)\n");
    return;
  }
  const std::filesystem::path path = std::filesystem::path(folder.empty() ? "." : folder) / "resolved_config.json";
  std::error_code ec;
  std::filesystem::create_directories(path.parent_path(), ec);
  std::ofstream out(path);
  out << runtime::config::config_to_json(config) << "\n";
  out.close();
  if (!out) {
    log::warn("could not write the resolved config to {}; --verbose prints it", path.string());
    return;
  }
  std::fprintf(stderr, "strata train: the resolved config is in %s (--verbose prints it here)\n", path.c_str());
}

}  // namespace

std::unique_ptr<Session> make_session(const TrainOptions& o) {
  auto session = std::make_unique<Session>();
  Session& s = *session;
  s.launch = runtime::launch::detect_launch();
  s.spec = models::model_from_flags(o.model_path, o.preset);
  const runtime::config::ParsedConfig parsed =
      o.config_json.empty() ? runtime::config::load_config_file(o.config_path, o.overrides)
                            : runtime::config::parse_config(o.config_json, o.config_path);
  // Every "auto" as Hugging Face's Trainer fills it: the flags, else HF's defaults (config.h).
  runtime::config::ResolveInputs resolve_inputs;
  resolve_inputs.world_size = static_cast<std::uint32_t>(s.launch.world);
  resolve_inputs.hidden_size = static_cast<std::uint64_t>(s.spec->hidden_size());
  resolve_inputs.training = true;
  resolve_inputs.flags = o.flags;
  resolve_inputs.flags.steps = o.steps;
  const runtime::config::Resolution resolution = runtime::config::resolve_config_explained(parsed.config, resolve_inputs);
  s.config = resolution.config;
  runtime::config::Config& config = s.config;
  check_resolved(config);
  s.rank0 = s.launch.rank == 0;
  if (s.rank0) {
    for (const std::string& note : resolution.notes) log::info("config: {}", note);
    const std::string table = runtime::config::resolution_table(resolution.autos);
    if (!table.empty()) std::fprintf(stderr, "%s", table.c_str());
  }

  // Device, with the tracer (busy-time accounting always on, spans kept for the trace file:
  // --trace, else strata.trace).
  s.trace_path = o.trace_path.empty() ? config.strata.trace : o.trace_path;
  if (o.trace_path.empty()) check_output_path(s.trace_path, "strata.trace");
  s.tracer = std::make_unique<runtime::trace::Tracer>(s.trace_path, "rank " + std::to_string(s.launch.rank),
                                               /*account_busy=*/true);
  // The flags over the config file's strata.device / strata.device_memory (as read from the file,
  // before resolution), over the backend's defaults.
  runtime::device::DeviceOptions options =
      runtime::device::device_options(parsed.config, o.device_kind, o.device_memory_bytes);
  options.tracer = s.tracer.get();
  options.host_threads = static_cast<int>(config.strata.cpu_threads);  // the host kernels' OpenMP team (resolved)
  s.device = runtime::device::Device::create(options);
  if (config.strata.device_memory_bytes == 0 || o.device_memory_bytes) {
    config.strata.device_memory_bytes = s.device->memory_stats().budget_bytes;
  }
  if (s.rank0) show_config(o, config);
  s.comm = runtime::comm::create_communicator(*s.device);
  s.compute = s.device->create_stream("compute");

  // Data and shapes.
  s.data = load_data(o, *s.spec, static_cast<int>(config.strata.cpu_threads), s.rank0);
  s.data.validate(s.spec->vocab_size());
  // The tokenizer files go with the weights: into every checkpoint and beside --save's.
  s.tokenizer_files = models::read_tokenizer_files(o.model_path);
  s.T = o.seq_len > 0 ? o.seq_len : std::min(s.spec->max_positions(), 1024);
  if (s.T > s.spec->max_positions()) {
    throw Error("--seq-len " + std::to_string(s.T) + " is longer than the model's longest sequence (" +
                    std::string(s.spec->max_positions_key()) + " " + std::to_string(s.spec->max_positions()) + ")",
                "--seq-len", "give at most " + std::to_string(s.spec->max_positions()));
  }
  s.B = static_cast<int>(config.train_micro_batch_size_per_gpu->value());
  s.gas = static_cast<int>(config.gradient_accumulation_steps->value());
  models::LoaderOptions loader_options;
  loader_options.shuffle = o.shuffle;
  loader_options.seed = o.seed;
  s.loader = std::make_unique<models::BatchLoader>(s.data, s.B, s.T, s.comm->rank(), s.comm->world(),
                                                   loader_options);

  // Engine and model.
  s.dtype = runtime::config::compute_dtype(config);
  s.layout = s.spec->layout();
  const models::ModelOptions model_options =
      run_model_options(s.dtype, o.activation_checkpointing, s.device->backend());
  s.setup = run_engine_setup(*s.spec, model_options, s.B, s.T);
  s.setup.io_completion_hook = offload::fault_hook_from_environment();  // the I/O fault tests only
  const auto engine_start = std::chrono::steady_clock::now();
  s.engine = std::make_unique<runtime::zero::ZeroEngine>(config, s.setup, *s.device, *s.compute, *s.comm, *s.tracer);
  s.engine_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - engine_start).count();
  // The disk's own tracks: the time the tier engine had reads (writes) in flight, from its
  // completion side, not the time some thread waited for them. The tracer outlives the engine.
  s.tier_io().set_activity_hook([tracer = s.tracer.get()](offload::IoOp op, std::int64_t start_ns,
                                                          std::int64_t end_ns, std::uint64_t bytes) {
    const bool read = op == offload::IoOp::kRead;
    tracer->record(read ? "read" : "write", read ? runtime::trace::kNvmeReadTrack : runtime::trace::kNvmeWriteTrack,
                   start_ns, end_ns, bytes);
  });
  if (s.rank0) {
    std::fprintf(stderr, "strata train: %s (%s), %lld parameters, %s, ZeRO stage %d, %d rank(s), device %s\n",
                 o.model_path.empty() ? o.preset.c_str() : o.model_path.c_str(), s.spec->describe().c_str(),
                 static_cast<long long>(s.spec->num_params()), std::string(dtype_name(s.dtype)).c_str(),
                 config.zero_optimization.stage, s.comm->world(), s.device->name().c_str());
    std::fprintf(stderr, "plan:\n%s", s.engine->plan().table(s.engine->plan_inputs()).c_str());
  }
  s.model = s.spec->make_model(model_options, *s.device, *s.compute, *s.engine);
  s.model->reserve(s.B, s.T);

  s.schedule = std::make_unique<runtime::zero::LrSchedule>(config.scheduler, config.optimizer->lr.value());
  return session;
}

}  // namespace strata::train
