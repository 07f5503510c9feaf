// kernels/cuda/cast.h against the host cast (the oracle): bit-identical for every dtype pair,
// on edge and random data (NaN payloads, subnormals, ties), aligned (vectorized kernel) and
// misaligned by whole elements (scalar kernel), with nothing written outside the destination.
// Exits 77 (skipped) where no GPU can be used.
#include "kernels/cuda/cast.h"

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <vector>

#include "core/error.h"
#include "kernels/host/cast.h"
#include "tests/core/fp_reference.h"
#include "tests/kernels/cuda_test_util.h"

namespace strata {
namespace {

constexpr DType kDTypes[] = {DType::f32, DType::f16, DType::bf16};
constexpr unsigned char kPoison = 0xA5;

using test::DeviceBuffer;  // tests/kernels/cuda_test_util.h
using test::Stream;

// offset_elems shifts both pointers by whole elements, which breaks the 8-element vector
// alignment and so runs the scalar kernel.
void check_pair(DType from, DType to, std::size_t n, std::size_t offset_elems) {
  SCOPED_TRACE(testing::Message() << dtype_name(from) << "->" << dtype_name(to) << " n=" << n
                                  << " offset=" << offset_elems);
  constexpr std::size_t kGuard = 256;
  const std::vector<unsigned char> src = test::source_bytes(from, n, n * 131 + 5);
  const std::size_t src_off = offset_elems * dtype_size(from);
  const std::size_t dst_off = kGuard + offset_elems * dtype_size(to);
  const std::size_t dst_bytes = n * dtype_size(to);
  std::vector<unsigned char> expected(dst_bytes + 1);
  kernels::host::cast(src.data(), from, expected.data(), to, n);

  Stream stream;
  DeviceBuffer d_src(src.size() + src_off + 1), d_dst(dst_off + dst_bytes + kGuard);
  const std::size_t total = dst_off + dst_bytes + kGuard;
  // Before the upload, which waits for the device: the cast's stream does not wait for the
  // legacy stream's memset.
  CUDA_CHECK(cudaMemset(d_dst.get(), kPoison, total));
  d_src.upload(src.data(), src.size(), src_off);
  kernels::cuda::cast(d_src.as<unsigned char>(src_off), from, d_dst.as<unsigned char>(dst_off), to,
                      n, stream.s);
  stream.sync();
  std::vector<unsigned char> got(total);
  d_dst.download(got.data(), total);

  for (std::size_t i = 0; i < n; ++i) {
    const std::size_t size = dtype_size(to);
    if (std::memcmp(got.data() + dst_off + i * size, expected.data() + i * size, size) != 0) {
      std::uint32_t g = 0, e = 0, s = 0;
      std::memcpy(&g, got.data() + dst_off + i * size, size);
      std::memcpy(&e, expected.data() + i * size, size);
      std::memcpy(&s, src.data() + i * dtype_size(from), dtype_size(from));
      FAIL() << "element " << i << ": source 0x" << std::hex << s << ", cuda 0x" << g
             << ", host 0x" << e;
    }
  }
  for (std::size_t i = 0; i < dst_off; ++i) ASSERT_EQ(got[i], kPoison) << "wrote before dst";
  for (std::size_t i = dst_off + dst_bytes; i < total; ++i) ASSERT_EQ(got[i], kPoison) << "wrote past the end";
}

TEST(CastCuda, MatchesHostForAllPairs) {
  const std::size_t sizes[] = {0, 1, 7, 8, 33, 4099, 1000003, (std::size_t{1} << 22) + 5};
  for (DType from : kDTypes)
    for (DType to : kDTypes)
      for (std::size_t n : sizes)
        for (std::size_t offset : {0, 1, 3}) {
          check_pair(from, to, n, offset);
          if (HasFailure()) return;
        }
}

// Every 16-bit pattern as fp16 and as bf16, to every dtype.
TEST(CastCuda, MatchesHostOnAll16BitPatterns) {
  const std::vector<std::uint16_t> all = test::all_16bit_patterns();
  for (DType from : {DType::f16, DType::bf16}) {
    for (DType to : kDTypes) {
      SCOPED_TRACE(testing::Message() << dtype_name(from) << "->" << dtype_name(to));
      std::vector<unsigned char> expected(all.size() * dtype_size(to));
      kernels::host::cast(all.data(), from, expected.data(), to, all.size());
      Stream stream;
      DeviceBuffer d_src(all.size() * 2), d_dst(expected.size());
      d_src.upload(all.data(), all.size() * 2);
      kernels::cuda::cast(d_src.get(), from, d_dst.get(), to, all.size(), stream.s);
      stream.sync();
      std::vector<unsigned char> got(expected.size());
      d_dst.download(got.data(), got.size());
      EXPECT_EQ(std::memcmp(got.data(), expected.data(), got.size()), 0);
    }
  }
}

// The fp32 tie sweeps: every rounding case of every binade of fp16 and bf16.
TEST(CastCuda, MatchesHostOnTieSweeps) {
  for (int dropped : {13, 16}) {
    const std::vector<float> sweep = test::tie_sweep_fp32(dropped);
    const DType to = dropped == 13 ? DType::f16 : DType::bf16;
    std::vector<std::uint16_t> expected(sweep.size()), got(sweep.size());
    kernels::host::cast(sweep.data(), DType::f32, expected.data(), to, sweep.size());
    Stream stream;
    DeviceBuffer d_src(sweep.size() * 4), d_dst(sweep.size() * 2);
    d_src.upload(sweep.data(), sweep.size() * 4);
    kernels::cuda::cast(d_src.get(), DType::f32, d_dst.get(), to, sweep.size(), stream.s);
    stream.sync();
    d_dst.download(got.data(), got.size() * 2);
    EXPECT_EQ(std::memcmp(got.data(), expected.data(), got.size() * 2), 0) << dtype_name(to);
  }
}

}  // namespace
}  // namespace strata
