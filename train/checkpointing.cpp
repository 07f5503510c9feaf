// Checkpoints of a training run: the folder, the saver at each step boundary, stop signals.
#include "train/checkpointing.h"

#include <sys/statvfs.h>

#include <csignal>
#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "core/error.h"
#include "core/log.h"
#include "core/units.h"
#include "models/tokenizer_files.h"

namespace strata::train {
namespace {

// One line per save: a failed one says what failed, what to do (in the error's own "What to
// do", e.g. free space) and what happens next.
void report_save(const runtime::checkpoint::SaveResult& r, bool rank0, bool stop_on_error) {
  if (!r.ok) {
    log::error("checkpoint of step {} failed: {}; {}", r.step,
               r.error.empty() ? std::string("another rank failed") : r.error,
               stop_on_error ? "the run stops (strata.checkpoint_on_error \"stop\"); the previous checkpoint stays "
                               "`latest`, resume from it with --resume"
                             : "training goes on, the previous checkpoint stays `latest`, and the next checkpoint "
                               "tries again (strata.checkpoint_on_error \"stop\" would end the run)");
    return;
  }
  if (rank0) {
    log::info("checkpoint {}: {:.1f} MiB per rank written in {:.0f} ms", r.path,
              static_cast<double>(r.bytes) / (1 << 20), r.write_ms);
  }
}

std::unique_ptr<runtime::checkpoint::CheckpointSaver> make_saver(runtime::checkpoint::CheckpointDir dir,
                                                                 const TrainOptions& o, Session& s,
                                                                 std::uint64_t first_step,
                                                                 runtime::checkpoint::CrashPoints& crash) {
  const int keep = o.checkpoint_keep >= 0 ? o.checkpoint_keep : static_cast<int>(s.config.strata.checkpoint_keep);
  if (s.rank0) {
    for (std::uint64_t step : dir.complete_steps()) {
      if (step > first_step) {
        log::warn("{}/{} is later than the step this run resumed at ({}): left alone, never pruned; the run's "
                  "own checkpoints of the same steps replace it",
                  o.checkpoint_dir, runtime::checkpoint::checkpoint_name(step), first_step);
      }
    }
  }
  auto saver = std::make_unique<runtime::checkpoint::CheckpointSaver>(std::move(dir), keep, *s.engine, *s.device,
                                                                     *s.comm, s.tier_io(), crash);
  // The model's tokenizer files go into every checkpoint: strata convert writes them beside the weights.
  std::vector<runtime::checkpoint::ExtraFile> extra;
  for (const models::ModelFile& f : s.tokenizer_files) extra.push_back({f.name, f.bytes});
  saver->set_extra_files(std::move(extra));
  return saver;
}

}  // namespace

std::optional<runtime::checkpoint::CheckpointDir> open_checkpoint_dir(const TrainOptions& o) {
  if (o.checkpoint_dir.empty()) return std::nullopt;
  std::optional<runtime::checkpoint::CheckpointDir> dir(std::in_place, o.checkpoint_dir);
  const std::vector<std::uint64_t> held = dir->complete_steps();
  if (!held.empty() && o.resume_path.empty()) {
    throw Error("--checkpoint-dir " + o.checkpoint_dir + " already holds checkpoints (" +
                    runtime::checkpoint::checkpoint_name(held.front()) + " to " +
                    runtime::checkpoint::checkpoint_name(held.back()) + ") of another run",
                "--checkpoint-dir",
                "continue that run with --resume " + o.checkpoint_dir + ", or give another --checkpoint-dir");
  }
  return dir;
}

Checkpointing::Checkpointing(runtime::checkpoint::CheckpointDir dir, const TrainOptions& o, Session& s,
                             std::uint64_t first_step)
    : o_(o),
      s_(s),
      crash_(runtime::checkpoint::CrashPoints::from_environment()),
      saver_(make_saver(std::move(dir), o, s, first_step, crash_)),
      signals_({SIGINT, SIGTERM}, /*second_stops_now=*/true) {
  for (std::uint64_t step : saver_->dir().complete_steps()) {
    if (step <= first_step) latest_good_ = step;
  }
  check_free_space();
}

void Checkpointing::check_free_space() const {
  struct statvfs fs{};
  if (::statvfs(o_.checkpoint_dir.c_str(), &fs) != 0) return;  // the folder was checked for writing
  const std::uint64_t free_bytes = static_cast<std::uint64_t>(fs.f_bavail) * fs.f_frsize;
  const std::uint64_t one = saver_->checkpoint_bytes();
  if (free_bytes < one) {
    throw Error(fmt::format("the checkpoint folder has {} free; one checkpoint of this run needs {} ({} ranks' "
                            "shard files of the fp32 master weights, exp_avg and exp_avg_sq)",
                            format_bytes(free_bytes), format_bytes(one), s_.comm->world()),
                o_.checkpoint_dir, "free space there, or give --checkpoint-dir a folder on a disk with room");
  }
  const int keep = o_.checkpoint_keep >= 0 ? o_.checkpoint_keep : static_cast<int>(s_.config.strata.checkpoint_keep);
  // Held at once: the kept checkpoints and the one being written (keep 0 keeps every one).
  const std::uint64_t held = keep > 0 ? static_cast<std::uint64_t>(keep + 1) * one : 2 * one;
  if (free_bytes < held && s_.rank0) {
    log::warn("the checkpoint folder {} has {} free: room for {} checkpoint(s) of {}, but {} are kept at once "
              "(checkpoint_keep {} and the one being written); later checkpoints may fail for want of space",
              o_.checkpoint_dir, format_bytes(free_bytes), free_bytes / one, format_bytes(one),
              keep > 0 ? keep + 1 : 2, keep);
  }
}

Checkpointing::Boundary Checkpointing::after_step(std::uint64_t done, std::uint64_t applied_steps, RunState& now) {
  Boundary b;
  // A failed save is reported as soon as it is known; with strata.checkpoint_on_error "stop" the
  // run ends there, before another save begins. `ok` is the same on every rank (the saver
  // agrees on it), so every rank reports and stops together.
  const bool stop_on_error = s_.config.strata.checkpoint_on_error == runtime::config::CheckpointOnError::kStop;
  const auto finished = [&](const runtime::checkpoint::SaveResult& r) {
    b.saves.push_back(r);
    if (r.ok) {
      latest_good_ = r.step;
      last_failed_.reset();
    } else {
      last_failed_ = r.step;
    }
    report_save(r, s_.rank0, stop_on_error);
    if (!r.ok && stop_on_error) {
      throw Error("the checkpoint of step " + std::to_string(r.step) + " could not be written", o_.checkpoint_dir,
                  "see the error above; strata.checkpoint_on_error is \"stop\": fix the folder (free space, the "
                  "disk), then --resume " + o_.checkpoint_dir + " from the previous checkpoint");
    }
  };
  if (std::optional<runtime::checkpoint::SaveResult> r = saver_->finish()) finished(*r);
  b.stop = runtime::comm::any_rank(*s_.comm, *s_.device, *s_.compute, signals_.received() != 0);
  const bool last = done == o_.steps || b.stop;
  if (last || (o_.checkpoint_every > 0 && done % o_.checkpoint_every == 0)) {
    now.step = done;
    now.applied_steps = applied_steps;
    now.engine = s_.engine->train_state();
    now.loader = s_.loader->state();
    saver_->begin(done, now.to_json());
    if (last) {
      const runtime::checkpoint::SaveResult r = *saver_->finish();
      if (b.stop && !r.ok) {
        report_save(r, s_.rank0, /*stop_on_error=*/true);
        throw Error("stopped by a signal, and the checkpoint of step " + std::to_string(done) + " failed",
                    o_.checkpoint_dir, "see the error above; the previous checkpoint is still `latest`");
      }
      finished(r);
    }
  }
  return b;
}

int Checkpointing::stop_signal() const { return signals_.received() != 0 ? signals_.received() : SIGTERM; }

}  // namespace strata::train
