#pragma once
// Where the config's I/O keys become offload/ options: aio.* -> AioOptions; strata.io_backend,
// strata.direct_io, strata.io_uring_sqpoll, strata.checksum and aio.block_size -> SwapOptions.
// Which folders the swap space uses is a placement decision: plan.h (nvme_paths).
#include <string>
#include <vector>

#include "offload/aio_engine.h"
#include "offload/swap_space.h"
#include "runtime/config/config.h"

namespace strata::runtime::tiers {

offload::AioOptions aio_options(const config::Config& config);
offload::SwapOptions swap_options(const config::Config& config, std::vector<std::string> paths);

}  // namespace strata::runtime::tiers
