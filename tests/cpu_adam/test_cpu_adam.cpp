// CpuAdam: groups and step counters, update = adam_step with the group's step, the state
// round trip through JSON, strata::Error naming the field for bad hyper-parameters and bad
// state, and STRATA_ASSERT for programming mistakes (malformed shards, update before
// begin_step).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "tests/cpu_adam/adam_test_util.h"

namespace strata::cpu_adam {
namespace {

using test::ShardBuffers;

CpuAdamOptions options(int threads, std::optional<SimdLevel> simd = std::nullopt) {
  CpuAdamOptions o;
  o.threads = threads;
  o.simd = simd;
  return o;
}

AdamHyper hyper(float lr, float wd, AdamMode mode) {
  AdamHyper h;
  h.lr = lr;
  h.weight_decay = wd;
  h.mode = mode;
  return h;
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

TEST(CpuAdam, UpdateIsAdamStepWithTheGroupsStep) {
  CpuAdam opt(options(2, SimdLevel::scalar));
  EXPECT_EQ(opt.threads(), 2);
  EXPECT_EQ(opt.simd(), SimdLevel::scalar);
  const int g0 = opt.add_group(hyper(1e-3f, 0.0f, AdamMode::adam));
  const int g1 = opt.add_group(hyper(2e-3f, 0.01f, AdamMode::adamw));
  EXPECT_EQ(g0, 0);
  EXPECT_EQ(g1, 1);
  EXPECT_EQ(opt.group_count(), 2);

  ShardBuffers a(1000, 1, DType::bf16, true, DType::bf16);
  a.fill(1, 0.1f, 1e-2f);
  ShardBuffers b = a;
  for (int t = 1; t <= 3; ++t) {
    opt.begin_step(g1);
    opt.update(g1, a.shard(), 0.5f);
    adam_step(SimdLevel::scalar, 1, opt.group(g1).hyper, t, b.shard(), 0.5f);
  }
  EXPECT_EQ(opt.group(g1).step, 3);
  EXPECT_EQ(opt.group(g0).step, 0);
  EXPECT_EQ(std::memcmp(a.params.data(), b.params.data(), a.params.size() * 4), 0);
  EXPECT_EQ(a.out, b.out);
}

TEST(CpuAdam, DefaultsToTheAffinityMaskAndActiveSimd) {
  CpuAdam opt;
  EXPECT_EQ(opt.threads(), std::max(1, cpu_info().logical_cores_in_affinity_mask));
  EXPECT_EQ(opt.simd(), active_simd());
  expect_error_naming([] { CpuAdam bad(options(-1)); }, "thread");
}

TEST(CpuAdam, InvalidHyperParametersThrowNamingTheField) {
  CpuAdam opt(options(1));
  auto with = [](auto change) {
    AdamHyper h;
    change(h);
    return h;
  };
  expect_error_naming([&] { opt.add_group(with([](AdamHyper& h) { h.lr = -1e-3f; })); }, "lr");
  expect_error_naming([&] { opt.add_group(with([](AdamHyper& h) { h.lr = NAN; })); }, "lr");
  expect_error_naming([&] { opt.add_group(with([](AdamHyper& h) { h.beta1 = 1.0f; })); }, "beta1");
  expect_error_naming([&] { opt.add_group(with([](AdamHyper& h) { h.beta1 = -0.1f; })); }, "beta1");
  expect_error_naming([&] { opt.add_group(with([](AdamHyper& h) { h.beta2 = 1.5f; })); }, "beta2");
  expect_error_naming([&] { opt.add_group(with([](AdamHyper& h) { h.eps = 0.0f; })); }, "eps");
  expect_error_naming([&] { opt.add_group(with([](AdamHyper& h) { h.weight_decay = -1.0f; })); },
                      "weight_decay");
  EXPECT_EQ(opt.group_count(), 0);
  // adam_step checks them too.
  ShardBuffers b(4, 0, DType::f32, false, DType::bf16);
  b.fill(1, 1.0f, 1.0f);
  expect_error_naming(
      [&] { adam_step(SimdLevel::scalar, 1, with([](AdamHyper& h) { h.eps = -1.0f; }), 1, b.shard(), 1.0f); },
      "eps");
}

TEST(CpuAdam, StateRoundTrip) {
  CpuAdam opt(options(1));
  opt.add_group(hyper(3e-4f, 0.1f, AdamMode::adamw));
  AdamHyper h2 = hyper(1.7e-3f, 0.0f, AdamMode::adam);
  h2.beta1 = 0.85f;
  h2.beta2 = 0.9999f;
  h2.eps = 1e-6f;
  h2.bias_correction = false;
  opt.add_group(h2);
  for (int i = 0; i < 5; ++i) opt.begin_step(0);
  opt.begin_step(1);
  const std::string saved = opt.save_state();

  CpuAdam restored(options(1));
  restored.load_state(saved);
  ASSERT_EQ(restored.group_count(), 2);
  EXPECT_EQ(restored.group(0).step, 5);
  EXPECT_EQ(restored.group(1).step, 1);
  for (int g = 0; g < 2; ++g) {
    const AdamHyper& a = opt.group(g).hyper;
    const AdamHyper& b = restored.group(g).hyper;
    EXPECT_EQ(test::bits(a.lr), test::bits(b.lr));
    EXPECT_EQ(test::bits(a.beta1), test::bits(b.beta1));
    EXPECT_EQ(test::bits(a.beta2), test::bits(b.beta2));
    EXPECT_EQ(test::bits(a.eps), test::bits(b.eps));
    EXPECT_EQ(test::bits(a.weight_decay), test::bits(b.weight_decay));
    EXPECT_EQ(a.mode, b.mode);
    EXPECT_EQ(a.bias_correction, b.bias_correction);
  }
  EXPECT_EQ(restored.save_state(), saved);

  // Loading into an optimizer with the same number of groups replaces them.
  CpuAdam same(options(1));
  same.add_group(AdamHyper{});
  same.add_group(AdamHyper{});
  same.load_state(saved);
  EXPECT_EQ(same.save_state(), saved);
}

TEST(CpuAdam, BadStateThrowsNamingTheField) {
  CpuAdam opt(options(1));
  opt.add_group(hyper(1e-3f, 0.01f, AdamMode::adamw));
  opt.begin_step(0);
  const nlohmann::json good = nlohmann::json::parse(opt.save_state());
  auto load_modified = [&](auto change) {
    nlohmann::json j = good;
    change(j);
    CpuAdam target(options(1));
    target.load_state(j.dump());
  };
  auto group = [](nlohmann::json& j) -> nlohmann::json& { return j["groups"][0]; };

  expect_error_naming([&] { opt.load_state("{not json"); }, "JSON");
  expect_error_naming([&] { opt.load_state("[1, 2]"); }, "top level");
  expect_error_naming([&] { load_modified([](nlohmann::json& j) { j["format"] = "torch"; }); }, "format");
  expect_error_naming([&] { load_modified([](nlohmann::json& j) { j.erase("format"); }); }, "format");
  expect_error_naming([&] { load_modified([](nlohmann::json& j) { j["version"] = 2; }); }, "version");
  expect_error_naming([&] { load_modified([](nlohmann::json& j) { j["extra"] = 1; }); }, "extra");
  expect_error_naming([&] { load_modified([](nlohmann::json& j) { j["groups"] = 3; }); }, "groups");
  expect_error_naming([&] { load_modified([](nlohmann::json& j) { j["groups"][0] = 3; }); },
                      "groups[0]");
  expect_error_naming([&] { load_modified([&](nlohmann::json& j) { group(j).erase("lr"); }); },
                      "groups[0].lr");
  expect_error_naming([&] { load_modified([&](nlohmann::json& j) { group(j)["lr"] = "big"; }); },
                      "groups[0].lr");
  expect_error_naming([&] { load_modified([&](nlohmann::json& j) { group(j)["beta2"] = 1.5; }); },
                      "beta2");
  expect_error_naming([&] { load_modified([&](nlohmann::json& j) { group(j)["eps"] = 0.1; }); },
                      "groups[0].eps");  // 0.1 is not an fp32 value: edited by hand
  expect_error_naming([&] { load_modified([&](nlohmann::json& j) { group(j)["eps"] = -1.0; }); },
                      "eps");
  expect_error_naming([&] { load_modified([&](nlohmann::json& j) { group(j)["mode"] = "sgd"; }); },
                      "groups[0].mode");
  expect_error_naming(
      [&] { load_modified([&](nlohmann::json& j) { group(j)["bias_correction"] = 1; }); },
      "bias_correction");
  expect_error_naming([&] { load_modified([&](nlohmann::json& j) { group(j)["step"] = -1; }); },
                      "groups[0].step");
  expect_error_naming([&] { load_modified([&](nlohmann::json& j) { group(j)["step"] = 1.5; }); },
                      "groups[0].step");
  expect_error_naming([&] { load_modified([&](nlohmann::json& j) { group(j)["momentum"] = 0.9; }); },
                      "groups[0].momentum");

  // Group count mismatch with an optimizer that has groups; a failed load changes nothing.
  CpuAdam two(options(1));
  two.add_group(AdamHyper{});
  two.add_group(AdamHyper{});
  const std::string before = two.save_state();
  expect_error_naming([&] { two.load_state(good.dump()); }, "groups");
  EXPECT_EQ(two.save_state(), before);
}

using CpuAdamDeathTest = ::testing::Test;

TEST_F(CpuAdamDeathTest, ProgrammingMistakesAssert) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  CpuAdam opt(options(1, SimdLevel::scalar));
  const int g = opt.add_group(AdamHyper{});
  ShardBuffers b(8, 0, DType::f32, true, DType::bf16);
  b.fill(1, 1.0f, 1.0f);
  EXPECT_DEATH(opt.update(g, b.shard(), 1.0f), "before begin_step");
  opt.begin_step(g);
  EXPECT_DEATH(opt.update(7, b.shard(), 1.0f), "no such parameter group");
  AdamShard null_params = b.shard();
  null_params.params = nullptr;
  EXPECT_DEATH(opt.update(g, null_params, 1.0f), "null pointer");
  AdamShard f32_out = b.shard();
  f32_out.out_dtype = DType::f32;
  EXPECT_DEATH(opt.update(g, f32_out, 1.0f), "out_dtype");
  AdamShard bad_grad = b.shard();
  bad_grad.grad_dtype = static_cast<DType>(9);
  EXPECT_DEATH(opt.update(g, bad_grad, 1.0f), "grad_dtype");
  EXPECT_DEATH(adam_step(SimdLevel::scalar, 1, AdamHyper{}, 0, b.shard(), 1.0f), "1-based");
  EXPECT_DEATH(adam_step(SimdLevel::scalar, -1, AdamHyper{}, 1, b.shard(), 1.0f), "thread count");
}

}  // namespace
}  // namespace strata::cpu_adam
