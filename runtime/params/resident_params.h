#pragma once
// The simplest ParamProvider: every module's parameters and gradients resident in device
// memory for the whole run (what fits on the device; tests, small models, inference of small
// models). The ZeRO engine replaces it without touching the model.
#include <cstddef>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "runtime/device/device.h"
#include "runtime/params/param_provider.h"

namespace strata::runtime::params {

class ResidentParams final : public ParamProvider {
 public:
  // Allocates one parameter and (when with_grads) one gradient buffer per module from the
  // device arena, zero-filled; OutOfMemory (naming the module) when they do not fit.
  // `names` label the allocations in memory reports. `device` must outlive this.
  ResidentParams(device::Device& device, const std::vector<std::size_t>& module_numels,
                 const std::vector<std::string>& names, DType dtype, bool with_grads);

  int module_count() const override { return static_cast<int>(params_.size()); }
  std::size_t module_numel(int module) const override;
  DType dtype() const { return dtype_; }

  ModuleView acquire(int module) override;
  void release(int module, const device::Event& done) override;
  ModuleView acquire_grads(int module) override;
  void grads_ready(int module, const device::Event& done) override;
  void prefetch(int module) override;  // nothing to fetch: counted
  void cancel_prefetch(int module) override;  // counted
  bool resident(int /*module*/) const override { return true; }
  ModuleView resident_view(int module) override;  // not counted as an acquire

  // Direct access for loading weights, the optimizer and tests (device memory).
  void* params(int module) const;
  void* grads(int module) const;

  // Enqueues zero-filling of every gradient buffer on `stream` (before a step's backward).
  void zero_grads(device::Stream& stream);

  // Number of acquire / acquire_grads / grads_ready / prefetch / cancel_prefetch calls so far,
  // per module (tests check the model's protocol with them).
  struct Counts {
    int acquires = 0;
    int releases = 0;
    int grad_acquires = 0;
    int grads_ready = 0;
    int prefetches = 0;
    int cancels = 0;
  };
  const Counts& counts(int module) const;
  // The most modules held at once so far (acquired and not yet released).
  int most_held() const { return most_held_; }

 private:
  void check_module(int module) const;

  DType dtype_;
  std::vector<std::size_t> numels_;
  std::vector<device::DeviceBuffer> params_;
  std::vector<device::DeviceBuffer> grads_;
  std::vector<Counts> counts_;
  int held_ = 0, most_held_ = 0;
};

}  // namespace strata::runtime::params
