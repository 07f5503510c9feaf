#pragma once
// Host cast between dtypes: the oracle for kernels/cuda/cast.h and the converter the offload
// path uses on large pinned buffers.
#include <cstddef>

#include "core/dtype.h"

namespace strata::kernels::host {

// Converts n elements of src_dtype at src into dst_dtype at dst (same dtypes copy). Results
// are bit-identical to strata::convert (core/dtype.h): round to nearest even, subnormals kept,
// NaN stays NaN. Large arrays are split into contiguous chunks converted by OpenMP threads on
// the calling thread's team; small ones are converted on the calling thread. Any alignment;
// src and dst must not overlap (except src == dst for the same dtype). Throws strata::Error
// only if STRATA_SIMD is invalid (see core/cpu_features.h).
void cast(const void* src, DType src_dtype, void* dst, DType dst_dtype, std::size_t n);

}  // namespace strata::kernels::host
