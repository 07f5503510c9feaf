#pragma once
// MPI for the communicators (internal to runtime/comm; compiled only with MPI): process-wide
// initialization, and MPI calls one thread at a time.
//
// MPI is initialized with MPI_THREAD_SERIALIZED: any thread may call MPI, never two at once.
// Collectives run on stream worker threads, so every MPI call holds MpiSession::lock().
// Note [Never block in MPI holding the lock]: a blocking collective that held the lock would
// stop every other thread of the rank from calling MPI until its peers arrive; if a peer is in
// turn stuck behind its own lock on another communicator, both ranks wait forever. So strata
// starts nonblocking operations (MPI_I*) and polls them with MPI_Test, taking the lock for each
// poll only (MpiSession::wait).
// The C API only: Open MPI's mpi.h otherwise pulls in the deprecated C++ bindings, which
// need libmpi_cxx at link time.
#ifndef OMPI_SKIP_MPICXX
#define OMPI_SKIP_MPICXX 1
#endif
#ifndef MPICH_SKIP_MPICXX
#define MPICH_SKIP_MPICXX 1
#endif
#include <mpi.h>

#include <mutex>

namespace strata::runtime::comm {

// Throws strata::Error naming `call` and MPI's message when rc is not MPI_SUCCESS.
void mpi_check(int rc, const char* call);

// A use of MPI. The first session of the process initializes MPI unless someone else already
// has (then it only checks the thread level); MPI is finalized when the last session goes
// away, if strata initialized it, unless it goes away because of an error with several ranks
// (Note [A rank that fails does not finalize]). Create and destroy sessions on the main thread: MPI wants
// MPI_Finalize on the thread that initialized it. Throws strata::Error when MPI cannot be
// initialized, was already finalized (MPI cannot start twice), or lacks MPI_THREAD_SERIALIZED.
class MpiSession {
 public:
  MpiSession();
  ~MpiSession();
  MpiSession(const MpiSession&) = delete;
  MpiSession& operator=(const MpiSession&) = delete;

  // Hold it around every MPI call.
  std::unique_lock<std::mutex> lock() const;

  // Completes a nonblocking operation: MPI_Test under the lock, yielding (then sleeping
  // briefly) between polls. Takes the lock itself; call it without holding it.
  void wait(MPI_Request& request, const char* call) const;
};

}  // namespace strata::runtime::comm
