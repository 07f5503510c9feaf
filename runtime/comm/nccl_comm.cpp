// The nccl backend: NCCL collectives on the stream's cudaStream_t, device buffers.
// Compiled only with CUDA. With more than one rank the ncclUniqueId is made by rank 0 and
// broadcast over MPI (so it needs a build with MPI); with one rank it is made locally.
#include <cuda_runtime.h>
#include <nccl.h>

#include <exception>
#include <string>

#include "core/error.h"
#include "core/log.h"
#include "runtime/comm/comm_impl.h"
#include "runtime/device/device.h"
#ifdef STRATA_HAVE_MPI
#include "runtime/comm/mpi_session.h"
#endif

namespace strata::runtime::comm {
namespace {

ncclDataType_t nccl_type(DType dtype) {
  switch (dtype) {
    case DType::f32:
      return ncclFloat32;
    case DType::f16:
      return ncclFloat16;
    case DType::bf16:
      return ncclBfloat16;
  }
  STRATA_ASSERT(false, "unknown DType");
}

ncclRedOp_t nccl_op(ReduceOp op) { return op == ReduceOp::sum ? ncclSum : ncclMax; }

cudaStream_t cuda_stream(device::Stream& stream) {
  auto* handle = static_cast<cudaStream_t>(stream.native_handle());
  STRATA_ASSERT(handle != nullptr, "nccl collectives need a stream of the cuda device");
  return handle;
}

// Makes `ordinal` the calling thread's CUDA device for its lifetime, then restores the old one.
class DeviceScope {
 public:
  explicit DeviceScope(int ordinal) {
    CUDA_CHECK(cudaGetDevice(&previous_));
    CUDA_CHECK(cudaSetDevice(ordinal));
  }
  ~DeviceScope() { cudaSetDevice(previous_); }
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;

 private:
  int previous_ = 0;
};

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(device::Device& device, const launch::LaunchInfo& launch)
      : rank_(launch.under_mpirun ? launch.rank : 0),
        world_(launch.under_mpirun ? launch.world : 1) {
    // barrier()'s operand, and the way to learn which GPU the Device uses: NCCL binds a
    // communicator to the current device of the thread that creates it.
    flag_ = device.allocate(sizeof(float), "nccl barrier flag");
    cudaPointerAttributes attributes{};
    CUDA_CHECK(cudaPointerGetAttributes(&attributes, flag_.data()));
    DeviceScope scope(attributes.device);
    barrier_stream_ = device.create_stream("nccl barrier");
    barrier_stream_->memset_async(flag_.data(), 0, sizeof(float));

    ncclUniqueId id{};
    if (world_ == 1) {
      NCCL_CHECK(ncclGetUniqueId(&id));
    } else {
      exchange_id(id);
    }
    NCCL_CHECK(ncclCommInitRank(&comm_, world_, id, rank_));
    int nccl_rank = -1;
    int nccl_world = -1;
    NCCL_CHECK(ncclCommUserRank(comm_, &nccl_rank));
    NCCL_CHECK(ncclCommCount(comm_, &nccl_world));
    STRATA_ASSERT(nccl_rank == rank_ && nccl_world == world_,
                  "NCCL disagrees with ncclCommInitRank");
    int version = 0;
    NCCL_CHECK(ncclGetVersion(&version));
    log::debug("nccl communicator: rank {} of {} on cuda device {}, NCCL {}", rank_, world_,
               attributes.device, version);
  }

  ~NcclCommunicator() override {
    if (std::uncaught_exceptions() > 0 && world_ > 1) {
      // Torn down by an error (Note [A rank that fails does not finalize], mpi_session.cpp):
      // the other ranks may never run the collectives still enqueued here, and finalizing
      // would wait for them. Abort drops them; the job is ended by end_job_after_error.
      const ncclResult_t rc = ncclCommAbort(comm_);
      if (rc != ncclSuccess) log::debug("ncclCommAbort: {}", ncclGetErrorString(rc));
      return;
    }
    // ncclCommFinalize waits for the operations still enqueued; destroy frees the rest.
    ncclResult_t rc = ncclCommFinalize(comm_);
    if (rc != ncclSuccess) log::warn("ncclCommFinalize: {}", ncclGetErrorString(rc));
    rc = ncclCommDestroy(comm_);
    if (rc != ncclSuccess) log::warn("ncclCommDestroy: {}", ncclGetErrorString(rc));
    try {
      barrier_stream_->synchronize();
    } catch (const std::exception& e) {
      log::warn("nccl barrier stream: {}", e.what());
    }
  }

  int rank() const override { return rank_; }
  int world() const override { return world_; }
  CommBackend backend() const override { return CommBackend::nccl; }

  void barrier() override {
    NCCL_CHECK(ncclAllReduce(flag_.data(), flag_.data(), 1, ncclFloat32, ncclSum, comm_,
                             cuda_stream(*barrier_stream_)));
    barrier_stream_->synchronize();
  }

 protected:
  void do_all_gather(const void* send, void* recv, std::size_t count, DType dtype,
                     device::Stream& stream) override {
    // NCCL's in-place rule is ours: send == recv + rank * count.
    NCCL_CHECK(ncclAllGather(send, recv, count, nccl_type(dtype), comm_, cuda_stream(stream)));
  }
  void do_reduce_scatter(const void* send, void* recv, std::size_t count, DType dtype, ReduceOp op,
                         device::Stream& stream) override {
    NCCL_CHECK(ncclReduceScatter(send, recv, count, nccl_type(dtype), nccl_op(op), comm_,
                                 cuda_stream(stream)));
  }
  void do_all_reduce(const void* in, void* out, std::size_t count, DType dtype, ReduceOp op,
                     device::Stream& stream) override {
    NCCL_CHECK(
        ncclAllReduce(in, out, count, nccl_type(dtype), nccl_op(op), comm_, cuda_stream(stream)));
  }
  void do_broadcast(void* buf, std::size_t count, DType dtype, int root, device::Stream& stream) override {
    NCCL_CHECK(ncclBroadcast(buf, buf, count, nccl_type(dtype), root, comm_, cuda_stream(stream)));
  }

 private:
  // Rank 0 makes the id; MPI_COMM_WORLD carries it to the others.
  void exchange_id(ncclUniqueId& id) {
#ifdef STRATA_HAVE_MPI
    mpi_ = std::make_unique<MpiSession>();
    int mpi_rank = -1;
    int mpi_world = -1;
    {
      auto lock = mpi_->lock();
      mpi_check(MPI_Comm_rank(MPI_COMM_WORLD, &mpi_rank), "MPI_Comm_rank");
      mpi_check(MPI_Comm_size(MPI_COMM_WORLD, &mpi_world), "MPI_Comm_size");
    }
    if (mpi_rank != rank_ || mpi_world != world_) {
      throw Error("MPI says rank " + std::to_string(mpi_rank) + " of " + std::to_string(mpi_world) +
                      " but the launcher's environment says rank " + std::to_string(rank_) +
                      " of " + std::to_string(world_),
                  "communicator", "start strata with the mpirun of the MPI it was built with");
    }
    if (rank_ == 0) NCCL_CHECK(ncclGetUniqueId(&id));
    MPI_Request request = MPI_REQUEST_NULL;
    {
      auto lock = mpi_->lock();
      mpi_check(
          MPI_Ibcast(&id, static_cast<int>(sizeof(id)), MPI_BYTE, 0, MPI_COMM_WORLD, &request),
          "MPI_Ibcast");
    }
    mpi_->wait(request, "MPI_Ibcast");
#else
    STRATA_ASSERT(false, "create_communicator lets nccl with several ranks through only with MPI");
#endif
  }

#ifdef STRATA_HAVE_MPI
  std::unique_ptr<MpiSession> mpi_;  // kept for the communicator's life: MPI is finalized once
#endif
  int rank_;
  int world_;
  device::DeviceBuffer flag_;
  std::unique_ptr<device::Stream> barrier_stream_;
  ncclComm_t comm_ = nullptr;
};

}  // namespace

std::unique_ptr<Communicator> create_nccl_communicator(device::Device& device, const launch::LaunchInfo& launch) {
  return std::make_unique<NcclCommunicator>(device, launch);
}

}  // namespace strata::runtime::comm
