#pragma once
// Shared by the op-dispatch files (ops.cpp, optim_ops.cpp): the stream's cudaStream_t, and
// CUDA_OP(call), the CUDA launch when this build has the CUDA kernels. A host stream never has
// a native handle, so without them the branch that uses CUDA_OP is unreachable. Each op is
//   const OpScope scope(s, "launcher");
//   if (cudaStream_t cs = cuda_stream(s)) { CUDA_OP(kc::launcher(..., cs)); return; }
//   s.host_task([=] { kh::launcher(...); }, "launcher");
// Includes no CUDA header: kernels/cuda/*.h declare cudaStream_t themselves.
#include "core/error.h"
#include "kernels/cuda/ops.h"
#include "runtime/device/device.h"

namespace strata::runtime::ops {

inline cudaStream_t cuda_stream(const device::Stream& s) { return static_cast<cudaStream_t>(s.native_handle()); }

// Tells the stream's op observer (an OpProfiler, when one is attached) where an op starts and
// ends in the stream's work, and makes the op one span of the device's trace where the backend
// needs to be told (cuda: its kernels between two timing events; the host backend traces the
// op's host task by its name already).
class OpScope {
 public:
  OpScope(device::Stream& s, const char* op) : stream_(s), observer_(s.op_observer()), span_(s, op) {
    if (observer_ != nullptr) observer_->op_begin(stream_, op);
  }
  ~OpScope() {
    if (observer_ != nullptr) observer_->op_end(stream_);
  }
  OpScope(const OpScope&) = delete;
  OpScope& operator=(const OpScope&) = delete;

 private:
  device::Stream& stream_;
  device::OpObserver* observer_;
  device::StreamSpan span_;  // opened before op_begin, closed after op_end: the profiler's events lie within
};

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
