#include "core/cpu_features.h"

#include <sched.h>

#include <array>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>

#include <fmt/format.h>

#include "core/error.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#define STRATA_CPU_X86 1
#endif

namespace strata {
namespace {

constexpr std::array<std::string_view, 4> kSimdNames = {"scalar", "avx2", "avx512",
                                                        "avx512_bf16"};

#if defined(STRATA_CPU_X86)

struct Regs {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
};

// cpuid(leaf, subleaf); all zero when the leaf is beyond what the CPU reports.
Regs cpuid(unsigned leaf, unsigned subleaf) {
  Regs r;
  if (!__get_cpuid_count(leaf, subleaf, &r.eax, &r.ebx, &r.ecx, &r.edx)) return Regs{};
  return r;
}

// XCR0: which register states the OS saves and restores. Executed only when cpuid says
// OSXSAVE, otherwise xgetbv faults. Inline asm because _xgetbv needs -mxsave on gcc.
std::uint64_t read_xcr0() {
  std::uint32_t lo = 0, hi = 0;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (static_cast<std::uint64_t>(hi) << 32) | lo;
}

constexpr bool bit(unsigned reg, int n) { return (reg >> n) & 1u; }

SimdLevel detect() {
  const auto max_leaf = static_cast<unsigned>(__get_cpuid_max(0, nullptr));
  if (max_leaf < 1) return SimdLevel::scalar;
  const Regs l1 = cpuid(1, 0);
  const bool osxsave = bit(l1.ecx, 27);
  const bool avx = bit(l1.ecx, 28), fma = bit(l1.ecx, 12), f16c = bit(l1.ecx, 29);
  if (!osxsave || !avx) return SimdLevel::scalar;

  const std::uint64_t xcr0 = read_xcr0();
  constexpr std::uint64_t kYmmState = 0x6;           // bit 1 SSE (XMM), bit 2 AVX (upper YMM)
  constexpr std::uint64_t kZmmState = 0x6 | 0xE0;    // + bit 5 opmask, 6 ZMM_Hi256, 7 Hi16_ZMM
  if ((xcr0 & kYmmState) != kYmmState || max_leaf < 7) return SimdLevel::scalar;

  const Regs l7 = cpuid(7, 0);
  const bool avx2 = bit(l7.ebx, 5);
  if (!(avx2 && fma && f16c)) return SimdLevel::scalar;

  const bool avx512 = bit(l7.ebx, 16) /*F*/ && bit(l7.ebx, 17) /*DQ*/ && bit(l7.ebx, 30) /*BW*/ &&
                      bit(l7.ebx, 31) /*VL*/;
  if (!avx512 || (xcr0 & kZmmState) != kZmmState) return SimdLevel::avx2;

  // Leaf 7 subleaf 1 exists when subleaf 0 reports max subleaf >= 1 in EAX.
  const bool bf16 = l7.eax >= 1 && bit(cpuid(7, 1).eax, 5);
  return bf16 ? SimdLevel::avx512_bf16 : SimdLevel::avx512;
}

std::string brand_string() {
  if (static_cast<unsigned>(__get_cpuid_max(0x80000000u, nullptr)) < 0x80000004u) return {};
  char text[49] = {};
  for (unsigned i = 0; i < 3; ++i) {
    const Regs r = cpuid(0x80000002u + i, 0);
    const unsigned words[4] = {r.eax, r.ebx, r.ecx, r.edx};
    std::memcpy(text + 16 * i, words, sizeof(words));
  }
  return text;
}

#else  // not x86: scalar only

SimdLevel detect() { return SimdLevel::scalar; }
std::string brand_string() { return {}; }

#endif

std::string trim(std::string s) {
  const auto first = s.find_first_not_of(" \t");
  if (first == std::string::npos) return {};
  const auto last = s.find_last_not_of(" \t\n");
  return s.substr(first, last - first + 1);
}

// Fallback for CPUs without a brand string: the first "model name" of /proc/cpuinfo.
std::string proc_model_name() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) != 0) continue;
    const auto colon = line.find(':');
    if (colon != std::string::npos) return trim(line.substr(colon + 1));
  }
  return {};
}

int affinity_cpu_count() {
  // The mask may be larger than the 1024 CPUs of cpu_set_t: grow until the kernel accepts it.
  for (int ncpus = 1024; ncpus <= (1 << 20); ncpus *= 2) {
    cpu_set_t* set = CPU_ALLOC(ncpus);
    if (set == nullptr) break;
    const std::size_t bytes = CPU_ALLOC_SIZE(ncpus);
    CPU_ZERO_S(bytes, set);
    const int rc = sched_getaffinity(0, bytes, set);
    const int count = rc == 0 ? CPU_COUNT_S(bytes, set) : -1;
    CPU_FREE(set);
    if (rc == 0) return count;
    if (errno != EINVAL) break;
  }
  return 0;  // unknown
}

}  // namespace

std::string_view simd_name(SimdLevel level) {
  const auto i = static_cast<std::size_t>(level);
  STRATA_ASSERT(i < kSimdNames.size());
  return kSimdNames[i];
}

SimdLevel detected_simd() {
  static const SimdLevel level = detect();
  return level;
}

SimdLevel resolve_simd(SimdLevel detected, std::optional<std::string_view> request) {
  if (!request || request->empty()) return detected;
  for (std::size_t i = 0; i < kSimdNames.size(); ++i) {
    if (*request != kSimdNames[i]) continue;
    const auto asked = static_cast<SimdLevel>(i);
    if (asked > detected) {
      throw Error(fmt::format("STRATA_SIMD={} asks for more than this CPU supports (up to {})",
                              *request, simd_name(detected)),
                  "environment variable STRATA_SIMD",
                  fmt::format("unset STRATA_SIMD or set it to a level up to {}",
                              simd_name(detected)));
    }
    return asked;
  }
  throw Error(fmt::format("STRATA_SIMD={} is not a SIMD level (this CPU supports up to {})",
                          *request, simd_name(detected)),
              "environment variable STRATA_SIMD",
              "use one of scalar, avx2, avx512, avx512_bf16, or unset it");
}

SimdLevel active_simd() {
  static const SimdLevel level = [] {
    const char* env = std::getenv("STRATA_SIMD");
    return resolve_simd(detected_simd(),
                        env ? std::optional<std::string_view>(env) : std::nullopt);
  }();
  return level;
}

CpuInfo cpu_info() {
  CpuInfo info;
  info.model_name = trim(brand_string());
  if (info.model_name.empty()) info.model_name = proc_model_name();
  if (info.model_name.empty()) info.model_name = "unknown CPU";
  info.logical_cores_in_affinity_mask = affinity_cpu_count();
  return info;
}

}  // namespace strata
