#pragma once
// The streams the engine's parts enqueue on besides the model's compute stream. Each part gets
// the ones it uses by reference; they outlive the parts (the facade owns them).
#include <memory>

#include "runtime/device/device.h"

namespace strata::runtime::zero {

struct EngineStreams {
  explicit EngineStreams(device::Device& device)
      : copy_in(device.create_stream("h2d")),
        staged_in(device.create_stream("h2d nvme")),
        copy_out(device.create_stream("d2h")),
        comm(device.create_stream("comm")),
        optim(device.create_stream("optimizer")) {}

  std::unique_ptr<device::Stream> copy_in;   // H2D (and D2D into gathered buffers); new parameters
  // H2D of parameter shards read from NVMe into pinned staging buffers. A stream of their own:
  // a copy fetched ahead waits on its stream for the read (a HostFlag), and on copy_in that wait
  // held up every H2D behind it, the updater's new parameters and `updated` events included
  // (Note [Staged copies] in param_fetcher.cpp).
  std::unique_ptr<device::Stream> staged_in;
  std::unique_ptr<device::Stream> copy_out;  // D2H of gradient shards
  std::unique_ptr<device::Stream> comm;      // collectives; device-side gradient accumulation
  std::unique_ptr<device::Stream> optim;     // device-resident optimizer work
};

}  // namespace strata::runtime::zero
