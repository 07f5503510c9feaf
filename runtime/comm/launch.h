#pragma once
// How this process was started: by mpirun (and as which rank of how many) or alone.
// Read from the launcher's environment, before MPI is initialized.
#include <string>

namespace strata::runtime {

struct LaunchInfo {
  bool mpi_compiled = false;  // this build has the MPI communicator
  bool under_mpirun = false;  // the environment of an MPI launcher was found
  int rank = 0;
  int world = 1;
  std::string launcher;       // "Open MPI", "PMI", "PMIx", or "none"
};

LaunchInfo detect_launch();

}  // namespace strata::runtime
