// main() of the CUDA kernel tests: exit 77 (skipped) where the CUDA runtime reports no device,
// else run the tests.
#include <cstdio>

#include <cuda_runtime.h>
#include <gtest/gtest.h>

int main(int argc, char** argv) {
  const char* name = argc > 0 ? argv[0] : "cuda test";
  int count = 0;
  const cudaError_t rc = cudaGetDeviceCount(&count);
  if (rc != cudaSuccess) {
    std::printf("%s: skipped: cudaGetDeviceCount failed: %s (%s)\n", name, cudaGetErrorString(rc),
                cudaGetErrorName(rc));
    return 77;
  }
  if (count == 0) {
    std::printf("%s: skipped: no CUDA device\n", name);
    return 77;
  }
  testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
