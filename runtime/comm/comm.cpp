// The Communicator's argument checks, the single-rank backend, and backend selection.
#include "runtime/comm/comm.h"

#include <cstdint>
#include <limits>
#include <string>

#include "core/error.h"
#include "core/log.h"
#include "runtime/comm/comm_impl.h"
#include "runtime/launch/launch.h"
#include "runtime/device/device.h"

namespace strata::runtime::comm {
namespace {

// [a, a + a_bytes) and [b, b + b_bytes) share a byte.
bool overlaps(const void* a, std::size_t a_bytes, const void* b, std::size_t b_bytes) {
  const auto pa = reinterpret_cast<std::uintptr_t>(a);
  const auto pb = reinterpret_cast<std::uintptr_t>(b);
  return a_bytes != 0 && b_bytes != 0 && pa < pb + b_bytes && pb < pa + a_bytes;
}

const void* offset(const void* p, std::size_t bytes) {
  return static_cast<const unsigned char*>(p) + bytes;
}

// count * world elements of dtype, in bytes; asserts that it fits.
std::size_t total_bytes(std::size_t count, int world, DType dtype) {
  const std::size_t elem = dtype_size(dtype);
  const auto ranks = static_cast<std::size_t>(world);
  STRATA_ASSERT(count <= std::numeric_limits<std::size_t>::max() / elem / ranks,
                "collective size overflows size_t");
  return count * ranks * elem;
}

// One rank: every collective is the identity, so only out-of-place calls move bytes.
class SingleCommunicator final : public Communicator {
 public:
  int rank() const override { return 0; }
  int world() const override { return 1; }
  CommBackend backend() const override { return CommBackend::single; }
  void barrier() override {}

 protected:
  void do_all_gather(const void* send, void* recv, std::size_t count, DType dtype,
                     device::Stream& stream) override {
    copy(send, recv, count, dtype, stream);
  }
  void do_reduce_scatter(const void* send, void* recv, std::size_t count, DType dtype, ReduceOp,
                         device::Stream& stream) override {
    copy(send, recv, count, dtype, stream);
  }
  void do_all_reduce(const void* in, void* out, std::size_t count, DType dtype, ReduceOp,
                     device::Stream& stream) override {
    copy(in, out, count, dtype, stream);
  }
  void do_broadcast(void*, std::size_t, DType, int, device::Stream&) override {}

 private:
  static void copy(const void* src, void* dst, std::size_t count, DType dtype, device::Stream& stream) {
    if (src != dst) stream.copy_async(dst, src, count * dtype_size(dtype));
  }
};

Error no_mpi_error(const launch::LaunchInfo& launch, std::string_view wanted) {
  std::string what = "this build of strata has no MPI, which " + std::string(wanted) + " needs";
  if (launch.under_mpirun) {
    what += " (started by " + launch.launcher + " as rank " + std::to_string(launch.rank) + " of " +
            std::to_string(launch.world) + ")";
  }
  return Error(what, "communicator",
               "install MPI (apt-get install libopenmpi-dev openmpi-bin) and reconfigure with "
               "-DSTRATA_MPI=ON, or run a single process without mpirun");
}

}  // namespace

CommBackend resolve_comm_backend(CommBackend wanted, device::Backend device, const launch::LaunchInfo& launch) {
  const bool cuda = device == device::Backend::cuda;
  if (wanted == CommBackend::automatic) {
    if (!launch.under_mpirun) return CommBackend::single;
    if (!launch.mpi_compiled && launch.world > 1) {
      throw no_mpi_error(launch, "mpirun with several ranks");
    }
    if (cuda) return CommBackend::nccl;
    return launch.mpi_compiled ? CommBackend::mpi : CommBackend::single;
  }
  switch (wanted) {
    case CommBackend::single:
      if (launch.world > 1) {
        throw Error("communicator 'single' asked for, but this process is rank " +
                        std::to_string(launch.rank) + " of " + std::to_string(launch.world) +
                        " under " + launch.launcher + ": each rank would train alone",
                    "communicator", "use the 'auto' communicator, or run without mpirun");
      }
      break;
    case CommBackend::mpi:
      if (!launch.mpi_compiled) throw no_mpi_error(launch, "the 'mpi' communicator");
      if (cuda) {
        throw Error("the 'mpi' communicator needs host-addressable buffers, but the device is cuda",
                    "communicator",
                    "use the 'nccl' (or 'auto') communicator on a cuda device, or "
                    "the host device with 'mpi'");
      }
      break;
    case CommBackend::nccl:
      if (!comm_backend_compiled(CommBackend::nccl)) {
        throw Error("this build of strata has no CUDA/NCCL, which the 'nccl' communicator needs",
                    "communicator",
                    "reconfigure with -DSTRATA_CUDA=ON where nvcc and NCCL are "
                    "installed, or use the 'mpi' or 'single' communicator");
      }
      if (!cuda) {
        throw Error("the 'nccl' communicator needs a cuda device, but the device is host",
                    "communicator",
                    "use the 'mpi' (or 'auto') communicator on the host device, or "
                    "select the cuda device");
      }
      if (launch.world > 1 && !launch.mpi_compiled) {
        throw no_mpi_error(launch,
                           "the 'nccl' communicator with several ranks (to exchange the NCCL id)");
      }
      break;
    case CommBackend::automatic:
      break;
  }
  return wanted;
}

std::string_view comm_backend_name(CommBackend backend) {
  switch (backend) {
    case CommBackend::automatic:
      return "auto";
    case CommBackend::single:
      return "single";
    case CommBackend::mpi:
      return "mpi";
    case CommBackend::nccl:
      return "nccl";
  }
  return "unknown";
}

CommBackend parse_comm_backend(std::string_view name) {
  for (CommBackend b :
       {CommBackend::automatic, CommBackend::single, CommBackend::mpi, CommBackend::nccl}) {
    if (name == comm_backend_name(b)) return b;
  }
  throw Error("unknown communicator '" + std::string(name) + "'", "communicator",
              "use \"auto\", \"single\", \"mpi\" or \"nccl\"");
}

bool comm_backend_compiled(CommBackend backend) {
  switch (backend) {
    case CommBackend::automatic:
    case CommBackend::single:
      return true;
#ifdef STRATA_HAVE_MPI
    case CommBackend::mpi:
      return true;
#else
    case CommBackend::mpi:
      return false;
#endif
#ifdef STRATA_HAVE_CUDA
    case CommBackend::nccl:
      return true;
#else
    case CommBackend::nccl:
      return false;
#endif
  }
  return false;
}

void Communicator::all_gather(const void* send, void* recv, std::size_t count_per_rank, DType dtype,
                              device::Stream& stream) {
  const std::size_t part = total_bytes(count_per_rank, 1, dtype);
  const std::size_t all = total_bytes(count_per_rank, world(), dtype);
  STRATA_ASSERT(send == offset(recv, static_cast<std::size_t>(rank()) * part) ||
                    !overlaps(send, part, recv, all),
                "all_gather: send overlaps recv but is not recv + rank * count");
  if (count_per_rank == 0) return;
  const device::StreamSpan span(stream, "all_gather", all);  // a span of the trace (cuda)
  do_all_gather(send, recv, count_per_rank, dtype, stream);
}

void Communicator::reduce_scatter(const void* send, void* recv, std::size_t count_per_rank,
                                  DType dtype, device::Stream& stream, ReduceOp op) {
  const std::size_t part = total_bytes(count_per_rank, 1, dtype);
  const std::size_t all = total_bytes(count_per_rank, world(), dtype);
  STRATA_ASSERT(recv == offset(send, static_cast<std::size_t>(rank()) * part) ||
                    !overlaps(send, all, recv, part),
                "reduce_scatter: recv overlaps send but is not send + rank * count");
  if (count_per_rank == 0) return;
  const device::StreamSpan span(stream, "reduce_scatter", all);  // a span of the trace (cuda)
  do_reduce_scatter(send, recv, count_per_rank, dtype, op, stream);
}

void Communicator::all_reduce(const void* in, void* out, std::size_t count, DType dtype,
                              device::Stream& stream, ReduceOp op) {
  const std::size_t bytes = total_bytes(count, 1, dtype);
  STRATA_ASSERT(in == out || !overlaps(in, bytes, out, bytes),
                "all_reduce: in and out overlap without being equal");
  if (count == 0) return;
  const device::StreamSpan span(stream, "all_reduce", bytes);  // a span of the trace (cuda)
  do_all_reduce(in, out, count, dtype, op, stream);
}

void Communicator::broadcast(void* buf, std::size_t count, DType dtype, int root, device::Stream& stream) {
  STRATA_ASSERT(root >= 0 && root < world(), "broadcast: root is not a rank");
  total_bytes(count, 1, dtype);
  if (count == 0) return;
  const device::StreamSpan span(stream, "broadcast", count * dtype_size(dtype));  // a span of the trace (cuda)
  do_broadcast(buf, count, dtype, root, stream);
}

void end_job_after_error(int exit_code) noexcept {
#ifdef STRATA_HAVE_MPI
  mpi_abort_after_error(exit_code);
#else
  (void)exit_code;
#endif
}

std::unique_ptr<Communicator> create_single_communicator() {
  return std::make_unique<SingleCommunicator>();
}

std::unique_ptr<Communicator> create_communicator(device::Device& device, const CommOptions& options) {
  const launch::LaunchInfo launch = launch::detect_launch();
  const CommBackend backend = resolve_comm_backend(options.backend, device.backend(), launch);
  std::unique_ptr<Communicator> comm;
  switch (backend) {
    case CommBackend::mpi:
#ifdef STRATA_HAVE_MPI
      comm = create_mpi_communicator(launch, options);
#endif
      break;
    case CommBackend::nccl:
#ifdef STRATA_HAVE_CUDA
      comm = create_nccl_communicator(device, launch);
#endif
      break;
    case CommBackend::single:
    case CommBackend::automatic:
      comm = create_single_communicator();
      break;
  }
  STRATA_ASSERT(comm != nullptr, "resolve_comm_backend returned a backend this build lacks");
  log::debug("communicator: {} (asked for {}), rank {} of {}, launcher {}", comm->backend_name(),
             comm_backend_name(options.backend), comm->rank(), comm->world(), launch.launcher);
  return comm;
}

bool any_rank(Communicator& comm, device::Device& device, device::Stream& stream, bool flag) {
  if (comm.world() == 1) return flag;
  device::DeviceBuffer buf = device.allocate(sizeof(float), "any_rank flag");
  float value = flag ? 1.0f : 0.0f;
  stream.copy_async(buf.data(), &value, sizeof value);
  comm.all_reduce(buf.data(), buf.data(), 1, DType::f32, stream, ReduceOp::max);
  stream.copy_async(&value, buf.data(), sizeof value);
  stream.synchronize();
  return value != 0.0f;
}

}  // namespace strata::runtime::comm
