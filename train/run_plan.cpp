#include "train/run_plan.h"

namespace strata::train {

DType compute_dtype(const runtime::config::Config& c) {
  if (c.bf16.enabled.value_or(false)) return DType::bf16;
  if (c.fp16.enabled.value_or(false)) return DType::f16;
  return DType::f32;
}

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
  setup.dtype = options.dtype;
  setup.activation_bytes = spec.activation_bytes(options, B, T);
  return setup;
}

runtime::tiers::PlanInputs run_plan_inputs(const runtime::config::Config& config,
                                           const runtime::zero::EngineSetup& setup, int world) {
  runtime::tiers::PlanInputs in;
  in.module_numels = setup.module_numels;
  in.module_names = setup.module_names;
  in.world = world;
  in.dtype = setup.dtype;
  in.grad_dtype = runtime::config::to_dtype(config.data_types.grad_accum_dtype);
  in.activation_bytes = setup.activation_bytes;
  in.kv_cache_pinned_bytes = setup.kv_cache_pinned_bytes;
  in.nvme_block_bytes = config.aio.block_size;
  in.nvme_paths = runtime::tiers::nvme_paths(config);
  return in;
}

}  // namespace strata::train
