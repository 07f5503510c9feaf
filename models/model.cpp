#include "models/model.h"


namespace strata::models {

int vocab_multiple_for(runtime::device::Backend backend) {
  return backend == runtime::device::Backend::cuda ? 128 : 1;
}

}  // namespace strata::models
