// The CUDA backend: arena, copies host <-> device, cross-stream events, host tasks and their
// failures, the pin hook. Exits 77 (skipped) where no GPU is usable.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <stdexcept>
#include <thread>
#include <vector>

#include "runtime/device/device.h"

namespace strata::runtime {
namespace {

std::unique_ptr<device::Device> cuda_device() {
  return device::Device::create({.kind = "cuda", .memory_bytes = 256 << 20});
}

TEST(CudaDevice, ArenaBudgetAndOom) {
  auto device = cuda_device();
  EXPECT_EQ(device->backend(), device::Backend::cuda);
  device::DeviceBuffer a = device->allocate(200 << 20, "a");
  EXPECT_THROW(device->allocate(100 << 20, "b"), device::OutOfMemory);
  EXPECT_EQ(device->memory_stats().live_allocations, 1u);
}

// The kernels' stream-ordered scratch (cudaMallocAsync) stays in the default pool between
// synchronizations instead of going back to the driver at each one: the device sets the pool's
// release threshold to its maximum.
TEST(CudaDevice, DefaultPoolKeepsItsMemory) {
  auto device = cuda_device();
  int ordinal = -1;
  ASSERT_EQ(cudaGetDevice(&ordinal), cudaSuccess);
  cudaMemPool_t pool = nullptr;
  ASSERT_EQ(cudaDeviceGetDefaultMemPool(&pool, ordinal), cudaSuccess);
  std::uint64_t threshold = 0;
  ASSERT_EQ(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &threshold), cudaSuccess);
  EXPECT_EQ(threshold, UINT64_MAX);
  // 64 MiB freed and synchronized is still reserved by the pool.
  cudaStream_t s = nullptr;
  ASSERT_EQ(cudaStreamCreate(&s), cudaSuccess);
  void* p = nullptr;
  ASSERT_EQ(cudaMallocAsync(&p, 64 << 20, s), cudaSuccess);
  ASSERT_EQ(cudaFreeAsync(p, s), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  std::uint64_t reserved = 0;
  ASSERT_EQ(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrReservedMemCurrent, &reserved), cudaSuccess);
  EXPECT_GE(reserved, std::uint64_t{64} << 20);
  ASSERT_EQ(cudaStreamDestroy(s), cudaSuccess);
}

TEST(CudaDevice, RoundTripThroughTwoStreamsWithEvent) {
  auto device = cuda_device();
  auto h2d = device->create_stream("h2d");
  auto d2h = device->create_stream("d2h");
  auto done = device->create_event();
  const std::size_t n = (8 << 20) + 5;
  std::vector<unsigned char> src(n), dst(n, 0);
  std::iota(src.begin(), src.end(), 0);
  device->pin_host(src.data(), n);
  device::DeviceBuffer buf = device->allocate(n, "buf");
  h2d->memset_async(buf.data(), 0x5a, n);
  h2d->copy_async(buf.data(), src.data(), n - 1);
  done->record(*h2d);
  d2h->wait(*done);
  d2h->copy_async(dst.data(), buf.data(), n);
  d2h->synchronize();
  device->unpin_host(src.data());
  EXPECT_EQ(std::memcmp(src.data(), dst.data(), n - 1), 0);
  EXPECT_EQ(dst[n - 1], 0x5a);
  EXPECT_TRUE(done->query());
}

// Timing events measure the stream's time between two marks: a host task that holds the
// stream for 20 ms lies between them.
TEST(CudaDevice, TimingEventsMeasureTheStream) {
  auto device = cuda_device();
  auto stream = device->create_stream("s");
  auto begin = device->create_timing_event();
  auto end = device->create_timing_event();
  begin->record(*stream);
  stream->host_task([] { std::this_thread::sleep_for(std::chrono::milliseconds(20)); }, "sleep");
  end->record(*stream);
  stream->synchronize();
  const double ms = end->ms_since(*begin);
  EXPECT_GE(ms, 19.0);
  EXPECT_LT(ms, 2000.0);
}

// A copy behind a host-flag wait (cuStreamWaitValue32 on mapped pinned memory) does not run
// until the host raises the flag; no host function is involved.
TEST(CudaDevice, HostFlagHoldsTheStreamUntilRaised) {
  auto device = cuda_device();
  auto stream = device->create_stream("h2d");
  auto flag = device->create_host_flag();
  auto done = device->create_event();
  const std::size_t n = 1 << 20;
  std::vector<unsigned char> src(n, 7), dst(n, 0);
  device->pin_host(src.data(), n);
  device->pin_host(dst.data(), n);
  device::DeviceBuffer buf = device->allocate(n, "buf");
  stream->memset_async(buf.data(), 0, n);
  stream->wait_host(*flag, 3);
  stream->copy_async(buf.data(), src.data(), n);
  stream->copy_async(dst.data(), buf.data(), n);
  done->record(*stream);
  flag->signal(2);
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_FALSE(done->query());
  flag->signal(3);
  done->synchronize();
  EXPECT_EQ(dst[0], 7);
  EXPECT_EQ(dst[n - 1], 7);
  stream->synchronize();
  device->unpin_host(src.data());
  device->unpin_host(dst.data());
}

TEST(CudaDevice, HostTaskOrderAndFailure) {
  auto device = cuda_device();
  auto s = device->create_stream("s");
  std::vector<int> order;
  for (int i = 0; i < 100; ++i) s->host_task([&order, i] { order.push_back(i); });
  s->synchronize();
  ASSERT_EQ(order.size(), 100u);
  for (int i = 0; i < 100; ++i) EXPECT_EQ(order[i], i);
  bool ran_after = false;
  s->host_task([] { throw std::runtime_error("boom"); });
  s->host_task([&] { ran_after = true; });
  EXPECT_THROW(s->synchronize(), std::runtime_error);
  EXPECT_FALSE(ran_after);
}

}  // namespace
}  // namespace strata::runtime
