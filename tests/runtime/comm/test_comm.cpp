// The communicator on the host device: the shared collective tests (test_collectives.cpp) on
// the backend named by --comm (single, or mpi when run under mpirun), backend selection and
// its errors, and (--poison) what a skipped collective does to the mpi backend.
//
//   test_comm --comm=single                      one process
//   mpirun -n 3 test_comm                        auto: mpi, 3 ranks
//   mpirun -n 3 test_comm --piece-bytes=4100     mpi: many small MPI calls per collective
//   mpirun -n 2 test_comm --poison               breaks the communicator on purpose
// Every rank checks every result; a rank with a failure exits 1, and so does mpirun.
#include <cstdio>
#include <stdexcept>
#include <string>
#include <string_view>

#include "comm_test_util.h"
#include "core/error.h"
#include "runtime/launch/launch.h"

namespace strata::runtime::comm_test {
namespace {

class CommFactory : public ::testing::Test {
 protected:
  void SetUp() override {
    if (context().poison) GTEST_SKIP() << "poison run";
  }
};

TEST_F(CommFactory, BackendNamesRoundTrip) {
  for (comm::CommBackend b :
       {comm::CommBackend::automatic, comm::CommBackend::single, comm::CommBackend::mpi, comm::CommBackend::nccl}) {
    EXPECT_EQ(comm::parse_comm_backend(comm::comm_backend_name(b)), b);
  }
  EXPECT_THROW(comm::parse_comm_backend("gloo"), Error);
  EXPECT_TRUE(comm::comm_backend_compiled(comm::CommBackend::single));
}

TEST_F(CommFactory, AutoPicksWhatTheLaunchSays) {
  const launch::LaunchInfo launch = launch::detect_launch();
  comm::Communicator& comm = *context().comm;
  if (!launch.under_mpirun) {
    auto device = device::Device::create({.kind = "host", .memory_bytes = 1 << 20});
    auto single = comm::create_communicator(*device);
    EXPECT_EQ(single->backend(), comm::CommBackend::single);
    EXPECT_EQ(single->rank(), 0);
    EXPECT_EQ(single->world(), 1);
    single->barrier();
  } else {
    EXPECT_EQ(comm.rank(), launch.rank);
    EXPECT_EQ(comm.world(), launch.world);
    if (comm::comm_backend_compiled(comm::CommBackend::mpi)) {
      EXPECT_EQ(comm.backend(), comm::CommBackend::mpi);
    }
  }
}

// Impossible choices fail with an Error that says what to do, before touching MPI or CUDA.
TEST_F(CommFactory, ImpossibleChoicesAreErrors) {
  auto device = device::Device::create({.kind = "host", .memory_bytes = 1 << 20});
  try {
    comm::create_communicator(*device, {.backend = comm::CommBackend::nccl});
    ADD_FAILURE() << "nccl on the host device was accepted";
  } catch (const Error& e) {
    EXPECT_FALSE(e.hint().empty()) << e.what();
  }
  if (!comm::comm_backend_compiled(comm::CommBackend::mpi)) {
    EXPECT_THROW(comm::create_communicator(*device, {.backend = comm::CommBackend::mpi}), Error);
  }
  if (launch::detect_launch().world > 1) {
    EXPECT_THROW(comm::create_communicator(*device, {.backend = comm::CommBackend::single}), Error);
  }
}

// Only meaningful where the same calls are made on every rank: run alone with --poison.
TEST(CommPoison, SkippedCollectiveBreaksTheMpiCommunicator) {
  if (!context().poison) GTEST_SKIP() << "run with --poison";
  comm::Communicator& comm = *context().comm;
  if (comm.backend() != comm::CommBackend::mpi)
    GTEST_SKIP() << "only the mpi backend sequences collectives";
  device::Device& device = *context().device;
  auto failing = device.create_stream("failing");
  auto healthy = device.create_stream("healthy");
  const std::size_t n = 100;
  device::DeviceBuffer a = upload(device, *healthy, std::vector<float>(n, 1.0f), DType::f32);
  device::DeviceBuffer b = upload(device, *healthy, std::vector<float>(n, 2.0f), DType::f32);

  comm.all_reduce(a.data(), a.data(), n, DType::f32, *healthy);  // a healthy one first
  healthy->synchronize();
  failing->host_task([] { throw std::runtime_error("injected failure"); });
  comm.all_reduce(a.data(), a.data(), n, DType::f32, *failing);  // skipped by the failed stream
  comm.all_reduce(b.data(), b.data(), n, DType::f32, *healthy);  // must not run
  EXPECT_THROW(failing->synchronize(), std::runtime_error);
  try {
    healthy->synchronize();
    ADD_FAILURE() << "a collective ran after a skipped one";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("skipped"), std::string::npos) << e.what();
  }
  EXPECT_THROW(comm.barrier(), Error);
  const float world = static_cast<float>(comm.world());
  EXPECT_TRUE(
      same_values(std::vector<float>(n, world), download(*healthy, a.data(), n, DType::f32)));
  EXPECT_TRUE(
      same_values(std::vector<float>(n, 2.0f), download(*healthy, b.data(), n, DType::f32)));
}

}  // namespace
}  // namespace strata::runtime::comm_test

int main(int argc, char** argv) {
  using namespace strata::runtime;
  // Rank 0 prints the run, the others only their failures. Decided from the launcher's
  // environment: InitGoogleTest picks the printer, before any communicator exists.
  if (launch::detect_launch().rank > 0) GTEST_FLAG_SET(brief, true);
  ::testing::InitGoogleTest(&argc, argv);
  comm::CommOptions options;
  bool poison = false;
  try {
    for (int i = 1; i < argc; ++i) {
      const std::string_view arg = argv[i];
      if (arg.starts_with("--comm=")) {
        options.backend = comm::parse_comm_backend(arg.substr(7));
      } else if (arg.starts_with("--piece-bytes=")) {
        options.mpi_piece_bytes = std::stoul(std::string(arg.substr(14)));
      } else if (arg == "--poison") {
        poison = true;
      } else {
        std::fprintf(
            stderr,
            "unknown argument '%s' (use --comm=auto|single|mpi, --piece-bytes=N, --poison)\n",
            argv[i]);
        return 2;
      }
    }
    auto device = device::Device::create({.kind = "host"});
    auto comm = comm::create_communicator(*device, options);
    comm_test::context() = {device.get(), comm.get(), poison};
    std::printf("communicator %s, rank %d of %d\n", std::string(comm->backend_name()).c_str(),
                comm->rank(), comm->world());
    if (poison) GTEST_FLAG_SET(filter, "CommPoison.*");
    const int rc = RUN_ALL_TESTS();
    comm_test::context() = {};
    comm.reset();  // before the device it borrows
    return rc;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "test_comm: %s\n", e.what());
    return 1;
  }
}
