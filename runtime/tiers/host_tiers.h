#pragma once
// The host-side tiers of a run, made from the resolved config: the pinned host pool (pinned
// through the device's hook: cudaHostRegister on CUDA, nothing on the host device), the NVMe
// I/O engine over that pool, and the swap space over the nvme_path folders when something is
// offloaded to NVMe. Each tier reports its usage to the device, so that an out-of-memory error
// lists every tier.
//
// This is where config keys become offload/ options: aio.* -> AioOptions, strata.io_backend,
// strata.direct_io, strata.io_uring_sqpoll, strata.checksum, strata.pinned_memory,
// zero_optimization.offload_{param,optimizer}.nvme_path.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "offload/aio_engine.h"
#include "offload/host_buffer.h"
#include "offload/swap_space.h"
#include "runtime/config/config.h"
#include "runtime/device/device.h"

namespace strata::runtime {

offload::AioOptions aio_options(const Config& config);

// The NVMe folders of the config: offload_param's then offload_optimizer's, each once, in
// order; empty when neither section offloads to NVMe.
std::vector<std::string> nvme_paths(const Config& config);

offload::SwapOptions swap_options(const Config& config, std::vector<std::string> paths);

class HostTiers {
 public:
  // config: resolved (strata.pinned_memory is a byte count). device: borrowed, must outlive
  // this. Throws strata::Error for what the tiers refuse (a missing NVMe folder, io_uring asked
  // for where it is unavailable, O_DIRECT required where the file system lacks it, ...).
  HostTiers(const Config& config, Device& device);
  ~HostTiers();
  HostTiers(const HostTiers&) = delete;
  HostTiers& operator=(const HostTiers&) = delete;

  offload::HostPool& pinned() const { return state_->pinned; }
  offload::AioEngine& io() const { return state_->io; }
  // Null when nothing is offloaded to NVMe.
  offload::SwapSpace* swap() const { return state_->swap.get(); }

 private:
  // Shared with the usage reports the device holds, which may outlive this object: they see
  // an expired pointer and report nothing.
  struct State {
    State(const Config& config, Device& device);
    offload::HostPool pinned;
    offload::AioEngine io;
    std::unique_ptr<offload::SwapSpace> swap;
  };
  std::shared_ptr<State> state_;
};

}  // namespace strata::runtime
