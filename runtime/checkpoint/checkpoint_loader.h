#pragma once
// Reading a checkpoint back: resume (the states into whichever tiers this run's config names)
// and export (the fp32 masters, all shards, module by module).
//
// open_checkpoint() resolves the folder, parses manifest.json (its own checksum), checks that
// every listed file is there with its size, and verifies meta.json. Shard files are verified
// as they stream: load_states() reads this rank's shard once, in file order, hashing as it goes,
// and throws naming the file when the checksum differs, before any step runs.
#include <cstdint>
#include <string>
#include <vector>

#include "offload/aio_engine.h"
#include "runtime/checkpoint/manifest.h"
#include "runtime/zero/engine.h"

namespace strata::runtime::checkpoint {

struct CheckpointFiles {
  std::string path;       // the checkpoint folder (step-NNNNNNNN)
  Manifest manifest;
  std::string meta_json;  // verified
};

// `path`: a checkpoint folder or a --checkpoint-dir holding `latest`.
CheckpointFiles open_checkpoint(const std::string& path);

// Loads this rank's shard into the engine. The checkpoint must have as many shards as the
// engine and the same modules (names, sizes); the callers check the model and world in meta.json
// first, so a mismatch here means a damaged or foreign file (named in the error).
void load_states(const CheckpointFiles& checkpoint, zero::ZeroEngine& engine, offload::AioEngine& io);

// One optimizer state of a checkpoint (the fp32 master by default), all shards joined and cut
// at each module's size: what `strata convert` exports. Verifies every shard file's checksum
// when opened.
class CheckpointStates {
 public:
  explicit CheckpointStates(const CheckpointFiles& checkpoint, tiers::OptimState state = tiers::OptimState::master);
  ~CheckpointStates();
  CheckpointStates(const CheckpointStates&) = delete;
  CheckpointStates& operator=(const CheckpointStates&) = delete;

  int module_count() const { return static_cast<int>(names_.size()); }
  const std::string& module_name(int module) const { return names_.at(static_cast<std::size_t>(module)); }
  std::size_t module_numel(int module) const;
  // Module m's values (module_numel(m) floats), valid until the next call.
  const float* read(int module);

 private:
  struct Shard;
  std::vector<Shard> shards_;
  std::vector<std::string> names_;
  std::vector<float> values_;
  tiers::OptimState state_;
};

}  // namespace strata::runtime::checkpoint
