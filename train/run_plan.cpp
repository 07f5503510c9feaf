#include "train/run_plan.h"

namespace strata::train {

models::ModelOptions run_model_options(DType dtype, bool activation_checkpointing, runtime::device::Backend backend) {
  models::ModelOptions options;
  options.dtype = dtype;
  options.checkpointing = activation_checkpointing;
  options.vocab_multiple = models::vocab_multiple_for(backend);
  return options;
}

runtime::zero::EngineSetup run_engine_setup(const models::ModelSpec& spec, const models::ModelOptions& options, int B,
                                            int T) {
  const models::ModelLayout layout = spec.layout();
  runtime::zero::EngineSetup setup;
  setup.module_numels = layout.module_numels();
  setup.module_names = layout.module_names();
  setup.routed_modules = layout.routed_modules();
  setup.dtype = options.dtype;
  setup.activation_bytes = spec.activation_bytes(options, B, T);
  return setup;
}

runtime::estimate::EstimateModel estimate_model(const models::ModelSpec& spec) {
  const models::ModelLayout layout = spec.layout();
  runtime::estimate::EstimateModel m;
  m.describe = spec.describe();
  m.num_params = spec.num_params();
  m.hidden_size = spec.hidden_size();
  m.max_positions = spec.max_positions();
  m.module_numels = layout.module_numels();
  m.module_names = layout.module_names();
  const models::ExpertRouting routing = spec.expert_routing();
  m.routing = {routing.experts, routing.per_token, routing.sparse_layers, routing.active_params};
  if (routing.moe()) m.routed_modules = layout.routed_modules();
  m.activation_bytes = [&spec](DType dtype, bool activation_checkpointing, runtime::device::Backend backend, int B,
                               int T) {
    return spec.activation_bytes(run_model_options(dtype, activation_checkpointing, backend), B, T);
  };
  return m;
}

}  // namespace strata::train
