#pragma once
// Internal to core: the table of bulk conversion kernels that each SIMD variant provides.
//
// Each variant lives in its own file compiled with its own -m flags (dtype_avx2.cpp,
// dtype_avx512.cpp). Those files include only this header and <immintrin.h>, keep all their
// code in an anonymous namespace and call the scalar variant (dtype.cpp, compiled for the
// baseline) for tails: an inline function emitted from a file built with -mavx512f could
// otherwise be the copy the linker keeps, and run on a CPU without AVX-512.
#include <cstddef>

namespace strata::detail {

// Converts n elements from src to dst; both may be misaligned (any byte address).
using ConvertFn = void (*)(const void* src, void* dst, std::size_t n);

struct ConvertKernels {
  ConvertFn fp32_to_bf16;
  ConvertFn bf16_to_fp32;
  ConvertFn fp32_to_fp16;
  ConvertFn fp16_to_fp32;
  ConvertFn fp16_to_bf16;
  ConvertFn bf16_to_fp16;
};

const ConvertKernels& scalar_convert_kernels();  // dtype.cpp
#if defined(STRATA_X86_SIMD)
const ConvertKernels& avx2_convert_kernels();    // dtype_avx2.cpp
const ConvertKernels& avx512_convert_kernels();  // dtype_avx512.cpp
#endif

}  // namespace strata::detail
