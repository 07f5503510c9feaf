#pragma once
// The inference engine: a ParamProvider (runtime/params/param_provider.h) over the parameters
// alone, for ZeRO-Inference. Modules the plan keeps resident (make_inference_plan: what fits the
// device budget beside the streaming slots — the embedding, the head, the first blocks) stay on
// the device; the others live in pinned host memory or on NVMe (offload_param.device) and are
// streamed through the parameter fetcher (param_fetcher.h): NVMe reads and H2D copies run ahead
// of compute along the trace of the previous forward pass, into up to offload_param.buffer_count
// device slots, and compute waits only for its module's event. No optimizer states, gradients or
// update gate exist: acquire_grads is an error.
//
// Per forward pass (a prefill or one decoding step), driven by one thread:
//   begin_pass(); model.forward / forward_decode (acquire / release come here); end_pass()
// The first pass records the module order; from the second on, fetches run ahead along it.
// A mixture's experts (EngineSetup::routed_modules) are fetched when the router picks them and
// kept in the expert cache (param_fetcher.h) up to EngineSetup::expert_cache_bytes.
//
// Quantized streaming (EngineSetup::quant, kernels/host/quantize.h): the streamed modules' shards
// are stored, read from NVMe, copied to the device and kept in their slots as INT8 / INT4 values
// with bf16 scales, quantized once by load_module. acquire() of such a module waits for its
// fetched bytes on the compute stream, dequantizes them there into one of kDequantBuffers device
// buffers (compute dtype, the largest streamed module's size; plan.h counts them) and hands the
// fetched bytes back to the fetcher at once (stream-ordered: they are reused after the
// dequantization); the model reads the dequantized buffer, which is free again at release() (the
// next dequantization into it is ordered after the model's work on the compute stream). At most
// kDequantBuffers quantized modules may be held at once. Resident modules stay in the compute
// dtype.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "runtime/comm/comm.h"
#include "runtime/config/config.h"
#include "runtime/device/device.h"
#include "runtime/params/param_provider.h"
#include "runtime/tiers/plan.h"
#include "runtime/tiers/tier_store.h"
#include "runtime/trace/trace.h"
#include "runtime/zero/engine_setup.h"
#include "runtime/zero/expert_union.h"

namespace strata::runtime::zero {

class InferenceEngine final : public params::ParamProvider {
 public:
  // config: resolved. setup.activation_bytes: what the model reserves on the device (its decode
  // scratch and KV cache). Makes the tier store (throws strata::Error with the per-tier table
  // when the parameters do not fit). Borrowed references must outlive the engine.
  InferenceEngine(const config::Config& config, const EngineSetup& setup, device::Device& device,
                  device::Stream& compute, comm::Communicator& comm, trace::Tracer& tracer);
  ~InferenceEngine() override;
  InferenceEngine(const InferenceEngine&) = delete;
  InferenceEngine& operator=(const InferenceEngine&) = delete;

  const tiers::ZeroPlan& plan() const;
  const tiers::PlanInputs& plan_inputs() const;
  tiers::TierStore& tiers() const;
  // Modules kept on the device, and the device bytes of the streaming slots.
  int resident_modules() const;
  std::uint64_t slot_bytes() const;

  // Module m's weights: its full fp32 values (numel, host memory), cast to the compute dtype
  // into its tier. Every rank passes the same values and keeps its shard.
  void load_module(int module, const float* values);

  void begin_pass();
  void end_pass();

  EngineCounters counters() const;  // h2d, collective and NVMe read bytes; fetch statistics
  device::ArenaStats device_memory() const;

  // ParamProvider.
  int module_count() const override;
  std::size_t module_numel(int module) const override;
  params::ModuleView acquire(int module) override;
  void release(int module, const device::Event& done) override;
  params::ModuleView acquire_grads(int module) override;
  void grads_ready(int module, const device::Event& done) override;
  void prefetch(int module) override;
  void cancel_prefetch(int module) override;
  bool resident(int module) const override;  // the plan keeps it on the device
  params::ModuleView resident_view(int module) override;
  // Several shards: the union over the ranks (Note [Experts on every rank] in expert_union.h).
  void picked_on_any_rank(std::vector<std::uint8_t>& picked) override;
  // A pinned, unquantized module of one rank that is not fetched (ParamProvider::acquire_host);
  // counted in EngineCounters::expert_host.
  const void* acquire_host(int module) override;

  struct Parts;  // inference_engine.cpp

 private:
  const config::Config& config_;
  device::Device& device_;
  device::Stream& compute_;
  comm::Communicator& comm_;
  std::uint64_t io_read_base_ = 0;
  std::uint64_t host_acquires_ = 0;
  ExpertUnion expert_union_;  // picked_on_any_rank's
  std::unique_ptr<Parts> parts_;
};

}  // namespace strata::runtime::zero
