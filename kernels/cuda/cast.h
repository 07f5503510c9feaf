#pragma once
// CUDA cast between dtypes, launched on a stream. Same signature as kernels/host/cast.h plus
// the stream; includes no CUDA header.
#include <cstddef>

#include "core/dtype.h"

typedef struct CUstream_st* cudaStream_t;  // as cuda_runtime_api.h declares it

namespace strata::kernels::cuda {

// Enqueues on `stream` the conversion of n elements of src_dtype at src into dst_dtype at dst
// (same dtypes: cudaMemcpyAsync). src and dst are device-accessible (device, managed or
// mapped pinned memory), aligned to their element size, and must not overlap unless
// src == dst for the same dtype. Pointers aligned to 8 elements take a vectorized kernel. Returns after the launch; the result is ready when the stream gets
// there. Bit-identical to kernels::host::cast on every input: the device runs the scalar
// functions of core/dtype.h (RNE on integer bits, subnormals kept, NaN quieted keeping sign
// and top payload bits), not the cvt instructions, which return a canonical NaN.
// Throws strata::Error when the launch fails.
void cast(const void* src, DType src_dtype, void* dst, DType dst_dtype, std::size_t n,
          cudaStream_t stream);

}  // namespace strata::kernels::cuda
