// DeviceOptions::host_threads (strata.cpu_threads) reaches the host kernels: a host op runs
// on its stream's worker thread, and there OpenMP's team size is the device's. OpenBLAS's count
// is never changed (its sgemm's bits depend on it). 0 leaves OpenMP's default.
#include <gtest/gtest.h>

#include <memory>
#include <thread>

#include "kernels/host/threads.h"
#include "runtime/device/device.h"

namespace strata::runtime {
namespace {

// What a host op enqueued on a stream of `device` would use.
kernels::host::KernelThreads threads_seen_by_ops(device::Device& device) {
  std::unique_ptr<device::Stream> s = device.create_stream("ops");
  kernels::host::KernelThreads seen{};
  s->host_task([&] { seen = kernels::host::kernel_threads(); }, "probe");
  s->synchronize();
  return seen;
}

TEST(HostThreads, DeviceOptionsSetTheHostKernelsThreads) {
  const int blas_before = kernels::host::kernel_threads().openblas;
  for (int threads : {1, 3, 2}) {
    auto device = device::Device::create({.kind = "host", .memory_bytes = 1 << 20, .host_threads = threads});
    const kernels::host::KernelThreads seen = threads_seen_by_ops(*device);
    EXPECT_EQ(seen.openmp, threads);
    EXPECT_EQ(seen.openblas, blas_before);
  }
}

TEST(HostThreads, ZeroKeepsTheDefaults) {
  // A fresh thread has OpenMP's default.
  kernels::host::KernelThreads fresh{};
  std::thread([&] { fresh = kernels::host::kernel_threads(); }).join();
  auto device = device::Device::create({.kind = "host", .memory_bytes = 1 << 20});
  const kernels::host::KernelThreads seen = threads_seen_by_ops(*device);
  EXPECT_EQ(seen.openmp, fresh.openmp);
  EXPECT_EQ(seen.openblas, fresh.openblas);
}

TEST(HostThreads, NegativeIsAnError) {
  EXPECT_THROW(device::Device::create({.kind = "host", .memory_bytes = 1 << 20, .host_threads = -1}), Error);
}

}  // namespace
}  // namespace strata::runtime
