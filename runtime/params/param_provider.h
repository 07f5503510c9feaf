#pragma once
// How a model reaches its parameters and hands back its gradients: the interface between
// models/ (which computes) and the engine (which decides where states live). See
// docs/architecture.md, "Model, engine and kernels".
//
// A model is a list of modules (embedding, each block, the final norm); each module's
// parameters are one flat buffer of `numel` elements in the compute dtype. Per step the model
//   - acquire(m) before it reads module m's parameters, and waits on the view's `ready` event
//     on its compute stream; release(m, done) when the work recorded in `done` is the last
//     that reads them. A module may be acquired more than once per step (the tied embedding
//     / LM head); each acquire has its own release.
//   - acquire_grads(m) before its first gradient contribution of the step (the view is
//     accumulated into, +=), and grads_ready(m, done) after its last one: the gradient is
//     final once `done` has completed. Or grads_none(m, done) instead of both: no contribution.
// Events passed to the provider are borrowed for the duration of the call only: a provider
// that needs the point in the stream later makes its stream wait on it (or records its own).
#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/dtype.h"
#include "runtime/device/device.h"

namespace strata::runtime::params {

// A module's full parameters or gradient buffer in device memory.
struct ModuleView {
  void* data = nullptr;          // numel elements of dtype, device memory
  std::size_t numel = 0;
  DType dtype = DType::f32;
  const device::Event* ready = nullptr;  // wait on it before use; nullptr = usable now
};

class ParamProvider {
 public:
  virtual ~ParamProvider() = default;

  virtual int module_count() const = 0;
  virtual std::size_t module_numel(int module) const = 0;

  virtual ModuleView acquire(int module) = 0;
  virtual void release(int module, const device::Event& done) = 0;
  virtual ModuleView acquire_grads(int module) = 0;
  virtual void grads_ready(int module, const device::Event& done) = 0;
  // Module m contributes nothing to this micro-batch's gradient (a mixture's expert that no token
  // was routed to): means acquire_grads(m) with nothing added, then grads_ready(m, done), which
  // is what this default does. A provider may skip the zero buffer and its copies.
  virtual void grads_none(int module, const device::Event& done) {
    acquire_grads(module);
    grads_ready(module, done);
  }
  // A hint: module m will be acquired soon (a mixture's experts, once their router ran). A
  // provider may start fetching it; nothing by default.
  virtual void prefetch(int /*module*/) {}
  // Module m's parameters are on the device for good: acquire(m) fetches nothing and needs no
  // device memory (resident modules). A model may then hold several such modules at once (a
  // mixture's experts in one grouped matmul). False by default.
  virtual bool resident(int /*module*/) const { return false; }
  // A resident module's parameters without acquiring it (a mixture's lookahead reads the next
  // layer's router from its block): no holder, no record in a fetch order, nothing fetched. The
  // view is valid while the provider lives and no update rewrites the module; data is null where
  // the provider cannot give it now (the default; a module not resident).
  virtual ModuleView resident_view(int /*module*/) { return {}; }
  // The hint of module m was wrong (a mixture's expert guessed ahead that its router did not
  // pick): a provider may drop a fetch not started yet and give up the fetched module first.
  virtual void cancel_prefetch(int /*module*/) {}
  // Module m's parameters (numel elements of the compute dtype) in host memory, for the host to
  // compute on where they are instead of the device (a mixture's cold expert, models/moe/
  // moe_mlp.h): the pointer when the provider keeps them in pinned host memory, unquantized and
  // whole (one rank), and has not fetched them to the device; else null, and the caller
  // acquires them. Valid and unchanged while no update rewrites them (inference: for the
  // provider's life). Null by default: only a forward-only provider (the inference engine) gives
  // it, since what a model computes from it keeps no activations for a backward.
  virtual const void* acquire_host(int /*module*/) { return nullptr; }
  // One layer's routed experts: picked[e] != 0 where this rank's tokens were routed to expert e.
  // Ranks that shard the parameters must fetch the same modules in the same order (each fetch
  // and each gradient is a collective): a provider with several such ranks sets picked to the
  // union over the ranks, a collective every rank calls at the same point. One rank: unchanged
  // (this default).
  virtual void picked_on_any_rank(std::vector<std::uint8_t>& /*picked*/) {}

 protected:
  ParamProvider() = default;
  ParamProvider(const ParamProvider&) = delete;
  ParamProvider& operator=(const ParamProvider&) = delete;
};

}  // namespace strata::runtime::params
