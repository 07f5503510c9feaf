// The process-wide MPI state: the one global of runtime/comm, because MPI itself is one per
// process (initialized once, finalized once, one thread level).
#include "runtime/comm/mpi_session.h"

#include <chrono>
#include <cstdio>
#include <exception>
#include <string>
#include <thread>

#include "core/error.h"
#include "core/log.h"
#include "runtime/comm/comm_impl.h"

namespace strata::runtime::comm {
namespace {

struct MpiProcess {
  std::mutex mutex;  // held around every MPI call (MPI_THREAD_SERIALIZED)
  int sessions = 0;
  bool initialized_here = false;
  bool left_for_abort = false;  // the last session ended by an error with peers: not finalized
};

MpiProcess& mpi_process() {
  static MpiProcess process;
  return process;
}

// Polls that yield before MpiSession::wait starts sleeping between polls: a collective whose
// peers are ready finishes within these; one waiting on a slow rank should not burn a core.
constexpr int kSpinPolls = 2000;
constexpr std::chrono::microseconds kPollSleep{20};

std::string thread_level_name(int level) {
  switch (level) {
    case MPI_THREAD_SINGLE:
      return "MPI_THREAD_SINGLE";
    case MPI_THREAD_FUNNELED:
      return "MPI_THREAD_FUNNELED";
    case MPI_THREAD_SERIALIZED:
      return "MPI_THREAD_SERIALIZED";
    case MPI_THREAD_MULTIPLE:
      return "MPI_THREAD_MULTIPLE";
  }
  return "level " + std::to_string(level);
}

}  // namespace

void mpi_check(int rc, const char* call) {
  if (rc == MPI_SUCCESS) [[likely]]
    return;
  char text[MPI_MAX_ERROR_STRING] = {};
  int length = 0;
  if (MPI_Error_string(rc, text, &length) != MPI_SUCCESS) length = 0;
  throw Error(std::string(call) + " failed: " +
                  (length > 0 ? std::string(text, length) : "error " + std::to_string(rc)),
              "MPI",
              "check that every rank issues the same collectives in the same order with "
              "the same counts, and that no rank has died");
}

MpiSession::MpiSession() {
  MpiProcess& p = mpi_process();
  std::lock_guard lock(p.mutex);
  if (p.sessions == 0) {
    int finalized = 0;
    mpi_check(MPI_Finalized(&finalized), "MPI_Finalized");
    if (finalized != 0) {
      throw Error("MPI was already finalized in this process and cannot be initialized again",
                  "communicator", "create one communicator and keep it for the whole run");
    }
    int initialized = 0;
    mpi_check(MPI_Initialized(&initialized), "MPI_Initialized");
    int provided = MPI_THREAD_SINGLE;
    if (initialized == 0) {
      mpi_check(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided),
                "MPI_Init_thread");
      if (provided < MPI_THREAD_SERIALIZED) {
        MPI_Finalize();
        throw Error(
            "MPI provides only " + thread_level_name(provided) +
                "; strata calls MPI from its stream threads and needs MPI_THREAD_SERIALIZED",
            "MPI_Init_thread", "use an MPI library built with thread support (Open MPI, MPICH)");
      }
      p.initialized_here = true;
      // MPI is ours: report its errors as codes (mpi_check turns them into strata::Error)
      // rather than aborting. Some failures, e.g. of MPI_Test on a collective's request, are
      // reported on MPI_COMM_WORLD even for collectives on a duplicate of it.
      mpi_check(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN),
                "MPI_Comm_set_errhandler");
      log::debug("MPI initialized ({})", thread_level_name(provided));
    } else {
      mpi_check(MPI_Query_thread(&provided), "MPI_Query_thread");
      if (provided < MPI_THREAD_SERIALIZED) {
        throw Error(
            "MPI was initialized before strata with " + thread_level_name(provided) +
                "; strata calls MPI from its stream threads and needs MPI_THREAD_SERIALIZED",
            "MPI_Init_thread",
            "initialize MPI with MPI_Init_thread(MPI_THREAD_SERIALIZED) or "
            "higher, or let strata initialize it");
      }
    }
  }
  ++p.sessions;
}

// Note [A rank that fails does not finalize]
// MPI_Finalize waits for the other ranks (Open MPI's ends in a fence). When a rank ends because
// of an error (its disk failed, its checkpoint is damaged), the others are still training and
// wait for it in their next collective: a finalizing rank and its peers would wait for each
// other forever. So a session destroyed while an exception unwinds, with more than one rank,
// leaves MPI initialized; the error is printed, and mpi_abort_after_error (called by the CLI's
// error handler) ends the job with MPI_Abort, which takes every rank down. A process that
// exits without either still ends the job: mpirun kills the others when a rank exits without
// finalizing. With one rank nobody waits, and MPI is finalized as usual.
MpiSession::~MpiSession() {
  MpiProcess& p = mpi_process();
  std::lock_guard lock(p.mutex);
  if (--p.sessions == 0 && p.initialized_here) {
    int world = 1;
    if (std::uncaught_exceptions() > 0 && MPI_Comm_size(MPI_COMM_WORLD, &world) == MPI_SUCCESS &&
        world > 1) {
      p.left_for_abort = true;
      return;
    }
    const int rc = MPI_Finalize();
    if (rc != MPI_SUCCESS) log::warn("MPI_Finalize failed with error {}", rc);
    p.initialized_here = false;  // MPI cannot be initialized again anyway
  }
}

// After an error, with MPI left unfinalized by a session that ended during unwinding and more
// than one rank: MPI_Abort on MPI_COMM_WORLD, which ends every rank of the job (does not
// return). Otherwise returns. See end_job_after_error (comm.h).
void mpi_abort_after_error(int exit_code) noexcept {
  MpiProcess& p = mpi_process();
  {
    std::lock_guard lock(p.mutex);
    if (!p.left_for_abort) return;
  }
  int rank = 0;
  int world = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  std::fprintf(stderr, "strata: rank %d of %d stopped with an error; ending the other ranks\n",
               rank, world);
  std::fflush(stderr);
  // Not under the lock: a stream thread of this rank may still hold it in a poll, and
  // MPI_Abort needs no serialization to end the job.
  MPI_Abort(MPI_COMM_WORLD, exit_code);
}

std::unique_lock<std::mutex> MpiSession::lock() const {
  return std::unique_lock(mpi_process().mutex);
}

void MpiSession::wait(MPI_Request& request, const char* call) const {
  for (int polls = 0;; ++polls) {
    int done = 0;
    {
      auto held = lock();
      mpi_check(MPI_Test(&request, &done, MPI_STATUS_IGNORE), call);
    }
    if (done != 0) return;
    if (polls < kSpinPolls) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(kPollSleep);
    }
  }
}

}  // namespace strata::runtime::comm
