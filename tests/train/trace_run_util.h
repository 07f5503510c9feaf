#pragma once
// Helpers of the trace tests that drive train::run_training in-process: a temporary folder, a
// stage-3 config, one short run with --trace, and the trace's spans grouped by track.
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "train/trainer.h"

#include "tests/offload/offload_test_util.h"

namespace strata::train::test {

// The training text (its bytes are the tokens): STRATA_TEST_TEXT when set (a lent GPU machine has
// no Debian files: scripts/gpu/package.sh carries this one and run.sh points at it), else the one
// every Debian machine has.
inline std::string text_path() {
  const char* carried = std::getenv("STRATA_TEST_TEXT");
  return carried != nullptr && *carried != '\0' ? carried : "/usr/share/common-licenses/GPL-3";
}

// A fresh folder, removed with its contents at the end of the test (the offload tests' helper).
using TempDir = offload::testing::TempDir;

struct Span {
  std::string name;
  double ts_us = 0;   // start
  double dur_us = 0;
  std::uint64_t bytes = 0;
};

struct TracedRun {
  std::map<std::string, std::vector<Span>> tracks;  // track name -> its spans, in file order
  std::vector<nlohmann::json> metrics;              // one object per step
};

// Stage 3 with both the optimizer states and the parameters on `offload` ("cpu" or "nvme",
// under dir/nvme), `steps` steps of the tiny preset on `device` ("host" or "cuda"), traced;
// the final weights saved to `save_path` when it is not empty.
inline TracedRun traced_run(const std::string& dir, const std::string& offload, const std::string& device,
                            int steps = 3, const std::string& save_path = "") {
  namespace fs = std::filesystem;
  using nlohmann::json;
  fs::create_directories(dir + "/nvme");
  json zero = {{"stage", 3}, {"offload_optimizer", {{"device", offload}}}, {"offload_param", {{"device", offload}}}};
  if (offload == "nvme") {
    zero["offload_optimizer"]["nvme_path"] = dir + "/nvme";
    zero["offload_param"]["nvme_path"] = dir + "/nvme";
  }
  const json config = {{"train_micro_batch_size_per_gpu", 2},
                       {"gradient_accumulation_steps", 2},
                       {"gradient_clipping", 1.0},
                       {"optimizer", {{"type", "AdamW"}, {"params", {{"lr", 1e-3}}}}},
                       {"zero_optimization", zero},
                       {"aio", {{"block_size", 65536}}},
                       {"strata", {{"device", device}}}};
  TrainOptions o;
  o.config_path = dir + "/config.json";
  std::ofstream(o.config_path) << config.dump(1);
  o.preset = "tiny";
  o.text_path = text_path();
  o.seq_len = 32;
  o.steps = steps;
  o.seed = 7;
  o.metrics_path = dir + "/metrics.jsonl";
  o.trace_path = dir + "/trace.json";
  o.report = "none";
  o.save_path = save_path;
  EXPECT_EQ(run_training(o), 0);

  TracedRun run;
  std::ifstream in(o.trace_path);
  EXPECT_TRUE(in.good()) << o.trace_path;
  const json trace = json::parse(in);
  std::map<int, std::string> names;
  for (const json& e : trace.at("traceEvents")) {
    if (e.at("ph") == "M" && e.at("name") == "thread_name") {
      names[e.at("tid").get<int>()] = e.at("args").at("name").get<std::string>();
    }
  }
  for (const json& e : trace.at("traceEvents")) {
    if (e.at("ph") != "X") continue;
    Span s;
    s.name = e.at("name").get<std::string>();
    s.ts_us = e.at("ts").get<double>();
    s.dur_us = e.at("dur").get<double>();
    if (e.contains("args") && e.at("args").contains("bytes")) s.bytes = e.at("args").at("bytes").get<std::uint64_t>();
    run.tracks[names.at(e.at("tid").get<int>())].push_back(s);
  }
  std::ifstream metrics(o.metrics_path);
  for (std::string line; std::getline(metrics, line);) {
    if (!line.empty()) run.metrics.push_back(json::parse(line));
  }
  return run;
}

inline bool have_text() { return std::filesystem::is_regular_file(text_path()); }

}  // namespace strata::train::test
