#include "runtime/zero/engine.h"
#include "runtime/device/device.h"
#include "runtime/zero/host_worker.h"
