// kernels/cuda/grad_ops.h against cpu_adam/grad_ops.h (the oracle), bit for bit:
//   accumulate_grads: f32 / bf16 / f16 inputs, odd sizes, sizes past one grid-stride sweep,
//                     inputs misaligned by one element; bf16 / fp16 accumulators
//                     (data_types.grad_accum_dtype), and the norm and the finite check over them
//   grad_sq_norm:     sizes around the 4096-element chunks and the 16-chunk blocks, scales,
//                     values over 60 binades (so any other summation order shows in the bits);
//                     every chunk sum checked on its own; a rerun (scratch refilled with
//                     garbage) gives the same bits; nothing written past the scratch
//   all_finite:       +-Inf, quiet and signalling NaN at the first, a middle and the last
//                     position; finite extremes (max, subnormals, -0); the flag starts as garbage
// Exits 77 (skipped) where no GPU can be used.
#include "kernels/cuda/grad_ops.h"

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "core/cpu_features.h"
#include "core/dtype.h"
#include "core/error.h"
#include "cpu_adam/grad_ops.h"
#include "tests/kernels/cuda_test_util.h"

namespace strata {
namespace {

namespace dev = kernels::cuda;

using namespace test;  // tests/kernels/cuda_test_util.h: DeviceBuffer, Stream, random_floats

std::uint64_t bits(double d) {
  std::uint64_t u;
  std::memcpy(&u, &d, 8);
  return u;
}

std::uint32_t bits(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

float from_bits(std::uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// Signed values whose magnitudes span 2^lo .. 2^(hi+1): with the default 2^-30 .. 2^31,
// squares and sums round in every chunk; -24 .. 14 stays finite in fp16 (subnormals included).
std::vector<float> wide_floats(std::size_t n, std::uint32_t seed, int lo = -30, int hi = 30) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> mantissa(1.0f, 2.0f);
  std::uniform_int_distribution<int> exponent(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = std::ldexp(mantissa(rng), exponent(rng)) * (rng() & 1 ? -1.0f : 1.0f);
  return v;
}

// The CPU variants to compare with: scalar, and the best this CPU has.
std::vector<SimdLevel> host_variants() {
  std::vector<SimdLevel> v{SimdLevel::scalar};
  if (active_simd() != SimdLevel::scalar) v.push_back(active_simd());
  return v;
}

// ---- accumulate_grads -------------------------------------------------------------------------

TEST(GradOpsCuda, AccumulateMatchesCpuBitForBit) {
  Stream stream;
  const std::size_t sizes[] = {1, 3, 255, 257, 4097, (std::size_t{1} << 20) + 3,
                               std::size_t{4096} * 256 * 3 + 11};  // > one grid-stride sweep
  for (DType dtype : {DType::f32, DType::bf16, DType::f16}) {
    for (std::size_t n : sizes) {
      for (std::size_t offset : {std::size_t{0}, std::size_t{1}}) {
        SCOPED_TRACE(testing::Message() << dtype_name(dtype) << " n=" << n << " offset=" << offset);
        const std::size_t ds = dtype_size(dtype);
        const auto seed = static_cast<std::uint32_t>(n);
        const std::vector<float> acc0 = random_floats(n, seed, -4.0f, 4.0f);
        const std::vector<float> xf = wide_floats(n, seed * 7 + 1, -24, 14);
        std::vector<unsigned char> x(n * ds);
        convert(xf.data(), DType::f32, x.data(), dtype, n);  // rounded to dtype once, for both

        std::vector<float> expected = acc0;
        cpu_adam::accumulate_grads(active_simd(), 0, expected.data(), x.data(), dtype, n);

        DeviceBuffer d_acc(n * 4), d_x((n + offset) * ds);
        d_acc.upload(acc0.data(), n * 4);
        d_x.upload(x.data(), n * ds, offset * ds);
        dev::accumulate_grads(d_acc.as<float>(), d_x.as<unsigned char>(offset * ds), dtype, n,
                              stream.s);
        std::vector<float> got(n);
        d_acc.download(got.data(), n * 4);
        std::size_t mismatches = 0, first = n;
        for (std::size_t i = 0; i < n; ++i) {
          if (bits(got[i]) != bits(expected[i])) {
            if (mismatches++ == 0) first = i;
          }
        }
        EXPECT_EQ(mismatches, 0u) << "first at " << first;
      }
    }
  }
}

// bf16 / fp16 accumulators: one fp32 addition, one rounding, the CPU's bits; then the norm and
// the finite check read the 2-byte accumulator as the engine does.
TEST(GradOpsCuda, NarrowAccumulatorsMatchCpuBitForBit) {
  Stream stream;
  for (DType acc_dtype : {DType::bf16, DType::f16}) {
    for (DType dtype : {DType::f32, DType::bf16, DType::f16}) {
      for (std::size_t n : {std::size_t{1}, std::size_t{4097}, (std::size_t{1} << 20) + 3}) {
        SCOPED_TRACE(testing::Message() << dtype_name(dtype) << " into " << dtype_name(acc_dtype) << " n=" << n);
        const auto seed = static_cast<std::uint32_t>(n + 17);
        std::vector<std::uint16_t> acc0(n);
        const std::vector<float> accf = wide_floats(n, seed, -20, 12);
        convert(accf.data(), DType::f32, acc0.data(), acc_dtype, n);
        const std::vector<float> xf = wide_floats(n, seed * 5 + 3, -20, 12);
        std::vector<unsigned char> x(n * dtype_size(dtype));
        convert(xf.data(), DType::f32, x.data(), dtype, n);

        std::vector<std::uint16_t> expected = acc0;
        cpu_adam::accumulate_grads(active_simd(), 0, expected.data(), acc_dtype, x.data(), dtype, n);
        const double want_norm = cpu_adam::grad_sq_norm(SimdLevel::scalar, 1, expected.data(), acc_dtype, n, 0.5f);

        DeviceBuffer d_acc(n * 2), d_x(x.size()), d_scratch(8 + dev::grad_sq_norm_partials(n) * 8), d_flag(4);
        d_acc.upload(acc0.data(), n * 2);
        d_x.upload(x.data(), x.size());
        dev::accumulate_grads(d_acc.get(), acc_dtype, d_x.get(), dtype, n, stream.s);
        dev::grad_sq_norm(d_acc.get(), acc_dtype, n, 0.5f, d_scratch.as<double>(), d_scratch.as<double>(8),
                          stream.s);
        dev::all_finite(d_acc.get(), acc_dtype, n, d_flag.as<int>(), stream.s);
        stream.sync();
        std::vector<std::uint16_t> got(n);
        d_acc.download(got.data(), n * 2);
        EXPECT_EQ(std::memcmp(got.data(), expected.data(), n * 2), 0);
        double norm = 0.0;
        int flag = -1;
        d_scratch.download(&norm, 8);
        d_flag.download(&flag, 4);
        EXPECT_EQ(bits(norm), bits(want_norm));
        EXPECT_EQ(flag, cpu_adam::all_finite(SimdLevel::scalar, 1, expected.data(), acc_dtype, n) ? 1 : 0);
      }
    }
  }
}

TEST(GradOpsCuda, ZeroSizesAreNoOps) {
  Stream stream;
  dev::accumulate_grads(nullptr, nullptr, DType::bf16, 0, stream.s);
  DeviceBuffer out(8), flag(4);
  dev::grad_sq_norm(nullptr, 0, 1.0f, out.as<double>(), nullptr, stream.s);
  dev::all_finite(nullptr, 0, flag.as<int>(), stream.s);
  stream.sync();
  double norm = -1.0;
  int f = -1;
  out.download(&norm, 8);
  flag.download(&f, 4);
  EXPECT_EQ(bits(norm), bits(0.0));  // +0, as the CPU returns
  EXPECT_EQ(f, 1);
}

// ---- grad_sq_norm -----------------------------------------------------------------------------

struct NormRun {
  double total;
  std::vector<double> partials;
};

// Runs the CUDA norm with the partials in an exactly sized buffer followed by a guard, which
// must come back untouched; `garbage` fills the partials (and out) first.
NormRun device_norm(const Stream& stream, const DeviceBuffer& d_x, std::size_t n, float scale,
                    unsigned char garbage) {
  const std::size_t chunks = dev::grad_sq_norm_partials(n);
  constexpr std::size_t kGuard = 64;
  DeviceBuffer d_scratch(8 + chunks * 8 + kGuard);
  CUDA_CHECK(cudaMemsetAsync(d_scratch.as<void>(), garbage, d_scratch.bytes(), stream.s));
  dev::grad_sq_norm(d_x.as<float>(), n, scale, d_scratch.as<double>(), d_scratch.as<double>(8),
                    stream.s);
  stream.sync();
  NormRun run{0.0, std::vector<double>(chunks)};
  std::vector<unsigned char> all(d_scratch.bytes());
  d_scratch.download(all.data(), all.size());
  std::memcpy(&run.total, all.data(), 8);
  if (chunks > 0) std::memcpy(run.partials.data(), all.data() + 8, chunks * 8);
  for (std::size_t i = 8 + chunks * 8; i < all.size(); ++i) {
    if (all[i] != garbage) {
      ADD_FAILURE() << "grad_sq_norm wrote past its scratch, at byte " << i - 8 - chunks * 8;
      break;
    }
  }
  return run;
}

TEST(GradOpsCuda, SqNormMatchesCpuBitForBitAndIsDeterministic) {
  Stream stream;
  const std::size_t k = dev::kNormChunkNumel;
  const std::size_t sizes[] = {1,          15,         16,          17,         k - 1,
                               k,          k + 1,      3 * k + 5,   16 * k,     16 * k + 1,
                               17 * k + 3, 1000003,    (std::size_t{1} << 22) + 7};
  const float scales[] = {1.0f, 1.0f / 1024.0f, 0.37f};
  for (std::size_t n : sizes) {
    const std::vector<float> x = wide_floats(n, static_cast<std::uint32_t>(n + 11));
    DeviceBuffer d_x(n * 4);
    d_x.upload(x.data(), n * 4);
    for (float scale : scales) {
      SCOPED_TRACE(testing::Message() << "n=" << n << " scale=" << scale);
      const NormRun a = device_norm(stream, d_x, n, scale, 0x00);
      const NormRun b = device_norm(stream, d_x, n, scale, 0xA5);
      EXPECT_EQ(bits(a.total), bits(b.total))
          << "not deterministic: " << a.total << " vs " << b.total;
      for (SimdLevel simd : host_variants()) {
        const double host = cpu_adam::grad_sq_norm(simd, 0, x.data(), DType::f32, n, scale);
        EXPECT_EQ(bits(a.total), bits(host))
            << simd_name(simd) << ": cuda " << a.total << " cpu " << host << " rel "
            << std::fabs(a.total - host) / host;
      }
      // Each chunk sum is the CPU's norm of that chunk alone (one chunk: 0 + its sum).
      if (n <= 17 * k + 3) {
        for (std::size_t c = 0; c < a.partials.size(); ++c) {
          const std::size_t begin = c * k, len = std::min(k, n - begin);
          const double host = cpu_adam::grad_sq_norm(SimdLevel::scalar, 1, x.data() + begin,
                                                     DType::f32, len, scale);
          ASSERT_EQ(bits(a.partials[c]), bits(host)) << "chunk " << c;
        }
      }
    }
  }
}

// ---- all_finite -------------------------------------------------------------------------------

int device_all_finite(const Stream& stream, const std::vector<float>& x) {
  DeviceBuffer d_x(x.size() * 4), d_flag(4);
  d_x.upload(x.data(), x.size() * 4);
  const int garbage = 0x12345678;
  d_flag.upload(&garbage, 4);
  dev::all_finite(d_x.as<float>(), x.size(), d_flag.as<int>(), stream.s);
  stream.sync();
  int flag = -1;
  d_flag.download(&flag, 4);
  return flag;
}

TEST(GradOpsCuda, AllFiniteMatchesCpu) {
  Stream stream;
  const float specials[] = {std::numeric_limits<float>::infinity(),
                            -std::numeric_limits<float>::infinity(),
                            std::numeric_limits<float>::quiet_NaN(),
                            from_bits(0x7F800001u),   // signalling NaN
                            from_bits(0xFFC00001u)};  // negative NaN with a payload
  const std::size_t sizes[] = {1, 2, 4097, 1000003, std::size_t{3} << 20};  // last: > one sweep
  for (std::size_t n : sizes) {
    std::vector<float> x = wide_floats(n, static_cast<std::uint32_t>(n + 3));
    // Finite extremes must pass.
    x[0] = std::numeric_limits<float>::max();
    x[n / 2] = std::numeric_limits<float>::denorm_min();
    x[n - 1] = -0.0f;
    {
      SCOPED_TRACE(testing::Message() << "n=" << n << " all finite");
      const bool host = cpu_adam::all_finite(active_simd(), 0, x.data(), DType::f32, n);
      ASSERT_TRUE(host);
      EXPECT_EQ(device_all_finite(stream, x), 1);
    }
    for (float special : specials) {
      for (std::size_t pos : {std::size_t{0}, n / 2, n - 1}) {
        SCOPED_TRACE(testing::Message() << "n=" << n << " bits 0x" << std::hex << bits(special)
                                        << std::dec << " at " << pos);
        std::vector<float> y = x;
        y[pos] = special;
        const bool host = cpu_adam::all_finite(active_simd(), 0, y.data(), DType::f32, n);
        ASSERT_FALSE(host);
        EXPECT_EQ(device_all_finite(stream, y), 0);
      }
    }
  }
}

TEST(GradOpsCuda, RejectsABadDtype) {
  Stream stream;
  DeviceBuffer d(16);
  EXPECT_THROW(
      dev::accumulate_grads(d.as<float>(), d.as<void>(), static_cast<DType>(77), 1, stream.s),
      Error);
}

}  // namespace
}  // namespace strata
