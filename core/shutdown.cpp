#include "core/shutdown.h"

#include "core/log.h"

namespace strata {

void shutdown_failure(std::string_view who, const char* what) noexcept {
  try {
    if (std::uncaught_exceptions() > 0) {
      log::debug("{}: failed at shutdown while an error unwinds: {}", who, what);
    } else {
      log::warn("{}: failed at shutdown: {}", who, what);
    }
  } catch (...) {
    // Logging itself failed (out of memory): nothing more to do in a destructor.
  }
}

}  // namespace strata
