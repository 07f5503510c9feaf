// strata estimate of a mixture of experts (tools/estimate/estimate_report.h over
// train::estimate_model): the routing and the expert modules come from the model's layout; the
// header names the active parameters; the "mixture of experts" section and --json's moe appear
// for mixtral-tiny, qwen3-moe-tiny, qwen3-30b-a3b and mixtral-8x7b and never for a dense model,
// with bytes equal to the layout's modules in the compute dtype; the step model fetches the
// experts at the micro-batch's expected share and counts the active parameters' flops; a cuda
// machine profile adds --moe-cpu-experts auto's row limit.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "models/llama/llama_config.h"
#include "models/registry.h"
#include "runtime/estimate/cpu_experts.h"
#include "runtime/estimate/estimate.h"
#include "runtime/estimate/moe_traffic.h"
#include "tools/estimate/estimate_report.h"
#include "train/run_plan.h"

namespace strata::tools {
namespace {

using runtime::estimate::Estimate;
using runtime::estimate::EstimateInputs;

EstimateInputs inputs(const models::ModelSpec& model) {
  EstimateInputs in;
  in.model = train::estimate_model(model);
  in.config = runtime::config::parse_config(R"({"bf16": {"enabled": true}})", "test").config;
  return in;
}

// The estimate's shape without planning a cell (the section needs only these).
Estimate shape(int batch, int seq_len, int gas = 1) {
  Estimate e;
  e.batch = batch;
  e.seq_len = seq_len;
  e.gas = gas;
  e.dtype = DType::bf16;
  return e;
}

TEST(EstimateMoe, DecodeBatchesAreTheFixedOnesAndTheRunsOnce) {
  EXPECT_EQ(moe_decode_batches(1), (std::vector<int>{1, 4, 16, 64}));
  EXPECT_EQ(moe_decode_batches(8), (std::vector<int>{1, 4, 8, 16, 64}));
  EXPECT_EQ(moe_decode_batches(64), (std::vector<int>{1, 4, 16, 64}));
  EXPECT_EQ(moe_decode_batches(100), (std::vector<int>{1, 4, 16, 64, 100}));
}

TEST(EstimateMoe, RoutingAndBytesAreTheLayoutsModules) {
  for (const char* name : {"mixtral-tiny", "qwen3-moe-tiny", "qwen3-30b-a3b", "mixtral-8x7b"}) {
    SCOPED_TRACE(name);
    const models::LlamaConfig c = models::LlamaConfig::preset(name);
    const models::ModelSpecPtr spec = models::model_preset(name);
    const models::ModelLayout layout = spec->layout();
    const EstimateInputs in = inputs(*spec);
    int sparse = 0;
    for (int l = 0; l < c.num_hidden_layers; ++l) sparse += c.sparse_layer(l) ? 1 : 0;
    EXPECT_EQ(in.model.routing.experts, c.num_experts);
    EXPECT_EQ(in.model.routing.per_token, c.num_experts_per_tok);
    EXPECT_EQ(in.model.routing.sparse_layers, sparse);
    EXPECT_EQ(in.model.routing.active_params, c.active_params());
    EXPECT_EQ(in.model.routed_modules, layout.routed_modules());

    std::uint64_t experts = 0, others = 0;
    for (const models::ModuleLayout& m : layout.modules) (m.kind == models::ModuleKind::expert ? experts : others) += 2 * m.numel;
    int first_sparse = 0;
    while (!c.sparse_layer(first_sparse)) ++first_sparse;
    const std::uint64_t one = 2 * layout.modules[static_cast<std::size_t>(layout.expert_module(first_sparse, 0))].numel;

    const Estimate e = shape(2, 128);
    const nlohmann::json j = moe_json(in, e);
    ASSERT_TRUE(j.is_object());
    EXPECT_EQ(j["experts"], c.num_experts);
    EXPECT_EQ(j["experts_per_token"], c.num_experts_per_tok);
    EXPECT_EQ(j["sparse_layers"], sparse);
    EXPECT_EQ(j["num_params"], c.num_params());
    EXPECT_EQ(j["active_params"], c.active_params());
    EXPECT_EQ(j["expert_bytes"], experts);
    EXPECT_EQ(j["non_expert_bytes"], others);
    EXPECT_EQ(j["one_expert_bytes"], one);
    EXPECT_EQ(experts, one * static_cast<std::uint64_t>(sparse) * static_cast<std::uint64_t>(c.num_experts));

    // Batch 1 moves k of each layer's E experts; every batch moves at most every expert.
    const nlohmann::json& d = j["decode"];
    ASSERT_EQ(d.size(), 5u);  // 1, 2, 4, 16, 64
    EXPECT_EQ(d[0]["batch"], 1);
    EXPECT_NEAR(d[0]["experts_per_layer"].get<double>(), c.num_experts_per_tok, 1e-9);
    const double k_share = static_cast<double>(c.num_experts_per_tok) / c.num_experts;
    EXPECT_NEAR(d[0]["step_bytes"].get<double>(), static_cast<double>(others) + k_share * static_cast<double>(experts),
                1.0);
    double last = 0;
    for (const nlohmann::json& row : d) {
      const double b = row["batch"].get<double>();
      EXPECT_DOUBLE_EQ(row["every_expert_step_bytes"].get<double>(), static_cast<double>(others + experts));
      EXPECT_LE(row["step_bytes"].get<double>(), row["every_expert_step_bytes"].get<double>());
      EXPECT_NEAR(row["token_bytes"].get<double>() * b, row["step_bytes"].get<double>(), 1e-3);
      EXPECT_GT(row["experts_per_layer"].get<double>(), last);
      last = row["experts_per_layer"].get<double>();
    }
    // Training: forward and backward each fetch the expected experts of 2 x 128 tokens.
    const double fetched = runtime::estimate::expected_experts(c.num_experts, c.num_experts_per_tok, 256);
    EXPECT_DOUBLE_EQ(j["train"]["experts_per_layer"].get<double>(), fetched);
    EXPECT_DOUBLE_EQ(j["train"]["every_expert_bytes_per_step"].get<double>(), 2.0 * static_cast<double>(experts));
    EXPECT_NEAR(j["train"]["expert_bytes_per_step"].get<double>(),
                2.0 * static_cast<double>(experts) * fetched / c.num_experts, 1.0);

    const std::string text = moe_section(in, e);
    EXPECT_NE(text.find("mixture of experts: " + std::to_string(c.num_experts) + " experts in each of " +
                        std::to_string(sparse) + " sparse layers, " + std::to_string(c.num_experts_per_tok) +
                        " per token"),
              std::string::npos)
        << text;
    EXPECT_NE(text.find("training, micro-batch 2 x 128"), std::string::npos) << text;
    EXPECT_NE(parameters_clause(in.model).find(std::to_string(c.active_params()) + " active"), std::string::npos);
  }
}

// With a cuda profile that has the host matmul rates, the section and --json give
// --moe-cpu-experts auto's row limit for one expert of the model (runtime/estimate/cpu_experts.h);
// without a profile, or with a host one (auto is every row there), none.
TEST(EstimateMoe, ACudaProfileGivesTheHostExpertRows) {
  const models::ModelSpecPtr spec = models::model_preset("qwen3-30b-a3b");
  EstimateInputs in = inputs(*spec);
  const Estimate e = shape(1, 64);
  EXPECT_TRUE(moe_json(in, e)["host_expert_rows"].is_null());
  runtime::estimate::MachineProfile p;
  p.backend = "cuda";
  p.h2d_bytes_per_s = 50e9;
  p.d2h_bytes_per_s = 50e9;
  p.cpu_matmul_bytes_per_s = 100e9;
  p.cpu_matmul_flops_per_s = 0.6e12;
  in.profile = p;
  // One expert: 3 x 2048 x 768 bf16 elements, rows of 2048 (test_cpu_experts: 11 rows).
  const std::uint64_t numel = 3ull * 2048 * 768;
  const std::int64_t rows = runtime::estimate::cpu_expert_max_rows(p, numel, 2048, 2);
  EXPECT_EQ(rows, 11);
  EXPECT_EQ(moe_json(in, e)["host_expert_rows"], rows);
  const std::string text = moe_section(in, e);
  EXPECT_NE(text.find("at most 11 row(s) runs on the host"), std::string::npos) << text;
  in.profile->backend = "host";
  EXPECT_TRUE(moe_json(in, e)["host_expert_rows"].is_null());
}

TEST(EstimateMoe, ADenseModelHasNoSection) {
  for (const char* name : {"llama-tiny", "qwen3-8b", "tiny"}) {
    SCOPED_TRACE(name);
    const models::ModelSpecPtr spec = models::model_preset(name);
    const EstimateInputs in = inputs(*spec);
    EXPECT_FALSE(in.model.routing.moe());
    EXPECT_TRUE(in.model.routed_modules.empty());
    EXPECT_EQ(in.model.routing.active_params, spec->num_params());
    EXPECT_EQ(moe_section(in, shape(1, 64)), "");
    EXPECT_TRUE(moe_json(in, shape(1, 64)).is_null());
    EXPECT_EQ(parameters_clause(in.model), std::to_string(spec->num_params()) + " parameters");
  }
}

TEST(EstimateMoe, EveryRowOfAMixtureCarriesItsMoeAndADenseRowNone) {
  for (const char* name : {"mixtral-tiny", "llama-tiny"}) {
    SCOPED_TRACE(name);
    const models::ModelSpecPtr spec = models::model_preset(name);
    EstimateInputs in = inputs(*spec);
    in.seq_len = 64;
    in.nvme_path = "/nonexistent-but-unused";
    in.budgets.device = in.budgets.pinned = in.budgets.nvme = std::uint64_t{1} << 40;
    const Estimate e = runtime::estimate::make_estimate(in, {{3, runtime::config::OffloadDevice::kCpu,
                                                              runtime::config::OffloadDevice::kCpu}});
    ASSERT_EQ(e.rows.size(), 1u);
    ASSERT_TRUE(e.rows[0].error.empty()) << e.rows[0].error;
    const nlohmann::json j = estimate_row_json(in, e, e.rows[0]);
    EXPECT_EQ(j.contains("moe"), in.model.routing.moe());
    if (j.contains("moe")) {
      EXPECT_EQ(j["moe"], moe_json(in, e));
    }
  }
}

// The step model of a mixture: flops of the active parameters over the layers (not the expert
// modules), and each expert fetched at the micro-batch's expected share (one token: k of E).
TEST(EstimateMoe, TheStepFetchesTheExpectedExpertsAndCountsTheActiveFlops) {
  const models::ModelSpecPtr spec = models::model_preset("mixtral-tiny");
  const models::LlamaConfig c = models::LlamaConfig::preset("mixtral-tiny");
  EstimateInputs in = inputs(*spec);
  in.batch = 1;
  in.seq_len = 1;
  in.nvme_path = "/nonexistent-but-unused";
  in.budgets.device = in.budgets.pinned = in.budgets.nvme = std::uint64_t{1} << 40;
  in.config.zero_optimization.stage3_param_persistence_threshold = std::uint64_t{0};
  in.profile = runtime::estimate::MachineProfile{};
  in.profile->backend = "cuda";
  in.profile->h2d_bytes_per_s = in.profile->d2h_bytes_per_s = 1e10;
  in.profile->cpu_adam_elements_per_s = 1e9;
  in.profile->step_flops_per_s = 1e12;
  in.backend = runtime::device::Backend::cuda;
  const Estimate e = runtime::estimate::make_estimate(
      in, {{3, runtime::config::OffloadDevice::kCpu, runtime::config::OffloadDevice::kCpu}});
  ASSERT_TRUE(e.rows[0].step);
  auto ms = [&](const char* name) {
    for (const auto& [k, v] : e.rows[0].step->resource_ms) {
      if (k == name) return v;
    }
    ADD_FAILURE() << "no " << name;
    return 0.0;
  };
  // One rank: a shard is the module padded to 64 elements, 2 bytes each; forward and backward.
  const models::ModelLayout layout = spec->layout();
  double h2d = 0;
  for (const models::ModuleLayout& m : layout.modules) {
    const double bytes = 2.0 * static_cast<double>((m.numel + 63) / 64 * 64);
    h2d += 2.0 * bytes * (m.kind == models::ModuleKind::expert ? 2.0 / 8.0 : 1.0);
  }
  EXPECT_NEAR(ms("h2d"), h2d / 1e10 * 1e3, 1e-9);
  const double flops = runtime::estimate::model_step_flops(static_cast<double>(c.active_params()),
                                                           c.num_hidden_layers, c.hidden_size, 1, 1.0, false);
  EXPECT_NEAR(ms("compute"), flops / 1e12 * 1e3, 1e-12);
}

}  // namespace
}  // namespace strata::tools
