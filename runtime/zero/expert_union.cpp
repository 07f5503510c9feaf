#include "runtime/zero/expert_union.h"

#include <cstddef>

#include "core/dtype.h"

namespace strata::runtime::zero {

void ExpertUnion::unite(std::vector<std::uint8_t>& picked, comm::Communicator& comm, device::Device& device,
                        device::Stream& stream) {
  if (comm.world() == 1 || picked.empty()) return;
  const std::size_t bytes = picked.size() * sizeof(float);
  if (flags_.bytes() < bytes) {
    flags_ = device::DeviceBuffer();
    flags_ = device.allocate(bytes, "routed experts of every rank");
  }
  std::vector<float> host(picked.begin(), picked.end());
  stream.copy_async(flags_.data(), host.data(), bytes);
  comm.all_reduce(flags_.data(), flags_.data(), picked.size(), DType::f32, stream, comm::ReduceOp::max);
  stream.copy_async(host.data(), flags_.data(), bytes);
  stream.synchronize();
  for (std::size_t e = 0; e < picked.size(); ++e) picked[e] = host[e] != 0.0f ? 1 : 0;
}

}  // namespace strata::runtime::zero
