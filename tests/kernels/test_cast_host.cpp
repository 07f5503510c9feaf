// kernels/host/cast.h: the OpenMP cast gives exactly core's convert, for every dtype pair
// (same-dtype copies included), small and large (multi-chunk) arrays, any thread count.
#include "kernels/host/cast.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <cstring>
#include <vector>

#include "core/dtype.h"
#include "tests/core/fp_reference.h"

namespace strata {
namespace {

constexpr DType kDTypes[] = {DType::f32, DType::f16, DType::bf16};

void check_pair(DType from, DType to, std::size_t n, std::size_t dst_offset_bytes) {
  SCOPED_TRACE(testing::Message() << dtype_name(from) << "->" << dtype_name(to) << " n=" << n
                                  << " dst+" << dst_offset_bytes << " threads="
                                  << omp_get_max_threads());
  const std::vector<unsigned char> src = test::source_bytes(from, n, n * 31 + 7);
  const std::size_t bytes = n * dtype_size(to);
  std::vector<unsigned char> expected(bytes + 1), got(bytes + dst_offset_bytes + 16, 0xA5);
  convert(src.data(), from, expected.data(), to, n);
  kernels::host::cast(src.data(), from, got.data() + dst_offset_bytes, to, n);
  ASSERT_EQ(std::memcmp(got.data() + dst_offset_bytes, expected.data(), bytes), 0);
  for (std::size_t i = 0; i < dst_offset_bytes; ++i) ASSERT_EQ(got[i], 0xA5);
  for (std::size_t i = dst_offset_bytes + bytes; i < got.size(); ++i) ASSERT_EQ(got[i], 0xA5);
}

TEST(CastHost, MatchesCoreConvertForAllPairs) {
  // Sizes below one chunk (the calling thread only), and across many chunks with a ragged end.
  const std::size_t sizes[] = {0, 1, 17, 4099, (std::size_t{1} << 18) * 3 + 12345};
  for (DType from : kDTypes)
    for (DType to : kDTypes)
      for (std::size_t n : sizes) {
        check_pair(from, to, n, 0);
        check_pair(from, to, n, 2);  // misaligned destination
      }
}

TEST(CastHost, SameResultForAnyThreadCount) {
  const int saved = omp_get_max_threads();
  for (int threads : {1, 3, 8}) {
    omp_set_num_threads(threads);
    for (DType from : kDTypes)
      for (DType to : kDTypes) check_pair(from, to, (std::size_t{1} << 20) + 3, 0);
  }
  omp_set_num_threads(saved);
}

TEST(CastHost, InPlaceSameDTypeIsANoOp) {
  std::vector<float> v = {1.0f, -2.5f, test::float_of(0x7F800001)};  // a signalling NaN too
  const std::vector<float> before = v;
  kernels::host::cast(v.data(), DType::f32, v.data(), DType::f32, v.size());
  EXPECT_EQ(std::memcmp(v.data(), before.data(), v.size() * 4), 0);
  kernels::host::cast(nullptr, DType::f16, nullptr, DType::f32, 0);
}

}  // namespace
}  // namespace strata
