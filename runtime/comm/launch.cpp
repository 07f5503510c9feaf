#include "runtime/comm/launch.h"

#include <cstdlib>
#include <string_view>

#include "core/error.h"

namespace strata::runtime {
namespace {

// Reads a non-negative integer environment variable; -1 when absent, throws when malformed.
int env_int(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return -1;
  char* end = nullptr;
  long x = std::strtol(v, &end, 10);
  if (*end != '\0' || x < 0 || x > 1 << 24) {
    throw Error(std::string("environment variable ") + name + "='" + v + "' is not a rank or size",
                name, "unset it, or start the processes with mpirun");
  }
  return static_cast<int>(x);
}

}  // namespace

LaunchInfo detect_launch() {
  LaunchInfo info;
#ifdef STRATA_HAVE_MPI
  info.mpi_compiled = true;
#endif
  struct Pair { const char* rank; const char* size; const char* launcher; };
  static constexpr Pair kLaunchers[] = {
      {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "Open MPI"},
      {"PMIX_RANK", "PMIX_SIZE", "PMIx"},
      {"PMI_RANK", "PMI_SIZE", "PMI"},
  };
  info.launcher = "none";
  for (const Pair& p : kLaunchers) {
    int rank = env_int(p.rank);
    int size = env_int(p.size);
    if (rank < 0 || size < 0) continue;
    if (size == 0 || rank >= size) {
      throw Error("launcher environment says rank " + std::to_string(rank) + " of " +
                      std::to_string(size), p.rank, "start the processes with mpirun");
    }
    info.under_mpirun = true;
    info.rank = rank;
    info.world = size;
    info.launcher = p.launcher;
    break;
  }
  return info;
}

}  // namespace strata::runtime
