// ZeroEngine: the facade. Construction wires the parts; the ParamProvider calls and the step
// are forwarded to them; the step's global decisions (norm, clipping, fp16 skip, the Adam step
// count) are made here. States in and out (initial values, export, checkpoints): engine_states.cpp.
#include "runtime/zero/engine.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "core/error.h"
#include "core/shutdown.h"
#include "runtime/zero/engine_parts.h"

namespace strata::runtime::zero {

ZeroEngine::Parts::Parts(const config::Config& config, const EngineSetup& setup, device::Device& device,
                         device::Stream& compute, comm::Communicator& communicator, trace::Tracer& tracer)
    : comm(communicator),
      streams(device),
      store(config, store_setup(setup, communicator), device, *streams.optim),
      gate(device, store.module_count(), [this] { updater.check(); }),
      fetcher(config, store, device, compute, streams, communicator, &gate, setup.activation_bytes),
      grads(config, store, device, compute, streams, communicator, fetcher, gate, tracer),
      updater(config, store, device, streams, gate, grads, tracer) {}

tiers::StoreSetup ZeroEngine::Parts::store_setup(const EngineSetup& setup, const comm::Communicator& comm) {
  tiers::StoreSetup s;
  s.module_numels = setup.module_numels;
  s.module_names = setup.module_names;
  s.routed_modules = setup.routed_modules;
  s.dtype = setup.dtype;
  s.activation_bytes = setup.activation_bytes;
  s.world = comm.world();
  s.rank = comm.rank();
  s.io_completion_hook = setup.io_completion_hook;
  s.quant = setup.quant;  // the plan refuses it with an optimizer
  return s;
}

ZeroEngine::ZeroEngine(const config::Config& config, const EngineSetup& setup, device::Device& device,
                       device::Stream& compute, comm::Communicator& comm, trace::Tracer& tracer)
    : config_(config), device_(device), scaler_(config.fp16, config.fp16.enabled.value_or(false)) {
  const config::ZeroConfig& z = config.zero_optimization;
  if (z.stage < 0 || z.stage > 3) {
    throw Error("ZeRO stage " + std::to_string(z.stage) + " does not exist", "zero_optimization.stage",
                "use 0, 1, 2 or 3");
  }
  world_ = comm.world();
  gas_ = static_cast<int>(config.gradient_accumulation_steps.value_or(std::uint64_t{1}).value_or(1));
  global_before_update_ = config.gradient_clipping.value_or(0.0) > 0.0 || config.fp16.enabled.value_or(false);
  speculate_ = global_before_update_ && !config.fp16.enabled.value_or(false) && config.strata.speculative_updates;
  parts_ = std::make_unique<Parts>(config, setup, device, compute, comm, tracer);
  speculated_.assign(static_cast<std::size_t>(parts_->store.module_count()), 0);
  if (offload::SwapSpace* sw = parts_->store.swap()) {
    const offload::AioStats io = sw->engine().stats();
    io_read_base_ = io.bytes_read;
    io_write_base_ = io.bytes_written;
  }
}

ZeroEngine::~ZeroEngine() {
  // Each wait runs even when one before it failed: the parts freed next are what they use.
  Parts& p = *parts_;
  drain_for_shutdown(
      "ZeRO engine", [&] { p.updater.drain(); }, [&] { p.updater.flush_swaps(); },
      [&] { device_.synchronize(); }, [&] { p.grads.drain(); },
      [&] {
        if (offload::SwapSpace* sw = p.store.swap()) sw->engine().wait_all();
      });
}

const tiers::ZeroPlan& ZeroEngine::plan() const { return parts_->store.plan(); }
const tiers::PlanInputs& ZeroEngine::plan_inputs() const { return parts_->store.plan_inputs(); }
tiers::TierStore& ZeroEngine::tiers() const { return parts_->store; }
int ZeroEngine::module_count() const { return parts_->store.module_count(); }
std::size_t ZeroEngine::module_numel(int module) const {
  STRATA_ASSERT(module >= 0 && module < module_count(), "module index out of range");
  return parts_->store.module_plan(module).part.numel;
}

cpu_adam::AdamHyper ZeroEngine::make_hyper(double lr) const {
  STRATA_ASSERT(config_.optimizer.has_value(), "the engine needs an optimizer section");
  const config::OptimizerConfig& o = *config_.optimizer;
  cpu_adam::AdamHyper h;
  h.lr = static_cast<float>(lr);
  const std::array<double, 2> betas = o.betas.value();
  h.beta1 = static_cast<float>(betas[0]);
  h.beta2 = static_cast<float>(betas[1]);
  h.eps = static_cast<float>(o.eps.value());
  h.weight_decay = static_cast<float>(o.weight_decay.value());
  h.mode =
      (o.type == config::OptimizerType::kAdamW || o.adam_w_mode) ? cpu_adam::AdamMode::adamw : cpu_adam::AdamMode::adam;
  h.bias_correction = o.bias_correction;
  return h;
}

float ZeroEngine::backward_loss_scale() const { return scaler_.scale() / static_cast<float>(gas_ * world_); }

void ZeroEngine::begin_step(double lr) {
  parts_->updater.check();
  parts_->fetcher.begin_step();
  parts_->grads.begin_step();
  step_hyper_ = make_hyper(lr);
  ++step_id_;
  std::fill(speculated_.begin(), speculated_.end(), 0);
  // Without a global check (or speculating: no step is ever skipped without fp16) the step's
  // updates are posted from grads_ready: its Adam step number is known now.
  if (!global_before_update_ || speculate_) ++adam_steps_;
}

void ZeroEngine::post_update(int module, float grad_scale) {
  parts_->fetcher.params_changed(module);
  parts_->updater.post(module, {step_hyper_, adam_steps_, grad_scale});
}

StepOutcome ZeroEngine::step() {
  Parts& p = *parts_;
  StepOutcome out;
  out.loss_scale = scaler_.scale();
  p.updater.check();
  p.fetcher.end_step();
  p.grads.check_step_complete();
  if (!global_before_update_) return out;  // the updates are under way

  if (!speculate_) p.updater.drain();  // speculative updates run on while the norm is computed
  device_.synchronize();  // every gradient has landed; rethrows a failure of any stream
  p.grads.drain();        // and has been accumulated
  const double max_norm = config_.gradient_clipping.value_or(0.0);
  const bool fp16 = config_.fp16.enabled.value_or(false);
  double sq = 0.0;
  bool overflow = false;
  p.grads.norm_and_overflow(max_norm > 0.0, fp16, 1.0f / scaler_.scale(), &sq, &overflow);
  if (max_norm > 0.0) out.grad_norm = std::sqrt(sq);
  if (fp16 && scaler_.update(overflow)) {
    out.skipped = true;
    ++skipped_steps_;
    p.grads.zero_accumulators();  // the next step starts from zero gradients
    return out;
  }
  // torch.nn.utils.clip_grad_norm_'s coefficient.
  float clip = 1.0f;
  if (max_norm > 0.0 && out.grad_norm > max_norm) clip = static_cast<float>(max_norm / (out.grad_norm + 1e-6));
  if (!speculate_) {
    ++adam_steps_;
    for (int m = 0; m < module_count(); ++m) post_update(m, clip / out.loss_scale);
    return out;
  }
  // Speculated modules were updated with clip 1 (grad_scale 1: no fp16 here): keep them when
  // the clip is 1, else redo them; the others update now. In forward order either way.
  if (clip != 1.0f) p.updater.cancel_speculation(step_id_);
  last_step_clipped_ = clip != 1.0f;
  for (int m = 0; m < module_count(); ++m) {
    if (!speculated_[static_cast<std::size_t>(m)]) {
      post_update(m, clip);
    } else if (clip == 1.0f) {
      p.updater.post_commit(m);
    } else {
      ++speculative_redone_;
      p.fetcher.params_changed(m);
      p.updater.post_redo(m, {step_hyper_, adam_steps_, clip});
    }
  }
  return out;
}

void ZeroEngine::finish_updates() {
  parts_->updater.drain();
  parts_->updater.flush_swaps();
}

void ZeroEngine::run_after_updates(std::function<void()> task, std::function<void()> done) {
  parts_->updater.run_after(std::move(task), std::move(done));
}

params::ModuleView ZeroEngine::acquire(int module) { return parts_->fetcher.acquire(module); }

void ZeroEngine::release(int module, const device::Event& /*done: recorded on the compute stream*/) {
  parts_->fetcher.release(module);
}

params::ModuleView ZeroEngine::acquire_grads(int module) { return parts_->grads.acquire(module); }

void ZeroEngine::grads_ready(int module, const device::Event& done) {
  if (parts_->grads.ready(module, done)) gradient_final(module);
}

void ZeroEngine::prefetch(int module) { parts_->fetcher.hint(module); }
void ZeroEngine::cancel_prefetch(int module) { parts_->fetcher.unhint(module); }
bool ZeroEngine::resident(int module) const { return parts_->store.module_plan(module).resident; }
params::ModuleView ZeroEngine::resident_view(int module) { return parts_->fetcher.resident_view(module); }

// The union of the ranks' picks (Note [Experts on every rank] in expert_union.h).
void ZeroEngine::picked_on_any_rank(std::vector<std::uint8_t>& picked) {
  Parts& p = *parts_;
  if (p.store.plan().shards == 1) return;
  expert_union_.unite(picked, p.comm, device_, *p.streams.comm);
}

void ZeroEngine::grads_none(int module, const device::Event& done) {
  if (parts_->grads.ready_none(module, done)) gradient_final(module);
}

void ZeroEngine::gradient_final(int module) {  if (!global_before_update_) {
    post_update(module, 1.0f);
  } else if (speculate_ && !last_step_clipped_) {
    // Speculate while the norm stays under the threshold: after a clipped step it would most
    // likely be redone, CPU Adam time spent twice.
    parts_->fetcher.params_changed(module);
    if (parts_->updater.post_speculative(module, {step_hyper_, adam_steps_, 1.0f}, step_id_)) {
      speculated_[static_cast<std::size_t>(module)] = 1;
      ++speculative_updates_;
    }
  }
}

device::ArenaStats ZeroEngine::device_memory() const { return parts_->fetcher.device_memory(); }

EngineCounters ZeroEngine::counters() const {
  const Parts& p = *parts_;
  const FetchCounters f = p.fetcher.counters();
  EngineCounters c;
  c.h2d_bytes = p.store.transfers().h2d();
  c.d2h_bytes = p.store.transfers().d2h();
  c.collective_bytes = f.collective_bytes + p.grads.collective_bytes();
  c.fetches = f.fetches;
  c.prefetched = f.prefetched;
  c.reused = f.reused;
  c.trace_divergences = f.trace_divergences;
  c.unused_fetches = f.unused_fetches;
  c.unused_read_bytes = f.unused_read_bytes;
  c.unused_h2d_bytes = f.unused_h2d_bytes;
  c.skipped_steps = skipped_steps_;
  c.speculative_updates = speculative_updates_;
  c.speculative_redone = speculative_redone_;
  if (offload::SwapSpace* sw = p.store.swap()) {
    const offload::AioStats io = sw->engine().stats();
    c.nvme_read_bytes = io.bytes_read - io_read_base_;
    c.nvme_write_bytes = io.bytes_written - io_write_base_;
  }
  return c;
}

}  // namespace strata::runtime::zero
