#pragma once
// Optimizer-side ops on device memory, enqueued on a Stream: what the ZeRO engine runs when the
// optimizer states of a module stay on the device.
//
// On the host backend each op is a host task that calls the CPU Adam code of cpu_adam/ (the
// same functions the engine calls for states in pinned host memory, with the same SIMD level and
// thread count), so that where a state lives never changes a bit. On CUDA these ops are not
// available yet: they throw strata::Error saying to offload the optimizer (cpu or nvme).
#include <cstddef>
#include <cstdint>

#include "core/dtype.h"
#include "cpu_adam/adam.h"
#include "runtime/device/device.h"

namespace strata::runtime::ops {

// acc[i] += x[i] in fp32 (x in `dtype`).
void accumulate_grads(Stream& s, float* acc, const void* x, DType dtype, std::size_t n, int threads);
// *out (host memory) = sum of (x[i] * scale)^2, in double; written when the stream runs it.
void grad_sq_norm(Stream& s, const float* x, std::size_t n, float scale, double* out, int threads);
// *out (host memory) = whether every x[i] is finite.
void all_finite(Stream& s, const float* x, std::size_t n, bool* out, int threads);
// One Adam / AdamW step on device-resident states (cpu_adam::adam_step's contract; the shard's
// pointers are device memory).
void adam_step(Stream& s, const cpu_adam::AdamHyper& hyper, std::int64_t step,
               const cpu_adam::AdamShard& shard, float grad_scale, int threads);

}  // namespace strata::runtime::ops
