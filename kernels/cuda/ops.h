#pragma once
// The GPT ops on CUDA: the same signatures and semantics as kernels/host/{embedding,
// layernorm, matmul, attention, elementwise, cross_entropy}.h (read those for shapes and
// meaning), plus the stream they are enqueued on. Includes no CUDA header. Every launch is
// checked (strata::Error on failure); each call returns after enqueueing. Pointers are device
// accessible; fp32 accumulation everywhere; matmuls on cuBLAS / cuBLASLt (fp32 compute) with
// one handle per device and stream, created on first use. The fused ops (matmul_bias_gelu_fwd,
// matmul_bwd_dgelu, residual_layernorm_fwd) and the bias of matmul_fwd / matmul_bwd use
// cuBLASLt epilogues or one kernel where the host runs several ops (kernels/cuda/matmul.cu).
//
// Results agree with the host ops within floating-point tolerance, not bit for bit (different
// summation orders; embedding_bwd and the bias / LayerNorm weight sums may use atomics).
#include <cstdint>

#include "core/dtype.h"

typedef struct CUstream_st* cudaStream_t;  // as cuda_runtime_api.h declares it

namespace strata::kernels::cuda {

void embedding_fwd(void* out, const std::int32_t* tokens, const void* wte, const void* wpe,
                   int B, int T, int C, int pos_offset, DType dtype, cudaStream_t stream);
void embedding_bwd(void* dwte, void* dwpe, const void* dout, const std::int32_t* tokens, int B,
                   int T, int C, DType dtype, cudaStream_t stream);

void layernorm_fwd(void* out, float* mean, float* rstd, const void* inp, const void* weight,
                   const void* bias, std::int64_t N, int C, float eps, DType dtype,
                   cudaStream_t stream);
void residual_layernorm_fwd(void* res_out, void* ln_out, float* mean, float* rstd, const void* a,
                            const void* b, const void* weight, const void* bias, std::int64_t N,
                            int C, float eps, DType dtype, cudaStream_t stream);
void layernorm_bwd(void* dinp, void* dweight, void* dbias, const void* dout, const void* inp,
                   const void* weight, const float* mean, const float* rstd, std::int64_t N,
                   int C, DType dtype, cudaStream_t stream);

void matmul_fwd(void* out, const void* inp, const void* weight, const void* bias,
                std::int64_t N, int C, int OC, DType dtype, cudaStream_t stream);
void matmul_bwd(void* dinp, void* dweight, void* dbias, const void* dout, const void* inp,
                const void* weight, std::int64_t N, int C, int OC, DType dtype,
                cudaStream_t stream);
void matmul_bias_gelu_fwd(void* out, void* pre, const void* inp, const void* weight,
                          const void* bias, std::int64_t N, int C, int OC, DType dtype,
                          cudaStream_t stream);
void matmul_bwd_dgelu(void* dpre, void* dpre_bias, void* dweight, void* dbias, const void* dout,
                      const void* inp, const void* pre, const void* weight, std::int64_t N, int C,
                      int OC, DType dtype, cudaStream_t stream);

// How many times, on the calling thread, a matmul op above took its unfused path because
// cuBLASLt offered no algorithm for the epilogue (or the GELU input's leading dimension, C or
// OC, is not a multiple of 8). A performance diagnostic: the results mean the same either way.
std::uint64_t matmul_unfused_epilogue_count();

void attention_fwd(void* out, float* lse, const void* qkv, int B, int T, int C, int NH,
                   DType dtype, cudaStream_t stream);
void attention_bwd(void* dqkv, const void* dout, const void* qkv, const void* out,
                   const float* lse, int B, int T, int C, int NH, DType dtype,
                   cudaStream_t stream);
void attention_decode(void* out, void* k_cache, void* v_cache, const void* qkv, int B,
                      int T_new, int past, int max_T, int C, int NH, DType dtype,
                      cudaStream_t stream);

void gelu_fwd(void* out, const void* inp, std::int64_t n, DType dtype, cudaStream_t stream);
void gelu_bwd(void* dinp, const void* inp, const void* dout, std::int64_t n, DType dtype,
              cudaStream_t stream);
void residual_fwd(void* out, const void* a, const void* b, std::int64_t n, DType dtype,
                  cudaStream_t stream);

void softmax_xent_fwd(float* losses, const void* logits, const std::int32_t* targets,
                      std::int64_t N, int V, DType dtype, cudaStream_t stream);
void softmax_xent_bwd(void* dlogits, const void* logits, const std::int32_t* targets,
                      std::int64_t N, int V, float dloss, DType dtype, cudaStream_t stream);

}  // namespace strata::kernels::cuda
