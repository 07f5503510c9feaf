// The bulk converters: every SIMD level this CPU has agrees bit for bit with the scalar
// functions of core/dtype.h, on all 16-bit patterns, edge, random and sweep data, for odd
// lengths and misaligned (even byte-misaligned) buffers, without touching bytes outside the
// destination. Also the CPU detection and the STRATA_SIMD override.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#if defined(__x86_64__)
#include <xmmintrin.h>
#endif

#include "core/cpu_features.h"
#include "core/dtype.h"
#include "core/error.h"
#include "tests/core/fp_reference.h"

namespace strata {
namespace {

std::vector<SimdLevel> levels_to_test() {
  std::vector<SimdLevel> out;
  for (int i = 0; i <= static_cast<int>(detected_simd()); ++i) out.push_back(static_cast<SimdLevel>(i));
  return out;
}

constexpr DType kDTypes[] = {DType::f32, DType::f16, DType::bf16};

// Element i of src converted by the scalar functions, as bytes.
std::vector<unsigned char> scalar_reference(const unsigned char* src, DType from, DType to,
                                            std::size_t n) {
  std::vector<unsigned char> out(n * dtype_size(to));
  for (std::size_t i = 0; i < n; ++i) {
    float wide;  // every dtype here is exactly representable in fp32
    std::uint16_t h;
    if (from == DType::f32) {
      std::memcpy(&wide, src + 4 * i, 4);
    } else {
      std::memcpy(&h, src + 2 * i, 2);
      wide = from == DType::f16 ? fp16_to_fp32(h) : bf16_to_fp32(h);
    }
    if (from == to) {  // a copy keeps the bits, signalling NaNs included
      std::memcpy(out.data() + i * dtype_size(to), src + i * dtype_size(from), dtype_size(to));
    } else if (to == DType::f32) {
      std::memcpy(out.data() + 4 * i, &wide, 4);
    } else {
      h = to == DType::f16 ? fp32_to_fp16(wide) : fp32_to_bf16(wide);
      std::memcpy(out.data() + 2 * i, &h, 2);
    }
  }
  return out;
}

// Runs convert_with(level) from src (at src_offset bytes) into a destination at dst_offset
// bytes surrounded by guard bytes, and checks the result and the guards.
void check_variant(SimdLevel level, DType from, DType to, const std::vector<unsigned char>& src,
                   std::size_t n, std::size_t src_offset, std::size_t dst_offset) {
  constexpr std::size_t kGuard = 64;
  constexpr unsigned char kPoison = 0xA5;
  std::vector<unsigned char> src_buf(src_offset + src.size());
  if (!src.empty()) std::memcpy(src_buf.data() + src_offset, src.data(), src.size());
  const std::size_t dst_bytes = n * dtype_size(to);
  std::vector<unsigned char> dst_buf(kGuard + dst_offset + dst_bytes + kGuard, kPoison);
  unsigned char* dst = dst_buf.data() + kGuard + dst_offset;

  convert_with(level, src_buf.data() + src_offset, from, dst, to, n);

  const std::vector<unsigned char> expected = scalar_reference(src.data(), from, to, n);
  SCOPED_TRACE(testing::Message() << simd_name(level) << " " << dtype_name(from) << "->"
                                  << dtype_name(to) << " n=" << n << " src+" << src_offset
                                  << " dst+" << dst_offset);
  for (std::size_t i = 0; i < n; ++i) {
    const std::size_t size = dtype_size(to);
    if (std::memcmp(dst + i * size, expected.data() + i * size, size) != 0) {
      ADD_FAILURE() << "element " << i << " differs from the scalar result";
      return;
    }
  }
  for (std::size_t i = 0; i < kGuard + dst_offset; ++i) ASSERT_EQ(dst_buf[i], kPoison) << "wrote before dst";
  for (std::size_t i = kGuard + dst_offset + dst_bytes; i < dst_buf.size(); ++i)
    ASSERT_EQ(dst_buf[i], kPoison) << "wrote past the end";
}

TEST(DTypeSimd, EveryLevelMatchesScalarOnOddLengthsAndMisalignment) {
  const std::size_t lengths[] = {0, 1, 7, 15, 16, 17, 31, 33, 1000003};
  const std::size_t offsets[] = {0, 1, 2, 3, 6};
  std::uint64_t seed = 1;
  for (DType from : kDTypes) {
    for (DType to : kDTypes) {
      for (std::size_t n : lengths) {
        const std::vector<unsigned char> src = test::source_bytes(from, n, seed++);
        for (SimdLevel level : levels_to_test()) {
          for (std::size_t so : offsets) {
            for (std::size_t dof : offsets) {
              // The long length once aligned and once misaligned, to keep the run short.
              if (n > 1000 && !((so == 0 && dof == 0) || (so == 1 && dof == 6))) continue;
              check_variant(level, from, to, src, n, so, dof);
              if (HasFailure()) return;
            }
          }
        }
      }
    }
  }
}

// Every 16-bit pattern as fp16 and as bf16, widened and cross-converted, by every level.
TEST(DTypeSimd, EveryLevelMatchesScalarOnAll16BitPatterns) {
  const std::vector<std::uint16_t> all = test::all_16bit_patterns();
  std::vector<unsigned char> src(all.size() * 2);
  std::memcpy(src.data(), all.data(), src.size());
  for (SimdLevel level : levels_to_test()) {
    for (DType from : {DType::f16, DType::bf16}) {
      for (DType to : kDTypes) check_variant(level, from, to, src, all.size(), 0, 0);
    }
  }
}

// The tie sweeps (every rounding case of every binade) through every level.
TEST(DTypeSimd, EveryLevelMatchesScalarOnTieSweeps) {
  for (int dropped : {13, 16}) {
    const std::vector<float> sweep = test::tie_sweep_fp32(dropped);
    std::vector<unsigned char> src(sweep.size() * 4);
    std::memcpy(src.data(), sweep.data(), src.size());
    for (SimdLevel level : levels_to_test()) {
      check_variant(level, DType::f32, DType::f16, src, sweep.size(), 0, 0);
      check_variant(level, DType::f32, DType::bf16, src, sweep.size(), 0, 0);
    }
  }
}

#if defined(__x86_64__)
// The optimizer may run with flush-to-zero / denormals-are-zero for speed, and someone may
// change the rounding mode: the conversions must not change. (F16C takes its rounding from
// the instruction's immediate; the bf16 paths and the scalar code are integer arithmetic.)
TEST(DTypeSimd, ResultsDoNotDependOnMxcsr) {
  const unsigned saved = _mm_getcsr();
  const std::vector<std::uint16_t> all = test::all_16bit_patterns();
  std::vector<unsigned char> all_bytes(all.size() * 2);
  std::memcpy(all_bytes.data(), all.data(), all_bytes.size());
  const std::vector<float> sweep = test::tie_sweep_fp32(13);
  std::vector<unsigned char> sweep_bytes(sweep.size() * 4);
  std::memcpy(sweep_bytes.data(), sweep.data(), sweep_bytes.size());
  for (unsigned mode : {_MM_FLUSH_ZERO_ON | 0x0040u /* DAZ */ | _MM_ROUND_TOWARD_ZERO,
                        unsigned{_MM_ROUND_UP}}) {
    _mm_setcsr((saved & ~0xE040u) | mode);
    for (SimdLevel level : levels_to_test()) {
      check_variant(level, DType::f16, DType::f32, all_bytes, all.size(), 0, 0);
      check_variant(level, DType::bf16, DType::f16, all_bytes, all.size(), 0, 0);
      check_variant(level, DType::f32, DType::f16, sweep_bytes, sweep.size(), 0, 0);
      check_variant(level, DType::f32, DType::bf16, sweep_bytes, sweep.size(), 0, 0);
    }
    // The scalar reference runs under the changed mode too: keep its results, check them
    // against the independent checker once the default mode is back.
    std::vector<std::uint16_t> narrowed(sweep.size());
    std::vector<float> widened(all.size());
    for (std::size_t i = 0; i < sweep.size(); ++i) narrowed[i] = fp32_to_fp16(sweep[i]);
    for (std::size_t i = 0; i < all.size(); ++i) widened[i] = fp16_to_fp32(all[i]);
    _mm_setcsr(saved);
    for (std::size_t i = 0; i < sweep.size(); ++i)
      ASSERT_TRUE(test::is_rne(test::kFp16, sweep[i], narrowed[i]));
    for (std::size_t i = 0; i < all.size(); ++i) {
      if (test::kFp16.is_nan(all[i])) continue;
      ASSERT_EQ(static_cast<double>(widened[i]), test::kFp16.decode(all[i])) << i;
    }
  }
}
#endif

TEST(DTypeSimd, TypedEntryPointsMatchScalar) {
  const std::vector<float> in = test::random_fp32(1001, 99);
  std::vector<std::uint16_t> h(in.size()), b(in.size());
  std::vector<float> back(in.size());
  fp32_to_fp16(in.data(), h.data(), in.size());
  fp32_to_bf16(in.data(), b.data(), in.size());
  for (std::size_t i = 0; i < in.size(); ++i) {
    ASSERT_EQ(h[i], fp32_to_fp16(in[i]));
    ASSERT_EQ(b[i], fp32_to_bf16(in[i]));
  }
  fp16_to_fp32(h.data(), back.data(), h.size());
  for (std::size_t i = 0; i < h.size(); ++i) ASSERT_EQ(test::bits_of(back[i]), test::bits_of(fp16_to_fp32(h[i])));
  bf16_to_fp32(b.data(), back.data(), b.size());
  for (std::size_t i = 0; i < b.size(); ++i) ASSERT_EQ(test::bits_of(back[i]), test::bits_of(bf16_to_fp32(b[i])));
  std::vector<std::uint16_t> cross(h.size());
  fp16_to_bf16(h.data(), cross.data(), h.size());
  for (std::size_t i = 0; i < h.size(); ++i) ASSERT_EQ(cross[i], fp32_to_bf16(fp16_to_fp32(h[i])));
  bf16_to_fp16(b.data(), cross.data(), b.size());
  for (std::size_t i = 0; i < b.size(); ++i) ASSERT_EQ(cross[i], fp32_to_fp16(bf16_to_fp32(b[i])));
  // n == 0 with null pointers is allowed.
  convert(nullptr, DType::f32, nullptr, DType::bf16, 0);
}

// Asking for a level the CPU lacks is a programming error (tests and benchmarks must ask
// detected_simd() first): it aborts.
TEST(DTypeSimdDeathTest, LevelAboveTheCpuAborts) {
  if (detected_simd() == SimdLevel::avx512_bf16) GTEST_SKIP() << "this CPU has every level";
  const auto above = static_cast<SimdLevel>(static_cast<int>(detected_simd()) + 1);
  float in = 1.0f;
  std::uint16_t out = 0;
  EXPECT_DEATH(convert_with(above, &in, DType::f32, &out, DType::bf16, 1), "SIMD level");
}

// ---- CPU detection and STRATA_SIMD ----------------------------------------------------------

TEST(CpuFeatures, NamesAndInfo) {
  EXPECT_EQ(simd_name(SimdLevel::scalar), "scalar");
  EXPECT_EQ(simd_name(SimdLevel::avx2), "avx2");
  EXPECT_EQ(simd_name(SimdLevel::avx512), "avx512");
  EXPECT_EQ(simd_name(SimdLevel::avx512_bf16), "avx512_bf16");
  EXPECT_LT(SimdLevel::scalar, SimdLevel::avx2);
  EXPECT_LT(SimdLevel::avx512, SimdLevel::avx512_bf16);
  const CpuInfo info = cpu_info();
  EXPECT_FALSE(info.model_name.empty());
  EXPECT_GE(info.logical_cores_in_affinity_mask, 1);
  std::printf("CPU: %s, %d CPUs in the affinity mask, SIMD detected: %s\n",
              info.model_name.c_str(), info.logical_cores_in_affinity_mask,
              std::string(simd_name(detected_simd())).c_str());
}

TEST(CpuFeatures, ResolveOverride) {
  for (SimdLevel detected : {SimdLevel::scalar, SimdLevel::avx2, SimdLevel::avx512_bf16}) {
    EXPECT_EQ(resolve_simd(detected, std::nullopt), detected);
    EXPECT_EQ(resolve_simd(detected, ""), detected);
    EXPECT_EQ(resolve_simd(detected, "scalar"), SimdLevel::scalar);
  }
  EXPECT_EQ(resolve_simd(SimdLevel::avx512, "avx2"), SimdLevel::avx2);
  EXPECT_EQ(resolve_simd(SimdLevel::avx512_bf16, "avx512"), SimdLevel::avx512);
  EXPECT_EQ(resolve_simd(SimdLevel::avx512_bf16, "avx512_bf16"), SimdLevel::avx512_bf16);
  EXPECT_THROW(resolve_simd(SimdLevel::avx2, "avx512"), Error);
  EXPECT_THROW(resolve_simd(SimdLevel::scalar, "avx2"), Error);
  EXPECT_THROW(resolve_simd(SimdLevel::avx512, "avx512_bf16"), Error);
  EXPECT_THROW(resolve_simd(SimdLevel::avx512, "sse2"), Error);
  EXPECT_THROW(resolve_simd(SimdLevel::avx512, "AVX2 "), Error);
  try {
    resolve_simd(SimdLevel::avx2, "avx512");
    FAIL();
  } catch (const Error& e) {  // names the variable, the value and what the CPU has
    const std::string what = e.what();
    EXPECT_NE(what.find("STRATA_SIMD"), std::string::npos) << what;
    EXPECT_NE(what.find("avx512"), std::string::npos) << what;
    EXPECT_NE(what.find("up to avx2"), std::string::npos) << what;
  }
  try {
    resolve_simd(SimdLevel::avx2, "bogus");
    FAIL();
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("STRATA_SIMD=bogus"), std::string::npos) << what;
  }
}

// Run by ctest with STRATA_SIMD unset and set to several values (tests/core/CMakeLists.txt).
TEST(SimdEnv, ActiveLevelFollowsEnvironment) {
  const char* env = std::getenv("STRATA_SIMD");
  std::optional<SimdLevel> asked;
  for (SimdLevel level : {SimdLevel::scalar, SimdLevel::avx2, SimdLevel::avx512, SimdLevel::avx512_bf16})
    if (env && simd_name(level) == env) asked = level;
  float in = 1.0f;
  std::uint16_t out = 0;
  if (env == nullptr || *env == '\0') {
    EXPECT_EQ(active_simd(), detected_simd());
  } else if (asked && *asked <= detected_simd()) {
    EXPECT_EQ(active_simd(), *asked);
    convert(&in, DType::f32, &out, DType::bf16, 1);
    EXPECT_EQ(out, 0x3F80);
  } else {  // unknown, or more than the CPU has: every use reports it
    EXPECT_THROW(active_simd(), Error);
    EXPECT_THROW(convert(&in, DType::f32, &out, DType::bf16, 1), Error);
  }
  std::printf("STRATA_SIMD=%s\n", env ? env : "(unset)");
}

}  // namespace
}  // namespace strata
