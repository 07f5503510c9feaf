#include "models/gpt/gpt_model.h"
#include "runtime/zero/engine.h"
#include "train/run_state.h"
