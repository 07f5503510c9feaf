#pragma once
// Internals of runtime/comm shared by the backends: their constructors, and the host-side
// reduction that the mpi backend uses (and that the tests use as the oracle).
#include <cstddef>
#include <memory>

#include "runtime/comm/comm.h"
#include "runtime/launch/launch.h"
#include "runtime/device/device.h"

namespace strata::runtime::comm {

// Turns CommOptions::backend into the backend to build for this device and launch, or throws
// strata::Error saying why it cannot work. Whether MPI is built in is read from
// launch.mpi_compiled (detect_launch() sets it from the build), so tests can pose as a build
// without MPI.
CommBackend resolve_comm_backend(CommBackend wanted, device::Backend device, const launch::LaunchInfo& launch);

std::unique_ptr<Communicator> create_single_communicator();
#ifdef STRATA_HAVE_MPI
std::unique_ptr<Communicator> create_mpi_communicator(const launch::LaunchInfo& launch,
                                                      const CommOptions& options);  // mpi_comm.cpp
void mpi_abort_after_error(int exit_code) noexcept;                // mpi_session.cpp
#endif
#ifdef STRATA_HAVE_CUDA
std::unique_ptr<Communicator> create_nccl_communicator(device::Device& device,
                                                       const launch::LaunchInfo& launch);  // nccl_comm.cpp
#endif

// out[i] = op(chunk 0 [i], chunk 1 [i], ..., chunk n-1 [i]) where chunk k starts at
// chunks + k * count elements. Combined in fp32 in chunk order 0, 1, ..., n-1 and rounded once
// (round-to-nearest-even) to `dtype`, so the result depends on nothing but the inputs and
// their order. max propagates NaN. `out` must not overlap `chunks`; n >= 1.
void reduce_in_order(const void* chunks, std::size_t n, std::size_t count, DType dtype, ReduceOp op,
                     void* out);

}  // namespace strata::runtime::comm
