// StepMetrics as a JSON line, MetricsWriter's JSONL file and its errors, the summary tables.
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "runtime/telemetry/step_metrics.h"
#include "runtime/telemetry/tables.h"

namespace strata::runtime {
namespace {

class TempDir {
 public:
  TempDir() {
    std::string templ = std::filesystem::temp_directory_path().string() + "/strata-telemetry-XXXXXX";
    if (::mkdtemp(templ.data()) != nullptr) dir_ = templ;
  }
  ~TempDir() {
    std::error_code ec;
    if (!dir_.empty()) std::filesystem::remove_all(dir_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& dir() const { return dir_; }

 private:
  std::string dir_;
};

telemetry::StepMetrics sample(std::uint64_t step) {
  telemetry::StepMetrics m;
  m.step = step;
  m.loss = 4.25;
  m.lr = 1e-3;
  m.step_ms = 412.5;
  m.tokens_per_s = 9900;
  m.tflops = 12.5;
  m.grad_norm = 1.5;
  m.loss_scale = 65536;
  m.skipped = true;
  m.phase_ms = {{"forward", 100}, {"backward", 200}, {"optimizer", 112.5}};
  m.bytes = {.nvme_read = 1, .nvme_write = 2, .h2d = 3, .d2h = 4, .collective = 5};
  m.collective_theory_bytes = 5.5;
  m.device = {10, 20, 30};
  m.pinned = {40, 50, 0};
  m.nvme = {std::uint64_t{1} << 40, std::uint64_t{1} << 41, std::uint64_t{1} << 42};
  m.memory_at_phase = {{"device/after_forward", {7, 8, 9}}};
  m.busiest = "cpu adam";
  m.busiest_ms = 300;
  m.overlap = 1.375;
  m.busy_ms = {{"compute", 250.0}, {"cpu adam", 300.0}};
  m.speculative_updates = 13;
  m.speculative_redone = 4;
  return m;
}

std::vector<std::string> read_lines(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

TEST(StepMetricsJson, OneObjectWithEveryKeyInOrder) {
  const std::string line = to_json_line(sample(7));
  EXPECT_EQ(line.find('\n'), std::string::npos);
  nlohmann::ordered_json j = nlohmann::ordered_json::parse(line);
  std::vector<std::string> keys;
  for (const auto& [key, value] : j.items()) keys.push_back(key);
  const std::vector<std::string> expected{
      "step",     "loss",           "lr",     "step_ms",
      "tokens_per_s", "tflops",     "grad_norm", "loss_scale",
      "skipped",  "phase_ms",       "bytes",  "collective_theory_bytes",
      "memory",   "memory_at_phase", "busiest", "busiest_ms",
      "overlap",  "busy_ms", "speculative"};
  EXPECT_EQ(keys, expected);
  ASSERT_EQ(j["busy_ms"].size(), 2u);
  EXPECT_DOUBLE_EQ(j["busy_ms"]["cpu adam"].get<double>(), 300.0);

  EXPECT_EQ(j["step"], 7);
  EXPECT_DOUBLE_EQ(j["loss"].get<double>(), 4.25);
  EXPECT_DOUBLE_EQ(j["lr"].get<double>(), 1e-3);
  EXPECT_DOUBLE_EQ(j["step_ms"].get<double>(), 412.5);
  EXPECT_DOUBLE_EQ(j["tokens_per_s"].get<double>(), 9900);
  EXPECT_DOUBLE_EQ(j["tflops"].get<double>(), 12.5);
  EXPECT_DOUBLE_EQ(j["grad_norm"].get<double>(), 1.5);
  EXPECT_DOUBLE_EQ(j["loss_scale"].get<double>(), 65536);
  EXPECT_EQ(j["skipped"], true);
  ASSERT_EQ(j["phase_ms"].size(), 3u);
  EXPECT_EQ(j["phase_ms"].begin().key(), "forward");  // in the order given
  EXPECT_DOUBLE_EQ(j["phase_ms"]["optimizer"].get<double>(), 112.5);
  EXPECT_EQ(j["bytes"]["nvme_read"], 1);
  EXPECT_EQ(j["bytes"]["nvme_write"], 2);
  EXPECT_EQ(j["bytes"]["h2d"], 3);
  EXPECT_EQ(j["bytes"]["d2h"], 4);
  EXPECT_EQ(j["bytes"]["collective"], 5);
  EXPECT_DOUBLE_EQ(j["collective_theory_bytes"].get<double>(), 5.5);
  for (const char* tier : {"device", "pinned", "nvme"}) {
    ASSERT_TRUE(j["memory"].contains(tier)) << tier;
    for (const char* key : {"current_bytes", "peak_bytes", "budget_bytes"}) {
      EXPECT_TRUE(j["memory"][tier].contains(key)) << tier << "." << key;
    }
  }
  EXPECT_EQ(j["memory"]["device"]["peak_bytes"], 20);
  EXPECT_EQ(j["memory"]["nvme"]["budget_bytes"].get<std::uint64_t>(), std::uint64_t{1} << 42);
  EXPECT_EQ(j["memory_at_phase"]["device/after_forward"]["current_bytes"], 7);
  EXPECT_EQ(j["busiest"], "cpu adam");
  EXPECT_DOUBLE_EQ(j["busiest_ms"].get<double>(), 300);
  EXPECT_DOUBLE_EQ(j["overlap"].get<double>(), 1.375);
  EXPECT_EQ(j["speculative"]["updates"], 13);
  EXPECT_EQ(j["speculative"]["redone"], 4);
}

TEST(StepMetricsJson, DefaultsAndNonFiniteNumbers) {
  telemetry::StepMetrics m;
  m.loss = std::numeric_limits<double>::quiet_NaN();
  m.phase_ms = {{"name \"with\" quotes\n", 1.0}};
  nlohmann::json j = nlohmann::json::parse(to_json_line(m));
  EXPECT_TRUE(j["loss"].is_null());  // a diverged loss stays valid JSON
  EXPECT_DOUBLE_EQ(j["grad_norm"].get<double>(), -1);
  EXPECT_DOUBLE_EQ(j["loss_scale"].get<double>(), 1);
  EXPECT_EQ(j["skipped"], false);
  EXPECT_TRUE(j["memory_at_phase"].is_object());
  EXPECT_TRUE(j["memory_at_phase"].empty());
  EXPECT_EQ(j["busiest"], "");
  EXPECT_TRUE(j["phase_ms"].contains("name \"with\" quotes\n"));
}

TEST(MetricsWriter, WritesOneLinePerStep) {
  TempDir tmp;
  ASSERT_FALSE(tmp.dir().empty());
  const std::string path = tmp.dir() + "/metrics.jsonl";
  {
    telemetry::MetricsWriter writer(path);
    EXPECT_TRUE(writer.enabled());
    EXPECT_EQ(writer.path(), path);
    for (std::uint64_t s = 1; s <= 5; ++s) {
      writer.write(sample(s));
      // Flushed after each line: a reader sees it while the writer is still open.
      EXPECT_EQ(read_lines(path).size(), s);
    }
  }
  std::vector<std::string> lines = read_lines(path);
  ASSERT_EQ(lines.size(), 5u);
  for (std::size_t i = 0; i < lines.size(); ++i) {
    EXPECT_EQ(nlohmann::json::parse(lines[i])["step"], i + 1);
  }
  // A new writer truncates.
  { telemetry::MetricsWriter writer(path); writer.write(sample(9)); }
  EXPECT_EQ(read_lines(path).size(), 1u);
}

TEST(MetricsWriter, EmptyPathIsDisabled) {
  telemetry::MetricsWriter writer("");
  EXPECT_FALSE(writer.enabled());
  EXPECT_NO_THROW(writer.write(sample(1)));
}

TEST(MetricsWriter, MovedWriterKeepsWriting) {
  TempDir tmp;
  const std::string path = tmp.dir() + "/m.jsonl";
  telemetry::MetricsWriter a(path);
  a.write(sample(1));
  telemetry::MetricsWriter b(std::move(a));
  b.write(sample(2));
  EXPECT_EQ(read_lines(path).size(), 2u);
}

TEST(MetricsWriter, UncreatablePathIsAnErrorNamingIt) {
  const std::string path = "/nonexistent/strata/metrics.jsonl";
  try {
    telemetry::MetricsWriter writer(path);
    FAIL() << "creating a file in a missing folder succeeded";
  } catch (const Error& e) {
    EXPECT_EQ(e.where(), path);
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos);
  }
}

TEST(MetricsWriter, FullDiskIsAnErrorNamingThePath) {
  if (::access("/dev/full", W_OK) != 0) GTEST_SKIP() << "no writable /dev/full";
  telemetry::MetricsWriter writer("/dev/full");
  try {
    writer.write(sample(3));
    FAIL() << "writing to /dev/full succeeded";
  } catch (const Error& e) {
    EXPECT_EQ(e.where(), "/dev/full");
    EXPECT_NE(std::string(e.what()).find("step 3"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(std::strerror(ENOSPC)), std::string::npos) << e.what();
  }
}

TEST(Tables, MemoryTable) {
  const std::string text = telemetry::memory_table({{"device", {512 << 20, 600 << 20, 1 << 30}},
                                         {"nvme", {2u << 30, 2u << 30, 0}}});
  EXPECT_EQ(text,
            "tier       current        peak    budget  peak/budget\n"
            "device  512.00 MiB  600.00 MiB  1.00 GiB        58.6%\n"
            "nvme      2.00 GiB    2.00 GiB         -            -\n")
      << text;
}

TEST(Tables, BytesTable) {
  telemetry::LinkBytes b{.nvme_read = std::uint64_t{4} << 30, .nvme_write = 1u << 30, .h2d = 3u << 20, .d2h = 1024,
              .collective = 3u << 29};
  const std::string text = bytes_table(b, static_cast<double>(1u << 30));
  EXPECT_EQ(text,
            "link           bytes\n"
            "NVMe read   4.00 GiB\n"
            "NVMe write  1.00 GiB\n"
            "H2D         3.00 MiB\n"
            "D2H         1.00 KiB\n"
            "collective  1.50 GiB  (ZeRO theory 1.00 GiB: 1.50x)\n")
      << text;
  // Without a theory the note is left out.
  EXPECT_EQ(bytes_table(b, 0).find("theory"), std::string::npos);
}

}  // namespace
}  // namespace strata::runtime
