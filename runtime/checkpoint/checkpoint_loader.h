#pragma once
// Reading a checkpoint back: resume (the states into whichever tiers this run's config names)
// and export (the fp32 masters, all shards, module by module).
//
// open_checkpoint() resolves the folder, parses manifest.json (its own checksum), checks that
// every listed file is there with its size, and verifies meta.json. Shard files are verified
// as they stream: load_states() reads this rank's shard once, in file order, hashing as it goes,
// and throws naming the file when the checksum differs, before any step runs.
#include <cstdint>
#include <functional>
#include <string>

#include "offload/aio_engine.h"
#include "runtime/checkpoint/manifest.h"
#include "runtime/zero/engine.h"

namespace strata::runtime {

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
void load_states(const CheckpointFiles& checkpoint, ZeroEngine& engine, offload::AioEngine& io);

// The fp32 master of each module, all shards joined and cut at the module's size, in module
// order: visit(module, name, values, numel). Verifies every shard file's checksum first.
void read_masters(const CheckpointFiles& checkpoint,
                  const std::function<void(int module, const std::string& name, const float* values,
                                           std::size_t numel)>& visit);

}  // namespace strata::runtime
