#pragma once
// The op-dispatch layer: enqueues a compute op (kernels/) on a runtime Stream.
//
// On the host backend the op runs on the stream's worker thread as a host task (the host
// kernel, OpenMP inside); on CUDA the launcher of kernels/cuda/ops.h is called with the
// stream's cudaStream_t. Arguments mean exactly what the kernels/host/*.h headers say; every
// pointer must stay valid until the stream has run the op (device memory from the arena, or
// host memory the caller keeps alive). Calls return after enqueueing.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/dtype.h"
#include "runtime/device/device.h"

namespace strata::runtime::ops {

void embedding_fwd(device::Stream& s, void* out, const std::int32_t* tokens, const void* wte,
                   const void* wpe, int B, int T, int C, int pos_offset, DType dtype);
void embedding_bwd(device::Stream& s, void* dwte, void* dwpe, const void* dout,
                   const std::int32_t* tokens, int B, int T, int C, DType dtype);

void layernorm_fwd(device::Stream& s, void* out, float* mean, float* rstd, const void* inp,
                   const void* weight, const void* bias, std::int64_t N, int C, float eps,
                   DType dtype);
void residual_layernorm_fwd(device::Stream& s, void* res_out, void* ln_out, float* mean,
                            float* rstd, const void* a, const void* b, const void* weight,
                            const void* bias, std::int64_t N, int C, float eps, DType dtype);
void layernorm_bwd(device::Stream& s, void* dinp, void* dweight, void* dbias, const void* dout,
                   const void* inp, const void* weight, const float* mean, const float* rstd,
                   std::int64_t N, int C, DType dtype);

// The LLaMA family's norm: kernels/host/rmsnorm.h.
void rmsnorm_fwd(device::Stream& s, void* out, float* rstd, const void* inp, const void* weight,
                 std::int64_t N, int C, float eps, DType dtype);
void rmsnorm_bwd(device::Stream& s, void* dinp, void* dweight, const void* dout, const void* inp,
                 const void* weight, const float* rstd, std::int64_t N, int C, DType dtype);

// Qwen3's per-head RMSNorm of q and k inside a packed qkv row: kernels/host/qk_norm.h. out may
// equal qkv; the backward is in place on dqkv and accumulates into dq_weight / dk_weight.
void qk_rmsnorm_fwd(device::Stream& s, void* out, float* rstd, const void* qkv, const void* q_weight,
                    const void* k_weight, std::int64_t N, int NH, int NKV, int hs, float eps, DType dtype);
void qk_rmsnorm_bwd(device::Stream& s, void* dqkv, void* dq_weight, void* dk_weight, const void* qkv,
                    const void* q_weight, const void* k_weight, const float* rstd, std::int64_t N, int NH,
                    int NKV, int hs, DType dtype);

void matmul_fwd(device::Stream& s, void* out, const void* inp, const void* weight, const void* bias,
                std::int64_t N, int C, int OC, DType dtype);
// A mixture's experts at once (kernels/host/matmul.h's matmul_grouped_fwd): weights (device
// pointers, null for an expert skipped) and offsets (groups + 1) are host values, copied.
void matmul_grouped_fwd(device::Stream& s, void* out, const void* inp, const std::vector<const void*>& weights,
                        const std::vector<std::int32_t>& offsets, int C, int OC, DType dtype);
void matmul_bwd(device::Stream& s, void* dinp, void* dweight, void* dbias, const void* dout,
                const void* inp, const void* weight, std::int64_t N, int C, int OC,
                DType dtype);
void matmul_bias_gelu_fwd(device::Stream& s, void* out, void* pre, const void* inp,
                          const void* weight, const void* bias, std::int64_t N, int C, int OC,
                          DType dtype);
void matmul_bwd_dgelu(device::Stream& s, void* dpre, void* dpre_bias, void* dweight, void* dbias,
                      const void* dout, const void* inp, const void* pre, const void* weight,
                      std::int64_t N, int C, int OC, DType dtype);

// Attention with NKV key/value heads (NKV = NH for GPT-2): see kernels/host/attention.h.
void attention_fwd(device::Stream& s, void* out, float* lse, const void* qkv, int B, int T, int NH,
                   int NKV, int hs, DType dtype);
void attention_bwd(device::Stream& s, void* dqkv, const void* dout, const void* qkv, const void* out,
                   const float* lse, int B, int T, int NH, int NKV, int hs, DType dtype);
void attention_decode(device::Stream& s, void* out, void* k_cache, void* v_cache, const void* qkv,
                      int B, int T_new, int past, int max_T, int NH, int NKV, int hs, DType dtype);

// Rotary embeddings in place on qkv's q and k: kernels/host/rope.h. inv_freq (hs/2) fp32 in
// the stream's device memory.
void rope_fwd(device::Stream& s, void* qkv, int B, int T, int NH, int NKV, int hs, int pos_offset,
              const float* inv_freq, DType dtype);
void rope_bwd(device::Stream& s, void* dqkv, int B, int T, int NH, int NKV, int hs, int pos_offset,
              const float* inv_freq, DType dtype);

void gelu_fwd(device::Stream& s, void* out, const void* inp, std::int64_t n, DType dtype);
void gelu_bwd(device::Stream& s, void* dinp, const void* inp, const void* dout, std::int64_t n,
              DType dtype);
void residual_fwd(device::Stream& s, void* out, const void* a, const void* b, std::int64_t n,
                  DType dtype);

// SwiGLU on the fused gate/up projection: kernels/host/swiglu.h.
void swiglu_fwd(device::Stream& s, void* out, const void* gate_up, std::int64_t N, int F,
                DType dtype);
void swiglu_bwd(device::Stream& s, void* dgate_up, const void* gate_up, const void* dout,
                std::int64_t N, int F, DType dtype);

void softmax_xent_fwd(device::Stream& s, float* losses, const void* logits,
                      const std::int32_t* targets, std::int64_t N, int V, int ld, DType dtype);
void softmax_xent_bwd(device::Stream& s, void* dlogits, const void* logits,
                      const std::int32_t* targets, std::int64_t N, int V, int ld, float dloss,
                      DType dtype);

// Mixture of experts (Mixtral, Qwen3-MoE): routing, grouping by expert, gather, weighted
// combine and their backwards: kernels/host/moe.h (shapes, roundings, the order of the calls).
// moe_sort's offsets live in the stream's memory: the caller copies them to the host to loop over
// the experts.
void moe_router_fwd(device::Stream& s, float* probs, std::int32_t* idx, float* weights, float* prob_sum,
                    const void* logits, std::int64_t N, int E, int k, bool renormalize, DType dtype);
void moe_router_bwd(device::Stream& s, void* dlogits, const float* dweights, const float* probs,
                    const std::int32_t* idx, const float* daux, std::int64_t N, int E, int k, bool renormalize,
                    DType dtype);
void moe_sort(device::Stream& s, std::int32_t* offsets, std::int32_t* order, std::int32_t* position,
              const std::int32_t* idx, std::int64_t N, int E, int k);
void moe_gather(device::Stream& s, void* out, const void* inp, const std::int32_t* order, std::int64_t N, int k,
                int C, DType dtype);
void moe_combine_fwd(device::Stream& s, void* out, const void* y, const float* weights,
                     const std::int32_t* position, std::int64_t N, int k, int C, DType dtype);
void moe_combine_bwd(device::Stream& s, void* dy, float* dweights, const void* dout, const void* y,
                     const float* weights, const std::int32_t* position, std::int64_t N, int k, int C,
                     DType dtype);
void moe_scatter_add(device::Stream& s, void* dinp, const void* dx, const std::int32_t* position, std::int64_t N,
                     int k, int C, DType dtype);

void cast(device::Stream& s, const void* src, DType src_dtype, void* dst, DType dst_dtype,
          std::size_t n);

// Group-wise weight dequantization (kernels/host/quantize.h): `in` holds the packed values and
// bf16 scales of numel elements; out gets numel elements of dtype.
void dequantize_groupwise(device::Stream& s, void* out, DType dtype, const void* in, std::size_t numel, int group,
                          int bits);

}  // namespace strata::runtime::ops
