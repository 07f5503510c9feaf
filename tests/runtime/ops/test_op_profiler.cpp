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
  const std::int64_t kSmall = 1024;  // a residual that takes well under a millisecond
  // Warm-up before profiling: the stream worker's OpenMP team is made by its first parallel op.
  residual_fwd(*stream, z.data(), x.data(), x.data(), kSmall, DType::f32);
  stream->synchronize();
  {
    OpProfiler profiler(*device, *stream);
    EXPECT_EQ(stream->op_observer(), &profiler);
    for (int i = 0; i < 3; ++i) matmul_fwd(*stream, y.data(), x.data(), w.data(), nullptr, N, C, OC, DType::f32);
    residual_fwd(*stream, z.data(), y.data(), y.data(), kSmall, DType::f32);
    // Not an op: a gap between ops is nobody's time. It measures itself: a bracket around it
    // would last at least as long, whatever the load (a fixed threshold failed under TSan on a
    // loaded 2-core machine, the residual taking 34 ms); 500 ms is far longer than the residual.
    double gap_ms = 0;
    stream->host_task(
        [&gap_ms] {
          const auto start = std::chrono::steady_clock::now();
          std::this_thread::sleep_for(std::chrono::milliseconds(500));
          gap_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
        },
        "gap");
    // The other stream works on buffers of its own (the two streams run at the same time).
    std::vector<float> u(1024, 1.0f), v(1024);
    residual_fwd(*other, v.data(), u.data(), u.data(), static_cast<std::int64_t>(u.size()), DType::f32);
    other->synchronize();
    EXPECT_EQ(v[0], 2.0f);
    const std::vector<OpTime> t = profiler.collect();
    ASSERT_EQ(t.size(), 2u);
    EXPECT_GE(t[0].ms, t[1].ms);  // the largest first
    const OpTime& mm = t[0].op == "matmul_fwd" ? t[0] : t[1];
    const OpTime& res = t[0].op == "matmul_fwd" ? t[1] : t[0];
    EXPECT_EQ(mm.op, "matmul_fwd");
    EXPECT_EQ(mm.count, 3);
    EXPECT_EQ(res.op, "residual_fwd");
    EXPECT_EQ(res.count, 1);  // the other stream's is not counted
    EXPECT_GT(mm.ms, 0.0);
    EXPECT_GT(res.ms, 0.0);
    EXPECT_LT(res.ms, gap_ms);  // the gap after it is outside every bracket
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
