#include "runtime/device/arena.h"
#include "runtime/trace/trace.h"
#include "runtime/comm/comm.h"
