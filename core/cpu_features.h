#pragma once
// What the CPU can do, detected at run time (never from the build machine's -march).
//
// SIMD code is compiled side by side for every level (core/dtype_avx2.cpp, ...) and chosen
// here at run time: detected_simd() asks the CPU (cpuid) and the OS (xgetbv: does it save
// the YMM / ZMM registers on a context switch?); active_simd() is what strata uses, which the
// environment variable STRATA_SIMD may lower for testing or to work around a bad kernel.
#include <optional>
#include <string>
#include <string_view>

namespace strata {

// Ordered: each level includes the ones below it.
enum class SimdLevel {
  scalar,       // portable C++ only
  avx2,         // AVX2 + FMA + F16C, OS saves YMM state
  avx512,       // AVX-512 F + BW + VL + DQ, OS saves ZMM and opmask state
  avx512_bf16,  // avx512 + AVX512_BF16 (cpuid leaf 7 subleaf 1, EAX bit 5)
};

// "scalar", "avx2", "avx512", "avx512_bf16" (the names STRATA_SIMD accepts).
std::string_view simd_name(SimdLevel level);

// The highest level this CPU and OS support. Detected once, then cached.
SimdLevel detected_simd();

// The level strata uses: detected_simd(), lowered by STRATA_SIMD when set. Read once, then
// cached. Throws strata::Error if STRATA_SIMD is not a level name or names a level higher
// than the CPU supports.
SimdLevel active_simd();

// The rule behind active_simd(), exposed for tests: `request` is the value of STRATA_SIMD
// (nullopt or empty when unset). Throws strata::Error as described above.
SimdLevel resolve_simd(SimdLevel detected, std::optional<std::string_view> request);

// For `strata info` and logs.
struct CpuInfo {
  std::string model_name;              // cpuid brand string, e.g. "AMD EPYC 9654 96-Core Processor"
  int logical_cores_in_affinity_mask;  // CPUs this process may run on (sched_getaffinity)
};
CpuInfo cpu_info();

}  // namespace strata
