// A mixture of experts' traffic model (runtime/estimate/moe_traffic.h): the expected distinct
// experts E (1 - (1 - k/E)^b) against an enumeration of every routing of b tokens for small E,
// k, b; b = 1 gives k, k = E gives E, increasing in b towards E; a skewed router with
// independent tokens expects fewer; the bytes of decoding and training from it.
#include "runtime/estimate/moe_traffic.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <vector>

namespace strata::runtime::estimate {
namespace {

// Every k-subset of E experts as a bit mask.
std::vector<unsigned> subsets(int E, int k) {
  std::vector<unsigned> out;
  for (unsigned m = 0; m < (1u << E); ++m) {
    if (__builtin_popcount(m) == k) out.push_back(m);
  }
  return out;
}

// The mean of the distinct experts over every way b tokens can each pick a k-subset (uniform,
// independent): exact, by enumeration.
double enumerated(int E, int k, int b) {
  const std::vector<unsigned> s = subsets(E, k);
  double sum = 0, count = 0;
  std::vector<std::size_t> pick(static_cast<std::size_t>(b), 0);
  while (true) {
    unsigned used = 0;
    for (std::size_t i : pick) used |= s[i];
    sum += __builtin_popcount(used);
    count += 1;
    std::size_t t = 0;
    while (t < pick.size() && ++pick[t] == s.size()) pick[t++] = 0;
    if (t == pick.size()) break;
  }
  return sum / count;
}

TEST(MoeTraffic, ExpectedExpertsIsTheEnumeratedMeanOfUniformRouting) {
  EXPECT_DOUBLE_EQ(expected_experts(8, 2, 2), 8.0 * (1.0 - 9.0 / 16.0));  // 3.5
  EXPECT_DOUBLE_EQ(expected_experts(8, 2, 3), 8.0 * 37.0 / 64.0);         // 4.625
  EXPECT_DOUBLE_EQ(expected_experts(4, 1, 2), 1.75);
  const int cases[][3] = {{4, 1, 3}, {4, 2, 2}, {5, 2, 3}, {6, 3, 3}, {6, 2, 4}, {8, 2, 3}};
  for (const auto& c : cases) {
    EXPECT_NEAR(expected_experts(c[0], c[1], c[2]), enumerated(c[0], c[1], c[2]), 1e-12)
        << "E " << c[0] << " k " << c[1] << " b " << c[2];
  }
}

TEST(MoeTraffic, OneTokenPicksKAndManyTendToEveryExpert) {
  const int shapes[][2] = {{8, 2}, {16, 4}, {128, 8}, {64, 1}};
  for (const auto& s : shapes) {
    const int E = s[0], k = s[1];
    EXPECT_DOUBLE_EQ(expected_experts(E, k, 1), k);
    double last = 0;
    for (int b = 1; b <= 4096; b *= 2) {
      const double d = expected_experts(E, k, b);
      // Strictly increasing while below E in doubles (at b = 512 (3/4)^b is under an ulp of 8).
      if (b <= 64) {
        EXPECT_GT(d, last) << "E " << E << " k " << k << " b " << b;
      }
      EXPECT_GE(d, last) << "E " << E << " k " << k << " b " << b;
      EXPECT_LE(d, E);
      EXPECT_LE(d, static_cast<double>(k) * b + 1e-9);
      last = d;
    }
    EXPECT_NEAR(expected_experts(E, k, 1e6), E, 1e-9);
  }
  EXPECT_DOUBLE_EQ(expected_experts(8, 8, 3), 8.0);
  EXPECT_DOUBLE_EQ(expected_experts(0, 0, 5), 0.0);
}

TEST(MoeTraffic, ASkewedRouterWithIndependentTokensExpectsFewer) {
  // p_e: the chance one token picks expert e (sum k = 2 of E = 8); distinct = sum 1 - (1 - p)^b.
  const double p[] = {0.6, 0.5, 0.3, 0.2, 0.15, 0.1, 0.1, 0.05};
  for (int b : {1, 2, 4, 16, 64}) {
    double skewed = 0;
    for (double pe : p) skewed += 1.0 - std::pow(1.0 - pe, b);
    EXPECT_LE(skewed, expected_experts(8, 2, b) + 1e-12) << "b " << b;
  }
}

TEST(MoeTraffic, DecodingAndTrainingBytesFollowTheExpectedExperts) {
  // Embedding 100, a block 10 with 4 experts of 6, a dense block 10, a head 20 (elements); 2
  // experts per token, one sparse layer.
  const std::vector<std::size_t> numels = {100, 10, 6, 6, 6, 6, 10, 20};
  const std::vector<char> routed = {0, 0, 1, 1, 1, 1, 0, 0};
  const MoeRouting r{4, 2, 1, 0};
  const MoeBytes b = moe_bytes(numels, routed, r, DType::bf16);
  EXPECT_EQ(b.non_expert_bytes, 2u * 140);
  EXPECT_EQ(b.expert_bytes, 2u * 24);
  EXPECT_EQ(b.one_expert_bytes, 12u);

  const DecodeTraffic one = decode_traffic(r, b, 1);
  EXPECT_DOUBLE_EQ(one.experts_per_layer, 2.0);
  EXPECT_DOUBLE_EQ(one.step_bytes, 280.0 + 24.0);  // 2 of the 4 experts
  EXPECT_DOUBLE_EQ(one.token_bytes, one.step_bytes);
  EXPECT_DOUBLE_EQ(one.dense_step_bytes, 328.0);
  const DecodeTraffic four = decode_traffic(r, b, 4);
  EXPECT_DOUBLE_EQ(four.experts_per_layer, 4.0 * (1.0 - 1.0 / 16.0));
  EXPECT_DOUBLE_EQ(four.step_bytes, 280.0 + 48.0 * four.experts_per_layer / 4.0);
  EXPECT_DOUBLE_EQ(four.token_bytes, four.step_bytes / 4);
  EXPECT_DOUBLE_EQ(four.dense_token_bytes, 328.0 / 4);

  const TrainTraffic t = train_traffic(r, b, 2, 3);
  EXPECT_DOUBLE_EQ(t.tokens, 6.0);
  EXPECT_DOUBLE_EQ(t.experts_per_layer, expected_experts(4, 2, 6));
  EXPECT_DOUBLE_EQ(t.all_expert_bytes, 2.0 * 48);
  EXPECT_DOUBLE_EQ(t.expert_bytes, 2.0 * 48 * t.experts_per_layer / 4);
  EXPECT_LT(t.fraction(), 1.0);

  // Dense: everything is non-expert, every step moves it all.
  const MoeBytes dense = moe_bytes(numels, {}, MoeRouting{}, DType::f32);
  EXPECT_EQ(dense.non_expert_bytes, 4u * 164);
  EXPECT_EQ(dense.expert_bytes, 0u);
  const DecodeTraffic d = decode_traffic(MoeRouting{}, dense, 2);
  EXPECT_DOUBLE_EQ(d.step_bytes, d.dense_step_bytes);
}

}  // namespace
}  // namespace strata::runtime::estimate
