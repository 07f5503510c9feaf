#pragma once
// The CPU Adam / AdamW step: ZeRO-Offload's optimizer on the fp32 master weights, one pass over
// a contiguous shard at the speed of memory.
//
// One pass reads params, grads, exp_avg, exp_avg_sq and writes params, exp_avg, exp_avg_sq (and,
// optionally, the updated params in bf16/fp16 into a second buffer). Grads may be fp32, or bf16 /
// fp16 read directly (2 bytes instead of upcasting to 4 first). Optional fused grad scaling
// (1 / loss_scale × clip coefficient).
//
// The math, for step t (1-based), with g = grad * grad_scale:
//   adam  (L2):        g += weight_decay * p
//   adamw (decoupled): p -= lr * weight_decay * p
//   m = beta1 * m + (1 - beta1) * g
//   v = beta2 * v + (1 - beta2) * g * g
//   p -= lr / (1 - beta1^t) * m / (sqrt(v / (1 - beta2^t)) + eps)     (bias correction on)
// which is torch.optim.Adam / AdamW's update (amsgrad off).
//
// Variants: scalar, avx2 (AVX2 + FMA + F16C), avx512 (F/BW/VL/DQ; bf16 output through
// AVX-512-BF16 where the CPU has it, identical bits to integer round-to-nearest-even). The best
// the CPU supports is used; STRATA_SIMD=scalar|avx2|avx512 lowers it (core/cpu_features.h).
// Each variant is bitwise deterministic and independent of thread count and tiling: every
// element's update depends only on its own inputs. The variants also agree with each other
// bit for bit: all perform the same IEEE fp32 operations in the same order, without FMA
// (cpu_adam/adam_impl.h), with the per-step scalars computed once in double (adam_scalars).
#include <cstddef>
#include <cstdint>

#include "core/cpu_features.h"
#include "core/dtype.h"
#include "cpu_adam/adam_scalars.h"

namespace strata::cpu_adam {

enum class AdamMode {
  adam,   // L2 regularization: weight decay added to the gradient (torch.optim.Adam)
  adamw,  // decoupled weight decay (torch.optim.AdamW)
};

struct AdamHyper {
  float lr = 1e-3f;
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float eps = 1e-8f;
  float weight_decay = 0.0f;
  AdamMode mode = AdamMode::adamw;
  bool bias_correction = true;
};

// One contiguous shard of a parameter group. Borrowed pointers; params, exp_avg and exp_avg_sq
// are updated in place, or, with the *_in pointers set, written from the values read there
// (out of place: the inputs are left as they were, the bits are those of the update in place;
// each *_in either null or an array that does not overlap the outputs); any alignment.
struct AdamShard {
  float* params = nullptr;             // fp32 master weights
  const void* grads = nullptr;         // grad_dtype
  DType grad_dtype = DType::f32;       // f32, bf16 or f16
  float* exp_avg = nullptr;            // fp32
  float* exp_avg_sq = nullptr;         // fp32
  std::size_t numel = 0;
  void* params_out = nullptr;          // optional: the updated params in out_dtype
  DType out_dtype = DType::bf16;       // bf16 (round-to-nearest-even) or f16
  const float* params_in = nullptr;    // optional: read the state here instead of params
  const float* exp_avg_in = nullptr;   // ... instead of exp_avg
  const float* exp_avg_sq_in = nullptr;  // ... instead of exp_avg_sq
};

// The step itself, for a given variant and thread count. The caller keeps the step count (the
// ZeRO engine snapshots it per module update: updates of step N run on a worker thread while
// the trainer begins step N+1). threads: 0 = the CPUs of the affinity mask; shards under 64K elements run on the calling
// thread. step >= 1. simd must not be above detected_simd(). Throws strata::Error for invalid
// hyper-parameters (check_hyper); a malformed shard (null pointers with numel > 0, an
// out_dtype of f32) is a STRATA_ASSERT.
void adam_step(SimdLevel simd, int threads, const AdamHyper& hyper, std::int64_t step,
               const AdamShard& shard, float grad_scale);

// The same step with the per-step scalars given instead of computed from an AdamHyper: for a
// caller whose hyper-parameters are doubles (the Python package computes them as torch does,
// 1 - beta2 in double from the double beta2, which AdamHyper's floats cannot express).
void adam_step(SimdLevel simd, int threads, const AdamScalars& scalars, const AdamShard& shard);

// The per-step scalars of step `step` (1-based), in double and rounded to float once, in the
// order of torch.optim.Adam(W)'s step: step_size = lr / (1 - beta1^t), bc2_sqrt =
// sqrt(1 - beta2^t). The one place they are computed: adam_step uses them, and runtime/ops
// passes them to the CUDA AdamW. Throws strata::Error for invalid hyper-parameters
// (check_hyper) or a step < 1.
AdamScalars adam_scalars(const AdamHyper& hyper, std::int64_t step, float grad_scale);

// Throws strata::Error naming the field when a hyper-parameter is out of range: lr < 0,
// beta1 or beta2 outside [0, 1), eps <= 0, weight_decay < 0, or any of them not finite.
void check_hyper(const AdamHyper& hyper);

// Zero-fills p[0, n) with the partition and threads adam_step uses for a shard of n elements
// and the same `threads`, so each page is first touched (and placed, on a NUMA machine) by the
// thread that will update it. For exp_avg / exp_avg_sq (and params before loading them).
void first_touch(float* p, std::size_t n, int threads);

// first_touch for memory known to be zero already (a fresh anonymous mapping): the same
// partition and threads, but one store per 4 KiB page instead of a memset, so the page faults
// (the kernel's zeroing) run on the updating threads and nothing is written twice.
void first_touch_zeroed(float* p, std::size_t n, int threads);

// A state's initial values with first_touch's partition and threads: dst[0, n) = src[0, n)
// (fp32), or the same values converted to dst_dtype (core/dtype.h's convert, element by element:
// the bits do not depend on the thread count).
void copy_partitioned(const float* src, void* dst, DType dst_dtype, std::size_t n, int threads);

}  // namespace strata::cpu_adam
