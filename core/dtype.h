#pragma once
// Element types (fp32, fp16, bf16) and exact conversions between them.
//
// Rounding is IEEE round-to-nearest, ties to even, everywhere, including fp16 subnormal
// results; nothing is flushed to zero. Widening (fp16/bf16 -> fp32) is exact.
//
// NaN: a NaN stays a NaN of the same sign, never turns into Inf. Conversions to and from
// fp16 return exactly what the F16C instructions return (vcvtps2ph with round-to-nearest,
// vcvtph2ps): the quiet bit is set and the top payload bits are kept. fp32 -> bf16 does the
// same (quiet bit set, top payload bits kept); bf16 -> fp32 only widens (a signalling NaN
// stays signalling). So the scalar functions below and the vectorized bulk converters agree
// bit for bit on every input, and the CUDA cast (kernels/cuda/cast.h) uses the same
// functions on the device.
//
// The scalar functions are inline and usable in CUDA device code. The bulk converters pick
// a SIMD variant at run time (active_simd(), see core/cpu_features.h).
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>

#include "core/cpu_features.h"

#if defined(__CUDACC__)
#define STRATA_HOST_DEVICE __host__ __device__
#else
#define STRATA_HOST_DEVICE
#endif

namespace strata {

enum class DType : std::uint8_t { f32, f16, bf16 };

// Bytes per element.
constexpr std::size_t dtype_size(DType t) { return t == DType::f32 ? 4 : 2; }

// "fp32", "fp16", "bf16".
std::string_view dtype_name(DType t);

// Accepts fp32/float32/f32, fp16/float16/half/f16, bf16/bfloat16 (any letter case).
// Throws strata::Error for anything else.
DType parse_dtype(std::string_view text);

// ---- scalar conversions on raw bits ---------------------------------------------------------

namespace detail {
STRATA_HOST_DEVICE inline std::uint32_t float_bits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  std::uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  return u;
#endif
}
STRATA_HOST_DEVICE inline float bits_float(std::uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
#endif
}
}  // namespace detail

// bf16 is the top half of an fp32: widening is a shift (NaN payloads kept as they are).
STRATA_HOST_DEVICE inline float bf16_to_fp32(std::uint16_t h) {
  return detail::bits_float(static_cast<std::uint32_t>(h) << 16);
}

STRATA_HOST_DEVICE inline std::uint16_t fp32_to_bf16(float f) {
  const std::uint32_t x = detail::float_bits(f);
  // NaN first: rounding its payload could carry into the exponent and make it Inf.
  if ((x & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<std::uint16_t>((x >> 16) | 0x0040u);
  // Adding 0x7FFF (+1 when the kept part is odd) carries into bit 16 exactly when the dropped
  // half is above the midpoint, or at it and the kept part is odd: ties to even. A carry out
  // of the mantissa moves to the next binade, and from the largest finite value to Inf.
  const std::uint32_t lsb = (x >> 16) & 1u;
  return static_cast<std::uint16_t>((x + 0x7FFFu + lsb) >> 16);
}

STRATA_HOST_DEVICE inline float fp16_to_fp32(std::uint16_t h) {
  const std::uint32_t sign = (static_cast<std::uint32_t>(h) & 0x8000u) << 16;
  const std::uint32_t exponent = (h >> 10) & 0x1Fu;
  const std::uint32_t mantissa = h & 0x3FFu;
  if (exponent == 0x1F) {  // Inf, or NaN: quiet bit set, payload kept (as vcvtph2ps)
    const std::uint32_t nan_bits = mantissa != 0 ? 0x00400000u | (mantissa << 13) : 0u;
    return detail::bits_float(sign | 0x7F800000u | nan_bits);
  }
  if (exponent != 0)  // normal: rebias 15 -> 127
    return detail::bits_float(sign | ((exponent + 112u) << 23) | (mantissa << 13));
  // Zero or subnormal, mantissa * 2^-24: exact in fp32 (at most 10 significant bits, and the
  // result is a normal fp32), so the product does not depend on the rounding mode.
  const float magnitude = static_cast<float>(mantissa) * 0x1p-24f;
  return detail::bits_float(sign | detail::float_bits(magnitude));
}

STRATA_HOST_DEVICE inline std::uint16_t fp32_to_fp16(float f) {
  const std::uint32_t x = detail::float_bits(f);
  const auto sign = static_cast<std::uint16_t>((x >> 16) & 0x8000u);
  const std::uint32_t a = x & 0x7FFFFFFFu;
  if (a > 0x7F800000u)  // NaN: quiet bit set, top 10 payload bits kept (as vcvtps2ph)
    return static_cast<std::uint16_t>(sign | 0x7E00u | ((a >> 13) & 0x3FFu));
  // >= 65520, the midpoint between the largest fp16 (65504) and 2^16: rounds to Inf (65504
  // has an odd mantissa, so the tie goes up). Includes Inf itself.
  if (a >= 0x477FF000u) return static_cast<std::uint16_t>(sign | 0x7C00u);
  if (a >= 0x38800000u) {  // >= 2^-14: a normal fp16. Rebias 127 -> 15, round 13 bits (RNE)
    const std::uint32_t r = a - 0x38000000u;
    return static_cast<std::uint16_t>(sign | ((r + 0xFFFu + ((r >> 13) & 1u)) >> 13));
  }
  // <= 2^-25, half the smallest subnormal: zero (the tie at 2^-25 goes to the even zero).
  if (a <= 0x33000000u) return sign;
  // Subnormal result in units of 2^-24: (1.m) * 2^(e-127) / 2^-24 = m24 >> (126 - e), where
  // m24 is the 24-bit significand and e in [102, 112], so the shift is 14..24.
  const std::uint32_t e = a >> 23;
  const std::uint32_t m24 = (a & 0x7FFFFFu) | 0x800000u;
  const std::uint32_t shift = 126u - e;
  const std::uint32_t q = m24 >> shift;
  const std::uint32_t rem = m24 & ((1u << shift) - 1u);
  const std::uint32_t half = 1u << (shift - 1u);
  const std::uint32_t up = (rem > half || (rem == half && (q & 1u))) ? 1u : 0u;
  return static_cast<std::uint16_t>(sign | (q + up));  // q + up = 0x400 is the smallest normal
}

// ---- bulk conversions -----------------------------------------------------------------------
// Any alignment (even byte-misaligned through the void* form), any n (0 included; pointers
// may then be null). src and dst must not overlap, except src == dst for same-dtype copies.
// Results are bit-identical across SIMD levels and to the scalar functions above.

// Converts n elements using the active_simd() variant; same dtypes copy.
void convert(const void* src, DType src_dtype, void* dst, DType dst_dtype, std::size_t n);

// The same with a given SIMD variant, for tests and benchmarks. `level` must not be above
// detected_simd() (checked with STRATA_ASSERT). avx512_bf16 runs the avx512 code: the
// AVX512-BF16 instruction vcvtneps2bf16 flushes subnormals, so it is not used.
void convert_with(SimdLevel level, const void* src, DType src_dtype, void* dst,
                  DType dst_dtype, std::size_t n);

void fp32_to_bf16(const float* src, std::uint16_t* dst, std::size_t n);
void bf16_to_fp32(const std::uint16_t* src, float* dst, std::size_t n);
void fp32_to_fp16(const float* src, std::uint16_t* dst, std::size_t n);
void fp16_to_fp32(const std::uint16_t* src, float* dst, std::size_t n);
void fp16_to_bf16(const std::uint16_t* src, std::uint16_t* dst, std::size_t n);  // via exact fp32
void bf16_to_fp16(const std::uint16_t* src, std::uint16_t* dst, std::size_t n);  // via exact fp32

}  // namespace strata
