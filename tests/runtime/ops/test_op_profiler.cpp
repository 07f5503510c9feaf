// OpProfiler on the host backend: every op of runtime/ops enqueued on the profiled stream is
// timed once under its name, ops on other streams are not, the times are the stream's (a host
// task inside a bracket would count; one between ops does not), and collect() starts over.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>
#include <vector>

#include "runtime/device/device.h"
#include "runtime/ops/op_profiler.h"
#include "runtime/ops/ops.h"

namespace strata::runtime::ops {
namespace {

TEST(TimingEvent, HostMeasuresTheStreamsTime) {
  auto device = device::Device::create({.kind = "host", .memory_bytes = 1 << 20});
  auto stream = device->create_stream("s");
  auto begin = device->create_timing_event();
  auto end = device->create_timing_event();
  begin->record(*stream);
  stream->host_task([] { std::this_thread::sleep_for(std::chrono::milliseconds(20)); }, "sleep");
  end->record(*stream);
  stream->synchronize();
  EXPECT_GE(end->ms_since(*begin), 19.0);
}

TEST(OpProfiler, CountsAndTimesEveryOpOnItsStream) {
  auto device = device::Device::create({.kind = "host", .memory_bytes = 64 << 20});
  auto stream = device->create_stream("compute");
  auto other = device->create_stream("other");
  const int N = 256, C = 256, OC = 512;
  std::vector<float> x(static_cast<std::size_t>(N) * C, 0.5f), w(static_cast<std::size_t>(OC) * C, 0.25f),
      y(static_cast<std::size_t>(N) * OC), z(y.size());
  {
    OpProfiler profiler(*device, *stream);
    EXPECT_EQ(stream->op_observer(), &profiler);
    for (int i = 0; i < 3; ++i) matmul_fwd(*stream, y.data(), x.data(), w.data(), nullptr, N, C, OC, DType::f32);
    residual_fwd(*stream, z.data(), y.data(), y.data(), static_cast<std::int64_t>(y.size()), DType::f32);
    // Not an op: a gap between ops is nobody's time.
    stream->host_task([] { std::this_thread::sleep_for(std::chrono::milliseconds(30)); }, "gap");
    residual_fwd(*other, z.data(), y.data(), y.data(), static_cast<std::int64_t>(y.size()), DType::f32);
    other->synchronize();
    const std::vector<OpTime> t = profiler.collect();
    ASSERT_EQ(t.size(), 2u);
    EXPECT_EQ(t[0].op, "matmul_fwd");  // the largest first
    EXPECT_EQ(t[0].count, 3);
    EXPECT_EQ(t[1].op, "residual_fwd");
    EXPECT_EQ(t[1].count, 1);  // the other stream's is not counted
    EXPECT_GT(t[1].ms, 0.0);
    EXPECT_GT(t[0].ms, t[1].ms);
    EXPECT_LT(t[1].ms, 30.0);  // the gap after it is outside every bracket
    EXPECT_EQ(y[0], 0.5f * 0.25f * C);
    // Starts over.
    gelu_fwd(*stream, z.data(), y.data(), static_cast<std::int64_t>(y.size()), DType::f32);
    const std::vector<OpTime> t2 = profiler.collect();
    ASSERT_EQ(t2.size(), 1u);
    EXPECT_EQ(t2[0].op, "gelu_fwd");
    EXPECT_EQ(t2[0].count, 1);
  }
  EXPECT_EQ(stream->op_observer(), nullptr);  // detached when destroyed
}

}  // namespace
}  // namespace strata::runtime::ops
