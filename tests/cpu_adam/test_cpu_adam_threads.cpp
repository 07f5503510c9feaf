// Multi-threaded determinism: for every SIMD variant, the Adam step gives the same bits for
// 1, 2, 3 and 7 threads (the machine may have fewer cores: OpenMP oversubscribes) and run to
// run; the grad helpers too (the norm for every thread count, not only a given one).
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "cpu_adam/grad_ops.h"
#include "tests/cpu_adam/adam_test_util.h"

namespace strata::cpu_adam {
namespace {

using test::ShardBuffers;

// Large enough that 7 threads each get a part (shards split in parts of >= 32K elements).
constexpr std::size_t kNumel = 7 * 32768 + 4099;
constexpr int kThreadCounts[] = {1, 2, 3, 7};

bool same_bits(const ShardBuffers& a, const ShardBuffers& b) {
  return std::memcmp(a.params.data(), b.params.data(), a.params.size() * 4) == 0 &&
         std::memcmp(a.exp_avg.data(), b.exp_avg.data(), a.exp_avg.size() * 4) == 0 &&
         std::memcmp(a.exp_avg_sq.data(), b.exp_avg_sq.data(), a.exp_avg_sq.size() * 4) == 0 &&
         a.out == b.out;
}

TEST(AdamThreads, SameBitsForEveryThreadCountAndRun) {
  for (SimdLevel simd : test::levels_to_test()) {
    SCOPED_TRACE(simd_name(simd));
    AdamHyper h;
    h.weight_decay = 0.01f;
    ShardBuffers start(kNumel, 1, DType::f16, true, DType::bf16);
    start.fill(42, 0.1f, 1e-2f);
    ShardBuffers ref = start;
    for (std::int64_t t = 1; t <= 2; ++t) adam_step(simd, 1, h, t, ref.shard(), 0.5f);
    for (int threads : kThreadCounts) {
      for (int run = 0; run < 2; ++run) {
        ShardBuffers b = start;
        first_touch(b.m(), kNumel, threads);
        first_touch(b.v(), kNumel, threads);
        for (std::int64_t t = 1; t <= 2; ++t) adam_step(simd, threads, h, t, b.shard(), 0.5f);
        ASSERT_TRUE(same_bits(b, ref)) << threads << " threads, run " << run;
      }
    }
  }
}

TEST(GradOpsThreads, SameResultForEveryThreadCount) {
  for (SimdLevel simd : test::levels_to_test()) {
    SCOPED_TRACE(simd_name(simd));
    ShardBuffers b(kNumel, 2, DType::bf16, false, DType::bf16);
    b.fill(8, 1.0f, 1.0f);
    const double norm_ref = grad_sq_norm(simd, 1, b.g(), DType::bf16, kNumel, 0.25f);
    std::vector<float> acc_ref(b.p(), b.p() + kNumel);
    accumulate_grads(simd, 1, acc_ref.data(), b.g(), DType::bf16, kNumel);
    for (int threads : kThreadCounts) {
      for (int run = 0; run < 2; ++run) {
        const double norm = grad_sq_norm(simd, threads, b.g(), DType::bf16, kNumel, 0.25f);
        ASSERT_EQ(std::memcmp(&norm, &norm_ref, sizeof norm), 0) << threads << " threads";
        std::vector<float> acc(b.p(), b.p() + kNumel);
        accumulate_grads(simd, threads, acc.data(), b.g(), DType::bf16, kNumel);
        ASSERT_EQ(std::memcmp(acc.data(), acc_ref.data(), kNumel * 4), 0) << threads << " threads";
      }
      // One Inf in the last element (the last thread's tail) or the first.
      ASSERT_TRUE(all_finite(simd, threads, b.g(), DType::bf16, kNumel));
      for (std::size_t pos : {kNumel - 1, std::size_t{0}, kNumel / 3}) {
        const float saved = b.grad(pos);
        b.set_grad(pos, INFINITY);
        EXPECT_FALSE(all_finite(simd, threads, b.g(), DType::bf16, kNumel)) << threads << " " << pos;
        b.set_grad(pos, saved);
      }
    }
  }
}

}  // namespace
}  // namespace strata::cpu_adam
