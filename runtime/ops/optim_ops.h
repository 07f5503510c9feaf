#pragma once
// Optimizer-side ops on device memory, enqueued on a Stream: what the ZeRO engine runs when the
// optimizer states of a module stay on the device.
//
// On the host backend each op is a host task that calls the CPU Adam code of cpu_adam/ (the
// same functions the engine calls for states in pinned host memory, with the same SIMD level and
// thread count). On CUDA each op launches the kernels of kernels/cuda/grad_ops.h and
// kernels/cuda/adamw.h on the stream's cudaStream_t (`threads` is then unused); they compute the
// CPU definitions operation for operation, so where a state lives never changes a bit.
//
// Results returned in host memory (grad_sq_norm, all_finite) are written when the stream runs
// the op: read them after synchronizing the stream. On CUDA the kernels write them into
// `device_scratch` and the op copies them to `out` with Stream::copy_async (a copy to pageable
// host memory may block the calling thread until the stream reaches it; pinned memory does not).
// device_scratch: optim_scratch_bytes(n) bytes of device memory (8-byte aligned), borrowed until
// the stream has run the op; later ops on the same stream may reuse it, other streams may not
// use it meanwhile. The host backend ignores it (it may be null there).
//
// Errors: invalid hyper-parameters throw strata::Error, from the stream's synchronize() on the
// host backend and from the call itself on CUDA.
#include <cstddef>
#include <cstdint>

#include "core/dtype.h"
#include "cpu_adam/adam.h"
#include "runtime/device/device.h"

namespace strata::runtime::ops {

// Bytes of device scratch grad_sq_norm and all_finite need for n elements (CUDA): the result
// slots and one double per 4096 elements (the norm's chunk sums). At least 16.
std::size_t optim_scratch_bytes(std::size_t n);

// acc[i] += x[i] in fp32 (x in `dtype`).
void accumulate_grads(device::Stream& s, float* acc, const void* x, DType dtype, std::size_t n, int threads);
// acc[i] = acc_dtype(float(acc[i]) + float(x[i])): an accumulator of any dtype (cpu_adam's
// accumulate_grads into acc_dtype: one fp32 addition, one rounding).
void accumulate_grads(device::Stream& s, void* acc, DType acc_dtype, const void* x, DType dtype, std::size_t n,
                      int threads);
// *out (host memory) = sum of (x[i] * scale)^2, in double; x in `dtype` (fp32 in the first form).
void grad_sq_norm(device::Stream& s, const float* x, std::size_t n, float scale, double* out,
                  void* device_scratch, int threads);
void grad_sq_norm(device::Stream& s, const void* x, DType dtype, std::size_t n, float scale, double* out,
                  void* device_scratch, int threads);
// *out (host memory) = 1 when every x[i] is finite, else 0; x in `dtype` (fp32 in the first form).
void all_finite(device::Stream& s, const float* x, std::size_t n, int* out, void* device_scratch,
                int threads);
void all_finite(device::Stream& s, const void* x, DType dtype, std::size_t n, int* out, void* device_scratch,
                int threads);
// One Adam / AdamW step on device-resident states (cpu_adam::adam_step's contract; the shard's
// pointers are device memory, params_out / out_dtype included).
void adam_step(device::Stream& s, const cpu_adam::AdamHyper& hyper, std::int64_t step,
               const cpu_adam::AdamShard& shard, float grad_scale, int threads);

}  // namespace strata::runtime::ops
