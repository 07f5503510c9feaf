#pragma once
// Shared by the op-dispatch files (ops.cpp, optim_ops.cpp): the stream's cudaStream_t, and
// CUDA_OP(call), the CUDA launch when this build has the CUDA kernels. A host stream never has
// a native handle, so without them the branch that uses CUDA_OP is unreachable. Use it as
//   if (cudaStream_t cs = cuda_stream(s)) { CUDA_OP(kc::launcher(..., cs)); return; }
// Includes no CUDA header: kernels/cuda/*.h declare cudaStream_t themselves.
#include "core/error.h"
#include "kernels/cuda/ops.h"
#include "runtime/device/device.h"

namespace strata::runtime::ops {

inline cudaStream_t cuda_stream(const device::Stream& s) { return static_cast<cudaStream_t>(s.native_handle()); }

}  // namespace strata::runtime::ops

#if defined(STRATA_KERNELS_HAVE_CUDA)
namespace strata::runtime::ops {
namespace kc = strata::kernels::cuda;
}  // namespace strata::runtime::ops
#define CUDA_OP(call) call
#else
#define CUDA_OP(call) \
  (void)cs;           \
  STRATA_ASSERT(false, "a CUDA stream in a build without CUDA kernels")
#endif
