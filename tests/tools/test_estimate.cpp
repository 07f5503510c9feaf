// strata estimate's rows (runtime/estimate/estimate.h, over train::estimate_model): the ZeRO paper's model-state formula for
// stages 1-3 at world 1, 2, 8 and 64 over several models, computed here from the layouts with
// strata's padding written out (each module padded to world shards of a multiple of 64
// elements); strata's own model states from the same per-module rule (an fp32 gradient
// accumulator shard where the paper keeps a compute-dtype gradient; modules at or under
// stage3_param_persistence_threshold kept whole on the device at stage 3; pinned buffers whole
// pages, NVMe extents whole blocks); the collective bytes; a 70 B model at world 512.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "models/registry.h"
#include "runtime/estimate/zero_theory.h"
#include "runtime/estimate/step_model.h"
#include "runtime/tiers/plan.h"
#include "runtime/estimate/estimate.h"
#include "runtime/estimate/recommend.h"
#include "train/run_plan.h"

namespace strata::runtime::estimate {
namespace {

using runtime::config::OffloadDevice;
using runtime::tiers::Tier;

constexpr int kWorlds[] = {1, 2, 8, 64};

std::uint64_t padded(std::uint64_t numel, int shards) {
  const std::uint64_t per = (numel + shards - 1) / shards;
  const std::uint64_t shard = std::max<std::uint64_t>(64, (per + 63) / 64 * 64);
  return shard * static_cast<std::uint64_t>(shards);
}
std::uint64_t round_up(std::uint64_t v, std::uint64_t a) { return (v + a - 1) / a * a; }

EstimateInputs inputs(const models::ModelSpec& model, int world) {
  EstimateInputs in;
  in.model = train::estimate_model(model);
  in.config = runtime::config::parse_config(R"({"bf16": {"enabled": true}})", "test").config;
  in.world = world;
  in.batch = 1;
  in.seq_len = 128;
  in.nvme_path = "/nonexistent-but-unused";
  in.budgets.device = std::uint64_t{1} << 50;
  in.budgets.pinned = std::uint64_t{1} << 50;
  in.budgets.nvme = std::uint64_t{1} << 50;
  return in;
}

// The paper's bytes for Ψ parameters of d bytes on N ranks, written out per stage.
std::uint64_t paper(int stage, std::uint64_t psi, int n, std::uint64_t d) {
  switch (stage) {
    case 1: return 2 * d * psi + 12 * psi / n;
    case 2: return d * psi + (d + 12) * psi / n;
    case 3: return (2 * d + 12) * psi / n;
  }
  return (2 * d + 12) * psi;
}

const char* const kModels[] = {"tiny", "gpt2", "qwen2.5-0.5b", "llama-3-8b"};

TEST(ZeroTheory, IsThePapersFormulaAtEveryStage) {
  // Ψ = 7.5 B at N = 64, the paper's Figure 1 example: 120 GB replicated, 31.4 GB at stage 1,
  // 16.6 GB at stage 2, 1.9 GB at stage 3 (in bytes, with Ψ padded to 64 ranks).
  const std::uint64_t psi = 7'500'000'000 / 64 * 64;
  EXPECT_EQ(runtime::estimate::zero_model_states_bytes(0, 64, psi, 2), 16 * psi);
  EXPECT_EQ(runtime::estimate::zero_model_states_bytes(1, 64, psi, 2), 4 * psi + 12 * psi / 64);
  EXPECT_EQ(runtime::estimate::zero_model_states_bytes(2, 64, psi, 2), 2 * psi + 14 * psi / 64);
  EXPECT_EQ(runtime::estimate::zero_model_states_bytes(3, 64, psi, 2), 16 * psi / 64);
  EXPECT_NEAR(static_cast<double>(runtime::estimate::zero_model_states_bytes(1, 64, psi, 2)) / 1e9, 31.4, 0.1);
  EXPECT_NEAR(static_cast<double>(runtime::estimate::zero_model_states_bytes(2, 64, psi, 2)) / 1e9, 16.6, 0.1);
  EXPECT_NEAR(static_cast<double>(runtime::estimate::zero_model_states_bytes(3, 64, psi, 2)) / 1e9, 1.9, 0.1);
  EXPECT_EQ(runtime::estimate::zero_collective_bytes(2, 1, psi, 2), 0.0);
  EXPECT_DOUBLE_EQ(runtime::estimate::zero_collective_bytes(2, 4, 1000, 2), 2.0 * 1000 * 2 * 3 / 4);
  EXPECT_DOUBLE_EQ(runtime::estimate::zero_collective_bytes(3, 4, 1000, 2), 3.0 * 1000 * 2 * 3 / 4);
  EXPECT_THROW(runtime::estimate::zero_model_states_bytes(4, 1, psi, 2), Error);
}

TEST(Estimate, FormulaColumnIsThePapersOverThePaddedParameters) {
  for (const char* name : kModels) {
    const models::ModelSpecPtr model = models::model_preset(name);
    const std::vector<std::size_t> numels = model->layout().module_numels();
    for (int world : kWorlds) {
      const EstimateInputs in = inputs(*model, world);
      for (int stage = 1; stage <= 3; ++stage) {
        const Estimate e = make_estimate(in, {{stage, OffloadDevice::kNone, OffloadDevice::kNone}});
        ASSERT_EQ(e.rows.size(), 1u);
        const EstimateRow& r = e.rows[0];
        ASSERT_TRUE(r.error.empty()) << r.error;
        std::uint64_t psi = 0;
        for (std::size_t n : numels) psi += padded(n, world);
        EXPECT_EQ(r.psi_padded, psi) << name << " world " << world;
        EXPECT_EQ(r.formula_bytes, paper(stage, psi, world, 2)) << name << " stage " << stage << " world " << world;
        const double coll = world == 1 ? 0.0 : (stage == 3 ? 3.0 : 2.0) * 2.0 * psi * (world - 1) / world;
        EXPECT_DOUBLE_EQ(r.collective_bytes, coll) << name << " stage " << stage << " world " << world;
      }
    }
  }
}

// strata's model states with the optimizer on the device: per module, the parameters (whole
// when resident, else this rank's shard) in bf16, and 16 bytes a shard element (fp32 master,
// exp_avg, exp_avg_sq, gradient accumulator).
TEST(Estimate, ModelStatesAreStratasLayoutExactly) {
  for (const char* name : kModels) {
    const models::ModelSpecPtr model = models::model_preset(name);
    const std::vector<std::size_t> numels = model->layout().module_numels();
    const std::uint64_t persistence = 100'000;  // stage3_param_persistence_threshold's default
    for (int world : kWorlds) {
      const EstimateInputs in = inputs(*model, world);
      for (int stage = 1; stage <= 3; ++stage) {
        const EstimateRow r = make_estimate(in, {{stage, OffloadDevice::kNone, OffloadDevice::kNone}}).rows[0];
        std::uint64_t want = 0;
        for (std::size_t n : numels) {
          const std::uint64_t full = padded(n, world);
          const std::uint64_t shard = full / world;
          const bool resident = stage < 3 || n <= persistence || world == 1;
          want += 2 * (resident ? full : shard) + 16 * shard;
        }
        EXPECT_EQ(r.model_states_bytes, want) << name << " stage " << stage << " world " << world;
        // Stage 1 and 2 hold the same in strata (gradients are accumulated per shard).
        if (stage == 2) {
          const EstimateRow s1 = make_estimate(in, {{1, OffloadDevice::kNone, OffloadDevice::kNone}}).rows[0];
          EXPECT_EQ(s1.model_states_bytes, r.model_states_bytes);
        }
      }
    }
  }
}

// data_types.grad_accum_dtype "bf16": 2 bytes an accumulator element, 14 a shard element with
// the optimizer states, so stage 2 holds exactly the ZeRO paper's (2 + 14 / N) bytes a parameter
// (its 16 at one rank), and every stage 2 bytes a shard element less than with fp32 accumulators.
TEST(Estimate, Bf16AccumulatorsGiveThePapersAccounting) {
  for (const char* name : kModels) {
    const models::ModelSpecPtr model = models::model_preset(name);
    for (int world : kWorlds) {
      EstimateInputs in = inputs(*model, world);
      const EstimateInputs fp32 = in;
      in.config = runtime::config::parse_config(
                      R"({"bf16": {"enabled": true}, "data_types": {"grad_accum_dtype": "bf16"}})", "test")
                      .config;
      for (int stage = 1; stage <= 3; ++stage) {
        const Placement p{stage, OffloadDevice::kNone, OffloadDevice::kNone};
        const EstimateRow r = make_estimate(in, {p}).rows[0];
        const EstimateRow f = make_estimate(fp32, {p}).rows[0];
        ASSERT_TRUE(r.error.empty()) << r.error;
        EXPECT_EQ(f.model_states_bytes - r.model_states_bytes, 2 * r.psi_padded / world)
            << name << " stage " << stage << " world " << world;
        if (stage == 2) {
          EXPECT_EQ(r.model_states_bytes, r.formula_bytes) << name << " world " << world;
        }
      }
    }
  }
}

// Offloaded: pinned buffers are whole 4 KiB pages (each of master, exp_avg, exp_avg_sq and the
// accumulator, and the parameter shard); NVMe extents whole aio.block_size blocks (1 MiB).
TEST(Estimate, OffloadedModelStatesRoundToPagesAndBlocks) {
  const models::ModelSpecPtr model = models::model_preset("gpt2");
  const std::vector<std::size_t> numels = model->layout().module_numels();
  for (int world : kWorlds) {
    EstimateInputs in = inputs(*model, world);
    in.config.zero_optimization.stage3_param_persistence_threshold = std::uint64_t{0};
    const Estimate e = make_estimate(in, {{3, OffloadDevice::kCpu, OffloadDevice::kCpu},
                                          {3, OffloadDevice::kNvme, OffloadDevice::kNvme}});
    std::uint64_t cpu = 0, nvme_disk = 0, nvme_pinned = 0;
    for (std::size_t n : numels) {
      const std::uint64_t shard = padded(n, world) / world;
      cpu += round_up(2 * shard, 4096) + 4 * round_up(4 * shard, 4096);
      nvme_disk += round_up(2 * shard, 1 << 20) + 3 * round_up(4 * shard, 1 << 20);
      nvme_pinned += round_up(4 * shard, 4096);  // the accumulator stays in pinned memory
    }
    EXPECT_EQ(e.rows[0].model_states_bytes, cpu) << "world " << world;
    EXPECT_EQ(e.rows[0].bytes.tier_bytes(Tier::nvme), 0u);
    EXPECT_EQ(e.rows[1].bytes.tier_bytes(Tier::nvme), nvme_disk) << "world " << world;
    EXPECT_EQ(e.rows[1].model_states_bytes, nvme_disk + nvme_pinned) << "world " << world;
    EXPECT_EQ(e.rows[0].bytes.at(Tier::device, runtime::tiers::StateClass::parameters), 0u);
  }
}

TEST(Estimate, EveryPlacementOfA70BModelAtWorld512) {
  const models::ModelSpecPtr model = models::model_from_json(R"({
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 8192,
    "intermediate_size": 28672, "num_attention_heads": 64, "num_key_value_heads": 8,
    "num_hidden_layers": 80, "vocab_size": 128256, "max_position_embeddings": 8192,
    "rms_norm_eps": 1e-5, "rope_theta": 500000.0, "tie_word_embeddings": false})");
  EXPECT_NEAR(static_cast<double>(model->num_params()), 70.55e9, 0.01e9);
  EstimateInputs in = inputs(*model, 512);
  in.budgets.device = std::uint64_t{80} << 30;
  const Estimate e = make_estimate(in, all_placements());
  ASSERT_EQ(e.rows.size(), all_placements().size());
  for (const EstimateRow& r : e.rows) {
    ASSERT_TRUE(r.error.empty()) << r.placement.label() << ": " << r.error;
    EXPECT_EQ(r.formula_bytes,
              runtime::estimate::zero_model_states_bytes(r.placement.stage, 512, r.psi_padded, 2));
  }
  // Replicated, the states are 70 B x 18 bytes: no 80 GB device holds them; sharded 512 ways at
  // stage 3 they do.
  EXPECT_FALSE(e.rows[0].fits);
  EXPECT_NE(e.rows[0].advice.find("device short by"), std::string::npos) << e.rows[0].advice;
  const auto stage3 = std::find_if(e.rows.begin(), e.rows.end(), [](const EstimateRow& r) {
    return r.placement.stage == 3 && r.placement.param == OffloadDevice::kNone &&
           r.placement.optimizer == OffloadDevice::kNone;
  });
  ASSERT_NE(stage3, e.rows.end());
  EXPECT_TRUE(stage3->fits) << stage3->advice;
}

TEST(Estimate, ACellTheConfigRefusesSaysWhy) {
  const models::ModelSpecPtr model = models::model_preset("gpt2");
  EstimateInputs in = inputs(*model, 1);
  in.config.zero_optimization.offload_param.buffer_size = 1000;  // smaller than a block's shard
  const Estimate e = make_estimate(in, {{3, OffloadDevice::kNvme, OffloadDevice::kNvme}});
  ASSERT_EQ(e.rows.size(), 1u);
  EXPECT_NE(e.rows[0].error.find("buffer_size"), std::string::npos) << e.rows[0].error;
}

}  // namespace
}  // namespace strata::runtime::estimate

namespace strata::runtime::estimate {
namespace {

runtime::estimate::MachineProfile flat_profile() {
  runtime::estimate::MachineProfile p;
  p.backend = "cuda";
  p.cpu_adam_elements_per_s = 1e9;
  p.h2d_bytes_per_s = 2e10;
  p.d2h_bytes_per_s = 2e10;
  p.disk_read_bytes_per_s = 2e9;
  p.disk_write_bytes_per_s = 1e9;
  p.step_flops_per_s = 1e14;
  p.step_points = {{256, 2, 4, 128, 1e13}, {1024, 2, 4, 128, 3e13}};
  return p;
}

TEST(StepModel, ComputeRateInterpolatesInLogWidthAndClampsAtTheEnds) {
  const runtime::estimate::MachineProfile p = flat_profile();
  EXPECT_DOUBLE_EQ(runtime::estimate::compute_rate(p, 128), 1e13);
  EXPECT_DOUBLE_EQ(runtime::estimate::compute_rate(p, 256), 1e13);
  EXPECT_DOUBLE_EQ(runtime::estimate::compute_rate(p, 512), 2e13);  // halfway in log2: 8 of 8..10
  EXPECT_DOUBLE_EQ(runtime::estimate::compute_rate(p, 4096), 3e13);
}

TEST(StepModel, WorkFollowsThePlanAndTheTimeTheOverlap) {
  const models::ModelSpecPtr model = models::model_preset("gpt2");
  EstimateInputs in = inputs(*model, 1);
  in.profile = flat_profile();
  in.config.zero_optimization.stage3_param_persistence_threshold = std::uint64_t{0};
  const Estimate e = make_estimate(in, {{3, OffloadDevice::kNvme, OffloadDevice::kNvme},
                                        {2, OffloadDevice::kNone, OffloadDevice::kCpu},
                                        {0, OffloadDevice::kNone, OffloadDevice::kNone}});
  std::uint64_t shards = 0;
  for (std::size_t n : model->layout().module_numels()) shards += padded(n, 1);
  auto ms = [&](const EstimateRow& r, const char* name) {
    for (const auto& [k, v] : r.step->resource_ms) if (k == name) return v;
    ADD_FAILURE() << "no " << name;
    return 0.0;
  };
  // NVMe, both: every shard read twice (forward, backward) and written once (2 bytes each), the
  // optimizer states (12 bytes) read and written once; the CPU Adam over every element.
  const EstimateRow& nvme = e.rows[0];
  ASSERT_TRUE(nvme.step);
  const double disk_ms = (2.0 * 2 * shards + 12.0 * shards) / 2e9 * 1e3 + (2.0 * shards + 12.0 * shards) / 1e9 * 1e3;
  EXPECT_NEAR(ms(nvme, "disk"), disk_ms, disk_ms * 1e-9);
  EXPECT_NEAR(ms(nvme, "cpu adam"), shards / 1e9 * 1e3, 1e-9);
  // On a GPU the step is its busiest resource.
  double busiest = 0;
  for (const auto& [k, v] : nvme.step->resource_ms) busiest = std::max(busiest, v);
  EXPECT_DOUBLE_EQ(nvme.step->step_ms, busiest);
  // Optimizer on the CPU, parameters resident: the gradients down and the new parameters up once.
  EXPECT_NEAR(ms(e.rows[1], "d2h"), 2.0 * shards / 2e10 * 1e3, 1e-9);
  EXPECT_NEAR(ms(e.rows[1], "h2d"), 2.0 * shards / 2e10 * 1e3, 1e-9);
  EXPECT_EQ(ms(e.rows[1], "disk"), 0.0);
  // Resident: compute only, at the rate of gpt2's width (768: between the points).
  const double flops = runtime::estimate::model_step_flops(static_cast<double>(model->num_params()), 12, 768, 128,
                                                           128.0, false);
  EXPECT_NEAR(e.rows[2].step->step_ms, flops / runtime::estimate::compute_rate(in.profile.value(), 768) * 1e3, 1e-9);
  EXPECT_EQ(e.rows[2].step->bottleneck, "compute");
  // On the host backend the CPU's shares add up.
  in.backend = runtime::device::Backend::host;
  const EstimateRow host = make_estimate(in, {{2, OffloadDevice::kNone, OffloadDevice::kCpu}}).rows[0];
  EXPECT_NEAR(host.step->step_ms, ms(host, "compute") + ms(host, "h2d") + ms(host, "d2h") + ms(host, "cpu adam"), 1e-9);
}

TEST(Recommend, NeverPicksAPlanThatDoesNotFit) {
  const models::ModelSpecPtr model = models::model_preset("gpt2");
  int picked = 0;
  for (std::uint64_t device_mib : {64, 200, 600, 2048, 16384}) {
    for (std::uint64_t pinned_mib : {256, 4096}) {
      for (bool profiled : {false, true}) {
        EstimateInputs in = inputs(*model, 1);
        in.budgets.device = device_mib << 20;
        in.budgets.pinned = pinned_mib << 20;
        in.budgets.nvme = std::uint64_t{64} << 30;
        in.seq_len = 512;
        if (profiled) in.profile = flat_profile();
        try {
          const Recommendation r = recommend(in, /*nvme_allowed=*/true);
          ASSERT_FALSE(r.fitting.empty());
          for (const Candidate& c : r.fitting) {
            EXPECT_TRUE(c.row.fits) << c.label();
            EXPECT_LE(c.row.need[0], in.budgets.device) << c.label();
            EXPECT_LE(c.row.need[1], in.budgets.pinned) << c.label();
          }
          EXPECT_EQ(r.pick.label(), r.fitting.front().label());
          if (profiled) {
            for (const Candidate& c : r.fitting) EXPECT_GE(r.pick.score, c.score) << c.label();
          }
          // The picked config is the pick's.
          EXPECT_EQ(r.config.zero_optimization.stage, r.pick.placement.stage);
          EXPECT_EQ(r.config.zero_optimization.offload_optimizer.device, r.pick.placement.optimizer);
          EXPECT_EQ(r.config.train_micro_batch_size_per_gpu->value(), static_cast<std::uint64_t>(r.pick.micro_batch));

          ++picked;
        } catch (const Error& err) {
          // Only when nothing fits (checked here at micro-batch 1, the smallest); it says what is short.
          EXPECT_NE(std::string(err.what()).find("short by"), std::string::npos) << err.what();
          in.config.train_micro_batch_size_per_gpu = std::uint64_t{1};
          for (const EstimateRow& row : make_estimate(in, all_placements()).rows) {
            EXPECT_FALSE(row.fits) << row.placement.label() << " fits, yet nothing was recommended";
          }
        }
      }
    }
  }
  EXPECT_GE(picked, 8);  // most budgets have a plan
}

TEST(Recommend, WithoutAProfileTheLeastOffloadedPlanWins) {
  const models::ModelSpecPtr model = models::model_preset("tiny");
  EstimateInputs in = inputs(*model, 1);
  const Recommendation big = recommend(in, true);
  EXPECT_EQ(big.pick.placement.optimizer, OffloadDevice::kNone);
  EXPECT_EQ(big.pick.micro_batch, 64);
  // A device too small for the optimizer states moves them to pinned memory; with too little of
  // that too, nothing fits without NVMe.
  in.budgets.device = 6 << 20;
  in.budgets.pinned = 64 << 20;
  const Recommendation cpu = recommend(in, false);
  EXPECT_EQ(cpu.pick.placement.optimizer, OffloadDevice::kCpu) << cpu.pick.label();
  EXPECT_TRUE(cpu.pick.row.fits);
  in.budgets.pinned = 1 << 20;
  EXPECT_THROW(recommend(in, false), Error);
}

TEST(Recommend, KeepsTheGlobalBatchOfTheConfig) {
  const models::ModelSpecPtr model = models::model_preset("tiny");
  EstimateInputs in = inputs(*model, 2);
  in.config.train_batch_size = std::uint64_t{48};
  const Recommendation r = recommend(in, false);
  for (const Candidate& c : r.fitting) EXPECT_EQ(c.micro_batch * c.gas * 2, 48) << c.label();
  EXPECT_EQ(r.pick.micro_batch, 8);  // the largest power of two dividing 24 per rank
  EXPECT_NE(r.batch_why.find("global batch 48 kept (given as train_batch_size 48)"), std::string::npos)
      << r.batch_why;
}

// The device bytes the most offloaded placement without NVMe needs at `micro` (no accumulation).
std::uint64_t device_need(EstimateInputs in, int micro) {
  in.config.train_micro_batch_size_per_gpu = static_cast<std::uint64_t>(micro);
  in.config.gradient_accumulation_steps = std::uint64_t{1};
  const Placement p{3, OffloadDevice::kCpu, OffloadDevice::kCpu};
  return make_estimate(in, {p}).rows.front().need[0];
}

TEST(Recommend, TradesAGivenMicroBatchForAccumulationNeverTheGlobalBatch) {
  const models::ModelSpecPtr model = models::model_preset("tiny");
  EstimateInputs in = inputs(*model, 1);
  in.config.train_micro_batch_size_per_gpu = std::uint64_t{16};
  in.config.gradient_accumulation_steps = std::uint64_t{2};  // global batch 32 per rank
  // A device that holds micro-batch 4 at the most offloaded placement, not 16 at any.
  in.budgets.device = (device_need(in, 4) + device_need(in, 16)) / 2;
  ASSERT_LT(device_need(in, 4), in.budgets.device);
  const Recommendation r = recommend(in, false);
  for (const Candidate& c : r.fitting) {
    EXPECT_EQ(c.micro_batch * c.gas, 32) << c.label();
    EXPECT_LE(c.micro_batch, 16) << c.label();
  }
  EXPECT_LT(r.pick.micro_batch, 16);
  EXPECT_NE(r.batch_why.find("global batch 32 kept (given as micro-batch 16 x 2 accumulation x 1 rank(s))"),
            std::string::npos)
      << r.batch_why;
  EXPECT_NE(r.batch_why.find("instead of the given micro-batch 16 x 2 accumulation: micro-batch 16 fits no "
                             "placement"),
            std::string::npos)
      << r.batch_why;
  // With room for it, the given micro-batch is kept, never a larger one.
  in.budgets.device = std::uint64_t{1} << 50;
  const Recommendation roomy = recommend(in, false);
  EXPECT_EQ(roomy.pick.micro_batch, 16);
  EXPECT_EQ(roomy.pick.gas, 2);
}

TEST(Recommend, KeepsAGivenAccumulationWhenTheMicroBatchIsOpen) {
  const models::ModelSpecPtr model = models::model_preset("tiny");
  EstimateInputs in = inputs(*model, 2);
  in.config.gradient_accumulation_steps = std::uint64_t{4};
  const Recommendation r = recommend(in, false);
  for (const Candidate& c : r.fitting) EXPECT_EQ(c.gas, 4) << c.label();
  EXPECT_NE(r.batch_why.find("no global batch given"), std::string::npos) << r.batch_why;
}

}  // namespace
}  // namespace strata::runtime::estimate

namespace strata::runtime::estimate {
namespace {

TEST(Estimate, AGlobalBatchAloneSetsTheMicroBatchAsTheRunWould) {
  const models::ModelSpecPtr model = models::model_preset("tiny");
  EstimateInputs in = inputs(*model, 2);
  in.config.train_batch_size = std::uint64_t{16};
  const Estimate e = make_estimate(in, {{1, OffloadDevice::kNone, OffloadDevice::kNone}});
  EXPECT_EQ(e.batch, 8);  // 16 over 2 ranks, no accumulation
  EXPECT_EQ(e.gas, 1);
  // Without any batch size, the inputs' micro-batch.
  in.config.train_batch_size.reset();
  in.batch = 3;
  EXPECT_EQ(make_estimate(in, {{1, OffloadDevice::kNone, OffloadDevice::kNone}}).batch, 3);
}


// The node's pinned memory and NVMe are shared by min(world, ranks a node) ranks: the flag, else
// the GPUs found, else 8.
TEST(Estimate, RanksPerNodeIsTheFlagElseTheGpusElseEightAtMostTheWorld) {
  std::string why;
  EXPECT_EQ(ranks_per_node(8, 8, 0, &why), 8);
  EXPECT_EQ(why, "--ranks-per-node");
  EXPECT_EQ(ranks_per_node(16, 8, 0), 8);  // two nodes
  EXPECT_EQ(ranks_per_node(2, 0, 0, &why), 2);
  EXPECT_NE(why.find("at most 8"), std::string::npos) << why;
  EXPECT_EQ(ranks_per_node(16, 0, 0, &why), kDefaultRanksPerNode);
  EXPECT_EQ(why, "the default");
  EXPECT_EQ(ranks_per_node(16, 0, 4, &why), 4);
  EXPECT_EQ(why, "the GPUs found");
  EXPECT_EQ(ranks_per_node(16, 3, 4), 3);
  EXPECT_EQ(ranks_per_node(1, 0, 0), 1);
  Budgets b;
  b.ranks_per_node = 8;
  b.set_node_nvme(800);
  EXPECT_EQ(b.nvme, 100u);
  EXPECT_EQ(b.node_nvme, 800u);
}

// What an offloaded stage-3 plan needs on the device is far less than what the run takes from a
// large budget (its transient buffers grow into the free memory): the row keeps both, and the
// minimum by kind adds up to the need less the scratch kept free.
TEST(Estimate, TheDeviceNeedIsTheMinimumAndTheUseWhatTheBudgetLetsItGrowTo) {
  const models::ModelSpecPtr model = models::model_preset("gpt2");
  EstimateInputs in = inputs(*model, 1);
  in.budgets.device = std::uint64_t{24} << 30;
  const EstimateRow r = make_estimate(in, {{3, OffloadDevice::kCpu, OffloadDevice::kCpu}}).rows[0];
  ASSERT_TRUE(r.error.empty()) << r.error;
  EXPECT_LT(r.need[0], r.bytes.tier_bytes(Tier::device));
  EXPECT_EQ(r.device_use_bytes(), r.bytes.tier_bytes(Tier::device));
  EXPECT_EQ(r.minimum.tier_bytes(Tier::device) + runtime::tiers::kDeviceScratchBytes, r.need[0]);
  EXPECT_EQ(r.minimum.tier_bytes(Tier::pinned), r.bytes.tier_bytes(Tier::pinned));
  EXPECT_EQ(r.minimum.tier_bytes(Tier::pinned), r.need[1]);
  // At a budget below the need the run allocates nothing more: the use is the need.
  in.budgets.device = r.need[0] / 2;
  const EstimateRow tight = make_estimate(in, {{3, OffloadDevice::kCpu, OffloadDevice::kCpu}}).rows[0];
  EXPECT_FALSE(tight.fits);
  EXPECT_EQ(tight.device_use_bytes(), tight.need[0]);
}

}  // namespace
}  // namespace strata::runtime::estimate
