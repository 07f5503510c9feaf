// kernels/cuda/quantize.cu against the host dequantization (the oracle): bit-identical for INT8
// and INT4, groups of 64 and 128, every output dtype, sizes that pad the last group, with
// nothing written past numel. Exits 77 (skipped) where no GPU can be used.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/cuda/ops.h"
#include "kernels/host/quantize.h"
#include "tests/kernels/cuda_test_util.h"

namespace strata {
namespace {

using test::DeviceBuffer;
using test::Stream;

TEST(QuantizeCuda, DequantizeEqualsHostBitForBit) {
  std::mt19937 rng(5);
  std::normal_distribution<float> d(0.0f, 0.1f);
  for (int bits : {8, 4}) {
    for (int group : {64, 128}) {
      for (std::size_t n : {std::size_t{1}, std::size_t{100}, std::size_t{4096}, std::size_t{1'000'003}}) {
        std::vector<float> x(n);
        for (float& v : x) v = d(rng);
        std::vector<std::uint8_t> q(kernels::host::quant_bytes(n, group, bits));
        kernels::host::quantize_groupwise(x.data(), n, group, bits, q.data());
        DeviceBuffer d_q(q.size());
        d_q.upload(q.data(), q.size());
        for (DType dtype : test::kAllDTypes) {
          SCOPED_TRACE(testing::Message() << "bits " << bits << " group " << group << " n " << n << " "
                                          << dtype_name(dtype));
          const std::size_t bytes = n * dtype_size(dtype);
          std::vector<unsigned char> expected(bytes);
          kernels::host::dequantize_groupwise(expected.data(), dtype, q.data(), n, group, bits);
          DeviceBuffer d_out(bytes, /*guard=*/256);
          Stream stream;
          kernels::cuda::dequantize_groupwise(d_out.get(), dtype, d_q.get(), n, group, bits, stream.s);
          stream.sync();
          std::vector<unsigned char> got(bytes + 256);
          d_out.download(got.data(), bytes + 256);
          ASSERT_EQ(std::memcmp(got.data(), expected.data(), bytes), 0);
          for (std::size_t i = bytes; i < bytes + 256; ++i) ASSERT_EQ(got[i], test::kGuardByte) << "past numel";
        }
      }
    }
  }
}

}  // namespace
}  // namespace strata
