#pragma once
// The folder that holds a run's checkpoints, and the file-system steps that make a save atomic.
//
// Layout of a checkpoint folder D (--checkpoint-dir):
//   D/step-00000120/            a complete checkpoint: manifest.json, meta.json, shard files
//   D/latest                    one line: the name of the newest complete checkpoint
//   D/.step-00000140.partial/   a save in progress (or cut short by a crash): never loaded
//   D/.step-00000020.deleting/  an old checkpoint being removed (keep_last)
//
// A save writes everything into the .partial folder, fsyncs every file and the folder, renames
// it to step-NNNNNNNN and fsyncs D; only then is `latest` replaced (written as .latest.tmp,
// fsynced, renamed over latest, D fsynced). A crash at any point leaves `latest` naming the
// previous complete checkpoint; a folder named step-* always has every file of its manifest.
// Old checkpoints are renamed to .deleting before they are removed, so a crash while removing
// never leaves a half-deleted folder under a checkpoint's name.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/file_io.h"
#include "runtime/checkpoint/crash_points.h"

namespace strata::runtime::checkpoint {

inline constexpr const char* kManifestFile = "manifest.json";
inline constexpr const char* kMetaFile = "meta.json";

// "step-00000120" for step 120.
std::string checkpoint_name(std::uint64_t step);
// The step of a folder named like checkpoint_name(), or nullopt.
std::optional<std::uint64_t> checkpoint_step(const std::string& name);

// core/file_io.h's write_file_atomic with the checkpoint's crash points (tests: a crash after
// each step of the replace).
void write_file_atomic(const std::string& path, const std::string& text, CrashPoints* crash = nullptr);

class CheckpointDir {
 public:
  // Creates `path` when missing (its parent must exist); throws strata::Error when it cannot be
  // created or written to.
  explicit CheckpointDir(std::string path);

  const std::string& path() const { return path_; }
  std::string partial_path(std::uint64_t step) const;  // D/.step-NNNNNNNN.partial
  std::string final_path(std::uint64_t step) const;    // D/step-NNNNNNNN

  // Makes an empty partial folder for `step`, removing one left by an earlier crash.
  std::string begin_partial(std::uint64_t step) const;
  // fsyncs the partial folder, renames it to its final name (or swaps it with an existing
  // step-N in one atomic rename), fsyncs D; then `latest`; then, best effort (a warning on
  // failure: the checkpoint is published), prune(step, keep_last) (0 keeps all).
  // A crash point is hit after each durable change. Removing the .deleting folders (tens of
  // ms for a large shard file) is remove_leftovers(), which the saver runs off the step.
  void publish(std::uint64_t step, int keep_last, CrashPoints* crash) const;

  // Renames all but the newest `keep_last` complete checkpoints up to `step` to .deleting.
  void prune(std::uint64_t step, int keep_last, CrashPoints* crash) const;
  // Complete checkpoints here, by step (oldest first).
  std::vector<std::uint64_t> complete_steps() const;
  // Left-over .partial / .deleting folders (from crashes); remove_leftovers() removes them
  // (with partial_too false, only the .deleting ones: safe beside a save in progress).
  std::vector<std::string> leftovers() const;
  void remove_leftovers(bool partial_too = true) const;

 private:
  std::string path_;
};

// The .partial / .deleting folders in `dir`.
std::vector<std::string> checkpoint_leftovers(const std::string& dir);
// The complete checkpoints (step-N folders with a manifest.json) in `dir`, by step (oldest first).
std::vector<std::uint64_t> complete_checkpoint_steps(const std::string& dir);

// The checkpoint folder a --resume argument names: `path` itself when it holds manifest.json,
// else the folder `path/latest` names, else (no `latest`: a run killed between publishing its
// first checkpoint and writing `latest`) the newest complete checkpoint in `path`. Throws
// strata::Error saying what was found instead.
std::string resolve_checkpoint(const std::string& path);

}  // namespace strata::runtime::checkpoint
