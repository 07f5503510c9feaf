#include "models/model.h"

#include <algorithm>

#include <fmt/format.h>

#include "core/error.h"

namespace strata::models {

int vocab_multiple_for(runtime::device::Backend backend) {
  return backend == runtime::device::Backend::cuda ? 128 : 1;
}

KvCache::KvCache(runtime::device::Device& device, int layers, int width, DType dtype, int batch, int max_T)
    : batch_(batch), max_T_(max_T), width_(width), dtype_(dtype) {
  if (batch <= 0 || max_T <= 0) {
    throw Error(fmt::format("KV cache of batch {} and length {}: both must be positive", batch, max_T));
  }
  const std::size_t bytes = static_cast<std::size_t>(batch) * static_cast<std::size_t>(max_T) *
                            static_cast<std::size_t>(width) * dtype_size(dtype);
  for (int l = 0; l < layers; ++l) {
    k_.push_back(device.allocate(bytes, fmt::format("KV cache keys of layer {}", l)));
    v_.push_back(device.allocate(bytes, fmt::format("KV cache values of layer {}", l)));
  }
  lengths_.assign(static_cast<std::size_t>(batch), 0);
}

int KvCache::length() const { return *std::max_element(lengths_.begin(), lengths_.end()); }

bool KvCache::uniform() const {
  return std::all_of(lengths_.begin(), lengths_.end(), [&](int n) { return n == lengths_.front(); });
}

void KvCache::reset() { std::fill(lengths_.begin(), lengths_.end(), 0); }

void KvCache::advance(int n) {
  for (int& len : lengths_) len += n;
}

void KvCache::set_length(int row, int n) {
  STRATA_ASSERT(row >= 0 && row < batch_ && n >= 0 && n <= max_T_, "KV cache row length out of range");
  lengths_[static_cast<std::size_t>(row)] = n;
}

void* KvCache::keys(int layer, int row) {
  return static_cast<std::byte*>(keys(layer)) +
         static_cast<std::size_t>(row) * static_cast<std::size_t>(max_T_) * static_cast<std::size_t>(width_) *
             dtype_size(dtype_);
}

void* KvCache::values(int layer, int row) {
  return static_cast<std::byte*>(values(layer)) +
         static_cast<std::size_t>(row) * static_cast<std::size_t>(max_T_) * static_cast<std::size_t>(width_) *
             dtype_size(dtype_);
}

std::uint64_t KvCache::bytes(int layers, int width, DType dtype, int batch, int max_T) {
  return 2ull * static_cast<std::uint64_t>(layers) * static_cast<std::uint64_t>(batch) *
         static_cast<std::uint64_t>(max_T) * static_cast<std::uint64_t>(width) * dtype_size(dtype);
}

}  // namespace strata::models
