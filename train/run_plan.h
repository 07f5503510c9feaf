#pragma once
// What a training run's plan is made from: the compute dtype of the config, and the engine setup
// (module sizes, the model's activation bytes for the micro-batch) of a model at B x T. make_session
// and `strata estimate` both call these, so the estimate and the run cannot disagree.
#include "core/dtype.h"
#include "models/model.h"
#include "models/model_spec.h"
#include "runtime/config/config.h"
#include "runtime/device/device.h"
#include "runtime/tiers/plan.h"
#include "runtime/zero/engine.h"

namespace strata::train {

// bf16.enabled -> bf16, fp16.enabled -> fp16, else fp32.
DType compute_dtype(const runtime::config::Config& config);

// The model options a run on `backend` builds its model with.
models::ModelOptions run_model_options(DType dtype, bool activation_checkpointing, runtime::device::Backend backend);

// Module sizes and names, the dtype and the activation bytes of micro-batch B x T.
runtime::zero::EngineSetup run_engine_setup(const models::ModelSpec& spec, const models::ModelOptions& options, int B,
                                            int T);

// The plan inputs the tier store will make of `setup` at `world` ranks, without the budgets
// (the tier store reads them from the device, the pinned pool and the NVMe folders).
runtime::tiers::PlanInputs run_plan_inputs(const runtime::config::Config& config,
                                           const runtime::zero::EngineSetup& setup, int world);

}  // namespace strata::train
