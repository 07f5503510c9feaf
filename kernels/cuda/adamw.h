#pragma once
// Adam / AdamW on a CUDA device, for optimizer states kept in device memory: the math of
// cpu_adam/adam.h (torch.optim.Adam / AdamW), element by element, in the same order of fp32
// operations and without FMA contraction, so it agrees with the CPU Adam to within an ulp or
// two per element and step. Includes no CUDA header.
#include <cstddef>
#include <cstdint>

#include "core/dtype.h"

typedef struct CUstream_st* cudaStream_t;  // as cuda_runtime_api.h declares it

namespace strata::kernels::cuda {

struct AdamwArgs {
  float lr = 1e-3f;
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float eps = 1e-8f;
  float weight_decay = 0.0f;
  bool decoupled = true;         // true: AdamW (p -= lr*wd*p); false: Adam with L2 (g += wd*p)
  bool bias_correction = true;
  std::int64_t step = 1;         // 1-based step (bias corrections computed in double on the host)
  float grad_scale = 1.0f;       // multiplies every gradient (1/loss_scale x clip coefficient)
};

// params, exp_avg, exp_avg_sq: fp32, numel elements, updated in place; grads in grad_dtype
// (f32, bf16, f16); params_out (optional, may be null): the updated params in out_dtype (bf16
// or f16, round to nearest even). Throws strata::Error for invalid arguments or a failed launch.
void adamw(float* params, const void* grads, DType grad_dtype, float* exp_avg, float* exp_avg_sq,
           std::size_t numel, const AdamwArgs& args, void* params_out, DType out_dtype,
           cudaStream_t stream);

}  // namespace strata::kernels::cuda
