#include "models/gpt/gpt_model.h"
#include "train/trainer.h"
