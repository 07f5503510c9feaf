#include "offload/probe.h"
