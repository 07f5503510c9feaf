#include "runtime/zero/engine.h"
#include "runtime/device/device.h"
#include "runtime/zero/update_worker.h"
