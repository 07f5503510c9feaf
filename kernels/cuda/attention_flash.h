#pragma once
// Internal to kernels/cuda: the tensor-core (FlashAttention-2) attention kernels' launchers,
// called by attention.cu's attention_fwd / attention_bwd / attention_decode for bf16 and fp16
// with head size 64 or 128. Shapes and meaning as in kernels/host/attention.h. Includes no CUDA
// header.
#include <cstdint>

#include "core/dtype.h"
#include "kernels/cuda/ops.h"

namespace strata::kernels::cuda::detail {

// True where the flash kernels handle (dtype, hs): bf16 or fp16, hs 64 or 128.
constexpr bool flash_supported(DType dtype, int hs) {
  return (dtype == DType::bf16 || dtype == DType::f16) && (hs == 64 || hs == 128);
}

// The flash kernels read and write 16 bytes at a time: every pointer must be 16-byte aligned
// (cudaMalloc and the arena give 256). Row strides are multiples of 16 bytes for hs 64 / 128.
bool flash_aligned(const void* p);

// out (B, T, NH hs), lse (B, NH, T) or null, from qkv (B, T, (NH + 2 NKV) hs).
void flash_attention_fwd(void* out, float* lse, const void* qkv, int B, int T, int NH, int NKV,
                         int hs, DType dtype, cudaStream_t stream);

// Decoding's prefill: out (B, T_new, NH hs) from the queries of qkv (B, T_new, (NH + 2 NKV) hs)
// and the keys and values at positions [0, past + T_new) of k_cache, v_cache (B, max_T, NKV hs),
// the new ones already appended; query t (position past + t) sees keys [0, past + t].
void flash_attention_decode(void* out, const void* qkv, const void* k_cache, const void* v_cache,
                            int B, int T_new, int past, int max_T, int NH, int NKV, int hs,
                            DType dtype, cudaStream_t stream);

// dqkv (B, T, (NH + 2 NKV) hs), overwritten; D (B, NH, T) = rowsum(dout * out), computed by the
// caller. Two kernels: dK/dV per key tile and key/value head, dQ per query tile and head.
void flash_attention_bwd(void* dqkv, const void* dout, const void* qkv, const float* lse,
                         const float* D, int B, int T, int NH, int NKV, int hs, DType dtype,
                         cudaStream_t stream);

}  // namespace strata::kernels::cuda::detail
