// strata train: config, device, communicator, tiers, engine, model, data; then the loop:
//   begin_step(lr) -> (forward, backward) x gradient_accumulation_steps -> step() -> metrics
// and at the end the weights (--save), the per-tier memory table, bytes moved and the trace.
#include "tools/train.h"

#include <algorithm>
#include <chrono>
#include <csignal>
#include <optional>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <memory>
#include <utility>
#include <vector>

#include <unistd.h>

#include "core/error.h"
#include "core/log.h"
#include "models/gpt/gpt_config.h"
#include "models/gpt/gpt_init.h"
#include "models/gpt/gpt_layout.h"
#include "models/gpt/gpt_model.h"
#include "models/gpt/gpt_weights.h"
#include "models/io/batch_loader.h"
#include "models/io/token_file.h"
#include "runtime/comm/comm.h"
#include "runtime/comm/launch.h"
#include "runtime/config/config.h"
#include "runtime/device/device.h"
#include "runtime/telemetry/busy_tracker.h"
#include "runtime/telemetry/progress.h"
#include "runtime/telemetry/step_metrics.h"
#include "runtime/telemetry/tables.h"
#include "runtime/tiers/tier_store.h"
#include "runtime/trace/trace.h"
#include "runtime/zero/engine.h"
#include "runtime/zero/lr_schedule.h"
#include "runtime/checkpoint/checkpoint_loader.h"
#include "runtime/checkpoint/checkpoint_saver.h"
#include "tools/stop_signals.h"
#include "tools/train_state.h"

namespace strata::tools {
namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

models::GptConfig load_model_config(const TrainOptions& o) {
  if (!o.model_path.empty() && !o.preset.empty()) {
    throw Error("both --model and --preset were given", "--model", "give one of them");
  }
  if (!o.model_path.empty()) return models::GptConfig::from_file(o.model_path);
  if (!o.preset.empty()) return models::GptConfig::preset(o.preset);
  throw Error("no model was given", "--model", "give --model config.json or --preset NAME");
}

models::TokenData load_data(const TrainOptions& o) {
  if (!o.data_path.empty() && !o.text_path.empty()) {
    throw Error("both --data and --text were given", "--data", "give one of them");
  }
  if (!o.data_path.empty()) return models::read_token_file(o.data_path);
  if (!o.text_path.empty()) return models::read_bytes_as_tokens(o.text_path);
  throw Error("no training data was given", "--data", "give --data tokens.bin (llm.c format) or --text FILE");
}

DType compute_dtype(const runtime::Config& c) {
  if (c.bf16.enabled.value_or(false)) return DType::bf16;
  if (c.fp16.enabled.value_or(false)) return DType::f16;
  return DType::f32;
}

runtime::TierMemory tier_memory(std::uint64_t current, std::uint64_t peak, std::uint64_t budget) {
  runtime::TierMemory t;
  t.current_bytes = current;
  t.peak_bytes = peak;
  t.budget_bytes = budget;
  return t;
}

struct TierSnapshot {
  runtime::TierMemory device, pinned, nvme;
};

TierSnapshot snapshot(const runtime::ZeroEngine& engine, const runtime::TierStore& tiers) {
  TierSnapshot s;
  const runtime::ArenaStats a = engine.device_memory();
  s.device = tier_memory(a.current_bytes, a.peak_bytes, a.budget_bytes);
  const offload::HostPoolStats p = tiers.pinned().stats();
  s.pinned = tier_memory(p.current_bytes, p.peak_bytes, p.budget_bytes);
  if (offload::SwapSpace* sw = tiers.swap()) {
    const offload::SwapStats n = sw->stats();
    std::uint64_t free_bytes = 0;
    for (const offload::SwapPathStats& path : n.paths) free_bytes += path.free_bytes;
    s.nvme = tier_memory(n.used_bytes, n.peak_bytes, n.file_bytes + free_bytes);
  }
  return s;
}

runtime::LinkBytes link_bytes(const runtime::EngineCounters& c) {
  runtime::LinkBytes b;
  b.nvme_read = c.nvme_read_bytes;
  b.nvme_write = c.nvme_write_bytes;
  b.h2d = c.h2d_bytes;
  b.d2h = c.d2h_bytes;
  b.collective = c.collective_bytes;
  return b;
}

runtime::LinkBytes minus(const runtime::LinkBytes& a, const runtime::LinkBytes& b) {
  runtime::LinkBytes d;
  d.nvme_read = a.nvme_read - b.nvme_read;
  d.nvme_write = a.nvme_write - b.nvme_write;
  d.h2d = a.h2d - b.h2d;
  d.d2h = a.d2h - b.d2h;
  d.collective = a.collective - b.collective;
  return d;
}

// The mean of `value` over the ranks (the same on every rank).
double mean_over_ranks(runtime::Communicator& comm, runtime::Device& device, runtime::Stream& stream,
                       double value) {
  if (comm.world() == 1) return value;
  runtime::DeviceBuffer buf = device.allocate(sizeof(float), "loss all-reduce");
  float host = static_cast<float>(value);
  stream.copy_async(buf.data(), &host, sizeof host);
  comm.all_reduce(buf.data(), buf.data(), 1, DType::f32, stream);
  stream.copy_async(&host, buf.data(), sizeof host);
  stream.synchronize();
  return static_cast<double>(host) / comm.world();
}

void check_optimizer(const runtime::Config& config) {
  const std::vector<std::string> unresolved = runtime::unresolved_auto_keys(config);
  if (!unresolved.empty()) {
    std::string keys;
    for (const std::string& k : unresolved) keys += (keys.empty() ? "" : ", ") + k;
    throw Error("these config values are still \"auto\": " + keys, unresolved.front(),
                "strata train has no outer framework to fill them in: give numbers");
  }
}

// An output file given on the command line must be creatable before hours of training make
// something to put in it: its folder exists and is writable, and it is not a folder itself.
void check_output_path(const std::string& path, const char* flag) {
  if (path.empty()) return;
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::is_directory(path, ec)) {
    throw Error(std::string(flag) + " " + path + " is a folder", flag, "give a file name");
  }
  fs::path parent = fs::path(path).parent_path();
  if (parent.empty()) parent = ".";
  if (!fs::is_directory(parent, ec)) {
    throw Error(std::string(flag) + " " + path + ": the folder " + parent.string() + " does not exist", flag,
                "create it first or give another path");
  }
  if (::access(parent.c_str(), W_OK) != 0) {
    throw Error(std::string(flag) + " " + path + ": the folder " + parent.string() + " is not writable", flag,
                "give a path in a folder you can write to");
  }
}

void report_save(const runtime::SaveResult& r, bool rank0) {
  if (!r.ok) {
    log::error("checkpoint of step {} failed: {}; training goes on, the previous checkpoint stays `latest`", r.step,
               r.error.empty() ? std::string("another rank failed") : r.error);
    return;
  }
  if (rank0) {
    log::info("checkpoint {}: {:.1f} MiB per rank written in {:.0f} ms", r.path,
              static_cast<double>(r.bytes) / (1 << 20), r.write_ms);
  }
}

}  // namespace

int run_training(const TrainOptions& o) {
  if (o.device.config_path.empty()) {
    throw Error("no config was given", "--config", "give --config ds.json (DeepSpeed-style JSON)");
  }
  if (o.steps == 0) throw Error("--steps must be at least 1", "--steps", "give the number of optimizer steps");
  check_output_path(o.save_path, "--save");
  check_output_path(o.trace_path, "--trace");
  check_output_path(o.metrics_path, "--metrics");
  if (!o.resume_path.empty() && !o.init_path.empty()) {
    throw Error("both --resume and --init were given", "--init",
                "--resume continues a run with its weights and optimizer states; drop --init");
  }
  if (o.checkpoint_every > 0 && o.checkpoint_dir.empty()) {
    throw Error("--checkpoint-every needs --checkpoint-dir", "--checkpoint-every", "give --checkpoint-dir D");
  }
  // The checkpoint folder is made (and checked for writing) before any training. A new run does
  // not write into another run's checkpoints: `latest` and keep_last would mix the two.
  std::optional<runtime::CheckpointDir> checkpoint_dir;
  if (!o.checkpoint_dir.empty()) {
    checkpoint_dir.emplace(o.checkpoint_dir);
    const std::vector<std::uint64_t> held = checkpoint_dir->complete_steps();
    if (!held.empty() && o.resume_path.empty()) {
      throw Error("--checkpoint-dir " + o.checkpoint_dir + " already holds checkpoints (" +
                      runtime::checkpoint_name(held.front()) + " to " + runtime::checkpoint_name(held.back()) +
                      ") of another run",
                  "--checkpoint-dir",
                  "continue that run with --resume " + o.checkpoint_dir + ", or give another --checkpoint-dir");
    }
  }
  runtime::CrashPoints crash = runtime::CrashPoints::from_environment();
  const runtime::LaunchInfo launch = runtime::detect_launch();
  const models::GptConfig model_config = load_model_config(o);
  runtime::ParsedConfig parsed = runtime::load_config_file(o.device.config_path);
  runtime::ResolveInputs resolve_inputs;
  resolve_inputs.world_size = static_cast<std::uint32_t>(launch.world);
  resolve_inputs.hidden_size = static_cast<std::uint64_t>(model_config.n_embd);
  runtime::Config config = runtime::resolve_config(parsed.config, resolve_inputs);
  if (!config.optimizer) {
    log::warn("the config has no optimizer section: AdamW with DeepSpeed's defaults (lr 1e-3)");
    config.optimizer = runtime::OptimizerConfig{};
  }
  check_optimizer(config);
  const bool rank0 = launch.rank == 0;

  // Device, with the tracer (busy-time accounting always on, spans kept for --trace).
  runtime::Tracer tracer(o.trace_path, "rank " + std::to_string(launch.rank), /*account_busy=*/true);
  runtime::DeviceOptions device_options = resolve_device_options(o.device);
  device_options.tracer = &tracer;
  std::unique_ptr<runtime::Device> device = runtime::Device::create(device_options);
  if (config.strata.device_memory_bytes == 0 || !o.device.device_memory.empty()) {
    config.strata.device_memory_bytes = device->memory_stats().budget_bytes;
  }
  if (rank0) runtime::log_config(config);
  std::unique_ptr<runtime::Communicator> comm = runtime::create_communicator(*device);
  std::unique_ptr<runtime::Stream> compute = device->create_stream("compute");

  // Data and shapes.
  const models::TokenData data = load_data(o);
  data.validate(model_config.vocab_size);
  const int T = o.seq_len > 0 ? o.seq_len : std::min(model_config.n_positions, 1024);
  if (T > model_config.n_positions) {
    throw Error("--seq-len " + std::to_string(T) + " is longer than the model's n_positions (" +
                    std::to_string(model_config.n_positions) + ")",
                "--seq-len", "give at most n_positions");
  }
  const int B = static_cast<int>(config.train_micro_batch_size_per_gpu->value());
  const int gas = static_cast<int>(config.gradient_accumulation_steps->value());
  models::LoaderOptions loader_options;
  loader_options.shuffle = o.shuffle;
  loader_options.seed = o.seed;
  models::BatchLoader loader(data, B, T, comm->rank(), comm->world(), loader_options);

  // Engine and model.
  const DType dtype = compute_dtype(config);
  const models::GptLayout layout = models::GptLayout::build(model_config);
  runtime::EngineSetup setup;
  setup.module_numels = layout.module_numels();
  setup.module_names = layout.module_names();
  setup.dtype = dtype;
  setup.activation_bytes = models::GptModel::activation_bytes(model_config, dtype, B, T, o.activation_checkpointing);
  runtime::ZeroEngine engine(config, setup, *device, *compute, *comm, tracer);
  runtime::TierStore& tiers = engine.tiers();
  if (rank0) {
    std::fprintf(stderr, "strata train: %s, %lld parameters, %s, ZeRO stage %d, %d rank(s), device %s\n",
                 o.model_path.empty() ? o.preset.c_str() : o.model_path.c_str(),
                 static_cast<long long>(model_config.num_params()), std::string(dtype_name(dtype)).c_str(),
                 config.zero_optimization.stage, comm->world(), device->name().c_str());
    std::fprintf(stderr, "plan:\n%s", engine.plan().table(engine.plan_inputs()).c_str());
  }
  models::GptOptions model_options;
  model_options.dtype = dtype;
  model_options.checkpointing = o.activation_checkpointing;
  models::GptModel model(model_config, model_options, *device, *compute, engine);
  model.reserve(B, T);

  const runtime::LrSchedule schedule(config.scheduler, config.optimizer->lr.value());
  // What a checkpoint records besides the states (and what a resumed run must match).
  TrainState now;
  now.world = comm->world();
  now.shards = engine.shards();
  now.stage = config.zero_optimization.stage;
  now.dtype = std::string(dtype_name(dtype));
  now.seq_len = T;
  now.seed = o.seed;
  now.shuffle = o.shuffle;
  now.model = model_config;
  now.config_json = runtime::config_to_json(config);
  std::uint64_t first_step = 0;
  std::uint64_t applied_steps = 0;  // the scheduler advances only on steps not skipped (fp16)

  if (!o.resume_path.empty()) {
    // Every rank checks and loads its part; a failure on any rank stops every rank (each
    // would otherwise wait for the others in the first step's collectives).
    std::optional<Error> failed;
    std::string resumed_from;
    try {
      const runtime::CheckpointFiles files = runtime::open_checkpoint(o.resume_path);
      const std::string where = files.path + "/meta.json";
      const TrainState saved = TrainState::from_json(files.meta_json, where);
      if (saved.step != files.manifest.step) {
        throw Error(where + " is at step " + std::to_string(saved.step) + " but its manifest at step " +
                        std::to_string(files.manifest.step),
                    where, "the checkpoint is damaged: resume from an earlier one");
      }
      check_resume(saved, now, files.path);
      if (saved.step >= o.steps) {
        throw Error("the checkpoint " + files.path + " is at step " + std::to_string(saved.step) +
                        " and --steps is " + std::to_string(o.steps) + ": nothing is left to train",
                    "--steps", "--steps is the run's total: raise it to train further");
      }
      // The cheap checks (data position, loss scaling mode) before the states' I/O.
      loader.restore(saved.loader);
      engine.restore_train_state(saved.engine);
      runtime::load_states(files, engine, tiers.io());
      first_step = saved.step;
      applied_steps = saved.applied_steps;
      resumed_from = files.path;
    } catch (const Error& e) {
      failed = e;
    }
    if (runtime::any_rank(*comm, *device, *compute, failed.has_value())) {
      if (failed) throw *failed;
      throw Error("another rank could not resume from " + o.resume_path + " (its error says why)", "--resume",
                  "see the other ranks' errors");
    }
    if (rank0) log::info("resumed from {} at step {}", resumed_from, first_step);
  } else {
    std::unique_ptr<models::HfWeightsReader> reader;
    if (!o.init_path.empty()) reader = std::make_unique<models::HfWeightsReader>(o.init_path, model_config);
    for (std::size_t m = 0; m < layout.modules.size(); ++m) {
      std::vector<float> values(layout.modules[m].numel);
      if (reader) {
        reader->read_module(static_cast<int>(m), values.data());
      } else {
        models::init_module(model_config, layout.modules[m], o.seed, values.data());
      }
      engine.load_module(static_cast<int>(m), values.data());
    }
  }
  const TierSnapshot after_init = snapshot(engine, tiers);

  std::unique_ptr<runtime::CheckpointSaver> saver;
  std::optional<StopSignals> signals;
  if (checkpoint_dir) {
    const int keep = o.checkpoint_keep >= 0 ? o.checkpoint_keep : static_cast<int>(config.strata.checkpoint_keep);
    if (rank0) {
      for (std::uint64_t s : checkpoint_dir->complete_steps()) {
        if (s > first_step) {
          log::warn("{}/{} is later than the step this run resumed at ({}): left alone, never pruned; the run's "
                    "own checkpoints of the same steps replace it",
                    o.checkpoint_dir, runtime::checkpoint_name(s), first_step);
        }
      }
    }
    saver = std::make_unique<runtime::CheckpointSaver>(std::move(*checkpoint_dir), keep, engine, *device, *comm,
                                                       tiers.io(), crash);
    signals.emplace(std::initializer_list<int>{SIGINT, SIGTERM}, /*second_stops_now=*/true);
  }
  int stopped_by = 0;
  runtime::MetricsWriter metrics(rank0 ? o.metrics_path : std::string());
  runtime::Progress progress(o.steps, std::cerr, rank0 && runtime::stderr_is_terminal());
  runtime::BusyTracker busy(tracer);
  const double flops_per_token =
      (o.activation_checkpointing ? 8.0 : 6.0) * static_cast<double>(model_config.num_params());
  const std::uint64_t tokens_per_step = static_cast<std::uint64_t>(B) * T * gas * comm->world();
  double psi_bytes = 0;  // Ψ: the model's parameters in the compute dtype
  for (std::size_t n : setup.module_numels) psi_bytes += static_cast<double>(n * dtype_size(dtype));
  const int stage = config.zero_optimization.stage;
  const double theory = comm->world() == 1 ? 0.0
                        : (stage == 3 ? 3.0 : 2.0) * psi_bytes * (comm->world() - 1) / comm->world();

  std::vector<std::int32_t> inputs(static_cast<std::size_t>(B) * T), targets(inputs.size());
  runtime::LinkBytes total_bytes;
  // Memory per tier after each phase of a step (the metrics carry it; the end report shows the
  // last step's).
  std::vector<std::pair<std::string, runtime::TierMemory>> phases;
  for (std::uint64_t step = first_step; step < o.steps; ++step) {
    const Clock::time_point t0 = Clock::now();
    busy.begin_step();
    const runtime::LinkBytes bytes_before = link_bytes(engine.counters());
    const double lr = schedule.lr(applied_steps);
    engine.begin_step(lr);
    double loss_sum = 0, forward_ms = 0, backward_ms = 0;
    for (int k = 0; k < gas; ++k) {
      loader.next(inputs.data(), targets.data());
      const Clock::time_point tf = Clock::now();
      loss_sum += model.forward(inputs.data(), targets.data(), B, T, true);
      forward_ms += ms_since(tf);
      if (k == 0) {
        const TierSnapshot s = snapshot(engine, tiers);
        phases.clear();
        phases.push_back({"device after forward", s.device});
        phases.push_back({"pinned after forward", s.pinned});
      }
      const Clock::time_point tb = Clock::now();
      model.backward(engine.backward_loss_scale());
      compute->synchronize();
      backward_ms += ms_since(tb);
    }
    {
      const TierSnapshot s = snapshot(engine, tiers);
      phases.push_back({"device after backward", s.device});
      phases.push_back({"pinned after backward", s.pinned});
    }
    const Clock::time_point ts = Clock::now();
    const runtime::StepOutcome outcome = engine.step();
    const double optimizer_ms = ms_since(ts);
    if (!outcome.skipped) ++applied_steps;

    // Checkpoints: the save begun after the last step is published now; a new one starts when
    // due and writes while the next step computes. Its time at the boundary counts in step_ms.
    bool stop = false;
    double checkpoint_ms = 0;
    std::vector<runtime::SaveResult> saves;  // finished in this step's boundary
    if (saver) {
      const Clock::time_point tc = Clock::now();
      if (std::optional<runtime::SaveResult> r = saver->finish()) saves.push_back(*r);
      stop = runtime::any_rank(*comm, *device, *compute, signals->received() != 0);
      const std::uint64_t done = step + 1;
      const bool last = done == o.steps || stop;
      if (last || (o.checkpoint_every > 0 && done % o.checkpoint_every == 0)) {
        now.step = done;
        now.applied_steps = applied_steps;
        now.engine = engine.train_state();
        now.loader = loader.state();
        saver->begin(done, now.to_json());
        if (last) {
          saves.push_back(*saver->finish());
          if (stop && !saves.back().ok) {
            report_save(saves.back(), rank0);
            throw Error("stopped by a signal, and the checkpoint of step " + std::to_string(done) + " failed",
                        o.checkpoint_dir, "see the error above; the previous checkpoint is still `latest`");
          }
        }
      }
      for (const runtime::SaveResult& r : saves) report_save(r, rank0);
      checkpoint_ms = ms_since(tc);
    }
    const double step_ms = ms_since(t0);

    runtime::StepMetrics m;
    m.step = step + 1;
    m.loss = mean_over_ranks(*comm, *device, *compute, loss_sum / gas);
    m.lr = lr;
    m.step_ms = step_ms;
    m.tokens_per_s = static_cast<double>(tokens_per_step) / (step_ms / 1000.0);
    m.tflops = flops_per_token * m.tokens_per_s / 1e12;
    m.grad_norm = outcome.grad_norm;
    m.loss_scale = outcome.loss_scale;
    m.skipped = outcome.skipped;
    m.phase_ms = {{"forward", forward_ms}, {"backward", backward_ms}, {"optimizer", optimizer_ms}};
    if (saver) m.phase_ms.push_back({"checkpoint", checkpoint_ms});
    for (const runtime::SaveResult& r : saves) {
      m.checkpoints.push_back({r.step, r.ok, r.bytes, r.write_ms, r.wait_ms, r.publish_ms});
    }
    m.bytes = minus(link_bytes(engine.counters()), bytes_before);
    total_bytes += m.bytes;
    m.collective_theory_bytes = theory;
    const TierSnapshot s = snapshot(engine, tiers);
    m.device = s.device;
    m.pinned = s.pinned;
    m.nvme = s.nvme;
    phases.push_back({"device after step", s.device});
    phases.push_back({"pinned after step", s.pinned});
    if (tiers.swap() != nullptr) phases.push_back({"nvme after step", s.nvme});
    m.memory_at_phase = phases;
    const runtime::BusyTracker::Result b = busy.end_step();
    m.busiest = b.busiest;
    m.busiest_ms = b.busiest_ms;
    m.overlap = runtime::overlap_ratio(step_ms, b.busiest_ms);
    if (!std::isfinite(m.loss)) {
      throw Error("the loss is " + std::to_string(m.loss) + " at step " + std::to_string(m.step),
                  "optimizer.params.lr", "lower the learning rate, enable gradient_clipping, or use bf16");
    }
    metrics.write(m);
    if (rank0) progress.update(m);

    if (stop) {
      stopped_by = signals->received() != 0 ? signals->received() : SIGTERM;
      if (rank0) log::warn("stopped after step {} by a signal; resume with --resume {}", step + 1, o.checkpoint_dir);
      break;
    }
  }
  if (rank0) progress.finish();

  engine.finish_updates();

  // --save: every rank gathers, rank 0 writes.
  if (!o.save_path.empty()) {
    std::vector<float> module_values;
    if (rank0) {
      models::write_hf_weights(
          o.save_path, model_config,
          [&](int m) {
            module_values.assign(layout.modules[static_cast<std::size_t>(m)].numel, 0.0f);
            engine.gather_module(m, module_values.data());
            return static_cast<const float*>(module_values.data());
          },
          DType::f32);
    } else {
      for (std::size_t m = 0; m < layout.modules.size(); ++m) {
        module_values.assign(layout.modules[m].numel, 0.0f);
        engine.gather_module(static_cast<int>(m), module_values.data());
      }
    }
  }
  tracer.flush();

  if (rank0 && o.report != "none") {
    std::vector<std::pair<std::string, runtime::TierMemory>> rows = {
        {"device after init", after_init.device}, {"pinned after init", after_init.pinned}};
    rows.insert(rows.end(), phases.begin(), phases.end());
    const runtime::EngineCounters c = engine.counters();
    std::fprintf(stderr, "\nmemory per tier:\n%s\nbytes moved (%llu steps, this rank):\n%s",
                 runtime::memory_table(rows).c_str(), static_cast<unsigned long long>(o.steps),
                 runtime::bytes_table(total_bytes, theory * static_cast<double>(o.steps)).c_str());
    std::fprintf(stderr, "fetches %llu (prefetched %llu, kept for reuse %llu), trace divergences %llu\n",
                 static_cast<unsigned long long>(c.fetches), static_cast<unsigned long long>(c.prefetched),
                 static_cast<unsigned long long>(c.reused), static_cast<unsigned long long>(c.trace_divergences));
    if (!o.trace_path.empty()) std::fprintf(stderr, "trace: %s (open in ui.perfetto.dev)\n", o.trace_path.c_str());
    if (!o.save_path.empty()) std::fprintf(stderr, "weights: %s\n", o.save_path.c_str());
  }
  device->synchronize();
  return stopped_by;
}

}  // namespace strata::tools
