#include "runtime/tiers/host_tiers.h"

#include <algorithm>
#include <utility>

#include "core/error.h"

namespace strata::runtime {

namespace {

offload::AioBackend to_backend(IoBackend backend) {
  switch (backend) {
    case IoBackend::kAuto: return offload::AioBackend::kAuto;
    case IoBackend::kIoUring: return offload::AioBackend::kIoUring;
    case IoBackend::kThreads: return offload::AioBackend::kThreads;
  }
  STRATA_ASSERT(false, "unknown IoBackend");
}

offload::DirectIo to_direct(DirectIoMode mode) {
  switch (mode) {
    case DirectIoMode::kAuto: return offload::DirectIo::kAuto;
    case DirectIoMode::kRequire: return offload::DirectIo::kRequire;
    case DirectIoMode::kOff: return offload::DirectIo::kOff;
  }
  STRATA_ASSERT(false, "unknown DirectIoMode");
}

offload::PinHook pin_hook(Device& device) {
  return {[&device](void* ptr, std::size_t bytes) { device.pin_host(ptr, bytes); },
          [&device](void* ptr) { device.unpin_host(ptr); }};
}

}  // namespace

offload::AioOptions aio_options(const Config& config) {
  offload::AioOptions o;
  o.block_size = config.aio.block_size;
  o.queue_depth = config.aio.queue_depth;
  o.parallelism = config.aio.intra_op_parallelism;
  o.single_submit = config.aio.single_submit;
  o.overlap_events = config.aio.overlap_events;
  o.sqpoll = config.strata.io_uring_sqpoll;
  o.backend = to_backend(config.strata.io_backend);
  return o;
}

std::vector<std::string> nvme_paths(const Config& config) {
  std::vector<std::string> paths;
  auto add = [&](OffloadDevice device, const std::vector<std::string>& section_paths) {
    if (device != OffloadDevice::kNvme) return;
    for (const std::string& p : section_paths) {
      if (std::find(paths.begin(), paths.end(), p) == paths.end()) paths.push_back(p);
    }
  };
  add(config.zero_optimization.offload_param.device, config.zero_optimization.offload_param.nvme_path);
  add(config.zero_optimization.offload_optimizer.device,
      config.zero_optimization.offload_optimizer.nvme_path);
  return paths;
}

offload::SwapOptions swap_options(const Config& config, std::vector<std::string> paths) {
  offload::SwapOptions o;
  o.paths = std::move(paths);
  o.block_size = config.aio.block_size;
  o.checksum = config.strata.checksum;
  o.direct = to_direct(config.strata.direct_io);
  return o;
}

HostTiers::State::State(const Config& config, Device& device)
    : pinned(config.strata.pinned_memory_bytes, pin_hook(device), "pinned host",
             "strata.pinned_memory"),
      io(aio_options(config), &pinned) {
  STRATA_ASSERT(config.strata.pinned_memory_bytes > 0,
                "HostTiers needs a resolved config (strata.pinned_memory is still 0)");
  std::vector<std::string> paths = nvme_paths(config);
  if (!paths.empty()) {
    swap = std::make_unique<offload::SwapSpace>(swap_options(config, std::move(paths)), io);
  }
}

HostTiers::HostTiers(const Config& config, Device& device)
    : state_(std::make_shared<State>(config, device)) {
  std::weak_ptr<State> weak = state_;
  device.add_tier([weak] {
    TierUsage usage{"pinned host", 0, 0, 0};
    if (auto s = weak.lock()) {
      offload::HostPoolStats stats = s->pinned.stats();
      usage = {"pinned host", stats.current_bytes, stats.peak_bytes, stats.budget_bytes};
    }
    return usage;
  });
  if (state_->swap) {
    device.add_tier([weak] {
      TierUsage usage{"nvme", 0, 0, 0};
      if (auto s = weak.lock()) {
        offload::SwapStats stats = s->swap->stats();
        std::uint64_t free_bytes = 0;
        for (const offload::SwapPathStats& p : stats.paths) free_bytes += p.free_bytes;
        // The NVMe budget is what the files hold plus what the file systems have left.
        usage = {"nvme", stats.used_bytes, stats.peak_bytes, stats.file_bytes + free_bytes};
      }
      return usage;
    });
  }
}

HostTiers::~HostTiers() = default;

}  // namespace strata::runtime
