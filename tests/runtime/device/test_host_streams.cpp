// Host backend streams and events: in-order execution, cross-stream waits, real concurrency,
// failure propagation, copies into the arena, and a randomized stress of 10,000 ops.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <numeric>
#include <random>
#include <stdexcept>
#include <thread>
#include <vector>

#include "runtime/device/device.h"

namespace strata::runtime {
namespace {

using namespace std::chrono_literals;

// A one-shot flag that a thread can wait on with a timeout (no timing thresholds in the test
// itself: the timeout only turns a deadlock into a failure).
class Signal {
 public:
  void set() {
    {
      std::lock_guard lock(mutex_);
      set_ = true;
    }
    cv_.notify_all();
  }
  bool wait_for(std::chrono::seconds timeout) {
    std::unique_lock lock(mutex_);
    return cv_.wait_for(lock, timeout, [&] { return set_; });
  }
  bool is_set() {
    std::lock_guard lock(mutex_);
    return set_;
  }

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  bool set_ = false;
};

std::unique_ptr<device::Device> host_device() {
  return device::Device::create({.kind = "host", .memory_bytes = 64 << 20});
}

TEST(HostStream, RunsItsQueueInOrder) {
  auto device = host_device();
  auto stream = device->create_stream("compute");
  std::vector<int> order;
  for (int i = 0; i < 1000; ++i) stream->host_task([&order, i] { order.push_back(i); });
  stream->synchronize();
  std::vector<int> expected(1000);
  std::iota(expected.begin(), expected.end(), 0);
  EXPECT_EQ(order, expected);
}

TEST(HostStream, TwoStreamsRunConcurrently) {
  // Work on A waits for a signal that only work on B gives: if the streams shared one thread
  // (or ran one after the other) A would time out.
  auto device = host_device();
  auto a = device->create_stream("a");
  auto b = device->create_stream("b");
  Signal from_b;
  std::atomic<bool> a_saw_b{false};
  a->host_task([&] { a_saw_b = from_b.wait_for(60s); });
  b->host_task([&] { from_b.set(); });
  a->synchronize();
  b->synchronize();
  EXPECT_TRUE(a_saw_b.load());
}

// A stream waits for a host flag to reach a value: work behind the wait does not run until the
// host raises the flag that far (a lower value does not release it), and a wait for a value
// already reached does not block.
TEST(HostFlag, StreamWorkWaitsUntilTheHostRaisesIt) {
  auto device = host_device();
  auto stream = device->create_stream("h2d");
  auto flag = device->create_host_flag();
  auto done = device->create_event();
  EXPECT_EQ(flag->value(), 0u);
  std::atomic<int> ran{0};
  stream->wait_host(*flag, 2);
  stream->host_task([&] { ran = 1; });
  done->record(*stream);
  flag->signal(1);
  std::this_thread::sleep_for(50ms);  // time to run if it wrongly could; not a threshold
  EXPECT_EQ(ran.load(), 0);
  EXPECT_FALSE(done->query());
  std::thread raiser([&] { flag->signal(2); });
  stream->synchronize();
  raiser.join();
  EXPECT_EQ(ran.load(), 1);
  EXPECT_EQ(flag->value(), 2u);
  flag->signal(1);  // values only grow
  EXPECT_EQ(flag->value(), 2u);
  stream->wait_host(*flag, 2);
  stream->host_task([&] { ran = 2; });
  stream->synchronize();
  EXPECT_EQ(ran.load(), 2);
}

// The counter wraps past 2^32 (a long-running server's NVMe read parts) in serial-number order, as
// cuStreamWaitValue32's GEQ compares: a value just past the wrap is above one just before it.
TEST(HostFlag, TheCounterWrapsInSerialNumberOrder) {
  auto device = host_device();
  auto stream = device->create_stream("h2d");
  auto flag = device->create_host_flag();
  constexpr std::uint32_t kNearTheTop = 0xFFFF'FFF0u;
  flag->signal(0x7FFF'FFF0u);  // a counter climbs less than 2^31 at a time
  flag->signal(kNearTheTop);
  EXPECT_EQ(flag->value(), kNearTheTop);
  std::atomic<int> ran{0};
  stream->wait_host(*flag, 3);  // past the wrap: not reached by kNearTheTop
  stream->host_task([&] { ran = 1; });
  std::this_thread::sleep_for(50ms);  // time to run if it wrongly could; not a threshold
  EXPECT_EQ(ran.load(), 0) << "0xFFFFFFF0 counted as reaching 3";
  std::thread raiser([&] { flag->signal(3); });
  stream->synchronize();
  raiser.join();
  EXPECT_EQ(ran.load(), 1);
  EXPECT_EQ(flag->value(), 3u);
  flag->signal(kNearTheTop);  // behind 3 in serial order: the counter does not go back
  EXPECT_EQ(flag->value(), 3u);
}

TEST(HostStream, WaitOrdersAcrossStreams) {
  auto device = host_device();
  auto producer = device->create_stream("producer");
  auto consumer = device->create_stream("consumer");
  auto ready = device->create_event();
  Signal release;
  std::atomic<int> value{0};
  producer->host_task([&] {
    release.wait_for(60s);  // hold the producer until the consumer's work is enqueued
    value = 42;
  });
  ready->record(*producer);
  EXPECT_FALSE(ready->query());
  consumer->wait(*ready);
  int seen = -1;
  consumer->host_task([&] { seen = value.load(); });
  release.set();
  consumer->synchronize();
  EXPECT_EQ(seen, 42);
  EXPECT_TRUE(ready->query());
}

TEST(HostEvent, NeverRecordedIsCompleteAndSynchronizeBlocks) {
  auto device = host_device();
  auto stream = device->create_stream("s");
  auto event = device->create_event();
  EXPECT_TRUE(event->query());
  event->synchronize();  // returns at once
  stream->wait(*event);  // no-op

  Signal release;
  std::atomic<bool> done{false};
  stream->host_task([&] {
    release.wait_for(60s);
    done = true;
  });
  event->record(*stream);
  EXPECT_FALSE(event->query());
  release.set();
  event->synchronize();
  EXPECT_TRUE(done.load());
  EXPECT_TRUE(event->query());
}

TEST(HostEvent, ReRecordOnAnotherStreamDoesNotReleaseEarlierWaiters) {
  auto device = host_device();
  auto slow = device->create_stream("slow");
  auto fast = device->create_stream("fast");
  auto waiter = device->create_stream("waiter");
  auto event = device->create_event();
  Signal release;
  std::atomic<bool> slow_done{false};
  slow->host_task([&] {
    release.wait_for(60s);
    slow_done = true;
  });
  event->record(*slow);
  waiter->wait(*event);  // captures the record on `slow`
  bool seen = true;
  waiter->host_task([&] { seen = slow_done.load(); });
  event->record(*fast);  // completes at once on `fast`
  fast->synchronize();
  release.set();
  waiter->synchronize();
  EXPECT_TRUE(seen) << "the waiter ran before the work it waited for";
}

TEST(HostStream, FailureIsRethrownLaterWorkSkippedAndDownstreamFails) {
  auto device = host_device();
  auto stream = device->create_stream("s");
  auto other = device->create_stream("other");
  auto event = device->create_event();
  bool ran_after_failure = false;
  bool downstream_ran = false;
  stream->host_task([] { throw std::runtime_error("kernel exploded"); });
  stream->host_task([&] { ran_after_failure = true; });
  event->record(*stream);
  other->wait(*event);
  other->host_task([&] { downstream_ran = true; });
  // The waiting stream neither hangs nor runs on bytes the failed work never wrote.
  try {
    other->synchronize();
    FAIL() << "the downstream stream did not learn of the failure";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("stream 's' failed: kernel exploded"), std::string::npos)
        << e.what();
  }
  EXPECT_FALSE(downstream_ran);
  EXPECT_TRUE(event->query());
  try {
    stream->synchronize();
    FAIL() << "the failure was not reported";
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "kernel exploded");
  }
  EXPECT_FALSE(ran_after_failure);
  // Reported once; the stream works again afterwards.
  bool ran = false;
  stream->host_task([&] { ran = true; });
  stream->synchronize();
  EXPECT_TRUE(ran);
}

TEST(HostStream, CopiesBetweenHostAndArena) {
  auto device = host_device();
  auto h2d = device->create_stream("h2d");
  auto d2h = device->create_stream("d2h");
  auto copied = device->create_event();
  const std::size_t n = (1 << 20) + 3;
  std::vector<unsigned char> src(n), dst(n, 0);
  std::mt19937 rng(1);
  for (auto& x : src) x = static_cast<unsigned char>(rng());
  device::DeviceBuffer buf = device->allocate(n, "staging");
  h2d->memset_async(buf.data(), 0xab, n);
  h2d->copy_async(buf.data(), src.data(), n - 1);
  copied->record(*h2d);
  d2h->wait(*copied);
  d2h->copy_async(dst.data(), buf.data(), n);
  d2h->synchronize();
  EXPECT_EQ(std::memcmp(dst.data(), src.data(), n - 1), 0);
  EXPECT_EQ(dst[n - 1], 0xab);
}

TEST(HostDevice, SynchronizeDrainsEveryStreamEvenAfterAFailure) {
  auto device = host_device();
  std::vector<std::unique_ptr<device::Stream>> streams;
  std::atomic<int> done{0};
  Signal release;
  // Every stream starts with work held until a helper thread lets it go, so a synchronize
  // that returned early would see done < 400.
  for (int i = 0; i < 4; ++i) {
    streams.push_back(device->create_stream("s" + std::to_string(i)));
    streams.back()->host_task([&] { release.wait_for(60s); });
    for (int k = 0; k < 100; ++k) streams.back()->host_task([&] { done.fetch_add(1); });
  }
  streams[0]->host_task([] { throw std::runtime_error("first stream failed"); });
  std::thread releaser([&] {
    std::this_thread::sleep_for(50ms);
    release.set();
  });
  EXPECT_THROW(device->synchronize(), std::runtime_error);
  EXPECT_EQ(done.load(), 400);
  releaser.join();
  device->synchronize();  // reported once
}

// 10,000 random small ops on 4 streams with random cross-stream waits. Every op checks, when
// it runs, that its stream's earlier ops ran (in-order) and that every event it waits on had
// its producer's work done (cross-stream order).
TEST(HostStream, RandomOpsWithCrossWaits) {
  constexpr int kStreams = 4;
  constexpr int kOps = 10000;
  auto device = host_device();
  std::vector<std::unique_ptr<device::Stream>> streams;
  std::vector<std::atomic<int>> progress(kStreams);  // ops completed per stream
  std::vector<int> enqueued(kStreams, 0);
  std::atomic<int> violations{0};
  std::vector<std::unique_ptr<device::Event>> events;
  device::DeviceBuffer scratch = device->allocate(kStreams * 4096, "scratch");
  std::vector<std::vector<unsigned char>> host(kStreams, std::vector<unsigned char>(4096));
  for (int s = 0; s < kStreams; ++s) streams.push_back(device->create_stream("s" + std::to_string(s)));

  std::mt19937 rng(12345);
  for (int op = 0; op < kOps; ++op) {
    const int s = static_cast<int>(rng() % kStreams);
    device::Stream& stream = *streams[s];
    switch (rng() % 4) {
      case 0: {  // record an event, and make another stream wait on it
        const int other = static_cast<int>((s + 1 + rng() % (kStreams - 1)) % kStreams);
        const int required = enqueued[s];
        auto event = device->create_event();
        event->record(stream);
        streams[other]->wait(*event);
        streams[other]->host_task([&progress, &violations, s, required] {
          if (progress[s].load() < required) violations.fetch_add(1);
        });
        // keep `other`'s in-order accounting honest: that check is one of its ops
        const int expect_other = enqueued[other]++;
        streams[other]->host_task([&progress, &violations, other, expect_other] {
          if (progress[other].load() != expect_other) violations.fetch_add(1);
          progress[other].fetch_add(1);
        });
        events.push_back(std::move(event));
        break;
      }
      case 1: {  // a copy of fresh bytes into this stream's slice of the arena and back
        unsigned char* dev = scratch.as<unsigned char>() + s * 4096;
        const std::size_t bytes = 1 + rng() % 4096;
        const auto fill = static_cast<unsigned char>(rng());
        stream.memset_async(host[s].data(), fill, bytes);
        stream.copy_async(dev, host[s].data(), bytes);
        stream.memset_async(host[s].data(), fill ^ 0xff, bytes);
        stream.copy_async(host[s].data(), dev, bytes);
        stream.host_task([&host, &violations, s, bytes, fill] {
          for (std::size_t i = 0; i < bytes; ++i) {
            if (host[s][i] != fill) {
              violations.fetch_add(1);
              break;
            }
          }
        });
        [[fallthrough]];
      }
      default: {  // an in-order counter step
        const int expect = enqueued[s]++;
        stream.host_task([&progress, &violations, s, expect] {
          if (progress[s].load() != expect) violations.fetch_add(1);
          progress[s].fetch_add(1);
        });
      }
    }
  }
  device->synchronize();
  for (int s = 0; s < kStreams; ++s) EXPECT_EQ(progress[s].load(), enqueued[s]);
  EXPECT_EQ(violations.load(), 0);
  for (auto& e : events) EXPECT_TRUE(e->query());
}

}  // namespace
}  // namespace strata::runtime
