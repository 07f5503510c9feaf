#include "runtime/zero/engine_impl.h"
#include "runtime/tiers/host_tiers.h"
#include "runtime/config/config.h"
