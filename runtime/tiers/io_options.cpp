#include "runtime/tiers/io_options.h"

#include <utility>

#include "core/error.h"

namespace strata::runtime::tiers {
namespace {

offload::AioBackend to_backend(config::IoBackend backend) {
  switch (backend) {
    case config::IoBackend::kAuto: return offload::AioBackend::kAuto;
    case config::IoBackend::kIoUring: return offload::AioBackend::kIoUring;
    case config::IoBackend::kThreads: return offload::AioBackend::kThreads;
  }
  STRATA_ASSERT(false, "unknown IoBackend");
}

offload::DirectIo to_direct(config::DirectIoMode mode) {
  switch (mode) {
    case config::DirectIoMode::kAuto: return offload::DirectIo::kAuto;
    case config::DirectIoMode::kRequire: return offload::DirectIo::kRequire;
    case config::DirectIoMode::kOff: return offload::DirectIo::kOff;
  }
  STRATA_ASSERT(false, "unknown DirectIoMode");
}

}  // namespace

offload::AioOptions aio_options(const config::Config& config) {
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

offload::SwapOptions swap_options(const config::Config& config, std::vector<std::string> paths) {
  offload::SwapOptions o;
  o.paths = std::move(paths);
  o.block_size = config.aio.block_size;
  o.checksum = config.strata.checksum;
  o.direct = to_direct(config.strata.direct_io);
  return o;
}

}  // namespace strata::runtime::tiers
