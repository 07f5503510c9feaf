#pragma once
// What a training run's plan is made from: the model options and the engine setup (module sizes,
// the model's activation bytes for the micro-batch) of a model at B x T (the compute dtype:
// runtime::config::compute_dtype). make_session and `strata estimate` (its model description,
// estimate_model below) both call these, so the estimate and the run cannot disagree.
#include "core/dtype.h"
#include "models/model.h"
#include "models/model_spec.h"
#include "runtime/config/config.h"
#include "runtime/device/device.h"
#include "runtime/estimate/estimate.h"
#include "runtime/zero/engine.h"

namespace strata::train {

// The model options a run on `backend` builds its model with.
models::ModelOptions run_model_options(DType dtype, bool activation_checkpointing, runtime::device::Backend backend);

// Module sizes and names, the dtype and the activation bytes of micro-batch B x T.
runtime::zero::EngineSetup run_engine_setup(const models::ModelSpec& spec, const models::ModelOptions& options, int B,
                                            int T);

// The model as `strata estimate` sees it (runtime/estimate/estimate.h): its shape, its layout's
// modules, and activation bytes as run_engine_setup counts them. `spec` is borrowed: it must
// outlive the description (its activation_bytes calls it).
runtime::estimate::EstimateModel estimate_model(const models::ModelSpec& spec);

}  // namespace strata::train
