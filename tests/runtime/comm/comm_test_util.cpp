#include "comm_test_util.h"

#include <algorithm>
#include <cstring>

namespace strata::runtime::comm_test {

Context& context() {
  static Context c;  // the communicator under test, owned by main
  return c;
}

float value(int rank, std::size_t index) {
  // For ranks r != s the difference is 13(r-s) plus a multiple of 41 minus 17(r-s) mod 41:
  // never 0 for |r - s| < 41.
  const auto r = static_cast<std::size_t>(rank);
  return static_cast<float>(static_cast<int>((index * 5 + 3 + r * 17) % 41) + 13 * rank - 20);
}

float round_to(float x, DType dtype) {
  float out = 0;
  std::vector<unsigned char> bits(dtype_size(dtype));
  convert(&x, DType::f32, bits.data(), dtype, 1);
  convert(bits.data(), dtype, &out, DType::f32, 1);
  return out;
}

void upload_into(device::Stream& stream, void* dst, const std::vector<float>& values, DType dtype) {
  std::vector<unsigned char> bytes(values.size() * dtype_size(dtype));
  convert(values.data(), DType::f32, bytes.data(), dtype, values.size());
  stream.copy_async(dst, bytes.data(), bytes.size());
  stream.synchronize();  // `bytes` dies here
}

device::DeviceBuffer upload(device::Device& device, device::Stream& stream, const std::vector<float>& values,
                            DType dtype) {
  // Never empty: a zero-count collective still gets distinct, valid pointers.
  device::DeviceBuffer buffer =
      device.allocate(std::max<std::size_t>(1, values.size()) * dtype_size(dtype), "comm test");
  upload_into(stream, buffer.data(), values, dtype);
  return buffer;
}

std::vector<unsigned char> download_bytes(device::Stream& stream, const void* src, std::size_t bytes) {
  std::vector<unsigned char> out(bytes);
  stream.copy_async(out.data(), src, bytes);
  stream.synchronize();
  return out;
}

std::vector<float> download(device::Stream& stream, const void* src, std::size_t count, DType dtype) {
  std::vector<unsigned char> bytes = download_bytes(stream, src, count * dtype_size(dtype));
  std::vector<float> out(count);
  convert(bytes.data(), dtype, out.data(), DType::f32, count);
  return out;
}

::testing::AssertionResult same_values(const std::vector<float>& expected,
                                       const std::vector<float>& actual) {
  if (expected.size() != actual.size()) {
    return ::testing::AssertionFailure()
           << "size " << actual.size() << ", expected " << expected.size();
  }
  std::size_t mismatches = 0;
  auto failure = ::testing::AssertionFailure();
  for (std::size_t i = 0; i < expected.size(); ++i) {
    // Bitwise: -0 vs +0 or a changed NaN would be a real difference too.
    if (std::memcmp(&expected[i], &actual[i], sizeof(float)) == 0) continue;
    if (mismatches < 5)
      failure << "[" << i << "] = " << actual[i] << ", expected " << expected[i] << "; ";
    ++mismatches;
  }
  if (mismatches == 0) return ::testing::AssertionSuccess();
  return failure << mismatches << " of " << expected.size() << " elements differ";
}

}  // namespace strata::runtime::comm_test
