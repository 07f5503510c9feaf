// A model reaches the runtime through the ParamProvider, the device and the ops: these are fine,
#include "runtime/params/param_provider.h"
#include "runtime/device/device.h"
#include "runtime/ops/ops.h"
// and these are not (the engine's internals, the tier store, checkpoints).
#include "runtime/zero/engine.h"
#include "runtime/tiers/tier_store.h"
#include "runtime/checkpoint/checkpoint_dir.h"
