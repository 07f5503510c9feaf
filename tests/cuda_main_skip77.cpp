// main() for the tests that need a GPU (runtime/device's CUDA backend): without a usable CUDA
// device the executable says why and exits 77, which ctest counts as skipped; otherwise it runs
// GoogleTest. Linked into the tests registered with LABELS cuda NO_MAIN.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>

#include "runtime/device/device.h"

int main(int argc, char** argv) {
  const auto cuda = strata::runtime::device::cuda_availability();
  if (cuda.devices.empty()) {
    const std::string name = argc > 0 ? std::filesystem::path(argv[0]).filename().string() : "test";
    std::printf("%s: skipped: no usable CUDA device: %s\n", name.c_str(), cuda.why_not.c_str());
    return 77;
  }
  testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
