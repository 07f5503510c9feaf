#include "kernels/host/quantize.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "core/error.h"

namespace strata::kernels::host {
namespace {

void check_format(int bits, int group) {
  if (!quant_format_valid(bits, group)) {
    throw Error("weight quantization with " + std::to_string(bits) + " bits and group size " +
                    std::to_string(group) + " is not a known format",
                "--quantize", "use int8 or int4 with a group size of 64 or 128");
  }
}

template <typename Put>
void dequantize(const std::uint8_t* packed, const std::uint16_t* scales, std::size_t numel, int group, int bits,
                Put put) {
  const auto groups = static_cast<std::int64_t>(quant_groups(numel, group));
#pragma omp parallel for schedule(static) if (numel > (std::size_t{1} << 16))
  for (std::int64_t g = 0; g < groups; ++g) {
    const std::size_t begin = static_cast<std::size_t>(g) * static_cast<std::size_t>(group);
    const std::size_t end = std::min(numel, begin + static_cast<std::size_t>(group));
    const std::uint16_t scale = scales[g];
    for (std::size_t i = begin; i < end; ++i) put(i, dequant_value(quant_value(packed, i, bits), scale));
  }
}

}  // namespace

void quantize_groupwise(const float* x, std::size_t numel, int group, int bits, void* out) {
  check_format(bits, group);
  auto* packed = static_cast<std::uint8_t*>(out);
  const std::size_t packed_bytes = quant_packed_bytes(numel, group, bits);
  auto* scales = reinterpret_cast<std::uint16_t*>(packed + packed_bytes);
  std::memset(packed, 0, packed_bytes);  // the last group's padding (and the int4 nibbles OR-ed in)
  const float qmax = static_cast<float>(quant_qmax(bits));
  const std::size_t groups = quant_groups(numel, group);
  for (std::size_t g = 0; g < groups; ++g) {
    const std::size_t begin = g * static_cast<std::size_t>(group);
    const std::size_t end = std::min(numel, begin + static_cast<std::size_t>(group));
    float amax = 0.0f;
    for (std::size_t i = begin; i < end; ++i) {
      if (!std::isfinite(x[i])) {
        throw Error("weight " + std::to_string(i) + " is not finite (" + std::to_string(x[i]) + ")",
                    "--quantize", "check the model's weights, or serve it unquantized");
      }
      amax = std::max(amax, std::fabs(x[i]));
    }
    const std::uint16_t scale = fp32_to_bf16(amax / qmax);
    scales[g] = scale;
    const float s = bf16_to_fp32(scale);
    if (s == 0.0f) continue;  // zeros (or values too small for a bf16 scale): q = 0
    for (std::size_t i = begin; i < end; ++i) {
      // nearbyint rounds half to even in the default rounding mode; the clamp catches a scale
      // rounded down (bf16) by a hair.
      const int q = static_cast<int>(std::clamp(std::nearbyint(x[i] / s), -qmax, qmax));
      if (bits == 8) {
        packed[i] = static_cast<std::uint8_t>(static_cast<std::int8_t>(q));
      } else {
        packed[i / 2] |= static_cast<std::uint8_t>((static_cast<unsigned>(q) & 0xFu) << ((i & 1) * 4));
      }
    }
  }
}

void dequantize_groupwise(void* out, DType dtype, const void* in, std::size_t numel, int group, int bits) {
  check_format(bits, group);
  const auto* packed = static_cast<const std::uint8_t*>(in);
  const auto* scales = reinterpret_cast<const std::uint16_t*>(packed + quant_packed_bytes(numel, group, bits));
  switch (dtype) {
    case DType::f32: {
      auto* o = static_cast<float*>(out);
      dequantize(packed, scales, numel, group, bits, [o](std::size_t i, float v) { o[i] = v; });
      break;
    }
    case DType::bf16: {
      auto* o = static_cast<std::uint16_t*>(out);
      dequantize(packed, scales, numel, group, bits, [o](std::size_t i, float v) { o[i] = fp32_to_bf16(v); });
      break;
    }
    case DType::f16: {
      auto* o = static_cast<std::uint16_t*>(out);
      dequantize(packed, scales, numel, group, bits, [o](std::size_t i, float v) { o[i] = fp32_to_fp16(v); });
      break;
    }
  }
}

}  // namespace strata::kernels::host
