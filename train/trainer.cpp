// The training run from start to end; each part has its own file (train/trainer.h).
#include "train/trainer.h"

#include <chrono>
#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "core/error.h"
#include "core/log.h"
#include "runtime/checkpoint/checkpoint_dir.h"
#include "models/hf_weights.h"
#include "models/tokenizer_files.h"
#include "train/checkpointing.h"
#include "train/report.h"
#include "train/resume.h"
#include "train/run_state.h"
#include "train/session.h"
#include "train/step_loop.h"
#include "train/train_options.h"

namespace strata::train {
namespace {

// --save: every rank gathers, rank 0 writes (the HF layout, fp32), with the --model folder's
// tokenizer files when the weights go to a folder.
void save_weights(Session& s, const std::string& path, std::uint64_t shard_bytes) {
  std::vector<float> module_values;
  if (s.rank0) {
    if (models::write_tokenizer_files_for_weights(path, s.tokenizer_files)) {
      log::info("--save {}: the model folder's {} beside the weights", path, models::file_names_text(s.tokenizer_files));
    }
    models::write_hf_model(
        path, *s.spec,
        [&](int m) {
          module_values.assign(s.layout.modules[static_cast<std::size_t>(m)].numel, 0.0f);
          s.engine->gather_module(m, module_values.data());
          return static_cast<const float*>(module_values.data());
        },
        DType::f32, shard_bytes);
  } else {
    for (std::size_t m = 0; m < s.layout.modules.size(); ++m) {
      module_values.assign(s.layout.modules[m].numel, 0.0f);
      s.engine->gather_module(static_cast<int>(m), module_values.data());
    }
  }
}

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

// Where the time before the first step went: setup (config, device, data, the engine making
// every state — touching and pinning the pinned pool's memory is part of it — and the model)
// and the initial weights or the checkpoint.
void log_startup(const Session& s, double ready_s, double setup_s, double init_s, bool resumed) {
  const offload::HostPoolStats pool = s.pinned().stats();
  log::info("ready in {:.2f} s (setup {:.2f} s: states {:.2f} s, of which first touch {:.2f} s and pinning {:.2f} s "
            "of {:.2f} GiB; {} {:.2f} s)",
            ready_s, setup_s, s.engine_seconds, pool.touch_seconds, pool.pin_seconds,
            static_cast<double>(pool.current_bytes) / double(1ull << 30), resumed ? "resume" : "init", init_s);
}

}  // namespace

int run_training(const TrainOptions& o) {
  check_options(o);
  // The checkpoint folder is made (and checked for writing) before any training.
  std::optional<runtime::checkpoint::CheckpointDir> checkpoint_dir = open_checkpoint_dir(o);

  const auto start_time = std::chrono::steady_clock::now();
  const std::unique_ptr<Session> session = make_session(o);
  Session& s = *session;
  const double setup_s = seconds_since(start_time);
  RunState now = start_state(s, o);
  const auto init_time = std::chrono::steady_clock::now();
  const StartPoint start = resume_or_init(s, o, now);
  const double init_s = seconds_since(init_time);
  if (s.rank0) log_startup(s, seconds_since(start_time), setup_s, init_s, !o.resume_path.empty());
  const TierSnapshot after_init = snapshot(s);

  std::optional<Checkpointing> checkpoints;
  if (checkpoint_dir) checkpoints.emplace(std::move(*checkpoint_dir), o, s, start.step);
  const RunTotals totals = run_steps(s, o, start, checkpoints ? &*checkpoints : nullptr, now);

  s.engine->finish_updates();
  if (!o.save_path.empty()) save_weights(s, o.save_path, o.save_shard_bytes);
  s.device->synchronize();
  s.device->flush_trace();  // the GPU's last spans (cuda records them from a reader thread)
  s.tracer->flush();
  if (s.rank0 && o.report != "none") print_end_report(s, o, after_init, totals);
  if (checkpoints && checkpoints->last_save_failed()) {
    const std::optional<std::uint64_t> good = checkpoints->latest_good();
    throw CheckpointNotSaved(
        fmt::format("the run finished, but its last checkpoint (step {}) could not be written (the error is above); "
                    "{}",
                    *checkpoints->last_save_failed(),
                    good ? fmt::format("the latest good checkpoint is step {} ({}/{})", *good, o.checkpoint_dir,
                                       runtime::checkpoint::checkpoint_name(*good))
                         : std::string("there is no good checkpoint in the folder")),
        o.checkpoint_dir,
        fmt::format("the trained weights are saved{}; free space in the checkpoint folder (or give another), then "
                    "resume from the latest good checkpoint or train again (strata train exits {} for this)",
                    o.save_path.empty() ? " only with --save" : " (--save)", kExitCheckpointFailed));
  }
  return totals.stopped_by;
}

}  // namespace strata::train
