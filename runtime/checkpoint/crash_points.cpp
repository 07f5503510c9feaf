// CrashPoints: SIGKILL at the N-th checkpoint step when STRATA_CRASH_AT=N.
#include "runtime/checkpoint/crash_points.h"

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <string>

#include <unistd.h>

#include "core/error.h"

namespace strata::runtime::checkpoint {

CrashPoints CrashPoints::from_environment() {
  const char* v = std::getenv("STRATA_CRASH_AT");
  if (v == nullptr || *v == '\0') return CrashPoints(0);
  char* end = nullptr;
  const unsigned long long n = std::strtoull(v, &end, 10);
  if (end == v || *end != '\0') {
    throw Error(std::string("STRATA_CRASH_AT=") + v + " is not a number", "STRATA_CRASH_AT",
                "unset it (it is for the crash-consistency tests) or give a count");
  }
  return CrashPoints(n);
}

void CrashPoints::hit(std::string_view what) {
  const std::uint64_t n = hits_.fetch_add(1) + 1;
  if (crash_at_ == 0 || n != crash_at_) return;
  std::fprintf(stderr, "strata: STRATA_CRASH_AT=%llu: killed after %.*s\n", static_cast<unsigned long long>(n),
               static_cast<int>(what.size()), what.data());
  std::fflush(stderr);
  ::kill(::getpid(), SIGKILL);
  ::pause();
}

}  // namespace strata::runtime::checkpoint
