#pragma once
// Helpers shared by the trace tests: a temporary trace path and reading the JSON back.
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace strata::runtime::test {

// A path in a fresh temporary folder, removed (with everything in it) at the end.
class TracePath {
 public:
  TracePath() {
    std::string templ = std::filesystem::temp_directory_path().string() + "/strata-trace-XXXXXX";
    if (::mkdtemp(templ.data()) != nullptr) dir_ = templ;
  }
  ~TracePath() {
    std::error_code ec;
    if (!dir_.empty()) std::filesystem::remove_all(dir_, ec);
  }
  TracePath(const TracePath&) = delete;
  TracePath& operator=(const TracePath&) = delete;
  std::string dir() const { return dir_; }
  std::string file() const { return dir_ + "/trace.json"; }

 private:
  std::string dir_;
};

inline nlohmann::json read_json(const std::string& path) {
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << path;
  return nlohmann::json::parse(in);  // throws (fails the test) on invalid JSON
}

// tid -> thread_name of the metadata events.
inline std::map<int, std::string> track_names(const nlohmann::json& trace) {
  std::map<int, std::string> names;
  for (const auto& e : trace.at("traceEvents")) {
    if (e.at("ph") == "M" && e.at("name") == "thread_name") {
      names[e.at("tid").get<int>()] = e.at("args").at("name").get<std::string>();
    }
  }
  return names;
}

}  // namespace strata::runtime::test
