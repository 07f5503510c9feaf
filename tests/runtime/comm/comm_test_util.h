#pragma once
// Shared by the communicator tests: the communicator under test (set by each test binary's
// main), rank-dependent values, and host <-> device staging in any dtype.
//
// The same collective tests (test_collectives.cpp) run on every backend: single and mpi on the
// host device (test_comm.cpp), nccl on a cuda device (test_nccl_comm.cpp). They never stop
// between collectives on a failed check (EXPECT, not ASSERT): every rank must issue every
// collective, or the other ranks would hang.
#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "runtime/comm/comm.h"
#include "runtime/device/device.h"

namespace strata::runtime::comm_test {

struct Context {
  device::Device* device = nullptr;
  comm::Communicator* comm = nullptr;
  bool poison = false;  // run only the test that breaks the communicator (it must be last)
};
Context& context();  // set by main before RUN_ALL_TESTS

// Depends on rank and index, differs between any two ranks at every index (so a wrong layout
// cannot pass), and is a small integer: exact in fp16/bf16, and so are sums over 3 ranks.
float value(int rank, std::size_t index);

// The value rounded to dtype (round-to-nearest-even), as a float.
float round_to(float x, DType dtype);

// Fills a device buffer of values.size() elements of dtype; synchronizes `stream`.
device::DeviceBuffer upload(device::Device& device, device::Stream& stream, const std::vector<float>& values,
                            DType dtype);
void upload_into(device::Stream& stream, void* dst, const std::vector<float>& values, DType dtype);

// Reads count elements of dtype at src (device memory); synchronizes `stream`.
std::vector<float> download(device::Stream& stream, const void* src, std::size_t count, DType dtype);
std::vector<unsigned char> download_bytes(device::Stream& stream, const void* src, std::size_t bytes);

// Equal element for element; on failure names the first mismatches and how many there are.
::testing::AssertionResult same_values(const std::vector<float>& expected,
                                       const std::vector<float>& actual);

}  // namespace strata::runtime::comm_test
