// The Python extension links core, cpu_adam and offload: these are fine,
#include "cpu_adam/adam.h"
#include "offload/aio_engine.h"
// and the runtime is not.
#include "runtime/zero/engine.h"
