#include "runtime/device/device.h"
