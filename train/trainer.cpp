// The training run from start to end; each part has its own file (train/trainer.h).
#include "train/trainer.h"

#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"
#include "models/gpt/gpt_weights.h"
#include "train/checkpointing.h"
#include "train/report.h"
#include "train/resume.h"
#include "train/run_state.h"
#include "train/session.h"
#include "train/step_loop.h"
#include "train/train_options.h"

namespace strata::train {
namespace {

// --save: every rank gathers, rank 0 writes (HF GPT-2 safetensors, fp32).
void save_weights(Session& s, const std::string& path) {
  std::vector<float> module_values;
  if (s.rank0) {
    models::write_hf_weights(
        path, s.model_config,
        [&](int m) {
          module_values.assign(s.layout.modules[static_cast<std::size_t>(m)].numel, 0.0f);
          s.engine->gather_module(m, module_values.data());
          return static_cast<const float*>(module_values.data());
        },
        DType::f32);
  } else {
    for (std::size_t m = 0; m < s.layout.modules.size(); ++m) {
      module_values.assign(s.layout.modules[m].numel, 0.0f);
      s.engine->gather_module(static_cast<int>(m), module_values.data());
    }
  }
}

}  // namespace

int run_training(const TrainOptions& o) {
  check_options(o);
  // The checkpoint folder is made (and checked for writing) before any training.
  std::optional<runtime::checkpoint::CheckpointDir> checkpoint_dir = open_checkpoint_dir(o);

  const std::unique_ptr<Session> session = make_session(o);
  Session& s = *session;
  RunState now = start_state(s, o);
  const StartPoint start = resume_or_init(s, o, now);
  const TierSnapshot after_init = snapshot(s);

  std::optional<Checkpointing> checkpoints;
  if (checkpoint_dir) checkpoints.emplace(std::move(*checkpoint_dir), o, s, start.step);
  const RunTotals totals = run_steps(s, o, start, checkpoints ? &*checkpoints : nullptr, now);

  s.engine->finish_updates();
  if (!o.save_path.empty()) save_weights(s, o.save_path);
  s.device->synchronize();
  s.device->flush_trace();  // the GPU's last spans (cuda records them from a reader thread)
  s.tracer->flush();
  if (s.rank0 && o.report != "none") print_end_report(s, o, after_init, totals);
  return totals.stopped_by;
}

}  // namespace strata::train
