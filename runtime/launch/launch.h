#pragma once
// How this process was started: by mpirun (and as which rank of how many) or alone.
// Read from the launcher's environment, before MPI is initialized.
#include <string>

namespace strata::runtime::launch {

struct LaunchInfo {
  bool mpi_compiled = false;  // this build has the MPI communicator
  bool under_mpirun = false;  // the environment of an MPI launcher was found
  int rank = 0;
  int world = 1;
  int local_rank = 0;         // rank among the processes on this machine (picks the GPU)
  int local_world = 1;        // processes on this machine; 0 when the launcher does not say
  std::string launcher;       // "Open MPI", "MPICH (PMI)", or "none"
};

// Open MPI (OMPI_COMM_WORLD_*) and MPICH's hydra (PMI_RANK / PMI_SIZE / MPI_LOCALRANKID /
// MPI_LOCALNRANKS).
// A PMIx launch that names a rank but no world size is an error rather than a silent
// single-rank run. Malformed values are errors naming the variable.
LaunchInfo detect_launch();

}  // namespace strata::runtime::launch
