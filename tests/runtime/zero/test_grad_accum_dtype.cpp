// data_types.grad_accum_dtype in the ZeRO engine, on the host backend with the fake model of
// engine_fixture.h:
//   - bf16 accumulators give bitwise what fp32 accumulators give when the model's gradients are
//     already bf16 values (one micro-batch: the accumulator then holds exactly the rounded
//     gradient), with clipping (the norm reads the accumulators) and without;
//   - with two micro-batches, where bf16 rounds each sum, every placement of the accumulator
//     (device, pinned beside pinned or NVMe states) gives the same bits, and not fp32's;
//   - fp16 accumulators (fp16 training only) likewise;
//   - the plan counts 2 bytes an accumulator element and names the dtype.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "core/units.h"
#include "runtime/config/config.h"
#include "runtime/tiers/plan.h"
#include "tests/runtime/zero/engine_fixture.h"

using namespace strata;
using namespace strata::runtime;
using namespace strata::runtime::engine_test;

namespace {

// make_config's config with gradient_accumulation_steps `gas` (one micro-batch of 1 each) and
// the accumulator dtype; fp16 training with an fp16 accumulator (validate_config requires it).
config::Config with_accumulators(config::Config c, config::GradAccumDtype dtype, std::uint64_t gas) {
  c.gradient_accumulation_steps = config::AutoOr<std::uint64_t>(gas);
  c.train_batch_size = config::AutoOr<std::uint64_t>(gas);
  c.data_types.grad_accum_dtype = dtype;
  if (dtype == config::GradAccumDtype::kFp16) c.fp16.enabled = true;
  config::ResolveInputs in;
  in.host_memory_bytes = 8 * kGiB;
  in.cpu_count = 2;
  return resolve_config(c, in);
}

struct Placement {
  int stage;
  config::OffloadDevice params, optimizer;
};
const Placement kPlacements[] = {
    {3, config::OffloadDevice::kNone, config::OffloadDevice::kNone},  // accumulators on the device
    {3, config::OffloadDevice::kCpu, config::OffloadDevice::kCpu},    // in pinned memory
    {3, config::OffloadDevice::kNvme, config::OffloadDevice::kNvme},  // pinned, states on NVMe
    {2, config::OffloadDevice::kNone, config::OffloadDevice::kCpu},
};

std::vector<std::vector<float>> train(const config::Config& config, int steps, bool bf16_grads = false) {
  EngineRun run(config);
  run.bf16_grads = bf16_grads;
  for (int s = 0; s < steps; ++s) run.step(0);
  return run.weights();
}

}  // namespace

TEST(GradAccumDtype, Bf16AccumulatorsAreFp32OnesFedBf16Gradients) {
  for (double clipping : {1.0, 0.0}) {
    for (const Placement& p : kPlacements) {
      SCOPED_TRACE("clipping " + std::to_string(clipping) + " stage " + std::to_string(p.stage) + " optimizer " +
                   std::string(config::to_string(p.optimizer)));
      TempDir dir;
      const config::Config base = make_config(p.stage, p.params, p.optimizer, dir.path(), clipping);
      const auto want = train(with_accumulators(base, config::GradAccumDtype::kFp32, 1), 3, /*bf16_grads=*/true);
      const auto got = train(with_accumulators(base, config::GradAccumDtype::kBf16, 1), 3);
      EXPECT_TRUE(same_bits(want, got));
      // Not a test of nothing: the same fp32 run without rounding differs.
      EXPECT_FALSE(same_bits(want, train(with_accumulators(base, config::GradAccumDtype::kFp32, 1), 3)));
    }
  }
}

TEST(GradAccumDtype, NarrowAccumulatorsGiveTheSameBitsOnEveryPlacement) {
  for (config::GradAccumDtype dtype : {config::GradAccumDtype::kBf16, config::GradAccumDtype::kFp16}) {
    std::vector<std::vector<float>> reference;
    for (const Placement& p : kPlacements) {
      SCOPED_TRACE(std::string(config::to_string(dtype)) + " stage " + std::to_string(p.stage) + " optimizer " +
                   std::string(config::to_string(p.optimizer)));
      TempDir dir;
      const config::Config base = make_config(p.stage, p.params, p.optimizer, dir.path());
      const auto w = train(with_accumulators(base, dtype, 2), 3);
      if (reference.empty()) {
        reference = w;
        // Two micro-batches summed in 2 bytes are not the fp32 sum.
        config::Config fp32 = with_accumulators(base, config::GradAccumDtype::kFp32, 2);
        if (dtype == config::GradAccumDtype::kFp16) fp32.fp16.enabled = true;
        EXPECT_FALSE(same_bits(w, train(fp32, 3)));
      } else {
        EXPECT_TRUE(same_bits(reference, w));
      }
    }
  }
}

TEST(GradAccumDtype, ThePlanCountsTwoBytesAnElement) {
  TempDir dir;
  const config::Config base = make_config(3, config::OffloadDevice::kNone, config::OffloadDevice::kNone, dir.path());
  auto accumulator_line = [](const tiers::ZeroPlan& plan) {
    for (const tiers::PlanLine& l : plan.lines) {
      if (l.kind == tiers::StateClass::gradients && l.what.find("gradient accumulators") != std::string::npos) return l;
    }
    ADD_FAILURE() << "no gradient accumulator line in the plan";
    return tiers::PlanLine{};
  };
  EngineRun fp32(with_accumulators(base, config::GradAccumDtype::kFp32, 1));
  EngineRun bf16(with_accumulators(base, config::GradAccumDtype::kBf16, 1));
  const tiers::PlanLine a = accumulator_line(fp32.engine->plan());
  const tiers::PlanLine b = accumulator_line(bf16.engine->plan());
  EXPECT_EQ(a.what, "fp32 gradient accumulators");
  EXPECT_EQ(b.what, "bf16 gradient accumulators");
  EXPECT_EQ(a.tier, tiers::Tier::device);
  EXPECT_EQ(b.bytes * 2, a.bytes);
  std::uint64_t shards = 0;
  for (int m = 0; m < kModules; ++m) shards += bf16.engine->shard_numel(m);
  EXPECT_EQ(b.bytes, shards * 2);
}

// The config: bf16 and fp32 with any training dtype; fp16 only with fp16 training.
TEST(GradAccumDtype, Fp16AccumulatorsNeedFp16Training) {
  config::Config c;
  c.train_micro_batch_size_per_gpu = std::uint64_t{1};
  c.strata.device = config::DeviceKind::kHost;
  c.data_types.grad_accum_dtype = config::GradAccumDtype::kFp16;
  c.bf16.enabled = true;
  try {
    config::validate_config(c);
    FAIL() << "an fp16 accumulator with bf16 training was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.where(), "data_types.grad_accum_dtype");
    EXPECT_NE(std::string(e.what()).find("fp16.enabled"), std::string::npos) << e.what();
  }
  c.bf16.enabled = false;
  c.fp16.enabled = true;
  EXPECT_NO_THROW(config::validate_config(c));
  c.fp16.enabled = false;
  c.data_types.grad_accum_dtype = config::GradAccumDtype::kBf16;
  EXPECT_NO_THROW(config::validate_config(c));
}
