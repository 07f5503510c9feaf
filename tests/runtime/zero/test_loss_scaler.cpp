// LossScaler against DeepSpeed's LossScaler / DynamicLossScaler.
//
// How the expected sequences were derived: DeepSpeed's DynamicLossScaler.update_scale
// (deepspeed/runtime/fp16/loss_scaler.py, current master, with the "stable_interval" growth
// rule) transcribed into plain Python (logging and torch.distributed stubbed out) and fed the
// same overflow sequence; each row below is (cur_scale, cur_hysteresis) after that update, or
// DeepSpeed's "Current loss scale already at minimum" exception. Every sequence can also be
// followed by hand with the rules in runtime/zero/loss_scaler.h.
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "runtime/config/config.h"
#include "runtime/zero/loss_scaler.h"

namespace strata::runtime {
namespace {

using Json = nlohmann::json;

config::Fp16Config dynamic_fp16(int power, std::uint32_t window, std::uint32_t hysteresis,
                        double min_scale, bool consecutive = false) {
  config::Fp16Config f;
  f.enabled = true;
  f.loss_scale = 0.0;
  f.initial_scale_power = power;
  f.loss_scale_window = window;
  f.hysteresis = hysteresis;
  f.min_loss_scale = min_scale;
  f.consecutive_hysteresis = consecutive;
  return f;
}

struct Expect {
  char step;  // 'O' = overflow, 'C' = clean
  double scale;
  std::uint32_t hysteresis;
};

std::uint64_t hysteresis_of(const zero::LossScaler& s) {
  return Json::parse(s.save_state()).at("cur_hysteresis").get<std::uint64_t>();
}

void run(zero::LossScaler& scaler, const std::vector<Expect>& rows) {
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const bool overflow = rows[i].step == 'O';
    EXPECT_EQ(scaler.update(overflow), overflow) << "row " << i;
    EXPECT_EQ(scaler.scale(), static_cast<float>(rows[i].scale)) << "row " << i;
    EXPECT_EQ(hysteresis_of(scaler), rows[i].hysteresis) << "row " << i;
  }
}

TEST(LossScaler, Fp16OffIsScaleOneAndNeverSkips) {
  config::Fp16Config f;
  f.loss_scale = 128.0;  // ignored with fp16 off
  zero::LossScaler scaler(f, /*fp16_enabled=*/false);
  EXPECT_EQ(scaler.scale(), 1.0f);
  EXPECT_FALSE(scaler.dynamic());
  EXPECT_FALSE(scaler.update(true));
  EXPECT_FALSE(scaler.update(false));
  EXPECT_EQ(scaler.scale(), 1.0f);
  // The fp16 section is not looked at when fp16 is off.
  f.loss_scale_window = 0;
  EXPECT_NO_THROW(zero::LossScaler(f, false));
}

TEST(LossScaler, StaticScaleSkipsOverflowButNeverMoves) {
  config::Fp16Config f;
  f.enabled = true;
  f.loss_scale = 128.0;
  zero::LossScaler scaler(f, true);
  EXPECT_FALSE(scaler.dynamic());
  EXPECT_EQ(scaler.scale(), 128.0f);
  for (int i = 0; i < 5; ++i) EXPECT_TRUE(scaler.update(true));
  for (int i = 0; i < 3000; ++i) EXPECT_FALSE(scaler.update(false));
  EXPECT_EQ(scaler.scale(), 128.0f);
}

TEST(LossScaler, DynamicStartsAtTwoToTheInitialPower) {
  config::Fp16Config defaults;
  defaults.enabled = true;
  zero::LossScaler scaler(defaults, true);  // DeepSpeed's defaults: 2^16
  EXPECT_TRUE(scaler.dynamic());
  EXPECT_EQ(scaler.scale(), 65536.0f);
  EXPECT_EQ(zero::LossScaler(dynamic_fp16(0, 1000, 2, 1.0), true).scale(), 1.0f);
  EXPECT_EQ(zero::LossScaler(dynamic_fp16(127, 1000, 2, 1.0), true).scale(), 0x1p127f);
}

TEST(LossScaler, HysteresisWindowGrowthAndRefill) {
  // 2^16, window 4, hysteresis 2, floor 1. The scale doubles on the update whose
  // stable = cur_iter - last_overflow_iter - 1 is a positive multiple of 4: iterations 4 and 8
  // of a fresh run (the 5th and 9th clean steps). After the overflows at 9, 10, 11 it doubles
  // at iteration 16 (stable = 16 - 11 - 1 = 4), refilling the hysteresis.
  zero::LossScaler scaler(dynamic_fp16(16, 4, 2, 1.0), true);
  run(scaler, {
                  {'C', 65536, 2},   // iter 0: stable 0
                  {'C', 65536, 2},   // 1
                  {'C', 65536, 2},   // 2
                  {'C', 65536, 2},   // 3
                  {'C', 131072, 2},  // 4: stable 4 -> double
                  {'C', 131072, 2},  // 5
                  {'C', 131072, 2},  // 6
                  {'C', 131072, 2},  // 7
                  {'C', 262144, 2},  // 8: stable 8 -> double
                  {'O', 262144, 1},  // 9: hysteresis 2 -> 1, scale kept, skipped
                  {'O', 131072, 1},  // 10: hysteresis spent -> halve
                  {'O', 65536, 1},   // 11: not refilled by halving -> halve again
                  {'C', 65536, 1},   // 12: stable 0
                  {'C', 65536, 1},   // 13
                  {'C', 65536, 1},   // 14
                  {'C', 65536, 1},   // 15: stable 3
                  {'C', 131072, 2},  // 16: stable 4 -> double, hysteresis refilled
                  {'O', 131072, 1},  // 17
                  {'C', 131072, 1},  // 18: no refill without consecutive_hysteresis
                  {'O', 65536, 1},   // 19: halve
                  {'C', 65536, 1},   // 20
                  {'C', 65536, 1},   // 21
              });
  const Json state = Json::parse(scaler.save_state());
  EXPECT_EQ(state.at("cur_iter").get<std::uint64_t>(), 22u);
  EXPECT_EQ(state.at("last_overflow_iter").get<std::int64_t>(), 19);
}

TEST(LossScaler, ConsecutiveHysteresisRefillsOnEveryCleanStep) {
  // hysteresis 2 with consecutive_hysteresis: isolated overflows never halve the scale; two in
  // a row do. Growth still waits for a window of 4 stable steps after the last overflow.
  zero::LossScaler scaler(dynamic_fp16(16, 4, 2, 1.0, /*consecutive=*/true), true);
  run(scaler, {
                  {'O', 65536, 1},
                  {'C', 65536, 2},
                  {'O', 65536, 1},
                  {'C', 65536, 2},
                  {'O', 65536, 1},
                  {'C', 65536, 2},
                  {'O', 65536, 1},   // iter 6
                  {'O', 32768, 1},   // iter 7: two in a row -> halve
                  {'C', 32768, 2},   // 8: stable 0
                  {'C', 32768, 2},
                  {'C', 32768, 2},
                  {'C', 32768, 2},   // 11: stable 3
                  {'C', 65536, 2},   // 12: stable 4 -> double
              });
}

TEST(LossScaler, WindowOfOneGrowsFromTheSecondCleanStep) {
  // window 1: stable > 0 and stable % 1 == 0 on every clean step but the first after a start
  // or an overflow. hysteresis 1: every overflow halves.
  zero::LossScaler scaler(dynamic_fp16(10, 1, 1, 1.0), true);
  run(scaler, {
                  {'C', 1024, 1},
                  {'C', 2048, 1},
                  {'C', 4096, 1},
                  {'C', 8192, 1},
                  {'O', 4096, 1},
                  {'C', 4096, 1},
                  {'C', 8192, 1},
                  {'C', 16384, 1},
              });
}

TEST(LossScaler, HysteresisOneHalvesOnEveryOverflow) {
  zero::LossScaler scaler(dynamic_fp16(16, 1000, 1, 1.0), true);
  run(scaler, {{'O', 32768, 1}, {'O', 16384, 1}, {'O', 8192, 1}, {'C', 8192, 1}, {'C', 8192, 1}});
}

TEST(LossScaler, FloorThenErrorAtTheMinimum) {
  // 2^2 = 4 with floor 3: the first overflow gives max(4 / 2, 3) = 3; the next overflow finds
  // the scale at the minimum, where DeepSpeed raises. The error changes nothing.
  zero::LossScaler scaler(dynamic_fp16(2, 2, 1, 3.0), true);
  run(scaler, {
                  {'O', 3, 1},  // iter 0
                  {'C', 3, 1},  // 1: stable 0
                  {'C', 3, 1},  // 2: stable 1
                  {'C', 6, 1},  // 3: stable 2 -> double (3 * 2: off the powers of two)
                  {'O', 3, 1},  // 4: max(6 / 2, 3)
              });
  const std::string before = scaler.save_state();
  try {
    scaler.update(true);
    ADD_FAILURE() << "no error at the minimum scale";
  } catch (const Error& e) {
    EXPECT_EQ(e.where(), "fp16.min_loss_scale");
    EXPECT_NE(std::string(e.what()).find("minimum loss scale"), std::string::npos) << e.what();
  }
  EXPECT_EQ(scaler.save_state(), before);
  EXPECT_EQ(scaler.scale(), 3.0f);
}

TEST(LossScaler, HysteresisIsSpentBeforeTheMinimumError) {
  // 2 with floor 1 and hysteresis 3: two overflows spend the hysteresis, the third halves to
  // the floor, the fourth raises.
  zero::LossScaler scaler(dynamic_fp16(1, 1000, 3, 1.0), true);
  run(scaler, {{'O', 2, 2}, {'O', 2, 1}, {'O', 1, 1}});
  EXPECT_THROW(scaler.update(true), Error);
  // A clean step still works afterwards (the error changed nothing).
  EXPECT_FALSE(scaler.update(false));
  EXPECT_EQ(scaler.scale(), 1.0f);
}

TEST(LossScaler, NonPowerOfTwoFloorIsExact) {
  // Floor 0.3: 2 -> 1 -> 0.5 -> max(0.25, 0.3) = 0.3 -> error.
  zero::LossScaler scaler(dynamic_fp16(1, 1000, 1, 0.3), true);
  run(scaler, {{'O', 1.0, 1}, {'O', 0.5, 1}, {'O', 0.3, 1}});
  EXPECT_EQ(Json::parse(scaler.save_state()).at("scale").get<double>(), 0.3);
  EXPECT_THROW(scaler.update(true), Error);
}

TEST(LossScaler, SaveLoadRoundTrip) {
  const config::Fp16Config f = dynamic_fp16(16, 4, 2, 1.0);
  zero::LossScaler a(f, true);
  for (char c : std::string("CCCCCOCOCC")) a.update(c == 'O');
  const std::string state = a.save_state();

  zero::LossScaler b(f, true);
  b.load_state(state);
  EXPECT_EQ(b.save_state(), state);
  EXPECT_EQ(b.scale(), a.scale());
  // Both continue identically.
  for (char c : std::string("CCCCCCCCOOCCCCCCCCC")) {
    const bool overflow = c == 'O';
    EXPECT_EQ(a.update(overflow), b.update(overflow));
    EXPECT_EQ(a.save_state(), b.save_state());
  }

  const Json j = Json::parse(state);
  EXPECT_EQ(j.at("format"), "strata.loss_scaler");
  EXPECT_EQ(j.at("version"), 1);
  EXPECT_EQ(j.at("mode"), "dynamic");
  EXPECT_EQ(j.at("scale").get<double>(), 65536.0);  // doubled at iter 4, halved at iter 7
  EXPECT_EQ(j.at("cur_iter").get<std::uint64_t>(), 10u);
  EXPECT_EQ(j.at("last_overflow_iter").get<std::int64_t>(), 7);
  EXPECT_EQ(j.at("cur_hysteresis").get<std::uint64_t>(), 1u);
}

TEST(LossScaler, StaticAndOffStatesRoundTrip) {
  config::Fp16Config f;
  f.enabled = true;
  f.loss_scale = 64.0;
  zero::LossScaler a(f, true);
  zero::LossScaler b(f, true);
  EXPECT_NO_THROW(b.load_state(a.save_state()));
  EXPECT_EQ(b.scale(), 64.0f);
  zero::LossScaler off_a(f, false);
  zero::LossScaler off_b(f, false);
  EXPECT_NO_THROW(off_b.load_state(off_a.save_state()));
  EXPECT_EQ(off_b.scale(), 1.0f);
}

TEST(LossScaler, ModeMismatchIsAnError) {
  config::Fp16Config static_f;
  static_f.enabled = true;
  static_f.loss_scale = 64.0;
  zero::LossScaler dynamic_scaler(dynamic_fp16(16, 4, 2, 1.0), true);
  zero::LossScaler static_scaler(static_f, true);
  zero::LossScaler off_scaler(static_f, false);
  const std::string before = dynamic_scaler.save_state();
  EXPECT_THROW(dynamic_scaler.load_state(static_scaler.save_state()), Error);
  EXPECT_THROW(dynamic_scaler.load_state(off_scaler.save_state()), Error);
  EXPECT_THROW(static_scaler.load_state(before), Error);
  EXPECT_EQ(dynamic_scaler.save_state(), before);
}

TEST(LossScaler, SavedHysteresisAboveTheConfigIsLowered) {
  zero::LossScaler a(dynamic_fp16(16, 4, 5, 1.0), true);
  zero::LossScaler b(dynamic_fp16(16, 4, 2, 1.0), true);
  b.load_state(a.save_state());  // cur_hysteresis 5 -> 2
  EXPECT_EQ(hysteresis_of(b), 2u);
}

TEST(LossScaler, MalformedStateIsAnErrorAndChangesNothing) {
  zero::LossScaler scaler(dynamic_fp16(16, 4, 2, 1.0), true);
  for (char c : std::string("CCCCCO")) scaler.update(c == 'O');
  const std::string before = scaler.save_state();
  const Json good = Json::parse(before);

  auto with = [&](const char* key, Json value) {
    Json j = good;
    j[key] = std::move(value);
    return j.dump();
  };
  auto without = [&](const char* key) {
    Json j = good;
    j.erase(key);
    return j.dump();
  };

  const std::vector<std::string> bad = {
      "",
      "not json",
      R"({"format": "strata.loss_scaler")",  // truncated
      "[]",
      "42",
      with("format", "deepspeed"),
      with("version", 2),
      with("version", "1"),
      with("mode", "Dynamic"),
      with("mode", 1),
      with("scale", 0.0),
      with("scale", -65536.0),
      with("scale", "65536"),
      with("scale", nullptr),
      with("cur_iter", -1),
      with("cur_iter", 1.5),
      with("cur_iter", "6"),
      with("last_overflow_iter", -2),
      with("last_overflow_iter", 6),  // not before cur_iter 6
      with("last_overflow_iter", std::numeric_limits<std::uint64_t>::max()),
      with("last_overflow_iter", 0.5),
      with("cur_hysteresis", 0),
      with("cur_hysteresis", std::uint64_t{1} << 32),
      with("cur_hysteresis", true),
      with("extra", 1),
      without("format"),
      without("version"),
      without("mode"),
      without("scale"),
      without("cur_iter"),
      without("last_overflow_iter"),
      without("cur_hysteresis"),
  };
  for (const std::string& text : bad) {
    try {
      scaler.load_state(text);
      ADD_FAILURE() << "accepted: " << text;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("loss scaler state"), std::string::npos) << e.what();
    }
    EXPECT_EQ(scaler.save_state(), before) << text;
  }
  // Off-mode state must have scale 1.
  zero::LossScaler off(config::Fp16Config{}, false);
  Json off_state = Json::parse(off.save_state());
  off_state["scale"] = 2.0;
  EXPECT_THROW(off.load_state(off_state.dump()), Error);

  // The good state still loads.
  EXPECT_NO_THROW(scaler.load_state(before));
}

TEST(LossScaler, BadConfigValuesAreErrorsNamingTheKey) {
  auto where = [](const config::Fp16Config& f) -> std::string {
    try {
      zero::LossScaler s(f, true);
    } catch (const Error& e) {
      return e.where();
    }
    return "(no error)";
  };
  config::Fp16Config f = dynamic_fp16(16, 1000, 2, 1.0);
  f.loss_scale = -1.0;
  EXPECT_EQ(where(f), "fp16.loss_scale");
  f.loss_scale = INFINITY;
  EXPECT_EQ(where(f), "fp16.loss_scale");
  f = dynamic_fp16(128, 1000, 2, 1.0);
  EXPECT_EQ(where(f), "fp16.initial_scale_power");
  f = dynamic_fp16(-1, 1000, 2, 1.0);
  EXPECT_EQ(where(f), "fp16.initial_scale_power");
  f = dynamic_fp16(16, 0, 2, 1.0);
  EXPECT_EQ(where(f), "fp16.loss_scale_window");
  f = dynamic_fp16(16, 1000, 0, 1.0);
  EXPECT_EQ(where(f), "fp16.hysteresis");
  f = dynamic_fp16(16, 1000, 2, 0.0);
  EXPECT_EQ(where(f), "fp16.min_loss_scale");
  f = dynamic_fp16(16, 1000, 2, NAN);
  EXPECT_EQ(where(f), "fp16.min_loss_scale");
}

TEST(LossScaler, ScaleSaturatesAtTheLargestFloat) {
  // 2^127 doubling on all-zero gradients: the double keeps growing, scale() stays finite.
  zero::LossScaler scaler(dynamic_fp16(127, 1, 1, 1.0), true);
  for (int i = 0; i < 4; ++i) scaler.update(false);
  EXPECT_EQ(scaler.scale(), std::numeric_limits<float>::max());
  EXPECT_TRUE(std::isfinite(scaler.scale()));
}

}  // namespace
}  // namespace strata::runtime
