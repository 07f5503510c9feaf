#pragma once
// The setup of one training run: everything it is built from, made in order by
// make_session() — the resolved config, the tracer and device, the communicator and compute
// stream, the host tiers, the data and its loader, the ZeRO engine, the model and the LR
// schedule. The members are destroyed in the reverse order (the model before the engine before
// the device). A Session does not move: the loader borrows the data, the engine the device.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "models/model.h"
#include "models/model_layout.h"
#include "models/model_spec.h"
#include "models/io/batch_loader.h"
#include "models/io/token_file.h"
#include "models/tokenizer_files.h"
#include "offload/aio_engine.h"
#include "offload/host_buffer.h"
#include "offload/swap_space.h"
#include "runtime/comm/comm.h"
#include "runtime/launch/launch.h"
#include "runtime/config/config.h"
#include "runtime/device/device.h"
#include "runtime/tiers/tier_store.h"
#include "runtime/trace/trace.h"
#include "runtime/zero/engine.h"
#include "runtime/zero/lr_schedule.h"
#include "train/train_options.h"

namespace strata::train {

struct Session {
  Session() = default;
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  runtime::launch::LaunchInfo launch;
  bool rank0 = false;
  models::ModelSpecPtr spec;  // the model's family and shape
  runtime::config::Config config;  // resolved; strata.device_memory is the device's budget
  std::string trace_path;  // where the tracer writes: --trace, else strata.trace; empty = none

  std::unique_ptr<runtime::trace::Tracer> tracer;  // busy-time accounting always on
  std::unique_ptr<runtime::device::Device> device;
  std::unique_ptr<runtime::comm::Communicator> comm;
  std::unique_ptr<runtime::device::Stream> compute;

  // Data and shapes: B sequences of T tokens per micro-batch, gas micro-batches per step.
  models::TokenData data;
  int B = 0;
  int T = 0;
  int gas = 0;
  std::unique_ptr<models::BatchLoader> loader;
  // The --model folder's tokenizer files (models/tokenizer_files.h), read at start: written into
  // every checkpoint and beside the --save weights. Empty for a preset or a folder without them.
  std::vector<models::ModelFile> tokenizer_files;

  DType dtype = DType::f32;  // compute dtype
  models::ModelLayout layout;
  runtime::zero::EngineSetup setup;
  std::unique_ptr<runtime::zero::ZeroEngine> engine;
  std::unique_ptr<models::Model> model;
  std::unique_ptr<runtime::zero::LrSchedule> schedule;

  // Seconds spent constructing the engine: the tier store making every state (the pinned pool's
  // share of it is in pinned().stats(): touching and pinning). For the startup line.
  double engine_seconds = 0;

  // The engine's host tiers the trainer uses: the checkpoint I/O engine, the pinned pool and the
  // swap space (nullptr without NVMe) for the memory reports.
  offload::AioEngine& tier_io() const { return engine->tiers().io(); }
  offload::HostPool& pinned() const { return engine->tiers().pinned(); }
  offload::SwapSpace* swap() const { return engine->tiers().swap(); }
};

// Builds the session of a run: reads the model config, the config file and the data, creates
// the device (options.device_* over strata.device*), communicator, tiers, engine and model, and
// prints the plan (rank 0). Throws strata::Error for bad input (config, model, data, budgets).
std::unique_ptr<Session> make_session(const TrainOptions& options);

}  // namespace strata::train
