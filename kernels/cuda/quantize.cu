// Group-wise weight dequantization on CUDA (kernels/host/quantize.h has the format): one
// element per thread and grid-stride step, the scalar functions of kernels/host/quantize.h and
// core/dtype.h on the device, so the result equals the host's bit for bit.
#include <cstdint>

#include "core/error.h"
#include "kernels/cuda/common_impl.cuh"
#include "kernels/cuda/ops.h"
#include "kernels/host/quantize.h"

namespace strata::kernels::cuda {
namespace {

constexpr int kThreads = 256;

// Out: float (f32) or std::uint16_t (bf16 / f16 bits, narrowed by core/dtype.h's RNE functions).
template <int kBits, DType kOut>
__global__ void dequantize_kernel(void* out, const std::uint8_t* packed, const std::uint16_t* scales,
                                  std::int64_t n, int group) {
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const float v = host::dequant_value(host::quant_value(packed, static_cast<std::size_t>(i), kBits), scales[i / group]);
    if constexpr (kOut == DType::f32) {
      static_cast<float*>(out)[i] = v;
    } else if constexpr (kOut == DType::bf16) {
      static_cast<std::uint16_t*>(out)[i] = fp32_to_bf16(v);
    } else {
      static_cast<std::uint16_t*>(out)[i] = fp32_to_fp16(v);
    }
  }
}

template <int kBits>
void launch(void* out, DType dtype, const std::uint8_t* packed, const std::uint16_t* scales, std::int64_t n,
            int group, cudaStream_t stream) {
  const unsigned blocks = detail::grid_stride_blocks(n, kThreads);
  switch (dtype) {
    case DType::f32:
      dequantize_kernel<kBits, DType::f32><<<blocks, kThreads, 0, stream>>>(out, packed, scales, n, group);
      break;
    case DType::bf16:
      dequantize_kernel<kBits, DType::bf16><<<blocks, kThreads, 0, stream>>>(out, packed, scales, n, group);
      break;
    case DType::f16:
      dequantize_kernel<kBits, DType::f16><<<blocks, kThreads, 0, stream>>>(out, packed, scales, n, group);
      break;
  }
  CUDA_CHECK_LAUNCH();
}

}  // namespace

void dequantize_groupwise(void* out, DType dtype, const void* in, std::size_t numel, int group, int bits,
                          cudaStream_t stream) {
  if (numel == 0) return;
  STRATA_ASSERT(out != nullptr && in != nullptr && host::quant_format_valid(bits, group));
  const auto* packed = static_cast<const std::uint8_t*>(in);
  const auto* scales =
      reinterpret_cast<const std::uint16_t*>(packed + host::quant_packed_bytes(numel, group, bits));
  const auto n = static_cast<std::int64_t>(numel);
  if (bits == 8) {
    launch<8>(out, dtype, packed, scales, n, group, stream);
  } else {
    launch<4>(out, dtype, packed, scales, n, group, stream);
  }
}

}  // namespace strata::kernels::cuda
