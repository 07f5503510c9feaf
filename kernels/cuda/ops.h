#pragma once
// The GPT and LLaMA ops on CUDA: the same signatures and semantics as kernels/host/{embedding,
// layernorm, rmsnorm, qk_norm, matmul, attention, rope, elementwise, swiglu, cross_entropy}.h (read those
// for shapes, meaning and roundings), plus the stream they are enqueued on. Includes no CUDA header. Every launch is
// checked (strata::Error on failure); each call returns after enqueueing. Pointers are device
// accessible; fp32 accumulation everywhere; matmuls on cuBLAS / cuBLASLt (fp32 compute) with
// one handle per device and stream, created on first use. The fused ops (matmul_bias_gelu_fwd,
// matmul_bwd_dgelu, residual_layernorm_fwd) and the bias of matmul_fwd / matmul_bwd use
// cuBLASLt epilogues or one kernel where the host runs several ops (kernels/cuda/matmul.cu).
//
// Results agree with the host ops within floating-point tolerance, not bit for bit (different
// summation orders; embedding_bwd and the bias / LayerNorm weight sums may use atomics).
#include <cstddef>
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

// RMSNorm (LLaMA family): kernels/host/rmsnorm.h, HF's roundings; dweight without atomics.
void rmsnorm_fwd(void* out, float* rstd, const void* inp, const void* weight, std::int64_t N,
                 int C, float eps, DType dtype, cudaStream_t stream);
void rmsnorm_bwd(void* dinp, void* dweight, const void* dout, const void* inp,
                 const void* weight, const float* rstd, std::int64_t N, int C, DType dtype,
                 cudaStream_t stream);
// Qwen3's per-head RMSNorm of q and k inside qkv: kernels/host/qk_norm.h (kernels/cuda/
// qk_norm.cu). The weight gradients without atomics (deterministic); rstd from fp32 sums.
void qk_rmsnorm_fwd(void* out, float* rstd, const void* qkv, const void* q_weight,
                    const void* k_weight, std::int64_t N, int NH, int NKV, int hs, float eps,
                    DType dtype, cudaStream_t stream);
void qk_rmsnorm_bwd(void* dqkv, void* dq_weight, void* dk_weight, const void* qkv,
                    const void* q_weight, const void* k_weight, const float* rstd, std::int64_t N,
                    int NH, int NKV, int hs, DType dtype, cudaStream_t stream);

void matmul_fwd(void* out, const void* inp, const void* weight, const void* bias,
                std::int64_t N, int C, int OC, DType dtype, cudaStream_t stream);
// kernels/host/matmul.h's matmul_grouped_fwd; weights and offsets are host arrays (the weights
// device pointers). One grouped cuBLAS call (Note [Grouped expert matmuls] in matmul.cu).
void matmul_grouped_fwd(void* out, const void* inp, const void* const* weights, const std::int32_t* offsets,
                        int groups, int C, int OC, DType dtype, cudaStream_t stream);
// How many times, on the calling thread, matmul_grouped_fwd ran one GEMM per group instead of
// the grouped call (cuBLAS found it unsupported, or a matrix did not start on 16 bytes).
std::uint64_t matmul_grouped_declined_count();
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

// Attention: the layout of kernels/host/attention.h (qkv (B, T, (NH + 2 NKV) hs), query head h
// uses key/value head h / (NH / NKV)). bf16 and fp16 with head size 64 or 128 run on tensor
// cores (FlashAttention-2: kernels/cuda/attention_flash_*.cu, fp32 accumulation and softmax);
// fp32 and other head sizes (<= 256) on the fp32 CUDA-core kernels (kernels/cuda/attention.cu).
// Both backwards are deterministic (no atomics). Decoding appends the new keys and values, then
// for T_new <= 16 runs a split-KV kernel (kernels/cuda/attention_decode.cu: every dtype, head
// size <= 256 with 16-byte head rows; each cached key/value read once for the query heads that
// share it, split over the cache length, fp32 softmax; deterministic), for longer prefills the
// flash forward over the caches (bf16 / fp16, head size 64 / 128) or else the fp32 forward.
void attention_fwd(void* out, float* lse, const void* qkv, int B, int T, int NH, int NKV, int hs,
                   DType dtype, cudaStream_t stream);
void attention_bwd(void* dqkv, const void* dout, const void* qkv, const void* out,
                   const float* lse, int B, int T, int NH, int NKV, int hs, DType dtype,
                   cudaStream_t stream);
void attention_decode(void* out, void* k_cache, void* v_cache, const void* qkv, int B,
                      int T_new, int past, int max_T, int NH, int NKV, int hs, DType dtype,
                      cudaStream_t stream);

// Which kernels attention_fwd / attention_bwd take for (dtype, hs): for tests and benchmarks.
enum class AttentionKernel { flash_tensor_core, fp32_cuda_core };
AttentionKernel attention_kernel(DType dtype, int hs);
// Which kernel attention_decode takes after the append for (dtype, hs, T_new) with 16-byte
// aligned tensors (cudaMalloc and the arena give 256; misaligned caches, or qkv / out for the
// flash path, fall back to fp32_cuda_core).
enum class AttentionDecodeKernel { split_kv, flash_tensor_core, fp32_cuda_core };
AttentionDecodeKernel attention_decode_kernel(DType dtype, int hs, int T_new);

// Rotary embeddings in place on qkv's q and k: kernels/host/rope.h. inv_freq (hs/2) fp32 in
// device memory (from kernels::host::rope_inv_freq).
void rope_fwd(void* qkv, int B, int T, int NH, int NKV, int hs, int pos_offset,
              const float* inv_freq, DType dtype, cudaStream_t stream);
void rope_bwd(void* dqkv, int B, int T, int NH, int NKV, int hs, int pos_offset,
              const float* inv_freq, DType dtype, cudaStream_t stream);

void gelu_fwd(void* out, const void* inp, std::int64_t n, DType dtype, cudaStream_t stream);
void gelu_bwd(void* dinp, const void* inp, const void* dout, std::int64_t n, DType dtype,
              cudaStream_t stream);
void residual_fwd(void* out, const void* a, const void* b, std::int64_t n, DType dtype,
                  cudaStream_t stream);

// SwiGLU: kernels/host/swiglu.h.
void swiglu_fwd(void* out, const void* gate_up, std::int64_t N, int F, DType dtype,
                cudaStream_t stream);
void swiglu_bwd(void* dgate_up, const void* gate_up, const void* dout, std::int64_t N, int F,
                DType dtype, cudaStream_t stream);

void softmax_xent_fwd(float* losses, const void* logits, const std::int32_t* targets,
                      std::int64_t N, int V, int ld, DType dtype, cudaStream_t stream);
void softmax_xent_bwd(void* dlogits, const void* logits, const std::int32_t* targets,
                      std::int64_t N, int V, int ld, float dloss, DType dtype,
                      cudaStream_t stream);

// Group-wise weight dequantization: kernels/host/quantize.h (format, arithmetic). Bit-identical
// to kernels::host::dequantize_groupwise.
void dequantize_groupwise(void* out, DType dtype, const void* in, std::size_t numel, int group, int bits,
                          cudaStream_t stream);

}  // namespace strata::kernels::cuda
