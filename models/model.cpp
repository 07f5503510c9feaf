#include "models/model.h"

#include <fmt/format.h>

#include "core/error.h"

namespace strata::models {

int vocab_multiple_for(runtime::device::Backend backend) {
  return backend == runtime::device::Backend::cuda ? 128 : 1;
}

KvCache::KvCache(runtime::device::Device& device, int layers, int width, DType dtype, int batch, int max_T)
    : batch_(batch), max_T_(max_T) {
  if (batch <= 0 || max_T <= 0) {
    throw Error(fmt::format("KV cache of batch {} and length {}: both must be positive", batch, max_T));
  }
  const std::size_t bytes = static_cast<std::size_t>(batch) * static_cast<std::size_t>(max_T) *
                            static_cast<std::size_t>(width) * dtype_size(dtype);
  for (int l = 0; l < layers; ++l) {
    k_.push_back(device.allocate(bytes, fmt::format("KV cache keys of layer {}", l)));
    v_.push_back(device.allocate(bytes, fmt::format("KV cache values of layer {}", l)));
  }
}

std::uint64_t KvCache::bytes(int layers, int width, DType dtype, int batch, int max_T) {
  return 2ull * static_cast<std::uint64_t>(layers) * static_cast<std::uint64_t>(batch) *
         static_cast<std::uint64_t>(max_T) * static_cast<std::uint64_t>(width) * dtype_size(dtype);
}

}  // namespace strata::models
