#pragma once
// Saving a checkpoint while training goes on (docs/architecture.md, "Checkpoints").
//
// begin(step, meta) at a step boundary, on every rank (collective):
//   rank 0 makes D/.step-NNNNNNNN.partial/ and writes meta.json (the trainer's state) and the
//   extra files (set_extra_files: the model's tokenizer files) into it;
//   a barrier; then each rank that owns a shard posts the write of its shard file to the
//   optimizer worker (ZeroEngine::run_after_updates): it runs after the step's updates and
//   before the next step's, while the next step's forward and backward run on the trainer
//   thread. Each module's states are streamed from their tier (NVMe extents through the I/O
//   engine) into the shard file in chunks; nothing is staged whole.
// finish(), at the next step boundary (or at once for the last step, or on a stop signal;
//   collective): waits for this rank's shard file (fdatasynced), gathers every rank's
//   size + checksum, and rank 0 writes manifest.json, fsyncs, renames the folder into place,
//   moves `latest` and removes all but keep_last checkpoints (checkpoint_dir.h). A rank that
//   failed (a full disk, an I/O error) makes every rank skip the publish: the error is logged,
//   the partial folder removed, `latest` stays, training goes on. A failure to read the run's
//   own states (its NVMe tier) is not a failed save: finish() throws it, ending the run.
#include <cstdint>
#include <future>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/error.h"
#include "offload/aio_engine.h"
#include "runtime/checkpoint/checkpoint_dir.h"
#include "runtime/checkpoint/crash_points.h"
#include "runtime/checkpoint/manifest.h"
#include "runtime/comm/comm.h"
#include "runtime/device/device.h"
#include "runtime/zero/engine.h"

namespace strata::runtime::checkpoint {

// A file rank 0 copies into every checkpoint beside meta.json, as is, listed in the manifest (the
// model's tokenizer files, so that `strata convert` writes them beside the weights it exports).
struct ExtraFile {
  std::string name;   // a plain file name, not meta.json, manifest.json or a shard's
  std::string bytes;
};

struct SaveResult {
  bool ok = false;
  std::uint64_t step = 0;
  std::string path;          // the published checkpoint folder (rank 0), when ok
  std::uint64_t bytes = 0;   // this rank's shard file
  double write_ms = 0;       // this rank's shard write, on the optimizer worker
  double wait_ms = 0;        // finish() waiting for that write (the part not hidden by the step)
  double publish_ms = 0;     // the agreement and, on rank 0, manifest, renames, fsyncs, latest
  std::string error;         // this rank's failure, when there was one
};

class CheckpointSaver {
 public:
  // All borrowed; they must outlive the saver. keep_last: complete checkpoints kept (0 = all).
  // Reports and removes what earlier runs left unfinished in the folder (rank 0).
  CheckpointSaver(CheckpointDir dir, int keep_last, zero::ZeroEngine& engine, device::Device& device,
                  comm::Communicator& comm, offload::AioEngine& io, CrashPoints& crash);
  ~CheckpointSaver();  // waits for a shard write in flight; publishes nothing
  CheckpointSaver(const CheckpointSaver&) = delete;
  CheckpointSaver& operator=(const CheckpointSaver&) = delete;

  const CheckpointDir& dir() const { return dir_; }
  // The extra files of every later save (rank 0 writes them; other ranks may pass any).
  void set_extra_files(std::vector<ExtraFile> files);
  // The bytes one checkpoint takes in the folder: every rank's shard file (the manifest and
  // meta.json are a few KiB more).
  std::uint64_t checkpoint_bytes() const;
  // Collective. Starts the save of the states after `step` optimizer steps; meta_json is
  // written by rank 0 as meta.json. No save may be in flight (finish() it first).
  void begin(std::uint64_t step, const std::string& meta_json);
  // Collective. Completes the save in flight (see above); nullopt when none is. `ok` is the
  // same on every rank: the checkpoint was published.
  std::optional<SaveResult> finish();
  bool in_flight() const { return in_flight_; }

 private:
  void write_shard(std::uint64_t step);  // on the optimizer worker
  void start_cleanup();
  void close_meta();
  bool agree(bool ok_here, std::uint64_t bytes, std::uint64_t xxh3, Manifest* manifest);

  CheckpointDir dir_;
  int keep_last_;
  zero::ZeroEngine& engine_;
  device::Device& device_;
  comm::Communicator& comm_;
  offload::AioEngine& io_;
  CrashPoints& crash_;
  std::unique_ptr<device::Stream> stream_;  // the gather of sizes and checksums
  std::future<void> cleanup_;       // rank 0: removing old checkpoints, off the trainer thread

  bool in_flight_ = false;
  std::uint64_t step_ = 0;
  ManifestFile meta_file_;
  std::vector<ExtraFile> extra_files_;
  std::vector<ManifestFile> extra_written_;  // rank 0: those of the save in flight
  std::string meta_error_;  // rank 0: the partial folder or meta.json could not be written
  int meta_fd_ = -1;        // rank 0: meta.json, open from its write to its fsync in finish()
  std::promise<void> done_;
  std::future<void> done_future_;
  // Written by the worker task, read after done_future_.
  ManifestFile shard_file_;
  std::string shard_error_;
  std::optional<Error> state_failure_;  // reading the run's own states failed: finish() throws it
  double write_ms_ = 0;
};

}  // namespace strata::runtime::checkpoint
