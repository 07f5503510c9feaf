// The pieces of runtime/comm that need no MPI: backend selection for every launch and device
// (posing as builds with and without MPI), the Sequencer (issue order across threads, skipped
// tickets) and reduce_in_order (rank-order fp32 reduction, one rounding).
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <limits>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "runtime/comm/comm_impl.h"
#include "runtime/comm/sequencer.h"

namespace strata::runtime {
namespace {

launch::LaunchInfo alone(bool mpi_compiled) { return {.mpi_compiled = mpi_compiled, .launcher = "none"}; }
launch::LaunchInfo mpirun(int world, bool mpi_compiled) {
  return {.mpi_compiled = mpi_compiled,
          .under_mpirun = true,
          .rank = world - 1,
          .world = world,
          .launcher = "Open MPI"};
}

// The Error's text, or "" when resolve_comm_backend accepted the choice.
std::string refusal(comm::CommBackend wanted, device::Backend device, const launch::LaunchInfo& launch) {
  try {
    resolve_comm_backend(wanted, device, launch);
    return "";
  } catch (const Error& e) {
    EXPECT_FALSE(e.hint().empty()) << e.what();
    return e.what();
  }
}

TEST(ResolveCommBackend, AutoFollowsTheLaunchAndTheDevice) {
  for (bool mpi : {false, true}) {
    EXPECT_EQ(resolve_comm_backend(comm::CommBackend::automatic, device::Backend::host, alone(mpi)),
              comm::CommBackend::single);
    EXPECT_EQ(resolve_comm_backend(comm::CommBackend::automatic, device::Backend::cuda, alone(mpi)),
              comm::CommBackend::single);
    EXPECT_EQ(resolve_comm_backend(comm::CommBackend::automatic, device::Backend::cuda, mpirun(1, mpi)),
              comm::CommBackend::nccl);
  }
  EXPECT_EQ(resolve_comm_backend(comm::CommBackend::automatic, device::Backend::host, mpirun(3, true)),
            comm::CommBackend::mpi);
  EXPECT_EQ(resolve_comm_backend(comm::CommBackend::automatic, device::Backend::host, mpirun(1, true)),
            comm::CommBackend::mpi);
  EXPECT_EQ(resolve_comm_backend(comm::CommBackend::automatic, device::Backend::cuda, mpirun(3, true)),
            comm::CommBackend::nccl);
  EXPECT_EQ(resolve_comm_backend(comm::CommBackend::automatic, device::Backend::host, mpirun(1, false)),
            comm::CommBackend::single);
}

TEST(ResolveCommBackend, ImpossibleChoicesSayWhatToDo) {
  // mpirun with several ranks and no MPI in the build: no way to talk.
  EXPECT_NE(
      refusal(comm::CommBackend::automatic, device::Backend::host, mpirun(2, false)).find("-DSTRATA_MPI=ON"),
      std::string::npos);
  EXPECT_NE(refusal(comm::CommBackend::automatic, device::Backend::cuda, mpirun(2, false)).find("no MPI"),
            std::string::npos);
  EXPECT_NE(refusal(comm::CommBackend::mpi, device::Backend::host, alone(false)).find("no MPI"),
            std::string::npos);
  EXPECT_NE(refusal(comm::CommBackend::mpi, device::Backend::cuda, mpirun(2, true)).find("cuda"),
            std::string::npos);
  EXPECT_NE(refusal(comm::CommBackend::single, device::Backend::host, mpirun(2, true)).find("rank 1 of 2"),
            std::string::npos);
  EXPECT_EQ(refusal(comm::CommBackend::single, device::Backend::host, mpirun(1, true)), "");
  EXPECT_EQ(refusal(comm::CommBackend::mpi, device::Backend::host, alone(true)), "");  // a world of one
  if (comm_backend_compiled(comm::CommBackend::nccl)) {
    EXPECT_NE(refusal(comm::CommBackend::nccl, device::Backend::host, alone(true)).find("needs a cuda device"),
              std::string::npos);
    EXPECT_EQ(refusal(comm::CommBackend::nccl, device::Backend::cuda, alone(false)), "");
    EXPECT_NE(refusal(comm::CommBackend::nccl, device::Backend::cuda, mpirun(2, false)).find("NCCL id"),
              std::string::npos);
  } else {
    EXPECT_NE(refusal(comm::CommBackend::nccl, device::Backend::cuda, alone(true)).find("-DSTRATA_CUDA=ON"),
              std::string::npos);
  }
}

TEST(Sequencer, RunsTicketsInIssueOrderWhateverThreadComesFirst) {
  comm::Sequencer sequencer;
  constexpr int kTickets = 16;
  std::vector<std::uint64_t> tickets;
  for (int i = 0; i < kTickets; ++i) tickets.push_back(sequencer.take());
  std::mutex mutex;
  std::vector<std::uint64_t> order;
  std::vector<std::thread> threads;
  for (int i = kTickets - 1; i >= 0; --i) {  // the last ticket's thread starts first
    threads.emplace_back([&, i] {
      sequencer.run_in_turn(tickets[static_cast<std::size_t>(i)], [&] {
        std::lock_guard lock(mutex);
        order.push_back(tickets[static_cast<std::size_t>(i)]);
      });
    });
  }
  for (auto& t : threads) t.join();
  sequencer.wait_drained();
  EXPECT_EQ(order, tickets);
  EXPECT_FALSE(sequencer.broken());
}

TEST(Sequencer, ClosureDestroyedUnrunBreaksIt) {
  comm::Sequencer sequencer;
  auto skipped = std::make_shared<comm::TicketGuard>(sequencer, sequencer.take());
  const std::uint64_t next = sequencer.take();
  std::thread waiter([&] {
    EXPECT_THROW(sequencer.run_in_turn(next, [] { ADD_FAILURE() << "ran after a skipped ticket"; }),
                 Error);
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(10));
  skipped.reset();  // as a failed stream drops its queued closures
  waiter.join();
  EXPECT_TRUE(sequencer.broken());
  EXPECT_THROW(sequencer.run_in_turn(sequencer.take(), [] {}), Error);
  sequencer.wait_drained();
}

TEST(Sequencer, FailureBreaksItAndIsRethrown) {
  comm::Sequencer sequencer;
  EXPECT_THROW(sequencer.run_in_turn(sequencer.take(), [] { throw Error("boom"); }), Error);
  EXPECT_TRUE(sequencer.broken());
  try {
    sequencer.run_in_turn(sequencer.take(), [] {});
    ADD_FAILURE() << "ran on a broken sequencer";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("boom"), std::string::npos) << e.what();
  }
}

TEST(ReduceInOrder, SumsInChunkOrderAndRoundsOnce) {
  // bf16 has 8 significant bits: 256 + 1 + 1 is 258 when summed in fp32 and rounded once,
  // but 256 when each step is rounded (256 + 1 ties to even, back to 256).
  std::vector<std::uint16_t> chunks = {fp32_to_bf16(256.0f), fp32_to_bf16(1.0f),
                                       fp32_to_bf16(1.0f)};
  std::uint16_t out = 0;
  reduce_in_order(chunks.data(), 3, 1, DType::bf16, comm::ReduceOp::sum, &out);
  EXPECT_EQ(bf16_to_fp32(out), 258.0f);

  // fp32 is summed left to right: (1e8 + 1 - 1e8) is 0 in that order, not 1.
  std::vector<float> f = {1e8f, 1.0f, -1e8f};
  float sum = -1;
  reduce_in_order(f.data(), 3, 1, DType::f32, comm::ReduceOp::sum, &sum);
  EXPECT_EQ(sum, 0.0f);
}

TEST(ReduceInOrder, MaxKeepsNaNAndInf) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  // 3 chunks of 3: column 0 has a NaN in the middle, column 1 an Inf, column 2 plain values.
  std::vector<float> chunks = {1.0f, 2.0f, -5.0f, nan, inf, -3.0f, 7.0f, 3.0f, -4.0f};
  std::vector<float> out(3);
  reduce_in_order(chunks.data(), 3, 3, DType::f32, comm::ReduceOp::max, out.data());
  EXPECT_TRUE(std::isnan(out[0]));
  EXPECT_EQ(out[1], inf);
  EXPECT_EQ(out[2], -3.0f);
}

TEST(ReduceInOrder, LongFp16BuffersMatchAScalarLoop) {
  const std::size_t n = 5000;  // more than one block, not a multiple of it
  const std::size_t chunks = 4;
  std::vector<std::uint16_t> in(chunks * n);
  for (std::size_t k = 0; k < chunks; ++k) {
    for (std::size_t i = 0; i < n; ++i) {
      in[k * n + i] = fp32_to_fp16(std::sin(static_cast<float>(i * (k + 1))) * 100.0f);
    }
  }
  std::vector<std::uint16_t> out(n);
  reduce_in_order(in.data(), chunks, n, DType::f16, comm::ReduceOp::sum, out.data());
  for (std::size_t i = 0; i < n; ++i) {
    float acc = fp16_to_fp32(in[i]);
    for (std::size_t k = 1; k < chunks; ++k) acc += fp16_to_fp32(in[k * n + i]);
    ASSERT_EQ(out[i], fp32_to_fp16(acc)) << "element " << i;
  }
}

}  // namespace
}  // namespace strata::runtime
