#pragma once
// What a ZeroEngine is made of, in construction order (each part borrows the ones above it;
// destruction runs the other way, so the update worker stops first and the tier store goes
// last). Private to engine.cpp and engine_states.cpp.
#include "runtime/zero/engine.h"
#include "runtime/zero/engine_streams.h"
#include "runtime/zero/grad_path.h"
#include "runtime/zero/param_fetcher.h"
#include "runtime/zero/update_gate.h"
#include "runtime/zero/updater.h"

namespace strata::runtime::zero {

struct ZeroEngine::Parts {
  Parts(const config::Config& config, const EngineSetup& setup, device::Device& device, device::Stream& compute,
        comm::Communicator& comm, trace::Tracer& tracer);
  static tiers::StoreSetup store_setup(const EngineSetup& setup, const comm::Communicator& comm);

  comm::Communicator& comm;
  EngineStreams streams;
  tiers::TierStore store;
  UpdateGate gate;
  ParamFetcher fetcher;
  GradPath grads;
  Updater updater;
};

}  // namespace strata::runtime::zero
