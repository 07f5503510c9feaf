#include "runtime/launch/launch.h"

#include <algorithm>
#include <cstdlib>
#include <string_view>

#include "core/error.h"

namespace strata::runtime::launch {
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
  struct Launcher {
    const char* rank;
    const char* size;
    const char* local_rank;
    const char* local_size;
    const char* name;
  };
  static constexpr Launcher kLaunchers[] = {
      {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE",
       "Open MPI"},
      {"PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS", "MPICH (PMI)"},
  };
  info.launcher = "none";
  for (const Launcher& l : kLaunchers) {
    int rank = env_int(l.rank);
    int size = env_int(l.size);
    if (rank < 0 || size < 0) continue;
    if (size == 0 || rank >= size) {
      throw Error("launcher environment says rank " + std::to_string(rank) + " of " +
                      std::to_string(size), l.rank, "start the processes with mpirun");
    }
    info.under_mpirun = true;
    info.rank = rank;
    info.world = size;
    info.local_rank = std::max(env_int(l.local_rank), 0);
    info.local_world = std::max(env_int(l.local_size), 0);
    info.launcher = l.name;
    return info;
  }
  if (env_int("PMIX_RANK") >= 0) {
    throw Error("started by a PMIx launcher that gives a rank (PMIX_RANK) but no world size",
                "PMIX_RANK",
                "start strata with Open MPI's mpirun or MPICH's mpiexec, which set the world size");
  }
  return info;
}

}  // namespace strata::runtime::launch
