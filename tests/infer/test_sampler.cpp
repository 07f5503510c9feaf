// infer/sampler: greedy, temperature, top-k, top-p against a plain full-sort reference, the
// empirical distribution against softmax(logits / T), determinism, and independence from the
// batch and the thread count.
#include "infer/sampler.h"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <limits>
#include <numeric>
#include <random>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "core/error.h"

namespace strata::infer {
namespace {

std::vector<float> random_logits(std::size_t vocab, std::uint32_t seed, float scale = 2.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, scale);
  std::vector<float> logits(vocab);
  for (float& x : logits) x = normal(rng);
  return logits;
}

std::int32_t argmax_lowest(const std::vector<float>& logits) {
  std::size_t best = 0;
  for (std::size_t i = 1; i < logits.size(); ++i) {
    if (logits[i] > logits[best]) best = i;
  }
  return static_cast<std::int32_t>(best);
}

Sampler make(float temperature, int top_k = 0, float top_p = 1.0f, std::uint64_t seed = 0) {
  return Sampler(SamplingOptions{temperature, top_k, top_p, seed});
}

// The reference: a full sort by (logit desc, id asc), top-k, softmax in double over what is
// kept, then HF's nucleus (keep a token while the probability above it is < top_p).
std::vector<Candidate> reference(const std::vector<float>& logits, const SamplingOptions& o) {
  std::vector<std::int32_t> order(logits.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](std::int32_t a, std::int32_t b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  });
  if (o.top_k > 0 && static_cast<std::size_t>(o.top_k) < order.size()) order.resize(o.top_k);
  const double mx = logits[order[0]];
  std::vector<double> w(order.size());
  double norm = 0;
  for (std::size_t i = 0; i < order.size(); ++i) {
    w[i] = std::exp((logits[order[i]] - mx) / o.temperature);
    norm += w[i];
  }
  std::size_t kept = order.size();
  if (o.top_p < 1.0f) {
    double above = 0;
    for (std::size_t i = 0; i < order.size(); ++i) {
      if (i > 0 && above / norm >= o.top_p) {
        kept = i;
        break;
      }
      above += w[i];
    }
  }
  double total = 0;
  for (std::size_t i = 0; i < kept; ++i) total += w[i];
  std::vector<Candidate> out;
  for (std::size_t i = 0; i < kept; ++i) out.push_back({order[i], w[i] / total});
  return out;
}

std::vector<std::int32_t> ids_of(const std::vector<Candidate>& c) {
  std::vector<std::int32_t> ids;
  for (const auto& x : c) ids.push_back(x.id);
  return ids;
}

void expect_error_naming(const SamplingOptions& o, const std::string& flag) {
  try {
    validate(o);
    ADD_FAILURE() << "no error for " << flag;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(flag), std::string::npos) << e.what();
    EXPECT_EQ(e.where(), flag);
  }
  EXPECT_THROW(Sampler{o}, Error);
}

TEST(Sampler, ValidatesOptionsNamingTheFlag) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_NO_THROW(validate(SamplingOptions{}));
  EXPECT_NO_THROW(validate(SamplingOptions{0.7f, 50, 0.9f, 1}));
  EXPECT_NO_THROW(validate(SamplingOptions{1e-30f, 0, 1e-9f, 0}));
  for (float t : {-0.1f, nan, inf, -inf}) expect_error_naming({t, 0, 1.0f, 0}, "--temperature");
  expect_error_naming({1.0f, -1, 1.0f, 0}, "--top-k");
  for (float p : {0.0f, -0.5f, 1.0001f, nan, inf}) expect_error_naming({1.0f, 0, p, 0}, "--top-p");
}

TEST(Sampler, PhiloxKnownAnswers) {
  // Random123's kat_vectors for philox4x32_10.
  using A4 = std::array<std::uint32_t, 4>;
  EXPECT_EQ(philox4x32_10({0, 0, 0, 0}, {0, 0}), (A4{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}));
  EXPECT_EQ(philox4x32_10({0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}, {0xffffffff, 0xffffffff}),
            (A4{0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}));
  EXPECT_EQ(philox4x32_10({0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}, {0xa4093822, 0x299f31d0}),
            (A4{0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}));
}

TEST(Sampler, GreedyIsArgmaxLowestIdOnTies) {
  const Sampler s = make(0.0f);
  EXPECT_TRUE(s.greedy());
  EXPECT_EQ(s.sample(std::vector<float>{1, 3, 3, 2}, {}), 1);
  EXPECT_EQ(s.sample(std::vector<float>{-5, -5, -5}, {}), 0);
  EXPECT_EQ(s.sample(std::vector<float>{7}, {}), 0);
  const auto logits = random_logits(152064, 1);
  EXPECT_EQ(s.sample(logits, {3, 9}), argmax_lowest(logits));
  const auto d = s.distribution(std::vector<float>{1, 3, 3, 2});
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0].id, 1);
  EXPECT_EQ(d[0].probability, 1.0);
  // top_k and top_p do not change greedy decoding (HF's do_sample=False ignores them too).
  EXPECT_EQ(make(0.0f, 5, 0.1f, 42).sample(logits, {0, 0}), argmax_lowest(logits));
}

TEST(Sampler, TemperatureToZeroIsGreedy) {
  for (std::uint32_t trial = 0; trial < 20; ++trial) {
    auto logits = random_logits(1000, 100 + trial);
    logits[argmax_lowest(logits)] += 1e-3f;  // a unique maximum, by a margin
    const std::int32_t best = argmax_lowest(logits);
    for (float t : {1e-5f, 1e-7f, 1e-30f, 1e-45f}) {
      const Sampler s = make(t, 0, 1.0f, trial);
      for (std::uint64_t step = 0; step < 50; ++step) ASSERT_EQ(s.sample(logits, {trial, step}), best);
    }
  }
}

TEST(Sampler, TopK1IsGreedy) {
  auto logits = random_logits(152064, 7);
  logits[1234] = logits[4321] = 100.0f;  // tied maxima: greedy and top_k=1 pick the lower id
  for (float t : {0.5f, 1.0f, 5.0f}) {
    const Sampler s = make(t, 1, 1.0f, 99);
    for (std::uint64_t step = 0; step < 30; ++step) EXPECT_EQ(s.sample(logits, {2, step}), 1234);
  }
  for (std::uint32_t trial = 0; trial < 10; ++trial) {
    const auto l = random_logits(5000, 200 + trial);
    EXPECT_EQ(make(1.3f, 1, 0.95f, trial).sample(l, {trial, 0}), argmax_lowest(l));
  }
}

// Pearson's chi-square of counts against probabilities (every expected count large).
double chi_square(const std::vector<long>& counts, const std::vector<double>& probs, long n) {
  double chi2 = 0;
  for (std::size_t i = 0; i < counts.size(); ++i) {
    const double expected = probs[i] * static_cast<double>(n);
    chi2 += (counts[i] - expected) * (counts[i] - expected) / expected;
  }
  return chi2;
}

TEST(Sampler, EmpiricalDistributionMatchesSoftmax) {
  const std::vector<float> logits = {1.0f, 0.5f, -0.3f, 2.0f, 0.0f, 1.7f, -1.0f, 0.9f};
  constexpr float kT = 0.7f;
  std::vector<double> softmax(logits.size());
  double norm = 0;
  for (std::size_t i = 0; i < logits.size(); ++i) norm += softmax[i] = std::exp(logits[i] / double{kT});
  for (double& p : softmax) p /= norm;

  // distribution() is softmax(logits / T) itself.
  const auto d = make(kT).distribution(logits);
  ASSERT_EQ(d.size(), logits.size());
  for (const auto& c : d) EXPECT_NEAR(c.probability, softmax[c.id], 1e-12);

  // Draws over many seeds, prompts and steps: chi-square with 7 degrees of freedom. 40 is the
  // 1 - 1e-6 quantile, so a correct sampler fails about once in a million runs; a sampler off
  // by 1% on one token (N = 400k) gives ~ 50+.
  constexpr long kN = 400000;
  std::vector<long> counts(logits.size(), 0);
  for (long i = 0; i < kN; ++i) {
    const Sampler s = make(kT, 0, 1.0f, static_cast<std::uint64_t>(i % 97));
    counts[s.sample(logits, {static_cast<std::uint64_t>(i / 97 % 13), static_cast<std::uint64_t>(i)})]++;
  }
  const double chi2 = chi_square(counts, softmax, kN);
  EXPECT_LT(chi2, 40.0);
  for (std::size_t i = 0; i < logits.size(); ++i) {
    EXPECT_NEAR(static_cast<double>(counts[i]) / kN, softmax[i], 0.005) << "token " << i;
  }
}

TEST(Sampler, FilteredDrawsFollowTheirDistribution) {
  // top_k = 5 then top_p = 0.8 over 12 tokens: draws land only on the kept tokens, in the
  // renormalized proportions.
  const auto logits = random_logits(12, 5, 1.0f);
  const Sampler s = make(1.2f, 5, 0.8f, 2024);
  const auto d = s.distribution(logits);
  ASSERT_GE(d.size(), 2u);
  ASSERT_LE(d.size(), 5u);
  std::vector<double> probs(logits.size(), 0.0);
  for (const auto& c : d) probs[c.id] = c.probability;
  constexpr long kN = 200000;
  std::vector<long> counts(logits.size(), 0);
  for (long i = 0; i < kN; ++i) counts[s.sample(logits, {7, static_cast<std::uint64_t>(i)})]++;
  std::vector<long> kept_counts;
  std::vector<double> kept_probs;
  for (std::size_t i = 0; i < logits.size(); ++i) {
    if (probs[i] == 0.0) {
      EXPECT_EQ(counts[i], 0) << "token " << i << " is outside the kept set";
    } else {
      kept_counts.push_back(counts[i]);
      kept_probs.push_back(probs[i]);
    }
  }
  EXPECT_LT(chi_square(kept_counts, kept_probs, kN), 40.0);  // <= 4 dof; 1 - 1e-6 quantile < 30
}

TEST(Sampler, TopKKeepsExactlyTheKHighest) {
  const auto logits = random_logits(1000, 3);
  const Sampler s = make(1.0f, 10, 1.0f, 5);
  const auto d = s.distribution(logits);
  const auto want = reference(logits, s.options());
  ASSERT_EQ(ids_of(d), ids_of(want));
  double sum = 0;
  for (std::size_t i = 0; i < d.size(); ++i) {
    EXPECT_NEAR(d[i].probability, want[i].probability, 1e-12);
    sum += d[i].probability;
  }
  EXPECT_NEAR(sum, 1.0, 1e-12);
  const std::vector<std::int32_t> kept_ids = ids_of(d);
  const std::set<std::int32_t> kept(kept_ids.begin(), kept_ids.end());
  for (std::uint64_t step = 0; step < 20000; ++step) {
    ASSERT_TRUE(kept.contains(s.sample(logits, {0, step})));
  }
  // Ties at the k-th place: exactly k tokens, the lower ids first (HF would keep all 4).
  EXPECT_EQ(ids_of(make(1.0f, 2).distribution(std::vector<float>{5, 4, 4, 4, 1})),
            (std::vector<std::int32_t>{0, 1}));
  // top_k >= V keeps everything.
  EXPECT_EQ(make(1.0f, 5).distribution(std::vector<float>{1, 2, 3}).size(), 3u);
}

TEST(Sampler, TopPKeepsExactlyTheNucleus) {
  // Against the full-sort reference, with and without top-k, at V = 152k (the nucleus spans
  // several of the sampler's partial-sort chunks) and a small V.
  for (std::size_t vocab : {std::size_t{50}, std::size_t{152064}}) {
    const auto logits = random_logits(vocab, 11, 3.0f);
    for (int top_k : {0, 40, 2000}) {
      for (float top_p : {1e-6f, 0.3f, 0.9f, 0.99f, 0.9999f}) {
        const SamplingOptions o{0.8f, top_k, top_p, 0};
        const auto got = Sampler(o).distribution(logits);
        const auto want = reference(logits, o);
        ASSERT_EQ(ids_of(got), ids_of(want)) << "V " << vocab << " top_k " << top_k << " top_p " << top_p;
        for (std::size_t i = 0; i < got.size(); ++i) {
          EXPECT_NEAR(got[i].probability, want[i].probability, 1e-9);
        }
      }
    }
  }
  // Probabilities 1/2, 1/4, 1/8, 1/8 (T = 1): the cumulative probability reaches 0.75 after two
  // tokens, so top_p just under 0.75 keeps 2 and just over keeps 3.
  const std::vector<float> p = {std::log(0.5f), std::log(0.25f), std::log(0.125f), std::log(0.125f)};
  EXPECT_EQ(ids_of(make(1.0f, 0, 0.7499f).distribution(p)), (std::vector<std::int32_t>{0, 1}));
  EXPECT_EQ(ids_of(make(1.0f, 0, 0.7501f).distribution(p)), (std::vector<std::int32_t>{0, 1, 2}));
  EXPECT_EQ(ids_of(make(1.0f, 0, 0.5f).distribution(p)), (std::vector<std::int32_t>{0}));
  EXPECT_EQ(ids_of(make(1.0f, 0, 0.5001f).distribution(p)), (std::vector<std::int32_t>{0, 1}));
  // Ties across the boundary: the lower id of the tied tokens is in, the higher one out.
  EXPECT_EQ(ids_of(make(1.0f, 0, 0.8f).distribution(p)), (std::vector<std::int32_t>{0, 1, 2}));
  const std::vector<float> tied = {2, 1, 1, 1, 0};
  const auto all = make(1.0f).distribution(tied);
  EXPECT_EQ(ids_of(make(1.0f, 0, static_cast<float>(all[0].probability) + 1e-4f).distribution(tied)),
            (std::vector<std::int32_t>{0, 1}));
  // top_p = 1 keeps every token, even those whose probability underflows to 0 (never drawn).
  std::vector<float> far = {0.0f, 1.0f, -1e4f, 0.5f};
  const Sampler off = make(1.0f, 0, 1.0f, 3);
  EXPECT_EQ(off.distribution(far).size(), 4u);
  for (std::uint64_t step = 0; step < 5000; ++step) ASSERT_NE(off.sample(far, {0, step}), 2);
  // A tiny top_p keeps only the top token: sampling is greedy.
  const auto logits = random_logits(152064, 12);
  const Sampler tiny = make(2.0f, 0, 1e-9f, 8);
  EXPECT_EQ(tiny.distribution(logits).size(), 1u);
  for (std::uint64_t step = 0; step < 20; ++step) EXPECT_EQ(tiny.sample(logits, {1, step}), argmax_lowest(logits));
}

TEST(Sampler, DeterministicAndIndependentOfBatchAndThreads) {
  constexpr std::size_t kVocab = 4096;
  constexpr std::size_t kPrompts = 9;
  // Each prompt has its own logits; nearly flat so that draws vary.
  std::vector<std::vector<float>> per_prompt;
  for (std::size_t p = 0; p < kPrompts; ++p) per_prompt.push_back(random_logits(kVocab, 300 + p, 0.5f));
  const SamplingOptions o{0.9f, 200, 0.95f, 1234};
  const Sampler s(o);

  // Alone: one prompt at a time.
  std::vector<std::vector<std::int32_t>> alone(kPrompts);
  for (std::size_t p = 0; p < kPrompts; ++p) {
    for (std::uint64_t step = 0; step < 16; ++step) alone[p].push_back(s.sample(per_prompt[p], {p, step}));
  }
  // Another Sampler with the same options: the same tokens.
  const Sampler again(o);
  for (std::size_t p = 0; p < kPrompts; ++p) {
    for (std::uint64_t step = 0; step < 16; ++step) EXPECT_EQ(again.sample(per_prompt[p], {p, step}), alone[p][step]);
  }
  // The draws are not degenerate: several distinct tokens per prompt.
  for (const auto& toks : alone) EXPECT_GT(std::set<std::int32_t>(toks.begin(), toks.end()).size(), 8u);
  // A different seed gives different tokens.
  const Sampler other(SamplingOptions{0.9f, 200, 0.95f, 1235});
  int differ = 0;
  for (std::uint64_t step = 0; step < 16; ++step) differ += other.sample(per_prompt[0], {0, step}) != alone[0][step];
  EXPECT_GT(differ, 8);

  // Batches: a subset of the prompts, shuffled into rows, at 1 and 4 threads.
  const std::vector<std::vector<std::size_t>> batches = {{8, 0, 3}, {3}, {5, 4, 7, 1, 6, 2, 0, 8}};
  for (int threads : {1, 4}) {
    omp_set_num_threads(threads);
    for (const auto& batch : batches) {
      std::vector<float> logits;
      for (std::size_t p : batch) logits.insert(logits.end(), per_prompt[p].begin(), per_prompt[p].end());
      for (std::uint64_t step = 0; step < 16; ++step) {
        std::vector<SampleKey> keys;
        for (std::size_t p : batch) keys.push_back({p, step});
        std::vector<std::int32_t> tokens(batch.size(), -1);
        s.sample_rows(logits, kVocab, keys, tokens);
        for (std::size_t row = 0; row < batch.size(); ++row) {
          ASSERT_EQ(tokens[row], alone[batch[row]][step]) << "prompt " << batch[row] << " step " << step;
        }
      }
    }
  }
}

TEST(Sampler, NonFiniteLogitsAreAnError) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  for (float bad : {nan, inf, -inf}) {
    std::vector<float> logits = random_logits(100, 4);
    logits[37] = bad;
    for (const Sampler& s : {make(0.0f), make(1.0f), make(0.7f, 10, 0.9f)}) {
      try {
        s.sample(logits, {5, 6});
        ADD_FAILURE() << "no error for " << bad;
      } catch (const Error& e) {
        const std::string what = e.what();
        EXPECT_NE(what.find("logit 37"), std::string::npos) << what;
        EXPECT_NE(what.find("prompt 5, step 6"), std::string::npos) << what;
      }
      EXPECT_THROW(s.distribution(logits), Error);
    }
    // From the parallel rows: the error of the bad row, rethrown on the caller's thread.
    std::vector<float> rows = random_logits(400, 9);
    rows[3 * 100 + 37] = bad;
    std::vector<SampleKey> keys = {{0, 0}, {1, 0}, {2, 0}, {3, 0}};
    std::vector<std::int32_t> tokens(4);
    try {
      make(1.0f).sample_rows(rows, 100, keys, tokens);
      ADD_FAILURE() << "no error from sample_rows";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("prompt 3"), std::string::npos) << e.what();
    }
  }
}

TEST(Sampler, CostAtQwenVocab) {
  // Not a pass/fail timing: prints the cost per token at V = 152k for the common settings, so a
  // full sort creeping back shows up in the log. Asserts only a loose bound.
  const auto logits = random_logits(152064, 21);
  const SamplingOptions settings[] = {{0, 0, 1, 0}, {0.7f, 0, 1, 0}, {0.7f, 50, 1, 0},
                                      {0.7f, 0, 0.9f, 0}, {0.7f, 50, 0.9f, 0}};
  for (const auto& o : settings) {
    const Sampler s(o);
    constexpr int kReps = 20;
    const auto t0 = std::chrono::steady_clock::now();
    std::int64_t sink = 0;
    for (int i = 0; i < kReps; ++i) sink += s.sample(logits, {0, static_cast<std::uint64_t>(i)});
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() / kReps;
    std::printf("V=152064 T=%.1f top_k=%d top_p=%.2f: %.3f ms/token (sink %lld)\n", o.temperature, o.top_k,
                o.top_p, ms, static_cast<long long>(sink));
    EXPECT_LT(ms, 100.0);
  }
}

}  // namespace
}  // namespace strata::infer
