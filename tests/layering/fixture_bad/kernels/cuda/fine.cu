#include <cuda_runtime.h>
#include "core/error.h"
