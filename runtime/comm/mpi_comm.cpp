// The mpi backend: collectives on host-addressable buffers, each a Stream::host_task calling
// nonblocking MPI (Note [Never block in MPI holding the lock] in mpi_session.h), run in issue
// order (Note [Collective order] in sequencer.h).
//
// Reductions do not use MPI's: MPI does not promise the same reduction order twice, and has no
// fp16/bf16 sum. reduce_scatter is an all-to-all (rank k receives every rank's piece of chunk
// k) followed by reduce_in_order; all_reduce is a reduce-scatter of the buffer split in W
// nearly equal parts followed by an all-gather. Each element is thus summed by one rank in
// rank order, in fp32, rounded once: results are reproducible, identical on all ranks and
// move the same bytes as a ring all-reduce.
//
// Large buffers go in pieces of at most `piece` elements per rank per MPI call
// (CommOptions::mpi_piece_bytes): MPI counts are ints, and the all-to-all receives W pieces
// into a scratch buffer.
#include <algorithm>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/log.h"
#include "runtime/comm/comm_impl.h"
#include "runtime/comm/mpi_session.h"
#include "runtime/comm/sequencer.h"
#include "runtime/device/device.h"

namespace strata::runtime::comm {
namespace {

// W times a piece, and every displacement within it, must be an int.
constexpr std::size_t kMaxElementsPerCall = std::size_t{1} << 30;

MPI_Datatype mpi_type(DType dtype) {
  // fp16/bf16 only travel as bits: strata does their arithmetic.
  return dtype == DType::f32 ? MPI_FLOAT : MPI_UINT16_T;
}

const unsigned char* at(const void* p, std::size_t bytes) {
  return static_cast<const unsigned char*>(p) + bytes;
}
unsigned char* at(void* p, std::size_t bytes) { return static_cast<unsigned char*>(p) + bytes; }

// `len` contiguous elements, with an extent of `stride_bytes`: with count 1 per rank, rank k's
// block starts at base + k * stride_bytes (one rank's part of a larger buffer). Committed on
// creation, freed on destruction, both under the MPI lock.
class StridedBlock {
 public:
  StridedBlock(const MpiSession& mpi, MPI_Datatype element, int len, std::size_t stride_bytes)
      : mpi_(mpi) {
    auto lock = mpi_.lock();
    MPI_Datatype block = MPI_DATATYPE_NULL;
    mpi_check(MPI_Type_contiguous(len, element, &block), "MPI_Type_contiguous");
    const int rc = MPI_Type_create_resized(block, 0, static_cast<MPI_Aint>(stride_bytes), &type_);
    MPI_Type_free(&block);
    mpi_check(rc, "MPI_Type_create_resized");
    mpi_check(MPI_Type_commit(&type_), "MPI_Type_commit");
  }
  ~StridedBlock() {
    auto lock = mpi_.lock();
    MPI_Type_free(&type_);
  }
  StridedBlock(const StridedBlock&) = delete;
  StridedBlock& operator=(const StridedBlock&) = delete;
  MPI_Datatype get() const { return type_; }

 private:
  const MpiSession& mpi_;
  MPI_Datatype type_ = MPI_DATATYPE_NULL;
};

class MpiCommunicator final : public Communicator {
 public:
  MpiCommunicator(const launch::LaunchInfo& launch, const CommOptions& options)
      : piece_bytes_(options.mpi_piece_bytes) {
    // A private copy of MPI_COMM_WORLD, so that no other MPI user's collectives can be matched
    // with ours; errors come back as codes (mpi_check) instead of aborting the process.
    MPI_Request request = MPI_REQUEST_NULL;
    {
      auto lock = mpi_.lock();
      mpi_check(MPI_Comm_idup(MPI_COMM_WORLD, &comm_, &request), "MPI_Comm_idup");
    }
    mpi_.wait(request, "MPI_Comm_idup");
    auto lock = mpi_.lock();
    mpi_check(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
    mpi_check(MPI_Comm_rank(comm_, &rank_), "MPI_Comm_rank");
    mpi_check(MPI_Comm_size(comm_, &world_), "MPI_Comm_size");
    if (launch.under_mpirun && (rank_ != launch.rank || world_ != launch.world)) {
      MPI_Comm_free(&comm_);
      throw Error("MPI says rank " + std::to_string(rank_) + " of " + std::to_string(world_) +
                      " but " + launch.launcher + "'s environment says rank " +
                      std::to_string(launch.rank) + " of " + std::to_string(launch.world),
                  "communicator", "start strata with the mpirun of the MPI it was built with");
    }
  }

  ~MpiCommunicator() override {
    sequencer_.wait_drained();  // enqueued collectives use comm_ and scratch_
    auto lock = mpi_.lock();
    const int rc = MPI_Comm_free(&comm_);
    if (rc != MPI_SUCCESS) log::warn("MPI_Comm_free failed with error {}", rc);
  }

  int rank() const override { return rank_; }
  int world() const override { return world_; }
  CommBackend backend() const override { return CommBackend::mpi; }

  void barrier() override {
    sequencer_.run_in_turn(sequencer_.take(), [this] {
      start_and_wait("MPI_Ibarrier",
                     [&](MPI_Request* request) { return MPI_Ibarrier(comm_, request); });
    });
  }

 protected:
  void do_all_gather(const void* send, void* recv, std::size_t count, DType dtype,
                     device::Stream& stream) override {
    const std::size_t elem = dtype_size(dtype);
    const bool in_place = send == at(recv, static_cast<std::size_t>(rank_) * count * elem);
    enqueue(stream, "all_gather", [=, this] {
      const std::size_t piece = piece_elements(dtype);
      for (std::size_t o = 0; o < count; o += piece) {
        const int len = static_cast<int>(std::min(piece, count - o));
        StridedBlock part(mpi_, mpi_type(dtype), len, count * elem);  // rank k's: recv + k * count
        start_and_wait("MPI_Iallgather", [&](MPI_Request* request) {
          return MPI_Iallgather(in_place ? MPI_IN_PLACE : at(send, o * elem), len, mpi_type(dtype),
                                at(recv, o * elem), 1, part.get(), comm_, request);
        });
      }
    });
  }

  void do_reduce_scatter(const void* send, void* recv, std::size_t count, DType dtype, ReduceOp op,
                         device::Stream& stream) override {
    enqueue(stream, "reduce_scatter", [=, this] {
      const std::size_t elem = dtype_size(dtype);
      const auto world = static_cast<std::size_t>(world_);
      const std::size_t piece = piece_elements(dtype);
      scratch_.resize(std::max(scratch_.size(), world * std::min(piece, count) * elem));
      // In place (recv == send + rank * count) is safe: piece o of our own chunk has been
      // received into scratch_ before it is overwritten, and later pieces lie beyond it.
      for (std::size_t o = 0; o < count; o += piece) {
        const std::size_t len = std::min(piece, count - o);
        StridedBlock chunk(mpi_, mpi_type(dtype), static_cast<int>(len), count * elem);
        start_and_wait("MPI_Ialltoall", [&](MPI_Request* request) {
          // To rank k: send + (k * count + o); from rank k: scratch_ + k * len.
          return MPI_Ialltoall(at(send, o * elem), 1, chunk.get(), scratch_.data(),
                               static_cast<int>(len), mpi_type(dtype), comm_, request);
        });
        reduce_in_order(scratch_.data(), world, len, dtype, op, at(recv, o * elem));
      }
    });
  }

  void do_all_reduce(const void* in, void* out, std::size_t count, DType dtype, ReduceOp op,
                     device::Stream& stream) override {
    enqueue(stream, "all_reduce", [=, this] {
      const std::size_t elem = dtype_size(dtype);
      const auto world = static_cast<std::size_t>(world_);
      // W parts of at most piece_elements per MPI call; rank k reduces part k.
      const std::size_t piece = world * piece_elements(dtype);
      std::vector<int> part_len(world), part_begin(world), recv_len(world), recv_begin(world);
      for (std::size_t o = 0; o < count; o += piece) {
        const std::size_t len = std::min(piece, count - o);
        const std::size_t part = (len + world - 1) / world;
        for (std::size_t k = 0; k < world; ++k) {
          const std::size_t begin = std::min(len, k * part);
          part_begin[k] = static_cast<int>(begin);
          part_len[k] = static_cast<int>(std::min(len, begin + part) - begin);
        }
        const auto mine = static_cast<std::size_t>(part_len[static_cast<std::size_t>(rank_)]);
        for (std::size_t k = 0; k < world; ++k) {
          recv_len[k] = static_cast<int>(mine);
          recv_begin[k] = static_cast<int>(k * mine);
        }
        scratch_.resize(std::max(scratch_.size(), world * mine * elem));
        // Reduce-scatter: every rank's part `rank` into scratch_, then reduced into out. In
        // place is safe: the whole piece of `in` has been sent before out is written.
        start_and_wait("MPI_Ialltoallv", [&](MPI_Request* request) {
          return MPI_Ialltoallv(at(in, o * elem), part_len.data(), part_begin.data(),
                                mpi_type(dtype), scratch_.data(), recv_len.data(),
                                recv_begin.data(), mpi_type(dtype), comm_, request);
        });
        if (mine > 0) {
          const std::size_t my_begin =
              static_cast<std::size_t>(part_begin[static_cast<std::size_t>(rank_)]);
          reduce_in_order(scratch_.data(), world, mine, dtype, op, at(out, (o + my_begin) * elem));
        }
        // All-gather of the reduced parts, each already at its place in out.
        start_and_wait("MPI_Iallgatherv", [&](MPI_Request* request) {
          return MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, at(out, o * elem),
                                 part_len.data(), part_begin.data(), mpi_type(dtype), comm_,
                                 request);
        });
      }
    });
  }

  void do_broadcast(void* buf, std::size_t count, DType dtype, int root, device::Stream& stream) override {
    enqueue(stream, "broadcast", [=, this] {
      const std::size_t elem = dtype_size(dtype);
      const std::size_t piece = piece_elements(dtype);
      for (std::size_t o = 0; o < count; o += piece) {
        const int len = static_cast<int>(std::min(piece, count - o));
        start_and_wait("MPI_Ibcast", [&](MPI_Request* request) {
          return MPI_Ibcast(at(buf, o * elem), len, mpi_type(dtype), root, comm_, request);
        });
      }
    });
  }

 private:
  // Elements of one rank's part per MPI call: at least 1, and small enough for int counts.
  std::size_t piece_elements(DType dtype) const {
    const std::size_t limit = kMaxElementsPerCall / static_cast<std::size_t>(world_);
    return std::clamp<std::size_t>(piece_bytes_ / dtype_size(dtype), 1, limit);
  }

  // Takes a ticket now (issue order) and runs `body` in ticket order on the stream's thread.
  // `name` (a literal) labels the collective in a trace.
  void enqueue(device::Stream& stream, const char* name, std::function<void()> body) {
    auto guard = std::make_shared<TicketGuard>(sequencer_, sequencer_.take());
    stream.host_task([guard, body = std::move(body)] { guard->run(body); }, name);
  }

  // start(&request) is an MPI_I* call, made under the MPI lock; then waits for it unlocked.
  template <typename Start>
  void start_and_wait(const char* call, Start&& start) {
    MPI_Request request = MPI_REQUEST_NULL;
    {
      auto lock = mpi_.lock();
      mpi_check(start(&request), call);
    }
    mpi_.wait(request, call);
  }

  MpiSession mpi_;  // first member: MPI outlives everything below
  std::size_t piece_bytes_;
  Sequencer sequencer_;
  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0;
  int world_ = 1;
  std::vector<unsigned char> scratch_;  // used by one collective at a time (the sequencer's turn)
};

}  // namespace

std::unique_ptr<Communicator> create_mpi_communicator(const launch::LaunchInfo& launch,
                                                      const CommOptions& options) {
  return std::make_unique<MpiCommunicator>(launch, options);
}

}  // namespace strata::runtime::comm
