// InferenceEngine: the tier store without optimizer states and the parameter fetcher without an
// update gate (inference_engine.h).
#include "runtime/zero/inference_engine.h"

#include <algorithm>

#include "core/error.h"
#include "core/shutdown.h"
#include "runtime/ops/ops.h"
#include "runtime/zero/engine_streams.h"
#include "runtime/zero/param_fetcher.h"
#include "runtime/zero/state_load.h"

namespace strata::runtime::zero {
namespace {

tiers::StoreSetup store_setup(const EngineSetup& setup, const comm::Communicator& comm) {
  tiers::StoreSetup s;
  s.module_numels = setup.module_numels;
  s.module_names = setup.module_names;
  s.routed_modules = setup.routed_modules;
  s.dtype = setup.dtype;
  s.activation_bytes = setup.activation_bytes;
  s.kv_cache_pinned_bytes = setup.kv_cache_pinned_bytes;
  s.activation_flags = setup.activation_flags;
  s.world = comm.world();
  s.rank = comm.rank();
  s.optimizer = false;
  s.io_completion_hook = setup.io_completion_hook;
  s.quant = setup.quant;
  return s;
}

// A device buffer quantized modules are dequantized into, and the module it holds while the
// model holds it.
struct DequantBuffer {
  device::DeviceBuffer buffer;
  int module = -1;
  int holders = 0;  // acquires not yet released
};

// Allocated before the fetcher, which carves what the device has left into its regions.
std::vector<DequantBuffer> make_dequant_buffers(const tiers::TierStore& store, device::Device& device) {
  std::vector<DequantBuffer> buffers;
  std::size_t largest = 0;  // elements of the largest quantized module (plan.cpp: dequant_buffer_bytes)
  for (const tiers::ModulePlan& mp : store.plan().modules) {
    if (mp.quantized) largest = std::max(largest, mp.part.padded_numel);
  }
  if (largest == 0) return buffers;
  for (int i = 0; i < tiers::kDequantBuffers; ++i) {
    DequantBuffer b;
    b.buffer = device.allocate(largest * dtype_size(store.dtype()), "dequantized parameters");
    buffers.push_back(std::move(b));
  }
  return buffers;
}

}  // namespace

// In construction order; destroyed the other way (the fetcher before the store it reads).
struct InferenceEngine::Parts {
  Parts(const config::Config& config, const EngineSetup& setup, device::Device& device, device::Stream& compute,
        comm::Communicator& comm)
      : streams(device),
        store(config, store_setup(setup, comm), device, *streams.optim),
        dequant(make_dequant_buffers(store, device)),
        fetcher(config, store, device, compute, streams, comm, /*gate=*/nullptr, setup.activation_bytes) {}

  EngineStreams streams;
  tiers::TierStore store;
  std::vector<DequantBuffer> dequant;  // quantized plans only
  ParamFetcher fetcher;
};

InferenceEngine::InferenceEngine(const config::Config& config, const EngineSetup& setup, device::Device& device,
                                 device::Stream& compute, comm::Communicator& comm, trace::Tracer& /*tracer*/)
    : config_(config), device_(device), compute_(compute), comm_(comm) {
  parts_ = std::make_unique<Parts>(config, setup, device, compute, comm);
  parts_->fetcher.set_expert_cache(setup.expert_cache_bytes);
  if (offload::SwapSpace* sw = parts_->store.swap()) io_read_base_ = sw->engine().stats().bytes_read;
}

InferenceEngine::~InferenceEngine() {
  // Each wait runs even when the one before it failed: the parts freed next are what they use.
  drain_for_shutdown(
      "inference engine", [&] { device_.synchronize(); },
      [&] {
        if (offload::SwapSpace* sw = parts_->store.swap()) sw->engine().wait_all();
      });
}

const tiers::ZeroPlan& InferenceEngine::plan() const { return parts_->store.plan(); }
const tiers::PlanInputs& InferenceEngine::plan_inputs() const { return parts_->store.plan_inputs(); }
tiers::TierStore& InferenceEngine::tiers() const { return parts_->store; }

int InferenceEngine::resident_modules() const {
  const std::vector<tiers::ModulePlan>& modules = plan().modules;
  return static_cast<int>(std::count_if(modules.begin(), modules.end(), [](const auto& m) { return m.resident; }));
}

std::uint64_t InferenceEngine::slot_bytes() const {
  if (resident_modules() == module_count()) return 0;
  return tiers::inference_slot_bytes(config_, plan());
}

void InferenceEngine::load_module(int module, const float* values) {
  load_params(parts_->store, module, values, *parts_->streams.copy_in);
  parts_->streams.copy_in->synchronize();
}

void InferenceEngine::begin_pass() { parts_->fetcher.begin_step(); }
void InferenceEngine::end_pass() { parts_->fetcher.end_step(); }

EngineCounters InferenceEngine::counters() const {
  const Parts& p = *parts_;
  const FetchCounters f = p.fetcher.counters();
  EngineCounters c;
  c.h2d_bytes = p.store.transfers().h2d();
  c.d2h_bytes = p.store.transfers().d2h();
  c.collective_bytes = f.collective_bytes;
  c.fetches = f.fetches;
  c.prefetched = f.prefetched;
  c.reused = f.reused;
  c.trace_divergences = f.trace_divergences;
  c.expert_hits = f.expert_hits;
  c.expert_misses = f.expert_misses;
  c.unused_fetches = f.unused_fetches;
  c.unused_read_bytes = f.unused_read_bytes;
  c.unused_h2d_bytes = f.unused_h2d_bytes;
  c.expert_host = host_acquires_;
  if (offload::SwapSpace* sw = p.store.swap()) c.nvme_read_bytes = sw->engine().stats().bytes_read - io_read_base_;
  return c;
}

device::ArenaStats InferenceEngine::device_memory() const { return parts_->fetcher.device_memory(); }

int InferenceEngine::module_count() const { return parts_->store.module_count(); }

std::size_t InferenceEngine::module_numel(int module) const {
  STRATA_ASSERT(module >= 0 && module < module_count(), "module index out of range");
  return parts_->store.module_plan(module).part.numel;
}

params::ModuleView InferenceEngine::acquire(int module) {
  Parts& p = *parts_;
  const tiers::ModulePlan& mp = p.store.module_plan(module);
  if (!mp.quantized) return p.fetcher.acquire(module);
  params::ModuleView view;
  view.numel = mp.part.numel;
  view.dtype = p.store.dtype();
  view.ready = nullptr;  // written on the compute stream, which the model computes on
  for (DequantBuffer& d : p.dequant) {
    if (d.module == module && d.holders > 0) {  // acquired again while held (a tied module)
      ++d.holders;
      view.data = d.buffer.data();
      return view;
    }
  }
  DequantBuffer* target = nullptr;
  for (DequantBuffer& d : p.dequant) {
    if (d.holders == 0) {
      target = &d;
      break;
    }
  }
  STRATA_ASSERT(target != nullptr, "more quantized modules held at once than there are dequantization buffers");
  const params::ModuleView q = p.fetcher.acquire(module);
  if (q.ready != nullptr) compute_.wait(*q.ready);
  const tiers::WeightQuant& quant = p.store.plan_inputs().quant;
  // The whole padded module: its layout (where the scales start) is the padded one.
  ops::dequantize_groupwise(compute_, target->buffer.data(), view.dtype, q.data, mp.part.padded_numel, quant.group,
                            quant.bits);
  // The fetched bytes go back now: the fetcher frees them after the compute stream's work so far
  // (the dequantization), and its fetches ahead go on.
  p.fetcher.release(module);
  target->module = module;
  target->holders = 1;
  view.data = target->buffer.data();
  return view;
}

void InferenceEngine::release(int module, const device::Event& done) {
  Parts& p = *parts_;
  if (!p.store.module_plan(module).quantized) {
    p.fetcher.release(module);  // `done` was recorded on the compute stream
    return;
  }
  for (DequantBuffer& d : p.dequant) {
    if (d.module == module && d.holders > 0) {
      // The next dequantization into this buffer runs on the compute stream: after `done`.
      compute_.wait(done);
      --d.holders;
      return;
    }
  }
  STRATA_ASSERT(false, "release of a quantized module that was not acquired");
}

params::ModuleView InferenceEngine::acquire_grads(int /*module*/) {
  throw Error("the inference engine holds no gradients: backward() needs strata train's engine");
}

void InferenceEngine::grads_ready(int /*module*/, const device::Event& /*done*/) {
  throw Error("the inference engine holds no gradients");
}

void InferenceEngine::prefetch(int module) { parts_->fetcher.hint(module); }
void InferenceEngine::cancel_prefetch(int module) { parts_->fetcher.unhint(module); }
bool InferenceEngine::resident(int module) const { return parts_->store.module_plan(module).resident; }
params::ModuleView InferenceEngine::resident_view(int module) { return parts_->fetcher.resident_view(module); }

void InferenceEngine::picked_on_any_rank(std::vector<std::uint8_t>& picked) {
  Parts& p = *parts_;
  if (p.store.plan().shards == 1) return;
  expert_union_.unite(picked, comm_, device_, *p.streams.comm);
}

const void* InferenceEngine::acquire_host(int module) {
  Parts& p = *parts_;
  const tiers::ModulePlan& mp = p.store.module_plan(module);
  if (mp.resident || mp.quantized || p.store.plan_inputs().world != 1 || p.fetcher.fetched(module)) return nullptr;
  const std::byte* host = p.store.state(module, tiers::StateKind::param).host_data();  // null unless pinned
  if (host != nullptr) ++host_acquires_;
  return host;
}

}  // namespace strata::runtime::zero
