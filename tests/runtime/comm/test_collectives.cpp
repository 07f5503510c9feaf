// Every collective, for fp32/bf16/fp16 and sizes 0, 1, odd, large, in and out of place,
// checked element by element on every rank; ordering across streams through events; results
// that are bitwise the same on all ranks and runs. Runs on whatever communicator main set up.
#include <chrono>
#include <cmath>
#include <cstring>
#include <optional>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "comm_test_util.h"

namespace strata::runtime::comm_test {
namespace {

class CommTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (context().poison) GTEST_SKIP() << "poison run";
    trace_.emplace(__FILE__, __LINE__,
                   "rank " + std::to_string(rank()) + " of " + std::to_string(world()) + " (" +
                       std::string(comm().backend_name()) + ")");
  }
  device::Device& device() { return *context().device; }
  comm::Communicator& comm() { return *context().comm; }
  int rank() { return comm().rank(); }
  int world() { return comm().world(); }
  std::size_t ranks() { return static_cast<std::size_t>(world()); }

  // Element i of rank r's buffer of count elements: value(r, i).
  std::vector<float> values_of(int r, std::size_t count) {
    std::vector<float> v(count);
    for (std::size_t i = 0; i < count; ++i) v[i] = value(r, i);
    return v;
  }
  // The reduction over ranks of value(r, index), in rank order in fp32, rounded once.
  float reduced(std::size_t index, comm::ReduceOp op, DType dtype) {
    float acc = value(0, index);
    for (int r = 1; r < world(); ++r) {
      acc = op == comm::ReduceOp::sum ? acc + value(r, index) : std::max(acc, value(r, index));
    }
    return round_to(acc, dtype);
  }

  std::optional<::testing::ScopedTrace> trace_;
};

class Collectives : public CommTest,
                    public ::testing::WithParamInterface<std::tuple<DType, std::size_t>> {
 protected:
  void SetUp() override {
    CommTest::SetUp();
    if (IsSkipped()) return;
    stream_ = device().create_stream("collectives");
  }
  DType dtype() const { return std::get<0>(GetParam()); }
  std::size_t count() const { return std::get<1>(GetParam()); }
  std::size_t bytes(std::size_t elements) const { return elements * dtype_size(dtype()); }
  unsigned char* at(const device::DeviceBuffer& b, std::size_t elements) const {
    return static_cast<unsigned char*>(b.data()) + bytes(elements);
  }

  void check_reduce_scatter(comm::ReduceOp op);
  void check_all_reduce(comm::ReduceOp op);

  std::unique_ptr<device::Stream> stream_;
};

TEST_P(Collectives, AllGather) {
  const std::size_t n = count();
  std::vector<float> expected(ranks() * n);
  for (std::size_t r = 0; r < ranks(); ++r) {
    for (std::size_t i = 0; i < n; ++i) expected[r * n + i] = value(static_cast<int>(r), i);
  }
  {  // out of place; recv starts as garbage that must all be overwritten
    device::DeviceBuffer send = upload(device(), *stream_, values_of(rank(), n), dtype());
    device::DeviceBuffer recv =
        upload(device(), *stream_, std::vector<float>(ranks() * n, -99.0f), dtype());
    comm().all_gather(send.data(), recv.data(), n, dtype(), *stream_);
    EXPECT_TRUE(same_values(expected, download(*stream_, recv.data(), ranks() * n, dtype())));
    EXPECT_TRUE(same_values(values_of(rank(), n), download(*stream_, send.data(), n, dtype())))
        << "send buffer changed";
  }
  {  // in place: our part already sits at recv + rank * n
    std::vector<float> initial(ranks() * n, -99.0f);
    for (std::size_t i = 0; i < n; ++i)
      initial[static_cast<std::size_t>(rank()) * n + i] = value(rank(), i);
    device::DeviceBuffer recv = upload(device(), *stream_, initial, dtype());
    comm().all_gather(at(recv, static_cast<std::size_t>(rank()) * n), recv.data(), n, dtype(),
                      *stream_);
    EXPECT_TRUE(same_values(expected, download(*stream_, recv.data(), ranks() * n, dtype())))
        << "in place";
  }
}

TEST_P(Collectives, ReduceScatterSum) { check_reduce_scatter(comm::ReduceOp::sum); }
TEST_P(Collectives, ReduceScatterMax) { check_reduce_scatter(comm::ReduceOp::max); }

void Collectives::check_reduce_scatter(comm::ReduceOp op) {
  const std::size_t n = count();
  const auto me = static_cast<std::size_t>(rank());
  // send chunk k, element i = value(rank, k * n + i): every chunk differs from the others.
  std::vector<float> send_values(ranks() * n);
  for (std::size_t j = 0; j < send_values.size(); ++j) send_values[j] = value(rank(), j);
  std::vector<float> expected(n);
  for (std::size_t i = 0; i < n; ++i) expected[i] = reduced(me * n + i, op, dtype());
  {
    device::DeviceBuffer send = upload(device(), *stream_, send_values, dtype());
    device::DeviceBuffer recv = upload(device(), *stream_, std::vector<float>(n, -99.0f), dtype());
    comm().reduce_scatter(send.data(), recv.data(), n, dtype(), *stream_, op);
    EXPECT_TRUE(same_values(expected, download(*stream_, recv.data(), n, dtype())));
    EXPECT_TRUE(
        same_values(send_values, download(*stream_, send.data(), send_values.size(), dtype())))
        << "send buffer changed";
  }
  {  // in place: the result lands on our own chunk of send
    device::DeviceBuffer send = upload(device(), *stream_, send_values, dtype());
    comm().reduce_scatter(send.data(), at(send, me * n), n, dtype(), *stream_, op);
    EXPECT_TRUE(same_values(expected, download(*stream_, at(send, me * n), n, dtype())))
        << "in place";
  }
}

TEST_P(Collectives, AllReduceSum) { check_all_reduce(comm::ReduceOp::sum); }
TEST_P(Collectives, AllReduceMax) { check_all_reduce(comm::ReduceOp::max); }

void Collectives::check_all_reduce(comm::ReduceOp op) {
  const std::size_t n = count();
  std::vector<float> in_values(n);
  std::vector<float> expected(n);
  for (std::size_t i = 0; i < n; ++i) {
    in_values[i] = value(rank(), i);
    expected[i] = reduced(i, op, dtype());
  }
  {
    device::DeviceBuffer in = upload(device(), *stream_, in_values, dtype());
    device::DeviceBuffer out = upload(device(), *stream_, std::vector<float>(n, -99.0f), dtype());
    comm().all_reduce(in.data(), out.data(), n, dtype(), *stream_, op);
    EXPECT_TRUE(same_values(expected, download(*stream_, out.data(), n, dtype())));
    EXPECT_TRUE(same_values(in_values, download(*stream_, in.data(), n, dtype()))) << "in changed";
  }
  {
    device::DeviceBuffer buf = upload(device(), *stream_, in_values, dtype());
    comm().all_reduce(buf.data(), buf.data(), n, dtype(), *stream_, op);
    EXPECT_TRUE(same_values(expected, download(*stream_, buf.data(), n, dtype()))) << "in place";
  }
}

TEST_P(Collectives, BroadcastFromEveryRoot) {
  const std::size_t n = count();
  for (int root = 0; root < world(); ++root) {
    device::DeviceBuffer buf = upload(device(), *stream_, values_of(rank(), n), dtype());
    comm().broadcast(buf.data(), n, dtype(), root, *stream_);
    EXPECT_TRUE(same_values(values_of(root, n), download(*stream_, buf.data(), n, dtype())))
        << "root " << root;
  }
}

std::string param_name(const ::testing::TestParamInfo<std::tuple<DType, std::size_t>>& info) {
  return std::string(dtype_name(std::get<0>(info.param))) + "_n" +
         std::to_string(std::get<1>(info.param));
}

INSTANTIATE_TEST_SUITE_P(Sizes, Collectives,
                         ::testing::Combine(::testing::Values(DType::f32, DType::bf16, DType::f16),
                                            ::testing::Values(std::size_t{0}, std::size_t{1},
                                                              std::size_t{7}, std::size_t{4099},
                                                              (std::size_t{1} << 20) + 3)),
                         param_name);

// A chain across four streams, ordered only by events: produce (late, after a sleep) ->
// all-reduce in place -> all-gather of the result -> copy out.
TEST_F(CommTest, StreamsOrderedByEvents) {
  const std::size_t n = 10007;
  const DType dtype = DType::bf16;
  auto produce = device().create_stream("produce");
  auto reduce = device().create_stream("reduce");
  auto gather = device().create_stream("gather");
  auto consume = device().create_stream("consume");
  auto produced = device().create_event();
  auto reduced_event = device().create_event();
  auto gathered = device().create_event();
  device::DeviceBuffer a = device().allocate(n * dtype_size(dtype), "a");
  device::DeviceBuffer g = device().allocate(ranks() * n * dtype_size(dtype), "g");
  std::vector<unsigned char> src(n * dtype_size(dtype));
  convert(values_of(rank(), n).data(), DType::f32, src.data(), dtype, n);
  std::vector<unsigned char> dst(ranks() * n * dtype_size(dtype));

  produce->host_task([] { std::this_thread::sleep_for(std::chrono::milliseconds(30)); });
  produce->copy_async(a.data(), src.data(), src.size());
  produced->record(*produce);
  reduce->wait(*produced);
  comm().all_reduce(a.data(), a.data(), n, dtype, *reduce);
  reduced_event->record(*reduce);
  gather->wait(*reduced_event);
  comm().all_gather(a.data(), g.data(), n, dtype, *gather);
  gathered->record(*gather);
  consume->wait(*gathered);
  consume->copy_async(dst.data(), g.data(), dst.size());
  consume->synchronize();
  produce->synchronize();
  reduce->synchronize();
  gather->synchronize();

  std::vector<float> got(ranks() * n);
  convert(dst.data(), dtype, got.data(), DType::f32, got.size());
  std::vector<float> expected(ranks() * n);
  for (std::size_t k = 0; k < ranks(); ++k) {
    for (std::size_t i = 0; i < n; ++i) expected[k * n + i] = reduced(i, comm::ReduceOp::sum, dtype);
  }
  EXPECT_TRUE(same_values(expected, got));
}

// Collectives issued round-robin on three streams that each rank delays differently, so the
// streams reach the communicator in a different order on every rank: they must still be
// matched in issue order.
TEST_F(CommTest, InterleavedStreamsMatchInIssueOrder) {
  const DType dtype = DType::f32;
  const std::size_t n = 1001;
  constexpr int kRounds = 4;
  std::vector<std::unique_ptr<device::Stream>> streams;
  for (int s = 0; s < 3; ++s) streams.push_back(device().create_stream("s" + std::to_string(s)));
  auto setup = device().create_stream("setup");
  streams[static_cast<std::size_t>(rank() % 3)]->host_task(
      [] { std::this_thread::sleep_for(std::chrono::milliseconds(40)); });
  streams[static_cast<std::size_t>((rank() + 1) % 3)]->host_task(
      [] { std::this_thread::sleep_for(std::chrono::milliseconds(15)); });

  struct Round {
    device::DeviceBuffer reduce, bcast, gather_in, gather_out, scatter_in, scatter_out;
  };
  std::vector<Round> rounds;
  for (int round = 0; round < kRounds; ++round) {
    std::vector<float> scatter(ranks() * n);
    for (std::size_t j = 0; j < scatter.size(); ++j)
      scatter[j] = value(rank(), j + static_cast<std::size_t>(round));
    rounds.push_back(Round{upload(device(), *setup, values_of(rank(), n), dtype),
                           upload(device(), *setup, values_of(rank(), n), dtype),
                           upload(device(), *setup, values_of(rank(), n), dtype),
                           device().allocate(ranks() * n * sizeof(float), "gather_out"),
                           upload(device(), *setup, scatter, dtype),
                           device().allocate(n * sizeof(float), "scatter_out")});
  }
  for (int round = 0; round < kRounds; ++round) {
    Round& r = rounds[static_cast<std::size_t>(round)];
    device::Stream& a = *streams[static_cast<std::size_t>(round % 3)];
    device::Stream& b = *streams[static_cast<std::size_t>((round + 1) % 3)];
    device::Stream& c = *streams[static_cast<std::size_t>((round + 2) % 3)];
    comm().all_reduce(r.reduce.data(), r.reduce.data(), n, dtype, a);
    comm().broadcast(r.bcast.data(), n, dtype, round % world(), b);
    comm().all_gather(r.gather_in.data(), r.gather_out.data(), n, dtype, c);
    comm().reduce_scatter(r.scatter_in.data(), r.scatter_out.data(), n, dtype, a);
  }
  for (auto& s : streams) s->synchronize();

  for (int round = 0; round < kRounds; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    Round& r = rounds[static_cast<std::size_t>(round)];
    std::vector<float> sum(n), gathered(ranks() * n), scattered(n);
    for (std::size_t i = 0; i < n; ++i) sum[i] = reduced(i, comm::ReduceOp::sum, dtype);
    for (std::size_t j = 0; j < gathered.size(); ++j)
      gathered[j] = value(static_cast<int>(j / n), j % n);
    for (std::size_t i = 0; i < n; ++i) {
      scattered[i] =
          reduced(static_cast<std::size_t>(rank()) * n + i + static_cast<std::size_t>(round),
                  comm::ReduceOp::sum, dtype);
    }
    EXPECT_TRUE(same_values(sum, download(*setup, r.reduce.data(), n, dtype))) << "all_reduce";
    EXPECT_TRUE(
        same_values(values_of(round % world(), n), download(*setup, r.bcast.data(), n, dtype)))
        << "broadcast";
    EXPECT_TRUE(same_values(gathered, download(*setup, r.gather_out.data(), ranks() * n, dtype)))
        << "all_gather";
    EXPECT_TRUE(same_values(scattered, download(*setup, r.scatter_out.data(), n, dtype)))
        << "reduce_scatter";
  }
}

// Non-integer values: every rank gets the same bits, twice; on single/mpi the bits are those
// of the rank-order fp32 sum rounded once.
TEST_F(CommTest, AllReduceIsBitwiseReproducibleAndAgreedOn) {
  auto stream = device().create_stream("determinism");
  const std::size_t n = 50021;
  for (DType dtype : {DType::f32, DType::bf16, DType::f16}) {
    SCOPED_TRACE(std::string(dtype_name(dtype)));
    auto input = [&](int r) {
      std::vector<float> v(n);
      for (std::size_t i = 0; i < n; ++i) {
        v[i] = round_to(std::sin(static_cast<float>(i) * 0.37f + static_cast<float>(r) * 1.3f) *
                            static_cast<float>(1 + r) * 3.1f,
                        dtype);
      }
      return v;
    };
    const std::size_t bytes = n * dtype_size(dtype);
    device::DeviceBuffer first = upload(device(), *stream, input(rank()), dtype);
    device::DeviceBuffer second = upload(device(), *stream, input(rank()), dtype);
    device::DeviceBuffer all = device().allocate(ranks() * bytes, "all");
    comm().all_reduce(first.data(), first.data(), n, dtype, *stream);
    comm().all_reduce(second.data(), second.data(), n, dtype, *stream);
    comm().all_gather(first.data(), all.data(), n, dtype, *stream);
    std::vector<unsigned char> mine = download_bytes(*stream, first.data(), bytes);
    EXPECT_EQ(mine, download_bytes(*stream, second.data(), bytes)) << "two runs differ";
    std::vector<unsigned char> everyone = download_bytes(*stream, all.data(), ranks() * bytes);
    for (std::size_t r = 0; r < ranks(); ++r) {
      EXPECT_EQ(0, std::memcmp(everyone.data() + r * bytes, mine.data(), bytes))
          << "rank " << r << " differs";
    }
    if (comm().backend() != comm::CommBackend::nccl) {
      std::vector<float> expected = input(0);
      for (int r = 1; r < world(); ++r) {
        std::vector<float> v = input(r);
        for (std::size_t i = 0; i < n; ++i) expected[i] += v[i];
      }
      for (float& x : expected) x = round_to(x, dtype);
      EXPECT_TRUE(same_values(expected, download(*stream, first.data(), n, dtype)));
    }
  }
}

// After the barrier, every rank's clock is past the moment every rank entered it (the ranks of
// these tests share one machine, hence one steady_clock).
TEST_F(CommTest, BarrierWaitsForEveryRank) {
  using Clock = std::chrono::steady_clock;
  std::this_thread::sleep_for(std::chrono::milliseconds(20 * rank()));
  const auto entered = Clock::now().time_since_epoch().count();
  comm().barrier();
  const auto left = Clock::now().time_since_epoch().count();
  // Share the entry times as raw bits (all_gather moves bits, it does no arithmetic).
  static_assert(sizeof(entered) == 2 * sizeof(float));
  auto stream = device().create_stream("barrier");
  device::DeviceBuffer mine = device().allocate(sizeof(entered), "entered");
  device::DeviceBuffer all = device().allocate(ranks() * sizeof(entered), "all entered");
  stream->copy_async(mine.data(), &entered, sizeof(entered));
  comm().all_gather(mine.data(), all.data(), 2, DType::f32, *stream);
  std::vector<unsigned char> bytes = download_bytes(*stream, all.data(), ranks() * sizeof(entered));
  for (std::size_t r = 0; r < ranks(); ++r) {
    Clock::rep t = 0;
    std::memcpy(&t, bytes.data() + r * sizeof(t), sizeof(t));
    EXPECT_LE(t, left) << "rank " << r << " entered the barrier after this rank left it";
  }
}

}  // namespace
}  // namespace strata::runtime::comm_test
