#pragma once
// Group-wise symmetric weight quantization (INT8, INT4) for streamed inference weights: the
// storage format of the parameter shards the inference engine streams (docs/architecture.md,
// "Inference"). Quantized once at load on the host; dequantized on the device just before the
// module's matmuls (kernels/cuda/quantize.cu, the same arithmetic bit for bit).
//
// Format of n values with group size G (64 or 128) and `bits` 8 or 4:
//   groups = ceil(n / G); the last group is padded with zeros (quantized to 0).
//   scale[g] = bf16(max |x| over the group / qmax), qmax = 127 (int8) or 7 (int4), rounded to
//              nearest even; a group of zeros has scale 0.
//   q[i]     = clamp(round_half_even(x[i] / float(scale[g])), -qmax, qmax); int4 uses [-7, 7]
//              (symmetric: -8 is never produced), stored two's complement in a nibble, two per
//              byte, element 2k in the low nibble, 2k+1 in the high one.
//   x'[i]    = round_to_dtype(float(q[i]) * float(scale[g])): one fp32 multiply (exact: q has at
//              most 8 significant bits, a bf16 scale 8), one rounding to the compute dtype.
// |x - x'| <= scale/2 per element before the final rounding (scale/2 + half an ulp of the dtype
// after it).
//
// One buffer holds a quantized tensor: the packed values (groups * G * bits / 8 bytes), then the
// scales (groups bf16 values; the packed part is a multiple of 32 bytes, so they are aligned).
#include <cstddef>
#include <cstdint>

#include "core/dtype.h"

namespace strata::kernels::host {

inline constexpr std::size_t quant_groups(std::size_t numel, int group) {
  return (numel + static_cast<std::size_t>(group) - 1) / static_cast<std::size_t>(group);
}
inline constexpr std::size_t quant_packed_bytes(std::size_t numel, int group, int bits) {
  return quant_groups(numel, group) * static_cast<std::size_t>(group) * static_cast<std::size_t>(bits) / 8;
}
// Packed values and scales together.
inline constexpr std::size_t quant_bytes(std::size_t numel, int group, int bits) {
  return quant_packed_bytes(numel, group, bits) + quant_groups(numel, group) * sizeof(std::uint16_t);
}
inline constexpr int quant_qmax(int bits) { return bits == 8 ? 127 : 7; }
// Whether (bits, group) is a format this file knows: bits 8 or 4, group 64 or 128.
inline constexpr bool quant_format_valid(int bits, int group) {
  return (bits == 8 || bits == 4) && (group == 64 || group == 128);
}

// Element i's quantized value (in [-qmax, qmax]) from the packed bytes.
STRATA_HOST_DEVICE inline int quant_value(const std::uint8_t* packed, std::size_t i, int bits) {
  if (bits == 8) return static_cast<std::int8_t>(packed[i]);
  const unsigned nibble = (packed[i / 2] >> ((i & 1) * 4)) & 0xFu;
  return static_cast<int>(nibble) - (nibble & 0x8u ? 16 : 0);
}

// The fp32 value of element i (then rounded once to the compute dtype).
STRATA_HOST_DEVICE inline float dequant_value(int q, std::uint16_t scale_bf16) {
  return static_cast<float>(q) * bf16_to_fp32(scale_bf16);
}

// Quantizes n fp32 values into `out` (quant_bytes(n, group, bits) bytes, the layout above).
// Throws strata::Error for a value that is not finite or an unknown format.
void quantize_groupwise(const float* x, std::size_t numel, int group, int bits, void* out);

// Dequantizes the n values of `in` (a buffer quantize_groupwise wrote for n) into `out` (n
// elements of `dtype`). OpenMP over groups.
void dequantize_groupwise(void* out, DType dtype, const void* in, std::size_t numel, int group, int bits);

}  // namespace strata::kernels::host
