#pragma once
// The config the streaming tests run under: DeepSpeed's ZeRO-Inference keys (stage 3 with
// offload_param to `params`), the host device with `device_bytes`, resolved.
#include <cstdint>
#include <string>

#include "core/units.h"
#include "runtime/config/config.h"

namespace strata::infer::test {

inline runtime::config::Config streaming_config(runtime::config::OffloadDevice params, const std::string& nvme,
                                                std::uint64_t device_bytes, int buffer_count) {
  runtime::config::Config c;
  c.train_micro_batch_size_per_gpu = std::uint64_t{1};
  c.zero_optimization.stage = 3;
  c.zero_optimization.offload_param.device = params;
  if (params == runtime::config::OffloadDevice::kNvme) c.zero_optimization.offload_param.nvme_path = {nvme};
  c.zero_optimization.offload_param.buffer_count = buffer_count;
  c.aio.block_size = 65'536;
  c.strata.device = runtime::config::DeviceKind::kHost;
  c.strata.device_memory_bytes = device_bytes;
  runtime::config::ResolveInputs in;
  in.host_memory_bytes = 8 * kGiB;
  in.cpu_count = 2;
  in.hidden_size = 64;
  return resolve_config(c, in);
}

}  // namespace strata::infer::test
