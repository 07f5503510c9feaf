#include "kernels/cuda/cast.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "core/error.h"

namespace strata::kernels::cuda {
namespace {

// Storage type of one element.
template <DType T>
using Elem = std::conditional_t<T == DType::f32, float, std::uint16_t>;

// One element, with the scalar conversions of core/dtype.h (compiled for the device), so the
// device rounds and treats NaN exactly as the host does.
template <DType From, DType To>
__device__ __forceinline__ Elem<To> convert_one(Elem<From> x) {
  if constexpr (From == DType::f32 && To == DType::bf16) return fp32_to_bf16(x);
  else if constexpr (From == DType::f32 && To == DType::f16) return fp32_to_fp16(x);
  else if constexpr (From == DType::bf16 && To == DType::f32) return bf16_to_fp32(x);
  else if constexpr (From == DType::f16 && To == DType::f32) return fp16_to_fp32(x);
  else if constexpr (From == DType::f16 && To == DType::bf16) return fp32_to_bf16(fp16_to_fp32(x));
  else return fp32_to_fp16(bf16_to_fp32(x));  // bf16 -> fp16 (fp32 holds both exactly)
}

// Grid-stride loop over groups of kVec elements (one vector load and store each, for wide
// coalesced transactions), then over the last n % kVec elements one by one. kVec > 1 only
// when both pointers are aligned to a whole group.
template <DType From, DType To, int kVec>
__global__ void cast_kernel(const Elem<From>* __restrict__ src, Elem<To>* __restrict__ dst,
                            std::size_t n) {
  using S = Elem<From>;
  using D = Elem<To>;
  struct alignas(sizeof(S) * kVec) SrcVec { S v[kVec]; };
  struct alignas(sizeof(D) * kVec) DstVec { D v[kVec]; };
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  const std::size_t tid = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const std::size_t groups = n / kVec;
  for (std::size_t g = tid; g < groups; g += stride) {
    const SrcVec in = reinterpret_cast<const SrcVec*>(src)[g];
    DstVec out;
#pragma unroll
    for (int k = 0; k < kVec; ++k) out.v[k] = convert_one<From, To>(in.v[k]);
    reinterpret_cast<DstVec*>(dst)[g] = out;
  }
  for (std::size_t i = groups * kVec + tid; i < n; i += stride)
    dst[i] = convert_one<From, To>(src[i]);
}

constexpr int kThreads = 256;
// Enough blocks to fill every SM of an H100/H200 several times over; the grid-stride loop
// covers the rest, so the grid size never grows with n.
constexpr std::size_t kMaxBlocks = 4096;
constexpr int kVecWidth = 8;  // 16 B of 16-bit elements, 32 B of fp32 per thread and step

template <DType From, DType To>
void launch(const void* src, void* dst, std::size_t n, cudaStream_t stream) {
  using S = Elem<From>;
  using D = Elem<To>;
  const bool aligned = reinterpret_cast<std::uintptr_t>(src) % (sizeof(S) * kVecWidth) == 0 &&
                       reinterpret_cast<std::uintptr_t>(dst) % (sizeof(D) * kVecWidth) == 0;
  const std::size_t items = aligned ? std::max<std::size_t>(n / kVecWidth, 1) : n;
  const auto blocks = static_cast<unsigned>(
      std::min<std::size_t>((items + kThreads - 1) / kThreads, kMaxBlocks));
  const auto* s = static_cast<const S*>(src);
  auto* d = static_cast<D*>(dst);
  if (aligned)
    cast_kernel<From, To, kVecWidth><<<blocks, kThreads, 0, stream>>>(s, d, n);
  else
    cast_kernel<From, To, 1><<<blocks, kThreads, 0, stream>>>(s, d, n);
  CUDA_CHECK_LAUNCH();
}

}  // namespace

void cast(const void* src, DType src_dtype, void* dst, DType dst_dtype, std::size_t n,
          cudaStream_t stream) {
  if (n == 0) return;
  STRATA_ASSERT(src != nullptr && dst != nullptr);
  if (src_dtype == dst_dtype) {
    if (src != dst)
      CUDA_CHECK(cudaMemcpyAsync(dst, src, n * dtype_size(src_dtype), cudaMemcpyDefault, stream));
    return;
  }
  // (No `using enum`: CUDA sources are compiled as C++17, see cmake/Dependencies.cmake.)
  constexpr DType f32 = DType::f32, f16 = DType::f16, bf16 = DType::bf16;
  if (src_dtype == f32 && dst_dtype == bf16) return launch<f32, bf16>(src, dst, n, stream);
  if (src_dtype == f32 && dst_dtype == f16) return launch<f32, f16>(src, dst, n, stream);
  if (src_dtype == bf16 && dst_dtype == f32) return launch<bf16, f32>(src, dst, n, stream);
  if (src_dtype == f16 && dst_dtype == f32) return launch<f16, f32>(src, dst, n, stream);
  if (src_dtype == f16 && dst_dtype == bf16) return launch<f16, bf16>(src, dst, n, stream);
  return launch<bf16, f16>(src, dst, n, stream);
}

}  // namespace strata::kernels::cuda
