// Host streams record their work in the device's tracer: one span per copy (with its bytes)
// and per named host task, on the stream's track; nothing when tracing is off.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>
#include <vector>

#include "runtime/device/device.h"
#include "runtime/trace/trace.h"
#include "tests/runtime/trace/trace_test_util.h"

namespace strata::runtime {
namespace {

TEST(StreamTrace, HostStreamWorkBecomesSpansOnItsTrack) {
  test::TracePath path;
  trace::Tracer tracer(path.file(), "rank 0");
  {
    auto device = device::Device::create({.kind = "host", .memory_bytes = 1 << 20, .tracer = &tracer});
    auto h2d = device->create_stream("h2d");
    auto compute = device->create_stream("compute");
    device::DeviceBuffer buf = device->allocate(4096, "buf");
    std::vector<char> host(4096, 1);
    h2d->copy_async(buf.data(), host.data(), 4096);
    compute->host_task([] {}, "layernorm");
    device->synchronize();
  }
  tracer.flush();
  nlohmann::json trace = test::read_json(path.file());
  auto tracks = test::track_names(trace);
  bool copy_seen = false, task_seen = false;
  for (const auto& e : trace.at("traceEvents")) {
    if (e.at("ph") != "X") continue;
    const std::string track = tracks.at(e.at("tid").get<int>());
    if (e.at("name") == "copy") {
      EXPECT_EQ(track, "h2d");
      EXPECT_EQ(e.at("args").at("bytes").get<std::uint64_t>(), 4096u);
      copy_seen = true;
    }
    if (e.at("name") == "layernorm") {
      EXPECT_EQ(track, "compute");
      task_seen = true;
    }
  }
  EXPECT_TRUE(copy_seen);
  EXPECT_TRUE(task_seen);
}

TEST(StreamTrace, AccountOnlyTracerSumsStreamBusyTime) {
  trace::Tracer tracer("", "rank 0", /*account_busy=*/true);
  {
    auto device = device::Device::create({.kind = "host", .memory_bytes = 1 << 20, .tracer = &tracer});
    auto h2d = device->create_stream("h2d");
    auto compute = device->create_stream("compute");
    device::DeviceBuffer buf = device->allocate(4096, "buf");
    std::vector<char> host(4096, 1);
    h2d->copy_async(buf.data(), host.data(), 4096);
    h2d->copy_async(host.data(), buf.data(), 1024);
    for (int i = 0; i < 2; ++i) {
      compute->host_task([] { std::this_thread::sleep_for(std::chrono::milliseconds(10)); },
                         "sleep");
    }
    device->synchronize();
  }
  std::int64_t compute_ns = -1;
  std::uint64_t h2d_bytes = 0, h2d_spans = 0;
  for (const trace::TrackBusy& b : tracer.busy()) {
    if (b.track == "compute") compute_ns = b.busy_ns;
    if (b.track == "h2d") {
      h2d_bytes = b.bytes;
      h2d_spans = b.spans;
    }
  }
  EXPECT_GE(compute_ns, 20'000'000);  // two 10 ms tasks, in order on one stream
  EXPECT_EQ(h2d_bytes, 5120u);
  EXPECT_EQ(h2d_spans, 2u);
}

TEST(StreamTrace, DisabledTracerRecordsNothing) {
  trace::Tracer tracer("");
  auto device = device::Device::create({.kind = "host", .memory_bytes = 1 << 20, .tracer = &tracer});
  auto s = device->create_stream("s");
  s->host_task([] {}, "work");
  s->synchronize();
  EXPECT_EQ(tracer.span_count(), 0u);
}

}  // namespace
}  // namespace strata::runtime
