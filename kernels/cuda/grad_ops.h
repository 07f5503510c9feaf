#pragma once
// Gradient helpers on a CUDA device, for optimizer states kept in device memory: the ops of
// cpu_adam/grad_ops.h (fp32 accumulation over micro-batches, the squared norm for clipping, the
// fp16 overflow check), with the same definitions, so that a state on the GPU gives the same
// bits as one in host memory. Includes no CUDA header. Each call returns after enqueueing; every
// launch is checked (strata::Error on failure). Null pointers are accepted when n == 0.
//
// Bits: accumulate_grads and all_finite are element-wise and exact; grad_sq_norm computes
// cpu_adam's fixed reduction tree (cpu_adam/grad_ops_impl.h, cpu_adam/grad_ops.cpp) operation
// for operation, so all three equal the CPU ops bit for bit (a NaN's payload aside), and a
// rerun gives the same bits (no float atomics, no order that depends on scheduling).
#include <cstddef>

#include "core/dtype.h"

typedef struct CUstream_st* cudaStream_t;  // as cuda_runtime_api.h declares it

namespace strata::kernels::cuda {

// The squared norm is summed over fixed chunks of this many elements (absolute positions from
// x): must equal cpu_adam's kNormChunkNumel (cpu_adam/grad_ops.cpp), which the bit-for-bit
// tests (tests/kernels/test_grad_ops_cuda.cpp) check.
inline constexpr std::size_t kNormChunkNumel = 4096;

// The scratch grad_sq_norm needs for n elements: one double per chunk.
constexpr std::size_t grad_sq_norm_partials(std::size_t n) {
  return (n + kNormChunkNumel - 1) / kNormChunkNumel;
}

// acc[i] = acc[i] + float(x[i]) (one fp32 rounding); x in dtype (f32, bf16, f16); acc is fp32.
void accumulate_grads(float* acc, const void* x, DType dtype, std::size_t n, cudaStream_t stream);
// The same into an accumulator of acc_dtype (data_types.grad_accum_dtype):
// acc[i] = acc_dtype(float(acc[i]) + float(x[i])), one fp32 addition then one rounding to
// nearest even with core/dtype.h's conversions (the CPU's bits).
void accumulate_grads(void* acc, DType acc_dtype, const void* x, DType dtype, std::size_t n,
                      cudaStream_t stream);

// *out_device = sum of (x[i] * scale)^2, in double. Two kernels, no atomics:
//   1. one 16-lane group per chunk of kNormChunkNumel elements: element j of the chunk goes to
//      lane j % 16 (widened to double, times scale, squared, added, each rounded, no FMA); the
//      16 lanes are combined by cpu_adam's fixed tree into partials_device[chunk]
//   2. one block adds the chunk sums in index order, starting from +0, into *out_device
// partials_device: grad_sq_norm_partials(n) doubles of device scratch, borrowed until the
// stream has run the call (the same stream's later work may reuse it); may be null when n == 0.
// Step 2 is serial: its cost is n / kNormChunkNumel dependent double additions (64K for 256M
// elements), the price of the CPU's bits.
void grad_sq_norm(const float* x, std::size_t n, float scale, double* out_device,
                  double* partials_device, cudaStream_t stream);
// The same over x in dtype (f32, bf16, f16), each element widened to fp32 (exact) first.
void grad_sq_norm(const void* x, DType dtype, std::size_t n, float scale, double* out_device,
                  double* partials_device, cudaStream_t stream);

// *out_device_flag = 1 when every x[i] is finite (no Inf or NaN), else 0. Two kernels: one sets
// the flag to 1, the next clears it (an integer atomic) from any block that sees a non-finite.
void all_finite(const float* x, std::size_t n, int* out_device_flag, cudaStream_t stream);
// The same over x in dtype (f32, bf16, f16).
void all_finite(const void* x, DType dtype, std::size_t n, int* out_device_flag, cudaStream_t stream);

}  // namespace strata::kernels::cuda
