#pragma once
// Collectives between the ranks of a data-parallel job: all-gather, reduce-scatter,
// all-reduce, broadcast and barrier, behind one small interface.
//
// Asynchronous, in stream order: every collective except barrier() is enqueued on the Stream
// passed in and runs after the work enqueued on that stream before it; record an Event after
// it to know when it has completed (or synchronize the stream). Buffers are borrowed: keep
// them alive and untouched until the collective has completed.
//
// Backends (CommOptions::backend):
//  - single: one rank. Collectives are copies on the stream (nothing when in place). Works on
//    every device.
//  - mpi: host device only (buffers must be host-addressable; the host device's arena is host
//    memory). Each collective is a Stream::host_task that calls MPI. Needs a build with MPI.
//  - nccl: cuda device only (device buffers); NCCL kernels on the stream's cudaStream_t. With
//    more than one rank the NCCL id is exchanged over MPI, so it needs a build with MPI too.
//  - automatic: single when the process was not started by mpirun (see launch.h); under
//    mpirun, mpi on the host device and nccl on a cuda device.
//
// Layouts (count is in elements of `dtype`; W = world(), r = rank()):
//  - all_gather(send, recv, count): send holds count elements, recv holds W * count; rank k's
//    elements land at recv + k * count. In place when send == recv + r * count.
//  - reduce_scatter(send, recv, count): send holds W * count; rank r receives in recv (count
//    elements) the reduction over all ranks of their chunk r, send + r * count. In place when
//    recv == send + r * count.
//  - all_reduce(in, out, count): out = reduction over all ranks of in. In place when in == out.
//  - broadcast(buf, count, root): every rank's buf becomes root's buf.
// Any other overlap between the send and receive buffers is a programming error (asserted).
// count == 0 is a no-op on every backend. Every rank must pass the same count, dtype, op and
// root, and must issue its collectives in the same order (as with NCCL); collectives issued on
// different streams are matched across ranks in the order they were issued, not the order in
// which the streams happen to run them.
//
// Reductions: sum, and max (propagates NaN on single/mpi; meant for overflow flags, e.g. each
// rank contributes 1.0f when it saw an Inf or NaN). fp16/bf16 are reduced in fp32.
// Determinism: the mpi backend sums each element in rank order 0, 1, ..., W-1 in fp32 and
// rounds once (round-to-nearest-even) to fp16/bf16. It does not use MPI's reduction (MPI only
// recommends, without guaranteeing, that a reduction gives the same result each time):
// the data is exchanged with MPI all-to-all and summed by strata, so results are bitwise
// reproducible, identical on every rank, and independent of count. NCCL reduces in its own
// order, reproducible in practice for a fixed world size, count, topology and NCCL version,
// but not specified by NCCL, and it may round fp16/bf16 at each step.
//
// Failure: a collective that cannot complete throws strata::Error: on mpi from the stream's
// synchronize() (the MPI calls run on the stream), on nccl from the call that enqueues it (or
// later CUDA errors from the stream). On the mpi backend, a collective skipped because its stream
// had failed earlier breaks the communicator: later collectives fail instead of being matched with
// the wrong collectives of the other ranks.
//
// Ownership: create_communicator returns the owned communicator. It borrows the Device, which
// must outlive it. Destroy it after the streams that carry its collectives have drained; the
// mpi backend waits for its enqueued collectives in its destructor. The mpi and nccl backends
// initialize MPI (MPI_THREAD_SERIALIZED) if nobody has, and finalize it when the last strata
// communicator using it is destroyed: create them on the main thread, keep one for the run
// (MPI cannot be initialized twice in a process).
#include <cstddef>
#include <memory>
#include <string_view>

#include "core/dtype.h"
#include "runtime/device/device.h"

namespace strata::runtime::comm {


enum class ReduceOp { sum, max };

enum class CommBackend { automatic, single, mpi, nccl };

// "auto", "single", "mpi", "nccl".
std::string_view comm_backend_name(CommBackend backend);
// The inverse of comm_backend_name; throws strata::Error for anything else.
CommBackend parse_comm_backend(std::string_view name);
// Whether this build contains the backend (automatic and single: always).
bool comm_backend_compiled(CommBackend backend);

struct CommOptions {
  CommBackend backend = CommBackend::automatic;
  // mpi backend: the most bytes of one rank's part that a single MPI call moves. Larger
  // collectives go in pieces (MPI counts are ints); reductions keep world() times this much
  // host scratch. Small values only cost latency (the tests use them to exercise pieces).
  std::size_t mpi_piece_bytes = std::size_t{8} << 20;
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  virtual int rank() const = 0;
  virtual int world() const = 0;
  virtual CommBackend backend() const = 0;
  std::string_view backend_name() const { return comm_backend_name(backend()); }

  // See the layouts above. These check the arguments, then enqueue on `stream`.
  void all_gather(const void* send, void* recv, std::size_t count_per_rank, DType dtype,
                  device::Stream& stream);
  void reduce_scatter(const void* send, void* recv, std::size_t count_per_rank, DType dtype,
                      device::Stream& stream, ReduceOp op = ReduceOp::sum);
  void all_reduce(const void* in, void* out, std::size_t count, DType dtype, device::Stream& stream,
                  ReduceOp op = ReduceOp::sum);
  void broadcast(void* buf, std::size_t count, DType dtype, int root, device::Stream& stream);

  // Synchronous: returns once every rank has called it, after this rank's collectives issued
  // before it (mpi backend); on nccl, a one-element all-reduce on an internal stream.
  virtual void barrier() = 0;

 protected:
  Communicator() = default;

  // Called with checked arguments and count > 0.
  virtual void do_all_gather(const void* send, void* recv, std::size_t count_per_rank, DType dtype,
                             device::Stream& stream) = 0;
  virtual void do_reduce_scatter(const void* send, void* recv, std::size_t count_per_rank,
                                 DType dtype, ReduceOp op, device::Stream& stream) = 0;
  virtual void do_all_reduce(const void* in, void* out, std::size_t count, DType dtype, ReduceOp op,
                             device::Stream& stream) = 0;
  virtual void do_broadcast(void* buf, std::size_t count, DType dtype, int root,
                            device::Stream& stream) = 0;
};

// Picks and creates the backend (see above). Throws strata::Error, saying what to do, when
// the choice cannot work: nccl on the host device, mpi on a cuda device, a backend this build
// lacks, or mpirun with several ranks and a build without MPI.
std::unique_ptr<Communicator> create_communicator(device::Device& device, const CommOptions& options = {});

// Collective: true on every rank when `flag` is true on any (a one-element max all-reduce on
// `stream`, synchronized). With one rank, `flag`. For decisions every rank must take alike (stop
// after this step; a checkpoint failed on some rank).
bool any_rank(Communicator& comm, device::Device& device, device::Stream& stream, bool flag);

// For a program's last error handler, after it printed the error: when a communicator with
// several ranks ended because of that error (it was destroyed while the exception unwound), the
// other ranks may be waiting for this one in a collective and would wait forever, so this ends
// the whole job (MPI_Abort: mpirun takes every rank down and names this one). Returns when
// there is nothing to end: one rank, no MPI, or a communicator that ended normally.
void end_job_after_error(int exit_code) noexcept;

}  // namespace strata::runtime::comm
