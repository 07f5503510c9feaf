#include "models/model.h"

#include <fmt/format.h>

#include "core/error.h"

namespace strata::models {

int vocab_multiple_for(runtime::device::Backend backend) {
  return backend == runtime::device::Backend::cuda ? 128 : 1;
}

ModelOptions resolved_options(ModelOptions options, runtime::device::Backend backend) {
  if (options.vocab_multiple == 0) options.vocab_multiple = vocab_multiple_for(backend);
  if (options.vocab_multiple < 1) {
    throw Error(fmt::format("ModelOptions::vocab_multiple is {}: it must be 0 (the device's choice) or positive",
                            options.vocab_multiple));
  }
  return options;
}

}  // namespace strata::models
