// LrSchedule against DeepSpeed's WarmupLR, WarmupDecayLR and WarmupCosineLR.
//
// How the expected values were derived: DeepSpeed's classes (deepspeed/runtime/lr_schedules.py,
// current master) transcribed into plain Python with a stand-in optimizer holding
// param_groups = [{"lr": base_lr}], and driven as DeepSpeedEngine drives them: construct the
// scheduler, then per applied optimizer step read param_groups[0]["lr"] (the lr that step
// uses) and call scheduler.step(). The literals below are Python's repr() of those reads;
// each test also states the formula the number comes from, with W = max(2, warmup_num_steps)
// and f(i) the schedule at last_batch_iteration i. lr(k) = f(k - 1) for k >= 1 on a fresh start.
#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "core/error.h"
#include "runtime/config/config.h"
#include "runtime/zero/lr_schedule.h"

namespace strata::runtime {
namespace {

config::SchedulerConfig warmup_lr(double min_lr, double max_lr, std::uint64_t warmup, config::WarmupType type) {
  config::SchedulerConfig s;
  s.type = config::SchedulerType::kWarmupLR;
  s.warmup_min_lr = min_lr;
  s.warmup_max_lr = max_lr;
  s.warmup_num_steps = warmup;
  s.warmup_type = type;
  return s;
}

config::SchedulerConfig warmup_decay_lr(double min_lr, double max_lr, std::uint64_t warmup,
                                std::uint64_t total, config::WarmupType type) {
  config::SchedulerConfig s = warmup_lr(min_lr, max_lr, warmup, type);
  s.type = config::SchedulerType::kWarmupDecayLR;
  s.total_num_steps = config::AutoOr<std::uint64_t>(total);
  return s;
}

config::SchedulerConfig warmup_cosine_lr(double warmup_min_ratio, double cos_min_ratio,
                                 std::uint64_t warmup, std::uint64_t total, config::WarmupType type) {
  config::SchedulerConfig s;
  s.type = config::SchedulerType::kWarmupCosineLR;
  s.warmup_min_ratio = warmup_min_ratio;
  s.cos_min_ratio = cos_min_ratio;
  s.warmup_num_steps = warmup;
  s.total_num_steps = config::AutoOr<std::uint64_t>(total);
  s.warmup_type = type;
  return s;
}

// lr(0), lr(1), ... against `expected`.
void expect_lrs(const zero::LrSchedule& schedule, const std::vector<double>& expected) {
  for (std::size_t k = 0; k < expected.size(); ++k) {
    EXPECT_DOUBLE_EQ(schedule.lr(k), expected[k]) << "step " << k;
  }
}

// The Error's where() when constructing throws.
std::string error_where(const std::optional<config::SchedulerConfig>& s, double base_lr) {
  try {
    zero::LrSchedule schedule(s, base_lr);
  } catch (const Error& e) {
    return e.where();
  }
  return "(no error)";
}

TEST(LrSchedule, NoSchedulerIsConstant) {
  zero::LrSchedule schedule(std::nullopt, 3e-4);
  for (std::uint64_t k : {0ULL, 1ULL, 2ULL, 1000ULL, 1ULL << 40}) EXPECT_EQ(schedule.lr(k), 3e-4);
}

TEST(LrSchedule, WarmupLrLog) {
  // min 1e-5, max 1e-3, W = 10: f(i) = 1e-5 + (1e-3 - 1e-5) * log(i + 1) / log(10) for i < 10,
  // then 1e-3. lr(0) = warmup_min_lr (written by the constructor), lr(1) = f(0) = min too.
  zero::LrSchedule schedule(warmup_lr(1e-5, 1e-3, 10, config::WarmupType::kLog), 1e-3);
  expect_lrs(schedule, {
                           1e-05,                   // lr(0): constructor, get_lr() at -1
                           1e-05,                   // f(0): log(1) = 0
                           0.0003080196957073414,   // f(1): log(2) / log(10)
                           0.00048235004217246576,  // f(2)
                           0.0006060393914146827,   // f(3)
                           0.0007019803042926585,   // f(4)
                           0.0007803697378798071,   // f(5)
                           0.0008466470596141142,   // f(6)
                           0.0009040590871220239,   // f(7)
                           0.0009547000843449315,   // f(8)
                           0.0009999999999999998,   // f(9): log(10)/log(10), one ulp short
                           0.001,                   // f(10): warmup over, gamma = 1
                           0.001,
                       });
  EXPECT_EQ(schedule.lr(1'000'000), 0.001);
}

TEST(LrSchedule, WarmupLrLinear) {
  // f(i) = 1e-5 + 9.9e-4 * i / 10 for i < 10, then 1e-3.
  zero::LrSchedule schedule(warmup_lr(1e-5, 1e-3, 10, config::WarmupType::kLinear), 1e-3);
  expect_lrs(schedule, {1e-05, 1e-05, 0.000109, 0.00020800000000000001, 0.00030700000000000004,
                        0.00040600000000000006, 0.000505, 0.000604, 0.000703,
                        0.0008020000000000001, 0.000901, 0.001, 0.001});
}

TEST(LrSchedule, WarmupNumStepsOneActsAsTwo) {
  // DeepSpeed: self.warmup_num_steps = max(2, warmup_num_steps), so 1 gives W = 2.
  // log: f(0) = 0, f(1) = 1e-3 * log(2) / log(2) = 1e-3. linear: f(1) = 1e-3 * 1 / 2.
  zero::LrSchedule log_schedule(warmup_lr(0.0, 1e-3, 1, config::WarmupType::kLog), 1e-3);
  expect_lrs(log_schedule, {0.0, 0.0, 0.001, 0.001, 0.001});
  zero::LrSchedule linear_schedule(warmup_lr(0.0, 1e-3, 1, config::WarmupType::kLinear), 1e-3);
  expect_lrs(linear_schedule, {0.0, 0.0, 0.0005, 0.001, 0.001});
  // And 2 is the same schedule as 1.
  zero::LrSchedule two(warmup_lr(0.0, 1e-3, 2, config::WarmupType::kLinear), 1e-3);
  for (std::uint64_t k = 0; k < 5; ++k) EXPECT_EQ(two.lr(k), linear_schedule.lr(k));
}

TEST(LrSchedule, WarmupNumStepsZeroIsAnError) {
  // DeepSpeed raises ValueError("warmup_num_steps must be a positive integer").
  EXPECT_EQ(error_where(warmup_lr(0.0, 1e-3, 0, config::WarmupType::kLog), 1e-3),
            "scheduler.params.warmup_num_steps");
  EXPECT_EQ(error_where(warmup_cosine_lr(0.0, 1e-4, 0, 10, config::WarmupType::kLog), 1e-3),
            "scheduler.params.warmup_num_steps");
}

TEST(LrSchedule, LastBatchIterationResumesTheSchedule) {
  // last_batch_iteration L = 5: DeepSpeed does not touch the optimizer's lr in the
  // constructor, so step 0 runs at optimizer.params.lr (7e-4 here); step k >= 1 uses f(5 + k).
  config::SchedulerConfig s = warmup_lr(1e-5, 1e-3, 10, config::WarmupType::kLog);
  s.last_batch_iteration = 5;
  zero::LrSchedule schedule(s, 7e-4);
  expect_lrs(schedule, {
                           0.0007,                 // base lr
                           0.0008466470596141142,  // f(6)
                           0.0009040590871220239,  // f(7)
                           0.0009547000843449315,  // f(8)
                           0.0009999999999999998,  // f(9)
                           0.001, 0.001,
                       });
  // The same f as a fresh run, shifted: resumed lr(k) = f(5 + k) = fresh lr(k + 6), k >= 1.
  zero::LrSchedule fresh(warmup_lr(1e-5, 1e-3, 10, config::WarmupType::kLog), 7e-4);
  for (std::uint64_t k = 1; k < 20; ++k) EXPECT_EQ(schedule.lr(k), fresh.lr(k + 6)) << k;
}

TEST(LrSchedule, WarmupDecayLrLog) {
  // min 1e-5, max 1e-2, W = 10, T = 30: warmup as WarmupLR, then
  // gamma = max(0, (30 - i) / max(1, 30 - 10)).
  zero::LrSchedule schedule(warmup_decay_lr(1e-5, 1e-2, 10, 30, config::WarmupType::kLog), 1e-3);
  expect_lrs(schedule, {
                           1e-05, 1e-05,
                           0.0030172896566831716,  // f(1): log(2) / log(10)
                           0.004776441334649427, 0.006024579313366343, 0.006992710343316826,
                           0.0077837309913325985, 0.008452529419742425, 0.009031868970049513,
                           0.009542882669298855,
                           0.009999999999999998,  // f(9)
                           0.01,                  // f(10): (30 - 10) / 20 = 1
                           0.0095005,             // f(11): 19 / 20
                           0.009001, 0.0085015, 0.008002,
                           0.0075025000000000005,  // f(15): 15 / 20
                       });
  EXPECT_DOUBLE_EQ(schedule.lr(21), 0.005005);               // f(20): 10 / 20
  EXPECT_DOUBLE_EQ(schedule.lr(29), 0.0010090000000000001);  // f(28): 2 / 20
  EXPECT_DOUBLE_EQ(schedule.lr(30), 0.0005095000000000001);  // f(29): 1 / 20
  EXPECT_EQ(schedule.lr(31), 1e-05);                         // f(30): 0 / 20 -> warmup_min_lr
  EXPECT_EQ(schedule.lr(41), 1e-05);                         // f(40): max(0, -10 / 20)
  EXPECT_EQ(schedule.lr(1'000'000), 1e-05);
}

TEST(LrSchedule, WarmupDecayLrLinear) {
  // min 0, max 1e-2, W = 10, T = 30: f(i) = 1e-2 * i / 10 for i < 10, then
  // 1e-2 * max(0, (30 - i) / 20).
  zero::LrSchedule schedule(warmup_decay_lr(0.0, 1e-2, 10, 30, config::WarmupType::kLinear), 1e-3);
  expect_lrs(schedule, {0.0,    0.0,    0.001,  0.002,  0.003,  0.004,  0.005,
                        0.006,  0.006999999999999999,  0.008,  0.009000000000000001,
                        0.01,                   // f(10)
                        0.0095,                 // f(11)
                        0.009000000000000001, 0.0085, 0.008, 0.0075});
  EXPECT_DOUBLE_EQ(schedule.lr(21), 0.005);   // f(20)
  EXPECT_DOUBLE_EQ(schedule.lr(30), 0.0005);  // f(29)
  EXPECT_EQ(schedule.lr(31), 0.0);            // f(30)
  EXPECT_EQ(schedule.lr(100), 0.0);
}

TEST(LrSchedule, WarmupDecayLrTotalBelowWarmup) {
  // T = 5 < W = 10 (DeepSpeed only warns): the warmup runs to the end, then
  // gamma = max(0, (5 - i) / max(1, 5 - 10)) = 0, so the lr drops to warmup_min_lr.
  // min 1e-4, max 1e-2, linear: f(i) = 1e-4 + 9.9e-3 * i / 10 for i < 10.
  zero::LrSchedule schedule(warmup_decay_lr(1e-4, 1e-2, 10, 5, config::WarmupType::kLinear), 1e-3);
  expect_lrs(schedule, {0.0001, 0.0001, 0.0010900000000000003, 0.0020800000000000003, 0.00307,
                        0.004060000000000001, 0.005050000000000001, 0.00604,
                        0.007030000000000001, 0.008020000000000001,
                        0.00901,  // f(9)
                        0.0001,   // f(10): gamma 0
                        0.0001, 0.0001});
}

TEST(LrSchedule, WarmupCosineLrLog) {
  // optimizer lr 0.1, W = 4, T = 12, warmup_min_ratio 0.1, cos_min_ratio 0.01:
  //   i < 4:  0.1 * (0.1 + 0.9 * log(i + 1) / log(4))
  //   i >= 4: 0.1 * max(0, 0.01 + 0.99 * (1 + cos(pi * min(1, (i - 3) / 8))) / 2)
  // lr(0) = 0: WarmupCosineLR's get_lr() before the start is 0, not warmup_min_ratio * lr.
  zero::LrSchedule schedule(warmup_cosine_lr(0.1, 0.01, 4, 12, config::WarmupType::kLog), 0.1);
  expect_lrs(schedule, {
                           0.0,                    // constructor
                           0.010000000000000002,   // f(0): warmup_min_ratio * lr
                           0.05500000000000001,    // f(1): log(2) / log(4) = 1/2
                           0.08132331253245204,    // f(2)
                           0.1,                    // f(3): log(4) / log(4)
                           0.0962320368593087,     // f(4): progress 1/8
                           0.0855017856687341,     // f(5): 2/8
                           0.06944282990207194,    // f(6): 3/8
                           0.0505,                 // f(7): 4/8, cos = 0
                           0.031557170097928064,   // f(8)
                           0.015498214331265903,   // f(9)
                           0.004767963140691307,   // f(10): 7/8
                           0.001,                  // f(11): 8/8 -> cos_min_ratio * lr
                           0.001,                  // f(12): progress clamped to 1
                           0.001,
                       });
  EXPECT_DOUBLE_EQ(schedule.lr(1'000'000), 0.001);
}

TEST(LrSchedule, WarmupCosineLrLinear) {
  // As above with linear warmup: i < 4: 0.1 * (0.1 + 0.9 * i / 4).
  zero::LrSchedule schedule(warmup_cosine_lr(0.1, 0.01, 4, 12, config::WarmupType::kLinear), 0.1);
  expect_lrs(schedule, {0.0, 0.010000000000000002, 0.0325, 0.05500000000000001,
                        0.07750000000000001,  // f(3): 0.1 + 0.9 * 3/4
                        0.0962320368593087, 0.0855017856687341, 0.06944282990207194, 0.0505,
                        0.031557170097928064, 0.015498214331265903, 0.004767963140691307,
                        0.001, 0.001});
}

TEST(LrSchedule, WarmupCosineLrTotalNotAboveWarmup) {
  // T = 3 <= W = 4: real_total_steps = max(1, 3 - 4) = 1, progress clamps to 1 at once, so
  // after the warmup the lr sits at cos_min_ratio * lr = 1e-4 * 0.1.
  zero::LrSchedule schedule(warmup_cosine_lr(0.0, 1e-4, 4, 3, config::WarmupType::kLinear), 0.1);
  expect_lrs(schedule, {0.0, 0.0, 0.025, 0.05, 0.07500000000000001, 1e-05, 1e-05, 1e-05});
}

TEST(LrSchedule, WarmupCosineLrLongRun) {
  // DeepSpeed's defaults (W = 1000, cos_min_ratio 1e-4, log) over T = 10000, lr 3e-4.
  zero::LrSchedule schedule(warmup_cosine_lr(0.0, 1e-4, 1000, 10000, config::WarmupType::kLog), 3e-4);
  EXPECT_DOUBLE_EQ(schedule.lr(500), 0.00026989700043360184);  // f(499): log(500)/log(1000)
  EXPECT_DOUBLE_EQ(schedule.lr(1000), 0.0003);                 // f(999): log(1000)/log(1000)
  EXPECT_DOUBLE_EQ(schedule.lr(1001), 0.0002999999908623913);  // f(1000): progress 1/9000
  EXPECT_DOUBLE_EQ(schedule.lr(5000), 0.00017605962192737457);
  EXPECT_DOUBLE_EQ(schedule.lr(10000), 3e-08);  // f(9999): progress 9000/9000
  EXPECT_DOUBLE_EQ(schedule.lr(20000), 3e-08);
}

TEST(LrSchedule, WarmupCosineLrResumed) {
  // L = 7: step 0 keeps the optimizer's lr (0.1), then f(8), f(9), f(10).
  config::SchedulerConfig s = warmup_cosine_lr(0.1, 0.01, 4, 12, config::WarmupType::kLinear);
  s.last_batch_iteration = 7;
  zero::LrSchedule schedule(s, 0.1);
  expect_lrs(schedule, {0.1, 0.031557170097928064, 0.015498214331265903, 0.004767963140691307});
}

TEST(LrSchedule, CosineIgnoresTheLrKeysItDoesNotUse) {
  // warmup_min_lr / warmup_max_lr "auto" do not matter to WarmupCosineLR.
  config::SchedulerConfig s = warmup_cosine_lr(0.0, 1e-4, 4, 3, config::WarmupType::kLinear);
  s.warmup_min_lr = config::AutoOr<double>::automatic();
  s.warmup_max_lr = config::AutoOr<double>::automatic();
  zero::LrSchedule schedule(s, 0.1);
  EXPECT_DOUBLE_EQ(schedule.lr(3), 0.05);
}

TEST(LrSchedule, AutoValuesAreErrorsNamingTheKey) {
  config::SchedulerConfig s = warmup_lr(0.0, 1e-3, 10, config::WarmupType::kLog);
  s.warmup_num_steps = config::AutoOr<std::uint64_t>::automatic();
  EXPECT_EQ(error_where(s, 1e-3), "scheduler.params.warmup_num_steps");

  s = warmup_lr(0.0, 1e-3, 10, config::WarmupType::kLog);
  s.warmup_max_lr = config::AutoOr<double>::automatic();  // e.g. optimizer.params.lr was "auto"
  EXPECT_EQ(error_where(s, 1e-3), "scheduler.params.warmup_max_lr");

  s = warmup_lr(0.0, 1e-3, 10, config::WarmupType::kLog);
  s.warmup_min_lr = config::AutoOr<double>::automatic();
  EXPECT_EQ(error_where(s, 1e-3), "scheduler.params.warmup_min_lr");

  s = warmup_decay_lr(0.0, 1e-3, 10, 100, config::WarmupType::kLog);
  s.total_num_steps = config::AutoOr<std::uint64_t>::automatic();
  EXPECT_EQ(error_where(s, 1e-3), "scheduler.params.total_num_steps");

  s = warmup_cosine_lr(0.0, 1e-4, 10, 100, config::WarmupType::kLog);
  s.total_num_steps = config::AutoOr<std::uint64_t>::automatic();
  EXPECT_EQ(error_where(s, 1e-3), "scheduler.params.total_num_steps");

  // The message says to set it.
  try {
    zero::LrSchedule schedule(s, 1e-3);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("auto"), std::string::npos) << e.what();
    EXPECT_NE(e.hint().find("set scheduler.params.total_num_steps"), std::string::npos)
        << e.hint();
  }
}

TEST(LrSchedule, OutOfRangeValuesAreErrors) {
  config::SchedulerConfig s = warmup_decay_lr(0.0, 1e-3, 10, 100, config::WarmupType::kLog);
  s.total_num_steps.reset();
  EXPECT_EQ(error_where(s, 1e-3), "scheduler.params.total_num_steps");
  s = warmup_decay_lr(0.0, 1e-3, 10, 0, config::WarmupType::kLog);
  EXPECT_EQ(error_where(s, 1e-3), "scheduler.params.total_num_steps");

  s = warmup_lr(0.0, 1e-3, 10, config::WarmupType::kLog);
  s.last_batch_iteration = -2;
  EXPECT_EQ(error_where(s, 1e-3), "scheduler.params.last_batch_iteration");

  EXPECT_EQ(error_where(warmup_lr(-1e-3, 1e-3, 10, config::WarmupType::kLog), 1e-3),
            "scheduler.params.warmup_min_lr");
  EXPECT_EQ(error_where(warmup_lr(0.0, NAN, 10, config::WarmupType::kLog), 1e-3),
            "scheduler.params.warmup_max_lr");
  EXPECT_EQ(error_where(warmup_cosine_lr(1.5, 1e-4, 10, 100, config::WarmupType::kLog), 1e-3),
            "scheduler.params.warmup_min_ratio");
  EXPECT_EQ(error_where(warmup_cosine_lr(0.0, -0.1, 10, 100, config::WarmupType::kLog), 1e-3),
            "scheduler.params.cos_min_ratio");
  EXPECT_EQ(error_where(std::nullopt, -1.0), "optimizer.params.lr");
  EXPECT_EQ(error_where(std::nullopt, INFINITY), "optimizer.params.lr");
}

TEST(LrSchedule, FromAParsedConfig) {
  // The config's WarmupLR without warmup_max_lr takes the optimizer's lr.
  const config::ParsedConfig parsed = config::parse_config(R"({
    "optimizer": {"type": "AdamW", "params": {"lr": 0.002}},
    "scheduler": {"type": "WarmupLR", "params": {"warmup_num_steps": 4, "warmup_type": "linear"}}
  })");
  const config::Config& c = parsed.config;
  zero::LrSchedule schedule(c.scheduler, c.optimizer->lr.value());
  expect_lrs(schedule, {0.0, 0.0, 0.0005, 0.001, 0.0015, 0.002, 0.002});
}

}  // namespace
}  // namespace strata::runtime
