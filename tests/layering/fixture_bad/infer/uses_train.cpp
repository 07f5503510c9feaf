#include "models/registry.h"
#include "train/trainer.h"
#include "infer/sampler.h"
