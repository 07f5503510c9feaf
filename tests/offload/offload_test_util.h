#pragma once
// Helpers shared by the offload tests: scratch folders and random bytes.
#include <stdlib.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <random>
#include <span>
#include <string>
#include <system_error>

namespace strata::offload::testing {

// A fresh folder under `parent` (default: $TMPDIR or /tmp), removed with its contents at the
// end of the test. path() is empty when it could not be made.
class TempDir {
 public:
  explicit TempDir(std::string parent = std::filesystem::temp_directory_path().string()) {
    std::string templ = parent + "/strata-offload-test-XXXXXX";
    if (::mkdtemp(templ.data()) != nullptr) path_ = templ;
  }
  ~TempDir() {
    std::error_code ec;
    if (!path_.empty()) std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// Deterministic pseudo-random bytes: the same seed gives the same bytes.
inline void fill_random(std::span<std::byte> out, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::size_t i = 0;
  for (; i + 8 <= out.size(); i += 8) {
    std::uint64_t v = rng();
    for (int b = 0; b < 8; ++b) out[i + b] = static_cast<std::byte>(v >> (8 * b));
  }
  std::uint64_t v = rng();
  for (int b = 0; i < out.size(); ++i, ++b) out[i] = static_cast<std::byte>(v >> (8 * b));
}

}  // namespace strata::offload::testing
