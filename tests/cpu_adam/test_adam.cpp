// The Adam step against an independent float64 reference, for every SIMD variant this CPU
// has: sizes around the vector widths and a large odd one, misaligned starts, Adam and AdamW,
// with and without weight decay, fp32/bf16/fp16 grads, with and without grad scaling and a
// bf16/fp16 params_out, over several steps with the state carried. Also: the variants give
// identical bits, the bf16 output is exactly round-to-nearest-even of the fp32 result (through
// AVX512-BF16 too, on denormals, NaN, Inf and rounding ties), and the bound is tight enough to
// catch a dropped bias correction, L2 in place of decoupled decay, or a wrong eps placement.
// And the checks: adam_scalars / check_hyper / adam_step throw strata::Error naming the field
// for bad hyper-parameters, and a malformed shard is a STRATA_ASSERT.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>

#include "core/error.h"
#include "tests/cpu_adam/adam_test_util.h"

namespace strata::cpu_adam {
namespace {

using test::ShardBuffers;

// The error bound, per element and per result x in {p, m, v}:
//     |ours - ref| <= kBound * mag(x)
// where ref is the float64 step from our previous fp32 state and mag(x) the sum of the
// absolute values of the terms x is made of (ReferenceStep). The fp32 kernel rounds each of
// its ~12 operations once (relative 2^-24 each) and the per-step scalars once (one_minus_beta,
// step_size, bc2_sqrt, decay: 2^-24 each). Following them through the formula: g <= 3 u, m <= 6 u,
// v <= 11 u (g enters squared), and the update <= 20 u (m 6, sqrt(v) 6.5, the scalars 3, the
// divisions and + eps 4), p <= 2 u from the decay + 1 u from the subtraction: ~24 u in the
// worst case. kBound = 32 u = 2^-19 ~ 1.9e-6 leaves a margin; the errors seen are up to ~4 u
// (the test prints the largest ratio). Wrong formulas are off by hundreds of times the bound
// or more (BoundCatchesWrongFormulas).
constexpr double kBound = 0x1p-19;

AdamHyper make_hyper(AdamMode mode, float wd, float eps) {
  AdamHyper h;
  h.lr = 1e-2f;  // updates ~10% of |p| (p ~ N(0, 0.1)): the update's own error is visible
  h.beta1 = 0.9f;
  h.beta2 = 0.999f;
  h.eps = eps;
  h.weight_decay = wd;
  h.mode = mode;
  return h;
}

struct Violation {
  double worst = 0.0;  // max over elements and results of |ours - ref| / (kBound * mag)
  std::size_t index = 0;
  std::string what;
};

// Checks one step: `before` holds the state before it (p, grads, m, v), `after` the kernel's
// results. The reference uses `ref_hyper` (the true one, or a deliberately wrong one).
Violation compare_step(const AdamHyper& ref_hyper, std::int64_t t, float grad_scale,
                       ShardBuffers& before, ShardBuffers& after) {
  Violation worst;
  auto check = [&](double ours, double ref, double mag, std::size_t i, const char* name) {
    const double ratio = std::fabs(ours - ref) / (kBound * mag + 1e-300);
    if (!(ratio <= worst.worst)) {  // also catches NaN
      worst.worst = std::isnan(ratio) ? 1e300 : ratio;
      worst.index = i;
      char buf[200];
      std::snprintf(buf, sizeof buf, "%s[%zu]: ours %.9g, float64 %.9g, magnitude %.3g", name, i,
                    ours, ref, mag);
      worst.what = buf;
    }
  };
  const test::ReferenceStep reference(ref_hyper, t, grad_scale);
  for (std::size_t i = 0; i < before.numel; ++i) {
    const test::RefElement r =
        reference(before.p()[i], before.grad(i), before.m()[i], before.v()[i]);
    check(after.p()[i], r.p, r.mag_p, i, "params");
    check(after.m()[i], r.m, r.mag_m, i, "exp_avg");
    check(after.v()[i], r.v, r.mag_v, i, "exp_avg_sq");
  }
  return worst;
}

// params_out must be exactly the conversion of the fp32 result.
void expect_exact_out(ShardBuffers& b) {
  if (!b.has_out) return;
  for (std::size_t i = 0; i < b.numel; ++i) {
    const std::uint16_t want =
        b.out_dtype == DType::bf16 ? fp32_to_bf16(b.p()[i]) : fp32_to_fp16(b.p()[i]);
    if (b.o()[i] != want) {
      ADD_FAILURE() << "params_out[" << i << "] = " << b.o()[i] << ", want " << want
                    << " (param " << b.p()[i] << ")";
      return;
    }
  }
}

double g_worst_seen = 0.0;  // the largest ratio over the whole matrix, printed at the end

// Runs `steps` steps (numbered first_step, first_step + 1, ...) checking each against the
// reference; new grads every step.
void run_and_check(SimdLevel simd, int threads, const AdamHyper& h, std::size_t n,
                   std::size_t offset, DType grad, float grad_scale, bool with_out, DType out,
                   std::int64_t first_step, int steps, std::uint32_t seed) {
  ShardBuffers b(n, offset, grad, with_out, out);
  // fp16 grads: sigma 1e-2 leaves them normal (>= 6e-5) almost everywhere, with a few
  // subnormals; grad_scale != 1 scales them back as an unscale would.
  b.fill(seed, 0.1f, 1e-2f / grad_scale);
  for (int s = 0; s < steps; ++s) {
    const std::int64_t t = first_step + s;
    if (s > 0) b.new_grads(seed + 1000u * static_cast<std::uint32_t>(s), 1e-2f / grad_scale);
    ShardBuffers before = b;
    adam_step(simd, threads, h, t, b.shard(), grad_scale);
    const Violation v = compare_step(h, t, grad_scale, before, b);
    g_worst_seen = std::max(g_worst_seen, v.worst);
    ASSERT_LE(v.worst, 1.0) << "step " << t << ": " << v.what;
    expect_exact_out(b);
    ASSERT_TRUE(b.guards_intact()) << "an element outside the shard was written";
  }
}

std::string describe(SimdLevel simd, AdamMode mode, float wd, DType grad, float scale,
                     bool with_out, DType out, std::size_t n, std::size_t offset) {
  return std::string(simd_name(simd)) + (mode == AdamMode::adam ? " adam" : " adamw") +
         " wd=" + std::to_string(wd) + " grad=" + std::string(dtype_name(grad)) +
         " scale=" + std::to_string(scale) +
         " out=" + (with_out ? std::string(dtype_name(out)) : std::string("none")) +
         " n=" + std::to_string(n) + " offset=" + std::to_string(offset);
}

constexpr DType kGradDTypes[] = {DType::f32, DType::bf16, DType::f16};

TEST(AdamStep, MatchesFloat64ReferenceSmallSizes) {
  const std::size_t sizes[] = {0, 1, 15, 16, 17, 31, 33, 100};
  for (SimdLevel simd : test::levels_to_test()) {
    for (AdamMode mode : {AdamMode::adam, AdamMode::adamw}) {
      for (float wd : {0.0f, 0.1f}) {
        for (DType grad : kGradDTypes) {
          for (float scale : {1.0f, 1.0f / 1024.0f}) {
            for (int out_case = 0; out_case < 3; ++out_case) {
              const bool with_out = out_case > 0;
              const DType out = out_case == 2 ? DType::f16 : DType::bf16;
              for (std::size_t n : sizes) {
                for (std::size_t offset = 0; offset < 4; ++offset) {
                  SCOPED_TRACE(describe(simd, mode, wd, grad, scale, with_out, out, n, offset));
                  const AdamHyper h = make_hyper(mode, wd, offset % 2 ? 1e-8f : 1e-4f);
                  run_and_check(simd, 1, h, n, offset, grad, scale, with_out, out, 1, 3,
                                static_cast<std::uint32_t>(n * 7 + offset));
                  if (HasFatalFailure()) return;
                }
              }
            }
          }
        }
      }
    }
  }
  std::printf("largest |ours - float64| / (kBound * magnitude) seen: %.3f (kBound = 2^-19)\n",
              g_worst_seen);
}

TEST(AdamStep, MatchesFloat64ReferenceLargeOddShard) {
  struct Case {
    AdamMode mode;
    float wd;
    DType grad;
    float scale;
    bool with_out;
    DType out;
  };
  const Case cases[] = {
      {AdamMode::adamw, 0.1f, DType::f32, 1.0f, true, DType::bf16},
      {AdamMode::adam, 0.1f, DType::bf16, 0.25f, true, DType::f16},
      {AdamMode::adamw, 0.0f, DType::f16, 1.0f / 512.0f, false, DType::bf16},
  };
  // Each variant runs one case (in turn) at 1000003 elements and the others at 100003: every
  // case and every variant meets the large odd size, in a quarter of the time.
  const auto levels = test::levels_to_test();
  for (std::size_t l = 0; l < levels.size(); ++l) {
    for (std::size_t k = 0; k < std::size(cases); ++k) {
      const Case& c = cases[k];
      const std::size_t n = k == l % std::size(cases) ? 1000003 : 100003;
      SCOPED_TRACE(describe(levels[l], c.mode, c.wd, c.grad, c.scale, c.with_out, c.out, n, 1));
      // threads = 0: the affinity mask's CPUs; steps 1-2, then a late step (bias correction
      // nearly 1) on a smaller shard.
      run_and_check(levels[l], 0, make_hyper(c.mode, c.wd, 1e-8f), n, 1, c.grad, c.scale,
                    c.with_out, c.out, 1, 2, 99);
      if (HasFatalFailure()) return;
      run_and_check(levels[l], 0, make_hyper(c.mode, c.wd, 1e-8f), 4099, 3, c.grad, c.scale,
                    c.with_out, c.out, 1000, 1, 7);
      if (HasFatalFailure()) return;
    }
  }
}

TEST(AdamStep, WithoutBiasCorrection) {
  for (SimdLevel simd : test::levels_to_test()) {
    AdamHyper h = make_hyper(AdamMode::adamw, 0.1f, 1e-4f);
    h.bias_correction = false;
    SCOPED_TRACE(simd_name(simd));
    run_and_check(simd, 1, h, 1001, 2, DType::f32, 1.0f, true, DType::bf16, 1, 3, 5);
  }
}

// The bound is tight enough to tell the right formula from plausible wrong ones: the same
// kernel results, checked against a reference with a wrong setting, violate it by far.
TEST(AdamStep, BoundCatchesWrongFormulas) {
  const std::size_t n = 4096 + 13;
  for (SimdLevel simd : test::levels_to_test()) {
    SCOPED_TRACE(simd_name(simd));
    for (AdamMode mode : {AdamMode::adam, AdamMode::adamw}) {
      const AdamHyper h = make_hyper(mode, 0.1f, 1e-4f);
      ShardBuffers b(n, 1, DType::f32, false, DType::bf16);
      b.fill(3, 0.1f, 1e-2f);
      for (std::int64_t t = 1; t <= 3; ++t) {
        b.new_grads(static_cast<std::uint32_t>(10 + t), 1e-2f);
        ShardBuffers before = b;
        adam_step(simd, 1, h, t, b.shard(), 1.0f);
        EXPECT_LE(compare_step(h, t, 1.0f, before, b).worst, 1.0);

        AdamHyper no_bias = h;  // bias correction dropped
        no_bias.bias_correction = false;
        EXPECT_GT(compare_step(no_bias, t, 1.0f, before, b).worst, 100.0);
        AdamHyper other_mode = h;  // L2 in place of decoupled decay, or the reverse
        other_mode.mode = mode == AdamMode::adam ? AdamMode::adamw : AdamMode::adam;
        EXPECT_GT(compare_step(other_mode, t, 1.0f, before, b).worst, 100.0);
        AdamHyper no_wd = h;  // weight decay ignored
        no_wd.weight_decay = 0.0f;
        EXPECT_GT(compare_step(no_wd, t, 1.0f, before, b).worst, 100.0);
        AdamHyper eps_10x = h;  // eps misplaced or scaled (1e-4 against sqrt(v_hat) ~ 1e-2)
        eps_10x.eps = 1e-3f;
        EXPECT_GT(compare_step(eps_10x, t, 1.0f, before, b).worst, 100.0);
      }
    }
  }
}

// Every variant gives the same bits as the scalar one (the bound between variants is 0 ulp:
// the same IEEE operations in the same order, no FMA), on every output.
TEST(AdamStep, VariantsGiveIdenticalBits) {
  const std::size_t n = 1000 + 7;
  for (DType grad : kGradDTypes) {
    for (DType out : {DType::bf16, DType::f16}) {
      for (AdamMode mode : {AdamMode::adam, AdamMode::adamw}) {
        const AdamHyper h = make_hyper(mode, 0.1f, 1e-8f);
        ShardBuffers ref(n, 1, grad, true, out);
        ref.fill(11, 0.1f, 1e-2f);
        std::vector<ShardBuffers> runs;
        for (SimdLevel simd : test::levels_to_test()) {
          (void)simd;
          runs.push_back(ref);
        }
        for (std::int64_t t = 1; t <= 3; ++t) {
          const auto levels = test::levels_to_test();
          for (std::size_t k = 0; k < levels.size(); ++k) {
            runs[k].new_grads(static_cast<std::uint32_t>(20 + t), 1e-2f);
            adam_step(levels[k], 1, h, t, runs[k].shard(), 0.5f);
          }
          for (std::size_t k = 1; k < levels.size(); ++k) {
            SCOPED_TRACE(std::string(simd_name(levels[k])) + " vs scalar, grad " +
                         std::string(dtype_name(grad)));
            ASSERT_TRUE(std::memcmp(runs[k].params.data(), runs[0].params.data(),
                                    runs[0].params.size() * 4) == 0);
            ASSERT_TRUE(std::memcmp(runs[k].exp_avg.data(), runs[0].exp_avg.data(),
                                    runs[0].exp_avg.size() * 4) == 0);
            ASSERT_TRUE(std::memcmp(runs[k].exp_avg_sq.data(), runs[0].exp_avg_sq.data(),
                                    runs[0].exp_avg_sq.size() * 4) == 0);
            ASSERT_EQ(runs[k].out, runs[0].out);
          }
        }
      }
    }
  }
}

// params_out for every class of fp32 value: with lr = 0 and zero grads the step leaves each
// param as it is (p - 0 * 0 / eps), so params_out is the conversion of arbitrary bit
// patterns. Covers every bf16 value (2^16 upper halves) with low halves at, around and away
// from the rounding tie: denormals (which vcvtneps2bf16 alone would flush), NaNs, Infs and
// the round-up to Inf. Shuffled so that vectors mix denormal and normal lanes.
TEST(AdamStep, HalfOutputIsExactRoundingOfEveryClass) {
  std::vector<std::uint32_t> patterns;
  const std::uint32_t lows[] = {0x0000, 0x0001, 0x7FFF, 0x8000, 0x8001, 0xFFFF, 0x1234, 0xC000};
  for (std::uint32_t hi = 0; hi < 0x10000; ++hi)
    for (std::uint32_t lo : lows) patterns.push_back(hi << 16 | lo);
  std::shuffle(patterns.begin(), patterns.end(), std::mt19937(1));
  AdamHyper h;
  h.lr = 0.0f;
  h.weight_decay = 0.0f;
  for (SimdLevel simd : test::levels_to_test()) {
    for (DType out : {DType::bf16, DType::f16}) {
      SCOPED_TRACE(std::string(simd_name(simd)) + " -> " + std::string(dtype_name(out)));
      ShardBuffers b(patterns.size(), 1, DType::f32, true, out);
      for (std::size_t i = 0; i < patterns.size(); ++i) {
        b.p()[i] = test::from_bits(patterns[i]);
        b.m()[i] = 0.0f;
        b.v()[i] = 0.0f;
        b.set_grad(i, 0.0f);
      }
      adam_step(simd, 1, h, 1, b.shard(), 1.0f);
      for (std::size_t i = 0; i < patterns.size(); ++i) {
        // Not NaN: the param is unchanged, bit for bit (a signalling NaN is quieted).
        const std::uint32_t was = patterns[i];
        if ((was & 0x7FFFFFFFu) <= 0x7F800000u) {
          ASSERT_EQ(test::bits(b.p()[i]), was);
        }
      }
      expect_exact_out(b);
    }
  }
}

// Parts of a shard may be stepped separately, in any split, with the same bits.
TEST(AdamStep, SplitShardGivesSameBits) {
  const std::size_t n = 300007;
  for (SimdLevel simd : test::levels_to_test()) {
    SCOPED_TRACE(simd_name(simd));
    const AdamHyper h = make_hyper(AdamMode::adamw, 0.1f, 1e-8f);
    ShardBuffers whole(n, 0, DType::bf16, true, DType::bf16);
    whole.fill(5, 0.1f, 1e-2f);
    ShardBuffers halves = whole;
    for (std::int64_t t = 1; t <= 2; ++t) {
      adam_step(simd, 1, h, t, whole.shard(), 1.0f);
      const std::size_t cut = n / 2 + 3;  // an odd cut: misaligned second half
      AdamShard a = halves.shard();
      a.numel = cut;
      AdamShard b = halves.shard();
      b.params += cut;
      b.exp_avg += cut;
      b.exp_avg_sq += cut;
      b.grads = static_cast<const unsigned char*>(b.grads) + 2 * cut;
      b.params_out = static_cast<std::uint16_t*>(b.params_out) + cut;
      b.numel = n - cut;
      adam_step(simd, 1, h, t, b, 1.0f);  // second half first: order does not matter
      adam_step(simd, 1, h, t, a, 1.0f);
      ASSERT_TRUE(std::memcmp(whole.params.data(), halves.params.data(), whole.params.size() * 4) == 0);
      ASSERT_TRUE(std::memcmp(whole.exp_avg_sq.data(), halves.exp_avg_sq.data(),
                              whole.exp_avg_sq.size() * 4) == 0);
      ASSERT_EQ(whole.out, halves.out);
    }
  }
}

// Out of place (the *_in pointers): the outputs get the bits of the update in place, the inputs
// are left as they were, for every variant, thread count, grad and output type (odd sizes and
// misaligned starts reach every tail).
TEST(AdamStep, OutOfPlaceGivesTheBitsOfInPlaceAndKeepsTheInputs) {
  for (SimdLevel simd : test::levels_to_test()) {
    for (DType grad : {DType::f32, DType::bf16}) {
      for (std::size_t n : {std::size_t{37}, std::size_t{300007}}) {
        SCOPED_TRACE(std::string(simd_name(simd)) + " " + std::string(dtype_name(grad)) + " " + std::to_string(n));
        const AdamHyper h = make_hyper(AdamMode::adamw, 0.1f, 1e-8f);
        ShardBuffers in_place(n, 3, grad, true, DType::bf16);
        in_place.fill(11, 0.1f, 1e-2f);
        const ShardBuffers before = in_place;
        ShardBuffers inputs = in_place;       // read by the out-of-place step
        ShardBuffers outputs(n, 1, grad, true, DType::bf16);  // written by it (other offset)
        adam_step(simd, 2, h, 3, in_place.shard(), 0.5f);
        AdamShard s = outputs.shard();
        s.grads = inputs.g();
        s.params_in = inputs.p();
        s.exp_avg_in = inputs.m();
        s.exp_avg_sq_in = inputs.v();
        adam_step(simd, 2, h, 3, s, 0.5f);
        ASSERT_EQ(std::memcmp(outputs.p(), in_place.p(), n * 4), 0);
        ASSERT_EQ(std::memcmp(outputs.m(), in_place.m(), n * 4), 0);
        ASSERT_EQ(std::memcmp(outputs.v(), in_place.v(), n * 4), 0);
        ASSERT_EQ(std::memcmp(outputs.o(), in_place.o(), n * 2), 0);
        ASSERT_EQ(std::memcmp(inputs.params.data(), before.params.data(), before.params.size() * 4), 0);
        ASSERT_EQ(std::memcmp(inputs.exp_avg.data(), before.exp_avg.data(), before.exp_avg.size() * 4), 0);
        ASSERT_EQ(std::memcmp(inputs.exp_avg_sq.data(), before.exp_avg_sq.data(), before.exp_avg_sq.size() * 4), 0);
      }
    }
  }
}

TEST(AdamStep, ZeroNumelAcceptsNullPointers) {
  AdamShard empty;
  for (SimdLevel simd : test::levels_to_test()) adam_step(simd, 1, AdamHyper{}, 1, empty, 1.0f);
  first_touch(nullptr, 0, 1);
}

TEST(AdamStep, FirstTouchZeroFills) {
  for (std::size_t n : {std::size_t{0}, std::size_t{5}, std::size_t{200003}}) {
    std::vector<float> buf(n + 2, 7.0f);
    first_touch(buf.data() + 1, n, 3);
    EXPECT_EQ(buf.front(), 7.0f);
    EXPECT_EQ(buf.back(), 7.0f);
    for (std::size_t i = 1; i <= n; ++i) ASSERT_EQ(test::bits(buf[i]), 0u) << i;
  }
}

// On zeroed memory, first_touch_zeroed leaves it zeroed and writes nothing outside [p, p + n),
// whatever the thread count and alignment.
TEST(AdamStep, FirstTouchZeroedStaysInside) {
  for (int threads : {1, 3}) {
    for (std::size_t n : {std::size_t{0}, std::size_t{5}, std::size_t{70001}, std::size_t{200003}}) {
      std::vector<float> buf(n + 2, 0.0f);
      buf.front() = 7.0f;
      buf.back() = 7.0f;
      first_touch_zeroed(buf.data() + 1, n, threads);
      EXPECT_EQ(buf.front(), 7.0f);
      EXPECT_EQ(buf.back(), 7.0f);
      for (std::size_t i = 1; i <= n; ++i) ASSERT_EQ(test::bits(buf[i]), 0u) << i;
    }
  }
}

// copy_partitioned gives the same bits as one serial convert, for every thread count.
TEST(AdamStep, CopyPartitionedMatchesSerialConvert) {
  const std::size_t n = 200003;
  std::vector<float> src(n);
  for (std::size_t i = 0; i < n; ++i) src[i] = static_cast<float>(std::sin(0.001 * static_cast<double>(i))) * 3.0f;
  for (DType dtype : {DType::f32, DType::bf16, DType::f16}) {
    std::vector<std::byte> serial(n * dtype_size(dtype));
    convert(src.data(), DType::f32, serial.data(), dtype, n);
    for (int threads : {1, 2, 5}) {
      std::vector<std::byte> out(n * dtype_size(dtype) + 1, std::byte{9});
      copy_partitioned(src.data(), out.data(), dtype, n, threads);
      EXPECT_EQ(out.back(), std::byte{9});
      ASSERT_EQ(std::memcmp(out.data(), serial.data(), serial.size()), 0) << dtype_name(dtype) << " " << threads;
    }
  }
}

// The per-step scalars, in double and rounded once (what the CPU variants and the CUDA AdamW
// both receive).
TEST(AdamScalars, AreTorchsStepScalarsRoundedOnce) {
  AdamHyper h;
  h.lr = 3e-3f;
  h.weight_decay = 0.05f;
  h.mode = AdamMode::adamw;
  const AdamScalars s = adam_scalars(h, 3, 0.5f);
  const double lr = h.lr, b1 = h.beta1, b2 = h.beta2;
  EXPECT_EQ(s.grad_scale, 0.5f);
  EXPECT_EQ(s.beta1, h.beta1);
  EXPECT_EQ(s.one_minus_beta1, static_cast<float>(1.0 - b1));
  EXPECT_EQ(s.one_minus_beta2, static_cast<float>(1.0 - b2));
  EXPECT_EQ(s.step_size, static_cast<float>(lr / (1.0 - std::pow(b1, 3.0))));
  EXPECT_EQ(s.bc2_sqrt, static_cast<float>(std::sqrt(1.0 - std::pow(b2, 3.0))));
  EXPECT_TRUE(s.has_decay);
  EXPECT_FALSE(s.has_l2);
  EXPECT_EQ(s.decay, static_cast<float>(1.0 - lr * static_cast<double>(h.weight_decay)));

  h.mode = AdamMode::adam;
  h.bias_correction = false;
  const AdamScalars l2 = adam_scalars(h, 7, 1.0f);
  EXPECT_EQ(l2.step_size, h.lr);
  EXPECT_EQ(l2.bc2_sqrt, 1.0f);
  EXPECT_TRUE(l2.has_l2);
  EXPECT_EQ(l2.l2, h.weight_decay);
  EXPECT_FALSE(l2.has_decay);
  EXPECT_EQ(l2.decay, 1.0f);
}

// The Error's message (what) mentions `field`.
template <typename Fn>
void expect_error_naming(Fn&& fn, const std::string& field) {
  try {
    fn();
    ADD_FAILURE() << "no strata::Error for " << field;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(field), std::string::npos)
        << "message does not name " << field << ": " << e.what();
  }
}

TEST(AdamStep, InvalidHyperParametersThrowNamingTheField) {
  auto with = [](auto change) {
    AdamHyper h;
    change(h);
    return h;
  };
  const AdamHyper bad_lr = with([](AdamHyper& h) { h.lr = -1e-3f; });
  expect_error_naming([&] { check_hyper(bad_lr); }, "lr");
  expect_error_naming([&] { check_hyper(with([](AdamHyper& h) { h.lr = NAN; })); }, "lr");
  expect_error_naming([&] { check_hyper(with([](AdamHyper& h) { h.beta1 = 1.0f; })); }, "beta1");
  expect_error_naming([&] { check_hyper(with([](AdamHyper& h) { h.beta1 = -0.1f; })); }, "beta1");
  expect_error_naming([&] { check_hyper(with([](AdamHyper& h) { h.beta2 = 1.5f; })); }, "beta2");
  expect_error_naming([&] { check_hyper(with([](AdamHyper& h) { h.eps = 0.0f; })); }, "eps");
  expect_error_naming([&] { check_hyper(with([](AdamHyper& h) { h.weight_decay = -1.0f; })); },
                      "weight_decay");
  // adam_scalars and adam_step check them too; adam_scalars also the step.
  expect_error_naming([&] { adam_scalars(bad_lr, 1, 1.0f); }, "lr");
  expect_error_naming([&] { adam_scalars(AdamHyper{}, 0, 1.0f); }, "1-based");
  ShardBuffers b(4, 0, DType::f32, false, DType::bf16);
  b.fill(1, 1.0f, 1.0f);
  expect_error_naming(
      [&] {
        adam_step(SimdLevel::scalar, 1, with([](AdamHyper& h) { h.eps = -1.0f; }), 1, b.shard(), 1.0f);
      },
      "eps");
}

using AdamStepDeathTest = ::testing::Test;

TEST_F(AdamStepDeathTest, ProgrammingMistakesAssert) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  ShardBuffers b(8, 0, DType::f32, true, DType::bf16);
  b.fill(1, 1.0f, 1.0f);
  auto step = [](const AdamShard& shard) {
    adam_step(SimdLevel::scalar, 1, AdamHyper{}, 1, shard, 1.0f);
  };
  AdamShard null_params = b.shard();
  null_params.params = nullptr;
  EXPECT_DEATH(step(null_params), "null pointer");
  AdamShard f32_out = b.shard();
  f32_out.out_dtype = DType::f32;
  EXPECT_DEATH(step(f32_out), "out_dtype");
  AdamShard bad_grad = b.shard();
  bad_grad.grad_dtype = static_cast<DType>(9);
  EXPECT_DEATH(step(bad_grad), "grad_dtype");
  EXPECT_DEATH(adam_step(SimdLevel::scalar, 1, AdamHyper{}, 0, b.shard(), 1.0f), "1-based");
  EXPECT_DEATH(adam_step(SimdLevel::scalar, -1, AdamHyper{}, 1, b.shard(), 1.0f), "thread count");
}

}  // namespace
}  // namespace strata::cpu_adam
