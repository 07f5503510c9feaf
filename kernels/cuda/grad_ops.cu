// Gradient helpers on CUDA: cpu_adam/grad_ops_scalar.cpp's definitions, operation for operation.
//
// Bits: every fp32 / double operation is an explicit round-to-nearest intrinsic (__fadd_rn,
// __dadd_rn, __dmul_rn), which nvcc never contracts into an FMA; bf16 / fp16 are widened with
// core/dtype.h's scalar conversions, the functions the CPU runs. The norm's reduction order is
// fixed by the chunk size and the lane count alone (not by the grid, the SM count or the
// scheduling): see kernels/cuda/grad_ops.h.
#include "kernels/cuda/grad_ops.h"

#include <cuda_runtime.h>

#include <cstdint>

#include "core/error.h"
#include "kernels/cuda/common_impl.cuh"

namespace strata::kernels::cuda {
namespace {

constexpr int kThreads = 256;

// ---- accumulate -------------------------------------------------------------------------------

template <DType kDType>
__device__ __forceinline__ float load_as_f32(const void* x, std::size_t i) {
  if constexpr (kDType == DType::f32) return static_cast<const float*>(x)[i];
  else if constexpr (kDType == DType::bf16)
    return bf16_to_fp32(static_cast<const std::uint16_t*>(x)[i]);
  else return fp16_to_fp32(static_cast<const std::uint16_t*>(x)[i]);
}

// acc[i] = v rounded to kDType (round to nearest even: core/dtype.h's functions).
template <DType kDType>
__device__ __forceinline__ void store_from_f32(void* acc, std::size_t i, float v) {
  if constexpr (kDType == DType::f32) static_cast<float*>(acc)[i] = v;
  else if constexpr (kDType == DType::bf16) static_cast<std::uint16_t*>(acc)[i] = fp32_to_bf16(v);
  else static_cast<std::uint16_t*>(acc)[i] = fp32_to_fp16(v);
}

template <DType kAcc, DType kDType>
__global__ void accumulate_kernel(void* __restrict__ acc, const void* __restrict__ x,
                                  std::size_t n) {
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride)
    store_from_f32<kAcc>(acc, i, __fadd_rn(load_as_f32<kAcc>(acc, i), load_as_f32<kDType>(x, i)));
}

template <DType kAcc, DType kDType>
void launch_accumulate(void* acc, const void* x, std::size_t n, cudaStream_t stream) {
  const unsigned blocks = detail::grid_stride_blocks(static_cast<std::int64_t>(n), kThreads);
  accumulate_kernel<kAcc, kDType><<<blocks, kThreads, 0, stream>>>(acc, x, n);
  CUDA_CHECK_LAUNCH();
}

template <DType kAcc>
void launch_accumulate_from(void* acc, const void* x, DType dtype, std::size_t n, cudaStream_t stream) {
  if (dtype == DType::f32) return launch_accumulate<kAcc, DType::f32>(acc, x, n, stream);
  if (dtype == DType::bf16) return launch_accumulate<kAcc, DType::bf16>(acc, x, n, stream);
  return launch_accumulate<kAcc, DType::f16>(acc, x, n, stream);
}

bool is_dtype(DType dtype) {
  return dtype == DType::f32 || dtype == DType::bf16 || dtype == DType::f16;
}

// ---- squared norm -----------------------------------------------------------------------------

constexpr int kLanes = 16;                           // cpu_adam's lanes per chunk
constexpr int kChunksPerBlock = kThreads / kLanes;  // 16 chunks (64 KiB of fp32) per block
static_assert(kThreads % kLanes == 0 && 32 % kLanes == 0, "a lane group must sit in one warp");

// Pass 1. (chunks,) partial sums. Thread t of a block is lane t % 16 of chunk
// blockIdx.x * 16 + t / 16 and sums elements lane, lane + 16, ... of its chunk in order; a warp
// reads two chunks' 64-byte rows per step. Then lanes combine as cpu_adam's tree does:
//   s[j] = l[j] + l[j+8]; t[j] = s[j] + s[j+4]; u[j] = t[j] + t[j+2]; sum = u[0] + u[1]
// which is a shuffle-down by 8, 4, 2, 1 within the 16-lane group.
template <DType kDType>
__global__ void sq_sum_chunks_kernel(const void* __restrict__ x, std::size_t n, double scale,
                                     double* __restrict__ partials, std::size_t chunks) {
  const std::size_t chunk =
      static_cast<std::size_t>(blockIdx.x) * kChunksPerBlock + threadIdx.x / kLanes;
  const unsigned lane = threadIdx.x % kLanes;
  double l = 0.0;
  if (chunk < chunks) {
    const std::size_t begin = chunk * kNormChunkNumel;
    const std::size_t end = begin + kNormChunkNumel < n ? begin + kNormChunkNumel : n;
#pragma unroll 8
    for (std::size_t i = begin + lane; i < end; i += kLanes) {
      const double d = __dmul_rn(static_cast<double>(load_as_f32<kDType>(x, i)), scale);
      l = __dadd_rn(l, __dmul_rn(d, d));
    }
  }
  // Every thread of the warp takes part in the shuffles (also past the last chunk).
#pragma unroll
  for (int offset = kLanes / 2; offset > 0; offset >>= 1)
    l = __dadd_rn(l, __shfl_down_sync(detail::kFullMask, l, offset, kLanes));
  if (lane == 0 && chunk < chunks) partials[chunk] = l;
}

constexpr int kTileDoubles = 2048;  // 16 KiB of shared memory

// Pass 2, one block: tiles of partials are staged in shared memory by every thread, and thread 0
// adds them in index order (cpu_adam's `for (s : partial) total += s`).
__global__ void sum_in_order_kernel(const double* __restrict__ partials, std::size_t chunks,
                                    double* __restrict__ out) {
  __shared__ double tile[kTileDoubles];
  double total = 0.0;
  for (std::size_t base = 0; base < chunks; base += kTileDoubles) {
    const std::size_t rest = chunks - base;
    const int m = rest < kTileDoubles ? static_cast<int>(rest) : kTileDoubles;
    for (int j = threadIdx.x; j < m; j += blockDim.x) tile[j] = partials[base + j];
    __syncthreads();
    if (threadIdx.x == 0) {
#pragma unroll 8
      for (int j = 0; j < m; ++j) total = __dadd_rn(total, tile[j]);
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) *out = total;
}

// ---- finite check -----------------------------------------------------------------------------

__global__ void set_flag_kernel(int* flag, int value) { *flag = value; }

// A float is Inf or NaN exactly when its exponent bits are all ones (cpu_adam's test); widening
// from bf16 / fp16 keeps Inf and NaN.
template <DType kDType>
__global__ void all_finite_kernel(const void* __restrict__ x, std::size_t n, int* flag) {
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  int bad = 0;
  for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride)
    bad |= (__float_as_uint(load_as_f32<kDType>(x, i)) & 0x7F800000u) == 0x7F800000u;
  if (__syncthreads_or(bad) && threadIdx.x == 0) atomicExch(flag, 0);
}

}  // namespace

void accumulate_grads(float* acc, const void* x, DType dtype, std::size_t n, cudaStream_t stream) {
  accumulate_grads(acc, DType::f32, x, dtype, n, stream);
}

void accumulate_grads(void* acc, DType acc_dtype, const void* x, DType dtype, std::size_t n,
                      cudaStream_t stream) {
  if (!is_dtype(dtype) || !is_dtype(acc_dtype))
    throw Error("accumulate_grads: the grad or accumulator dtype is not a DType",
                "kernels::cuda::accumulate_grads, dtype");
  if (n == 0) return;
  STRATA_ASSERT(acc != nullptr && x != nullptr,
                "kernels::cuda::accumulate_grads: null pointer with n > 0");
  if (acc_dtype == DType::f32) return launch_accumulate_from<DType::f32>(acc, x, dtype, n, stream);
  if (acc_dtype == DType::bf16) return launch_accumulate_from<DType::bf16>(acc, x, dtype, n, stream);
  return launch_accumulate_from<DType::f16>(acc, x, dtype, n, stream);
}

void grad_sq_norm(const float* x, std::size_t n, float scale, double* out_device,
                  double* partials_device, cudaStream_t stream) {
  grad_sq_norm(x, DType::f32, n, scale, out_device, partials_device, stream);
}

void grad_sq_norm(const void* x, DType dtype, std::size_t n, float scale, double* out_device,
                  double* partials_device, cudaStream_t stream) {
  STRATA_ASSERT(out_device != nullptr, "kernels::cuda::grad_sq_norm: null out_device");
  STRATA_ASSERT(is_dtype(dtype), "kernels::cuda::grad_sq_norm: not a DType");
  const std::size_t chunks = grad_sq_norm_partials(n);
  if (chunks > 0) {
    STRATA_ASSERT(x != nullptr && partials_device != nullptr,
                  "kernels::cuda::grad_sq_norm: null pointer with n > 0");
    const std::int64_t blocks =
        detail::ceil_div(static_cast<std::int64_t>(chunks), kChunksPerBlock);
    STRATA_ASSERT(blocks <= detail::kMaxGridX, "kernels::cuda::grad_sq_norm: n too large");
    const auto grid = static_cast<unsigned>(blocks);
    const double s = static_cast<double>(scale);
    if (dtype == DType::f32)
      sq_sum_chunks_kernel<DType::f32><<<grid, kThreads, 0, stream>>>(x, n, s, partials_device, chunks);
    else if (dtype == DType::bf16)
      sq_sum_chunks_kernel<DType::bf16><<<grid, kThreads, 0, stream>>>(x, n, s, partials_device, chunks);
    else
      sq_sum_chunks_kernel<DType::f16><<<grid, kThreads, 0, stream>>>(x, n, s, partials_device, chunks);
    CUDA_CHECK_LAUNCH();
  }
  // Also for n == 0: writes +0, as the CPU returns.
  sum_in_order_kernel<<<1, kThreads, 0, stream>>>(partials_device, chunks, out_device);
  CUDA_CHECK_LAUNCH();
}

void all_finite(const float* x, std::size_t n, int* out_device_flag, cudaStream_t stream) {
  all_finite(x, DType::f32, n, out_device_flag, stream);
}

void all_finite(const void* x, DType dtype, std::size_t n, int* out_device_flag, cudaStream_t stream) {
  STRATA_ASSERT(out_device_flag != nullptr, "kernels::cuda::all_finite: null out_device_flag");
  STRATA_ASSERT(is_dtype(dtype), "kernels::cuda::all_finite: not a DType");
  set_flag_kernel<<<1, 1, 0, stream>>>(out_device_flag, 1);
  CUDA_CHECK_LAUNCH();
  if (n == 0) return;
  STRATA_ASSERT(x != nullptr, "kernels::cuda::all_finite: null x with n > 0");
  const unsigned blocks = detail::grid_stride_blocks(static_cast<std::int64_t>(n), kThreads);
  if (dtype == DType::f32)
    all_finite_kernel<DType::f32><<<blocks, kThreads, 0, stream>>>(x, n, out_device_flag);
  else if (dtype == DType::bf16)
    all_finite_kernel<DType::bf16><<<blocks, kThreads, 0, stream>>>(x, n, out_device_flag);
  else
    all_finite_kernel<DType::f16><<<blocks, kThreads, 0, stream>>>(x, n, out_device_flag);
  CUDA_CHECK_LAUNCH();
}

}  // namespace strata::kernels::cuda
