#include "runtime/params/resident_params.h"

#include <algorithm>
#include <memory>

#include <fmt/format.h>

#include "core/error.h"

namespace strata::runtime::params {

ResidentParams::ResidentParams(device::Device& device, const std::vector<std::size_t>& module_numels,
                               const std::vector<std::string>& names, DType dtype,
                               bool with_grads)
    : dtype_(dtype), numels_(module_numels), counts_(module_numels.size()) {
  STRATA_ASSERT(names.size() == module_numels.size(), "one name per module");
  std::unique_ptr<device::Stream> stream = device.create_stream("resident-params-init");
  for (std::size_t m = 0; m < numels_.size(); ++m) {
    const std::size_t bytes = numels_[m] * dtype_size(dtype);
    params_.push_back(device.allocate(bytes, fmt::format("parameters of {}", names[m])));
    stream->memset_async(params_.back().data(), 0, bytes);
    if (with_grads) {
      grads_.push_back(device.allocate(bytes, fmt::format("gradients of {}", names[m])));
      stream->memset_async(grads_.back().data(), 0, bytes);
    }
  }
  stream->synchronize();
}

void ResidentParams::check_module(int module) const {
  STRATA_ASSERT(module >= 0 && module < module_count(), "module index out of range");
}

std::size_t ResidentParams::module_numel(int module) const {
  check_module(module);
  return numels_[static_cast<std::size_t>(module)];
}

ModuleView ResidentParams::acquire(int module) {
  check_module(module);
  ++counts_[static_cast<std::size_t>(module)].acquires;
  most_held_ = std::max(most_held_, ++held_);
  return {params(module), module_numel(module), dtype_, nullptr};
}

void ResidentParams::release(int module, const device::Event& /*done*/) {
  check_module(module);
  ++counts_[static_cast<std::size_t>(module)].releases;
  --held_;
}

ModuleView ResidentParams::acquire_grads(int module) {
  check_module(module);
  STRATA_ASSERT(!grads_.empty(), "acquire_grads on parameters made without gradients");
  ++counts_[static_cast<std::size_t>(module)].grad_acquires;
  return {grads(module), module_numel(module), dtype_, nullptr};
}

void ResidentParams::grads_ready(int module, const device::Event& /*done*/) {
  check_module(module);
  ++counts_[static_cast<std::size_t>(module)].grads_ready;
}

void ResidentParams::prefetch(int module) {
  check_module(module);
  ++counts_[static_cast<std::size_t>(module)].prefetches;
}

ModuleView ResidentParams::resident_view(int module) {
  check_module(module);
  return {params(module), module_numel(module), dtype_, nullptr};
}

void ResidentParams::cancel_prefetch(int module) {
  check_module(module);
  ++counts_[static_cast<std::size_t>(module)].cancels;
}

void* ResidentParams::params(int module) const {
  check_module(module);
  return params_[static_cast<std::size_t>(module)].data();
}

void* ResidentParams::grads(int module) const {
  check_module(module);
  STRATA_ASSERT(!grads_.empty(), "no gradient buffers");
  return grads_[static_cast<std::size_t>(module)].data();
}

void ResidentParams::zero_grads(device::Stream& stream) {
  for (std::size_t m = 0; m < grads_.size(); ++m) {
    stream.memset_async(grads_[m].data(), 0, grads_[m].bytes());
  }
}

const ResidentParams::Counts& ResidentParams::counts(int module) const {
  check_module(module);
  return counts_[static_cast<std::size_t>(module)];
}

}  // namespace strata::runtime::params
