#pragma once
// What the token file tests share (test_token_data.cpp, test_token_file_wide.cpp): a fresh folder
// per test, raw file bytes in and out, an llm.c header, and the strata::Error a call throws.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "core/error.h"

namespace strata::models::testing {

class TokenFolderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (std::filesystem::temp_directory_path() / "strata_token_data_XXXXXX").string();
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  static void write_bytes(const std::string& p, const std::vector<unsigned char>& bytes) {
    std::ofstream f(p, std::ios::binary | std::ios::trunc);
    f.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
    ASSERT_TRUE(f.good());
  }

  static std::vector<unsigned char> read_bytes(const std::string& p) {
    std::ifstream f(p, std::ios::binary);
    return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
  }

  // An llm.c header (256 int32 LE: magic, version, count, zeros) followed by `body_bytes` bytes
  // (byte i of the body is i mod 256).
  static std::vector<unsigned char> file_bytes(std::int32_t magic, std::int32_t version, std::int32_t count,
                                               std::size_t body_bytes) {
    std::vector<unsigned char> out(1024 + body_bytes, 0);
    const std::int32_t fields[3] = {magic, version, count};
    for (std::size_t k = 0; k < 3; ++k) {
      for (std::size_t b = 0; b < 4; ++b)
        out[4 * k + b] = static_cast<unsigned char>(static_cast<std::uint32_t>(fields[k]) >> (8 * b));
    }
    for (std::size_t i = 0; i < body_bytes; ++i) out[1024 + i] = static_cast<unsigned char>(i);
    return out;
  }

  // Runs f, expects a strata::Error, and returns it.
  template <typename F>
  static Error expect_error(F&& f) {
    try {
      f();
    } catch (const Error& e) {
      return e;
    }
    ADD_FAILURE() << "no strata::Error thrown";
    return Error("none");
  }

  std::filesystem::path dir_;
};

inline bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

}  // namespace strata::models::testing

#define EXPECT_HAS(s, part) \
  EXPECT_TRUE(::strata::models::testing::contains((s), (part))) << "'" << (s) << "' lacks '" << (part) << "'"
