// train::run_training in-process (train/trainer.h): the tiny preset on the host device, a few
// steps, the states in pinned host memory at stage 3. The loss falls, two identical runs give
// the same weights and losses bit for bit, and strata.trace names the trace file.
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "models/registry.h"
#include "train/run_state.h"
#include "train/trainer.h"

namespace strata::train {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// The training text every Debian machine has (its bytes are the tokens).
constexpr const char* kText = "/usr/share/common-licenses/GPL-3";

class TempDir {
 public:
  TempDir() {
    std::string templ = fs::temp_directory_path().string() + "/strata-train-XXXXXX";
    if (::mkdtemp(templ.data()) != nullptr) path_ = templ;
  }
  ~TempDir() {
    std::error_code ec;
    if (!path_.empty()) fs::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// A config for the host device: stage 3, parameters and optimizer in pinned host memory.
std::string write_config(const std::string& dir, const std::string& trace) {
  const json config = {
      {"train_micro_batch_size_per_gpu", 2},
      {"gradient_accumulation_steps", 2},
      {"gradient_clipping", 1.0},
      {"optimizer", {{"type", "AdamW"}, {"params", {{"lr", 1e-3}, {"weight_decay", 0.1}}}}},
      {"zero_optimization",
       {{"stage", 3}, {"offload_optimizer", {{"device", "cpu"}}}, {"offload_param", {{"device", "cpu"}}}}},
      {"strata", {{"device", "host"}, {"trace", trace}}}};
  const std::string path = dir + "/config.json";
  std::ofstream(path) << config.dump(1);
  return path;
}

struct Outcome {
  std::string weights;  // the --save file's bytes
  std::vector<double> losses;
};

Outcome train_tiny(const std::string& dir, const std::string& trace = {}) {
  fs::create_directories(dir);
  TrainOptions o;
  o.config_path = write_config(dir, trace);
  o.preset = "tiny";
  o.text_path = kText;
  o.seq_len = 32;
  o.steps = 6;
  o.seed = 7;
  o.save_path = dir + "/save.safetensors";
  o.metrics_path = dir + "/metrics.jsonl";
  o.report = "none";
  EXPECT_EQ(run_training(o), 0);
  Outcome out;
  out.weights = read_file(o.save_path);
  std::istringstream lines(read_file(o.metrics_path));
  for (std::string line; std::getline(lines, line);) {
    if (!line.empty()) out.losses.push_back(json::parse(line).at("loss").get<double>());
  }
  return out;
}

bool have_text() { return fs::is_regular_file(kText); }

TEST(Trainer, LossFallsAndRunsRepeatBitForBit) {
  if (!have_text()) GTEST_SKIP() << kText << " is missing";
  TempDir tmp;
  ASSERT_FALSE(tmp.path().empty());
  const Outcome a = train_tiny(tmp.path() + "/a");
  const Outcome b = train_tiny(tmp.path() + "/b");
  ASSERT_EQ(a.losses.size(), 6u);
  EXPECT_LT(a.losses.back(), a.losses.front());
  EXPECT_FALSE(a.weights.empty());
  EXPECT_TRUE(a.weights == b.weights) << "two identical runs saved different weights";
  EXPECT_EQ(a.losses, b.losses);
}

TEST(Trainer, ConfigTraceNamesTheTraceFile) {
  if (!have_text()) GTEST_SKIP() << kText << " is missing";
  TempDir tmp;
  ASSERT_FALSE(tmp.path().empty());
  const std::string trace = tmp.path() + "/run.trace.json";
  train_tiny(tmp.path() + "/run", trace);
  ASSERT_TRUE(fs::is_regular_file(trace)) << "strata.trace was ignored: no " << trace;
  const json j = json::parse(read_file(trace));
  std::size_t spans = 0;
  for (const json& e : j.at("traceEvents")) spans += e.at("ph") == "X" ? 1 : 0;
  EXPECT_GT(spans, 0u);
}


// meta.json's integers are read as integers in range: a float, a negative or a value beyond
// the field's type is damage with a clear error, not a converted (or undefined) value.
TEST(RunState, RefusesIntegersOutOfRangeInMetaJson) {
  RunState s;
  s.step = 12;
  s.applied_steps = 12;
  s.dtype = "fp32";
  s.seq_len = 32;
  s.model = models::model_preset("tiny");
  s.engine.loss_scaler = "{}";
  s.config_json = "{}";
  s.loader.batch_size = 2;
  s.loader.seq_len = 32;
  s.loader.world = 1;
  s.loader.ntokens = 1000;
  const json good = json::parse(s.to_json());
  EXPECT_EQ(RunState::from_json(good.dump(), "meta.json").step, 12u);
  const std::vector<std::pair<std::string, json>> bad = {
      {"step", -1},      {"step", 1.5},           {"step", 1e30},    {"world", 4294967297ULL},
      {"seq_len", -32},  {"version", 1.0},        {"seed", "7"},     {"shards", -1}};
  for (const auto& entry : bad) {
    json j = good;
    j[entry.first] = entry.second;
    try {
      RunState::from_json(j.dump(), "meta.json");
      ADD_FAILURE() << entry.first << " = " << entry.second << " was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("meta.json is damaged"), std::string::npos)
          << entry.first << " = " << entry.second << ": " << e.what();
    }
  }
  json j = good;
  j["engine"]["adam_steps"] = -3;
  EXPECT_THROW(RunState::from_json(j.dump(), "meta.json"), Error);
}

}  // namespace
}  // namespace strata::train
