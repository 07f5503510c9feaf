// The machine profile (runtime/estimate/machine_profile.h): written and read back field for
// field, and every way a file can be wrong refused with a message naming the file and the key.
#include "runtime/estimate/machine_profile.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <limits>
#include <string>

#include <nlohmann/json.hpp>

#include "core/error.h"

using strata::Error;
using namespace strata::runtime::estimate;
namespace fs = std::filesystem;

namespace {

MachineProfile sample() {
  MachineProfile p;
  p.backend = "host";
  p.device_name = "host";
  p.dtype = "fp32";
  p.threads = 2;
  p.cpu_adam_elements_per_s = 412.5e6;
  p.memory_bytes_per_s = 11.25e9;
  p.h2d_bytes_per_s = 6.5e9;
  p.d2h_bytes_per_s = 6.25e9;
  p.disk_read_bytes_per_s = 1.75e9;
  p.disk_write_bytes_per_s = 0.875e9;
  p.disk_block_bytes = 1 << 20;
  p.disk_queue_depth = 8;
  p.disk_dir = "/var/tmp";
  p.gemm_flops_per_s = 0.1234567891e12;
  p.step_flops_per_s = 0.0456789e12;
  p.step_points = {{128, 2, 4, 128, 0.031e12}, {512, 2, 4, 128, 0.0789e12}};
  p.cpu_matmul_bytes_per_s = 5.5e9;
  p.cpu_matmul_flops_per_s = 0.0625e12;
  return p;
}

class MachineProfileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("strata-machine-profile-" + std::to_string(::getpid()));
    fs::create_directories(dir_);
    path_ = (dir_ / "machine.json").string();
  }
  void TearDown() override { fs::remove_all(dir_); }

  void write(const std::string& text) const { std::ofstream(path_, std::ios::binary) << text; }

  // The sample's JSON with `edit` applied.
  template <typename F>
  void write_edited(F&& edit) const {
    nlohmann::json j = nlohmann::json::parse(machine_profile_json(sample()));
    edit(j);
    write(j.dump());
  }

  // The message of read_machine_profile(path_); fails the test when it does not throw Error.
  std::string read_error() const {
    try {
      read_machine_profile(path_);
    } catch (const Error& e) {
      return e.what();
    }
    ADD_FAILURE() << "read_machine_profile accepted " << path_;
    return "";
  }

  fs::path dir_;
  std::string path_;
};

TEST_F(MachineProfileTest, RoundTripsEveryField) {
  const MachineProfile p = sample();
  write_machine_profile(p, path_);
  const MachineProfile q = read_machine_profile(path_);
  EXPECT_EQ(q.backend, p.backend);
  EXPECT_EQ(q.device_name, p.device_name);
  EXPECT_EQ(q.dtype, p.dtype);
  EXPECT_EQ(q.threads, p.threads);
  // Doubles are written with enough digits to come back bit for bit.
  EXPECT_EQ(q.cpu_adam_elements_per_s, p.cpu_adam_elements_per_s);
  EXPECT_EQ(q.memory_bytes_per_s, p.memory_bytes_per_s);
  EXPECT_EQ(q.h2d_bytes_per_s, p.h2d_bytes_per_s);
  EXPECT_EQ(q.d2h_bytes_per_s, p.d2h_bytes_per_s);
  EXPECT_EQ(q.disk_read_bytes_per_s, p.disk_read_bytes_per_s);
  EXPECT_EQ(q.disk_write_bytes_per_s, p.disk_write_bytes_per_s);
  EXPECT_EQ(q.disk_block_bytes, p.disk_block_bytes);
  EXPECT_EQ(q.disk_queue_depth, p.disk_queue_depth);
  EXPECT_EQ(q.disk_dir, p.disk_dir);
  EXPECT_EQ(q.gemm_flops_per_s, p.gemm_flops_per_s);
  EXPECT_EQ(q.step_flops_per_s, p.step_flops_per_s);
  EXPECT_EQ(q.cpu_matmul_bytes_per_s, p.cpu_matmul_bytes_per_s);
  EXPECT_EQ(q.cpu_matmul_flops_per_s, p.cpu_matmul_flops_per_s);
  ASSERT_EQ(q.step_points.size(), 2u);
  for (std::size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(q.step_points[i].hidden, p.step_points[i].hidden);
    EXPECT_EQ(q.step_points[i].layers, p.step_points[i].layers);
    EXPECT_EQ(q.step_points[i].batch, p.step_points[i].batch);
    EXPECT_EQ(q.step_points[i].seq_len, p.step_points[i].seq_len);
    EXPECT_EQ(q.step_points[i].flops_per_s, p.step_points[i].flops_per_s);
  }
  // The documented form: the version key, the device object; no temporary file left behind.
  const nlohmann::json j = nlohmann::json::parse(machine_profile_json(p));
  EXPECT_EQ(j.at("strata_machine_profile"), kMachineProfileVersion);
  EXPECT_EQ(j.at("device").at("backend"), "host");
  EXPECT_EQ(std::distance(fs::directory_iterator(dir_), fs::directory_iterator()), 1);
}

TEST_F(MachineProfileTest, IgnoresUnknownKeys) {
  write_edited([](nlohmann::json& j) { j["measured_by"] = "a later strata"; });
  EXPECT_EQ(read_machine_profile(path_).threads, 2);
}

// A profile written before the CPU matmul rates reads with them 0; given, they must be rates.
TEST_F(MachineProfileTest, TheCpuMatmulRatesAreOptional) {
  write_edited([](nlohmann::json& j) {
    j.erase("cpu_matmul_bytes_per_s");
    j.erase("cpu_matmul_flops_per_s");
  });
  const MachineProfile q = read_machine_profile(path_);
  EXPECT_EQ(q.cpu_matmul_bytes_per_s, 0.0);
  EXPECT_EQ(q.cpu_matmul_flops_per_s, 0.0);
  write_edited([](nlohmann::json& j) { j["cpu_matmul_flops_per_s"] = -1; });
  const std::string e = read_error();
  EXPECT_NE(e.find("cpu_matmul_flops_per_s"), std::string::npos) << e;
}

TEST_F(MachineProfileTest, RewritingReplacesTheFile) {
  write_machine_profile(sample(), path_);
  MachineProfile p = sample();
  p.threads = 7;
  write_machine_profile(p, path_);
  EXPECT_EQ(read_machine_profile(path_).threads, 7);
}

TEST_F(MachineProfileTest, MissingFileNamesThePath) {
  const std::string e = read_error();
  EXPECT_NE(e.find(path_), std::string::npos) << e;
  EXPECT_NE(e.find("strata bench machine"), std::string::npos) << e;
}

TEST_F(MachineProfileTest, NotJsonNamesThePath) {
  write("{\"strata_machine_profile\": 1,");
  const std::string e = read_error();
  EXPECT_NE(e.find(path_), std::string::npos) << e;
  EXPECT_NE(e.find("not a JSON object"), std::string::npos) << e;
}

TEST_F(MachineProfileTest, WrongVersionNamesTheKey) {
  write_edited([](nlohmann::json& j) { j["strata_machine_profile"] = 2; });
  const std::string e = read_error();
  EXPECT_NE(e.find(path_), std::string::npos) << e;
  EXPECT_NE(e.find("strata_machine_profile"), std::string::npos) << e;
  EXPECT_NE(e.find("version 1"), std::string::npos) << e;
}

TEST_F(MachineProfileTest, MissingRateNamesTheKey) {
  for (const char* key : {"cpu_adam_elements_per_s", "memory_bytes_per_s", "h2d_bytes_per_s", "d2h_bytes_per_s",
                          "disk_read_bytes_per_s", "disk_write_bytes_per_s", "gemm_flops_per_s",
                          "step_flops_per_s"}) {
    write_edited([key](nlohmann::json& j) { j.erase(key); });
    const std::string e = read_error();
    EXPECT_NE(e.find(path_), std::string::npos) << e;
    EXPECT_NE(e.find(std::string(key) + " is missing"), std::string::npos) << e;
  }
}

TEST_F(MachineProfileTest, NonPositiveOrNonNumericRateNamesTheKey) {
  for (const nlohmann::json& bad : {nlohmann::json(0), nlohmann::json(-1.5e9), nlohmann::json("fast"),
                                    nlohmann::json(nullptr)}) {
    write_edited([&bad](nlohmann::json& j) { j["disk_read_bytes_per_s"] = bad; });
    const std::string e = read_error();
    EXPECT_NE(e.find(path_), std::string::npos) << e;
    EXPECT_NE(e.find("disk_read_bytes_per_s is " + bad.dump()), std::string::npos) << e;
  }
}

TEST_F(MachineProfileTest, BadDeviceDtypeAndCountsNameTheKey) {
  write_edited([](nlohmann::json& j) { j["device"].erase("backend"); });
  EXPECT_NE(read_error().find("device.backend is missing"), std::string::npos);
  write_edited([](nlohmann::json& j) { j["device"]["backend"] = "tpu"; });
  EXPECT_NE(read_error().find("device.backend is \"tpu\""), std::string::npos);
  write_edited([](nlohmann::json& j) { j["dtype"] = "fp8"; });
  EXPECT_NE(read_error().find("dtype is \"fp8\""), std::string::npos);
  write_edited([](nlohmann::json& j) { j["threads"] = 0; });
  EXPECT_NE(read_error().find("threads is 0"), std::string::npos);
  write_edited([](nlohmann::json& j) { j["disk_queue_depth"] = 2.5; });
  EXPECT_NE(read_error().find("disk_queue_depth is 2.5"), std::string::npos);
}

TEST_F(MachineProfileTest, BadStepPointsNameTheKey) {
  write_edited([](nlohmann::json& j) { j.erase("step_points"); });
  EXPECT_NE(read_error().find("step_points is missing"), std::string::npos);
  write_edited([](nlohmann::json& j) { j["step_points"] = nlohmann::json::array(); });
  EXPECT_NE(read_error().find("step_points is not a list"), std::string::npos);
  write_edited([](nlohmann::json& j) { j["step_points"][1]["flops_per_s"] = -1; });
  EXPECT_NE(read_error().find("step_points[1].flops_per_s is not a positive rate"), std::string::npos);
  write_edited([](nlohmann::json& j) { j["step_points"][0].erase("hidden"); });
  EXPECT_NE(read_error().find("step_points[0].hidden is missing"), std::string::npos);
  write_edited([](nlohmann::json& j) { j["step_points"][1]["hidden"] = 64; });
  EXPECT_NE(read_error().find("step_points[1].hidden is not larger"), std::string::npos);
}

TEST_F(MachineProfileTest, UnwritableFolderNamesThePath) {
  const std::string path = (dir_ / "missing" / "machine.json").string();
  try {
    write_machine_profile(sample(), path);
    ADD_FAILURE() << "wrote into a missing folder";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find((dir_ / "missing").string()), std::string::npos) << e.what();
  }
}

}  // namespace
