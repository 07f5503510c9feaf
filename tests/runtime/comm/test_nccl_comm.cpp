// The nccl communicator, one rank on a cuda device: the shared collective tests
// (test_collectives.cpp) on device buffers, plus the single backend on the same device.
// Exits 77 (skipped) where cudaGetDeviceCount reports no device.
#include <cuda_runtime.h>

#include <cstdio>
#include <string>

#include "comm_test_util.h"
#include "core/error.h"

namespace strata::runtime::comm_test {
namespace {

TEST(NcclComm, IsNcclWithOneRank) {
  comm::Communicator& comm = *context().comm;
  EXPECT_EQ(comm.backend(), comm::CommBackend::nccl);
  EXPECT_EQ(comm.rank(), 0);
  EXPECT_EQ(comm.world(), 1);
}

TEST(NcclComm, SingleBackendCopiesDeviceBuffers) {
  device::Device& device = *context().device;
  auto single = comm::create_communicator(device, {.backend = comm::CommBackend::single});
  auto stream = device.create_stream("single");
  const std::vector<float> values = {1.0f, -2.0f, 3.5f};
  device::DeviceBuffer in = upload(device, *stream, values, DType::f32);
  device::DeviceBuffer out = upload(device, *stream, {0.0f, 0.0f, 0.0f}, DType::f32);
  single->all_reduce(in.data(), out.data(), values.size(), DType::f32, *stream);
  EXPECT_TRUE(same_values(values, download(*stream, out.data(), values.size(), DType::f32)));
}

TEST(NcclComm, MpiOnACudaDeviceIsAnError) {
  EXPECT_THROW(comm::create_communicator(*context().device, {.backend = comm::CommBackend::mpi}), Error);
}

}  // namespace
}  // namespace strata::runtime::comm_test

int main(int argc, char** argv) {
  using namespace strata::runtime;
  ::testing::InitGoogleTest(&argc, argv);
  int devices = 0;
  const cudaError_t rc = cudaGetDeviceCount(&devices);
  if (rc != cudaSuccess || devices == 0) {
    std::printf("skipped: no CUDA device (%s)\n",
                rc != cudaSuccess ? cudaGetErrorString(rc) : "count is 0");
    return 77;
  }
  try {
    auto device = device::Device::create({.kind = "cuda", .memory_bytes = std::uint64_t{512} << 20});
    auto comm = comm::create_communicator(*device, {.backend = comm::CommBackend::nccl});
    comm_test::context() = {device.get(), comm.get(), false};
    const int result = RUN_ALL_TESTS();
    comm_test::context() = {};
    comm.reset();
    return result;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "test_nccl_comm: %s\n", e.what());
    return 1;
  }
}
