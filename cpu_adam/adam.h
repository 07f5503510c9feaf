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
// (cpu_adam/adam_impl.h), with the per-step scalars computed once in double.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/cpu_features.h"
#include "core/dtype.h"

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
// are updated in place; any alignment is accepted.
struct AdamShard {
  float* params = nullptr;             // fp32 master weights
  const void* grads = nullptr;         // grad_dtype
  DType grad_dtype = DType::f32;       // f32, bf16 or f16
  float* exp_avg = nullptr;            // fp32
  float* exp_avg_sq = nullptr;         // fp32
  std::size_t numel = 0;
  void* params_out = nullptr;          // optional: the updated params in out_dtype
  DType out_dtype = DType::bf16;       // bf16 (round-to-nearest-even) or f16
};

struct CpuAdamOptions {
  int threads = 0;                      // 0 = the CPUs in this process's affinity mask
  std::optional<SimdLevel> simd;        // nullopt = active_simd(); tests pick a variant
};

// Per-group hyper-parameters and step counters; the moments live in the caller's buffers
// (the engine tiers them).
struct ParamGroup {
  AdamHyper hyper;
  std::int64_t step = 0;  // completed steps
};

class CpuAdam {
 public:
  explicit CpuAdam(CpuAdamOptions options = {});

  int add_group(const AdamHyper& hyper);  // returns the group's index
  ParamGroup& group(int index);
  const ParamGroup& group(int index) const;
  int group_count() const { return static_cast<int>(groups_.size()); }

  // Advances the group's step counter (call once per optimizer step, before its updates).
  void begin_step(int group);
  // Applies the group's current step to one shard; grad_scale multiplies every gradient.
  void update(int group, const AdamShard& shard, float grad_scale = 1.0f) const;

  // Checkpoint hooks: the groups' hyper-parameters and step counters as JSON text; load
  // validates (a clear strata::Error for a malformed or mismatched state). Loading replaces
  // the groups; an optimizer that already has groups must have as many as the state (format
  // in cpu_adam/cpu_adam.cpp). A failed load changes nothing.
  std::string save_state() const;
  void load_state(const std::string& json);

  SimdLevel simd() const { return simd_; }
  int threads() const { return threads_; }

 private:
  SimdLevel simd_;
  int threads_;
  std::vector<ParamGroup> groups_;
};

// The step itself, for a given variant and thread count (what CpuAdam::update calls).
// threads: 0 = the CPUs of the affinity mask; shards under 64K elements run on the calling
// thread. step >= 1. simd must not be above detected_simd(). Throws strata::Error for invalid
// hyper-parameters (check_hyper); a malformed shard (null pointers with numel > 0, an
// out_dtype of f32) is a STRATA_ASSERT.
void adam_step(SimdLevel simd, int threads, const AdamHyper& hyper, std::int64_t step,
               const AdamShard& shard, float grad_scale);

// Throws strata::Error naming the field when a hyper-parameter is out of range: lr < 0,
// beta1 or beta2 outside [0, 1), eps <= 0, weight_decay < 0, or any of them not finite.
void check_hyper(const AdamHyper& hyper);

// Zero-fills p[0, n) with the partition and threads adam_step uses for a shard of n elements
// and the same `threads`, so each page is first touched (and placed, on a NUMA machine) by the
// thread that will update it. For exp_avg / exp_avg_sq (and params before loading them).
void first_touch(float* p, std::size_t n, int threads);

}  // namespace strata::cpu_adam
