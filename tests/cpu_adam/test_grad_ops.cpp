// The grad helpers for every SIMD variant this CPU has: the squared norm against a long
// double reference (and the same bits in every variant), the non-finite check at every
// position including vector tails for every dtype, and grad accumulation exact against a
// scalar reference, for sizes around the vector widths and misaligned starts, into fp32 and into
// bf16 / fp16 accumulators (data_types.grad_accum_dtype).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include <cfloat>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "cpu_adam/grad_ops.h"
#include "tests/cpu_adam/adam_test_util.h"

namespace strata::cpu_adam {
namespace {

constexpr DType kDTypes[] = {DType::f32, DType::bf16, DType::f16};
const std::size_t kSizes[] = {0, 1, 15, 16, 17, 31, 32, 33, 4095, 4096, 4097, 100003};

// n random grads of `dtype` after `offset` elements of padding, as raw bytes.
struct Grads {
  DType dtype;
  std::size_t offset;
  std::vector<unsigned char> bytes;
  Grads(DType d, std::size_t n, std::size_t off, std::uint32_t seed, float sigma = 1.0f)
      : dtype(d), offset(off), bytes((n + off) * dtype_size(d), 0xCD) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> dist(0.0f, sigma);
    for (std::size_t i = 0; i < n; ++i) set(i, dist(rng));
  }
  void* data() { return bytes.data() + offset * dtype_size(dtype); }
  void set(std::size_t i, float value) {
    unsigned char* p = bytes.data() + (offset + i) * dtype_size(dtype);
    if (dtype == DType::f32) {
      std::memcpy(p, &value, 4);
      return;
    }
    const std::uint16_t h = dtype == DType::bf16 ? fp32_to_bf16(value) : fp32_to_fp16(value);
    std::memcpy(p, &h, 2);
  }
  void set_bits16(std::size_t i, std::uint16_t h) {
    std::memcpy(bytes.data() + (offset + i) * 2, &h, 2);
  }
  float get(std::size_t i) const {
    const unsigned char* p = bytes.data() + (offset + i) * dtype_size(dtype);
    if (dtype == DType::f32) {
      float f;
      std::memcpy(&f, p, 4);
      return f;
    }
    std::uint16_t h;
    std::memcpy(&h, p, 2);
    return dtype == DType::bf16 ? bf16_to_fp32(h) : fp16_to_fp32(h);
  }
};

std::string name(SimdLevel simd, DType dtype, std::size_t n, std::size_t offset) {
  return std::string(simd_name(simd)) + " " + std::string(dtype_name(dtype)) +
         " n=" + std::to_string(n) + " offset=" + std::to_string(offset);
}

// Relative bound 1e-12: the sum is a few hundred double additions deep at most (256 per lane
// per chunk, a 4-level tree, one per chunk), each off by at most 2^-53 relative to the
// partial sum of non-negative terms: < 1e-13. A lost element (a skipped tail) changes the sum
// by ~1/n relative, far more.
TEST(GradSqNorm, MatchesLongDoubleReference) {
  for (SimdLevel simd : test::levels_to_test()) {
    for (DType dtype : kDTypes) {
      for (std::size_t n : kSizes) {
        for (std::size_t offset = 0; offset < 4; ++offset) {
          for (float scale : {1.0f, 0.37f}) {
            SCOPED_TRACE(name(simd, dtype, n, offset) + " scale=" + std::to_string(scale));
            Grads g(dtype, n, offset, static_cast<std::uint32_t>(n + offset));
            long double want = 0.0L;
            for (std::size_t i = 0; i < n; ++i) {
              const long double x = static_cast<long double>(g.get(i)) * scale;
              want += x * x;
            }
            const double got = grad_sq_norm(simd, 1, g.data(), dtype, n, scale);
            const double want_d = static_cast<double>(want);
            ASSERT_LE(std::fabs(got - want_d), 1e-12 * want_d) << got << " vs " << want_d;
          }
        }
      }
    }
  }
}

// The chunk sums have one exact definition (cpu_adam/grad_ops_impl.h): all variants agree to
// the bit, for every tail length.
TEST(GradSqNorm, VariantsGiveIdenticalBits) {
  for (DType dtype : kDTypes) {
    for (std::size_t n : kSizes) {
      Grads g(dtype, n, 1, 77);
      const double ref = grad_sq_norm(SimdLevel::scalar, 1, g.data(), dtype, n, 0.5f);
      for (SimdLevel simd : test::levels_to_test()) {
        const double got = grad_sq_norm(simd, 1, g.data(), dtype, n, 0.5f);
        ASSERT_EQ(std::memcmp(&got, &ref, sizeof got), 0) << name(simd, dtype, n, 1);
      }
    }
  }
}

TEST(GradSqNorm, InfAndNanPropagate) {
  for (SimdLevel simd : test::levels_to_test()) {
    Grads g(DType::f32, 33, 0, 1);
    g.set(32, INFINITY);
    EXPECT_TRUE(std::isinf(grad_sq_norm(simd, 1, g.data(), DType::f32, 33)));
    g.set(31, NAN);
    EXPECT_TRUE(std::isnan(grad_sq_norm(simd, 1, g.data(), DType::f32, 33)));
  }
}

// The largest finite value, the smallest non-finite ones and NaNs of each dtype, as 16 or 32
// bits: a single non-finite element anywhere (every position of short arrays, both ends and
// the middle of a long one) makes all_finite false.
struct Specials {
  std::vector<std::uint32_t> finite;      // must stay finite
  std::vector<std::uint32_t> non_finite;  // +Inf, -Inf, quiet and signalling NaN
};
Specials specials(DType dtype) {
  switch (dtype) {
    case DType::f32:
      return {{test::bits(FLT_MAX), test::bits(-FLT_MAX), 1u, 0x80000000u},
              {0x7F800000u, 0xFF800000u, 0x7FC00000u, 0x7F800001u, 0xFFFFFFFFu}};
    case DType::bf16: return {{0x7F7F, 0xFF7F, 0x0001}, {0x7F80, 0xFF80, 0x7FC0, 0x7F81, 0xFFFF}};
    case DType::f16:  // 65504 (0x7BFF) is finite; 0x7C00 is Inf
      return {{0x7BFF, 0xFBFF, 0x0001}, {0x7C00, 0xFC00, 0x7E00, 0x7C01, 0xFFFF}};
  }
  return {};
}

void put(Grads& g, std::size_t i, std::uint32_t bits) {
  if (g.dtype == DType::f32) g.set(i, test::from_bits(bits));
  else g.set_bits16(i, static_cast<std::uint16_t>(bits));
}

TEST(AllFinite, FindsOneNonFiniteAnywhere) {
  for (SimdLevel simd : test::levels_to_test()) {
    for (DType dtype : kDTypes) {
      const Specials sp = specials(dtype);
      for (std::size_t n : {1, 7, 15, 16, 17, 31, 32, 33, 63, 64, 65, 100}) {
        for (std::size_t offset : {0, 3}) {
          SCOPED_TRACE(name(simd, dtype, n, offset));
          Grads g(dtype, n, offset, 9);
          // Every third element an extreme finite value (the largest, a denormal, -0).
          for (std::size_t i = 0; i < n; i += 3) put(g, i, sp.finite[(i / 3) % sp.finite.size()]);
          ASSERT_TRUE(all_finite(simd, 1, g.data(), dtype, n));
          for (std::size_t pos = 0; pos < n; ++pos) {
            const float saved = g.get(pos);
            for (std::uint32_t bad : sp.non_finite) {
              put(g, pos, bad);
              ASSERT_FALSE(all_finite(simd, 1, g.data(), dtype, n)) << "at " << pos;
            }
            g.set(pos, saved);
          }
          ASSERT_TRUE(all_finite(simd, 1, g.data(), dtype, n));
        }
      }
      // A non-finite value just past the end is not looked at.
      Grads g(dtype, 18, 0, 4);
      put(g, 17, sp.non_finite[0]);
      EXPECT_TRUE(all_finite(simd, 1, g.data(), dtype, 17));
      EXPECT_TRUE(all_finite(simd, 1, nullptr, dtype, 0));
    }
  }
}

TEST(AllFinite, LongArrayEndsAndMiddle) {
  const std::size_t n = 100003;
  for (SimdLevel simd : test::levels_to_test()) {
    for (DType dtype : kDTypes) {
      Grads g(dtype, n, 1, 2);
      ASSERT_TRUE(all_finite(simd, 1, g.data(), dtype, n));
      for (std::size_t pos : {std::size_t{0}, n / 2, n - 2, n - 1}) {
        const float saved = g.get(pos);
        put(g, pos, specials(dtype).non_finite[0]);
        EXPECT_FALSE(all_finite(simd, 1, g.data(), dtype, n)) << name(simd, dtype, n, 1) << " at " << pos;
        g.set(pos, saved);
      }
    }
  }
}

TEST(AccumulateGrads, ExactAgainstScalarReference) {
  for (SimdLevel simd : test::levels_to_test()) {
    for (DType dtype : kDTypes) {
      for (std::size_t n : kSizes) {
        for (std::size_t offset = 0; offset < 4; ++offset) {
          SCOPED_TRACE(name(simd, dtype, n, offset));
          Grads g(dtype, n, offset, static_cast<std::uint32_t>(3 * n + offset));
          std::vector<float> acc(offset + n + 5, 12345.0f);
          std::mt19937 rng(static_cast<std::uint32_t>(n));
          std::normal_distribution<float> dist(0.0f, 3.0f);
          for (std::size_t i = 0; i < n; ++i) acc[offset + i] = dist(rng);
          std::vector<float> want = acc;
          for (std::size_t i = 0; i < n; ++i) want[offset + i] = want[offset + i] + g.get(i);
          accumulate_grads(simd, 1, acc.data() + offset, g.data(), dtype, n);
          ASSERT_EQ(std::memcmp(acc.data(), want.data(), acc.size() * 4), 0);
        }
      }
    }
  }
}

// The first micro-batch's store ignores what the accumulator held (garbage, NaN) and gives
// exactly what accumulating into zeros gives: 0.0f + g, so -0 becomes +0; the elements around the
// range are not touched.
TEST(StoreFirstGrads, EqualsAccumulatingIntoZeros) {
  for (SimdLevel simd : test::levels_to_test()) {
    for (DType dtype : kDTypes) {
      for (std::size_t n : kSizes) {
        for (std::size_t offset = 0; offset < 4; ++offset) {
          SCOPED_TRACE(name(simd, dtype, n, offset));
          Grads g(dtype, n, offset, static_cast<std::uint32_t>(5 * n + offset));
          if (n > 0) g.set(0, -0.0f);
          std::vector<float> zeros(offset + n + 5, 12345.0f);
          for (std::size_t i = 0; i < n; ++i) zeros[offset + i] = 0.0f;
          std::vector<float> want = zeros;
          accumulate_grads(simd, 1, want.data() + offset, g.data(), dtype, n);
          std::vector<float> acc(offset + n + 5, 12345.0f);
          for (std::size_t i = 0; i < n; ++i) acc[offset + i] = std::numeric_limits<float>::quiet_NaN();
          store_first_grads(simd, 1, acc.data() + offset, g.data(), dtype, n);
          ASSERT_EQ(std::memcmp(acc.data(), want.data(), acc.size() * 4), 0);
          if (n > 0) {
            EXPECT_FALSE(std::signbit(acc[offset]));
          }
        }
      }
    }
  }
}

}  // namespace
// A bf16 / fp16 accumulator (data_types.grad_accum_dtype): each element is widened, added to in
// fp32 and rounded once to nearest even; with `first` the accumulator is not read (NaN there is
// ignored) and -0 becomes +0. Sizes around the widening block (2048) and the thread split, every
// variant, 1 and 3 threads: the same bits as the scalar definition, and the bytes around the range
// untouched.
TEST(AccumulateGrads, NarrowAccumulatorRoundsOnce) {
  const std::size_t sizes[] = {1, 17, 2047, 2048, 2049, 70001};
  for (SimdLevel simd : test::levels_to_test()) {
    for (DType acc_dtype : {DType::bf16, DType::f16}) {
      for (DType dtype : kDTypes) {
        for (std::size_t n : sizes) {
          for (int threads : {1, 3}) {
            for (bool first : {false, true}) {
              const std::size_t offset = n % 3;
              SCOPED_TRACE(name(simd, dtype, n, offset) + " into " + std::string(dtype_name(acc_dtype)) +
                           " threads " + std::to_string(threads) + (first ? " first" : ""));
              Grads g(dtype, n, offset, static_cast<std::uint32_t>(7 * n + offset), 0.5f);
              Grads acc(acc_dtype, n, offset, static_cast<std::uint32_t>(11 * n + 1), 2.0f);
              acc.bytes.resize(acc.bytes.size() + 6, 0xAB);
              if (n > 1) g.set(1, -0.0f);
              if (first) acc.set_bits16(0, 0x7FC1);  // a NaN the first store must not read
              std::vector<std::uint16_t> want(n);
              for (std::size_t i = 0; i < n; ++i) {
                const float sum = (first ? 0.0f : acc.get(i)) + g.get(i);
                want[i] = acc_dtype == DType::bf16 ? fp32_to_bf16(sum) : fp32_to_fp16(sum);
              }
              const std::vector<unsigned char> before = acc.bytes;
              if (first) {
                store_first_grads(simd, threads, acc.data(), acc_dtype, g.data(), dtype, n);
              } else {
                accumulate_grads(simd, threads, acc.data(), acc_dtype, g.data(), dtype, n);
              }
              ASSERT_EQ(std::memcmp(acc.data(), want.data(), n * 2), 0);
              ASSERT_EQ(std::memcmp(acc.bytes.data(), before.data(), offset * 2), 0);
              const std::size_t end = (offset + n) * 2;
              ASSERT_EQ(std::memcmp(acc.bytes.data() + end, before.data() + end, before.size() - end), 0);
              if (first && n > 1) {
                EXPECT_FALSE(std::signbit(acc.get(1)));
              }
            }
          }
        }
      }
    }
  }
}

// The fp32 form of the accumulator-dtype overload is the fp32 function, bit for bit.
TEST(AccumulateGrads, Fp32AccumulatorOverloadIsTheFp32Function) {
  Grads g(DType::bf16, 5000, 0, 3);
  std::vector<float> a(5000, 1.25f), b(5000, 1.25f);
  accumulate_grads(active_simd(), 2, a.data(), g.data(), DType::bf16, a.size());
  accumulate_grads(active_simd(), 2, static_cast<void*>(b.data()), DType::f32, g.data(), DType::bf16, b.size());
  EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * 4), 0);
}

}  // namespace strata::cpu_adam
