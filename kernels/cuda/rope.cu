// Rotary position embeddings on CUDA, in place on the q and k heads of qkv: the convention
// and precision of kernels/host/rope.h (rotate_half pairs (i, i + hs/2); the angle the fp32
// product float(pos_offset + t) * inv_freq[i]; sincosf, not the fast __sinf / __cosf, whose
// error grows with the angle; the rotation in fp32, rounded once).
//
// One thread per (token, q-or-k head, pair i) in a grid-stride loop: each pair is read and
// written by its thread only, so the update in place is safe and the result deterministic.
#include <cstdint>
#include <string>

#include "core/error.h"
#include "kernels/cuda/common_impl.cuh"
#include "kernels/cuda/ops.h"

namespace strata::kernels::cuda {
namespace {

using detail::from_f32;
using detail::to_f32;

constexpr int kThreads = 256;

// qkv (B*T, (NH + 2 NKV) hs); the first `heads` = NH + NKV heads of each row are rotated by
// +angle (sign 1, forward) or -angle (sign -1, backward).
template <typename T>
__global__ void rope_kernel(T* qkv, const float* __restrict__ inv_freq, std::int64_t tokens,
                            int T_len, int heads, int row, int hs, int pos_offset, float sign) {
  const int half = hs / 2;
  const std::int64_t n = tokens * heads * half;
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t idx = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
       idx < n; idx += stride) {
    const int i = static_cast<int>(idx % half);
    const std::int64_t token_head = idx / half;
    const int h = static_cast<int>(token_head % heads);
    const std::int64_t bt = token_head / heads;
    const int t = static_cast<int>(bt % T_len);
    const float angle = static_cast<float>(pos_offset + t) * inv_freq[i];  // fp32, as HF
    float sn, cs;
    sincosf(angle, &sn, &cs);
    sn *= sign;
    T* x = qkv + bt * row + static_cast<std::int64_t>(h) * hs;
    const float x1 = to_f32(x[i]), x2 = to_f32(x[i + half]);
    x[i] = from_f32<T>(x1 * cs - x2 * sn);
    x[i + half] = from_f32<T>(x2 * cs + x1 * sn);
  }
}

void rope(void* qkv, int B, int T, int NH, int NKV, int hs, int pos_offset,
          const float* inv_freq, DType dtype, float sign, const char* op, cudaStream_t stream) {
  if (NH <= 0 || NKV <= 0 || hs <= 0 || NH % NKV != 0 || hs % 2 != 0)
    throw Error("rope: " + std::to_string(NH) + " query heads, " + std::to_string(NKV) +
                    " key/value heads, head size " + std::to_string(hs) +
                    ": the heads must be positive, NH a multiple of NKV and hs even",
                std::string("kernels::cuda::") + op,
                "check num_attention_heads / num_key_value_heads / head_dim in the model config");
  STRATA_ASSERT(B >= 0 && T >= 0 && pos_offset >= 0);
  if (B == 0 || T == 0) return;
  STRATA_ASSERT(qkv != nullptr && inv_freq != nullptr);
  const std::int64_t tokens = static_cast<std::int64_t>(B) * T;
  const int heads = NH + NKV;
  const std::int64_t n = tokens * heads * (hs / 2);
  detail::dispatch_dtype(dtype, [&](auto tag) {
    using E = typename decltype(tag)::type;
    rope_kernel<E><<<detail::grid_stride_blocks(n, kThreads), kThreads, 0, stream>>>(
        static_cast<E*>(qkv), inv_freq, tokens, T, heads, (NH + 2 * NKV) * hs, hs, pos_offset,
        sign);
    CUDA_CHECK_LAUNCH();
  });
}

}  // namespace

void rope_fwd(void* qkv, int B, int T, int NH, int NKV, int hs, int pos_offset,
              const float* inv_freq, DType dtype, cudaStream_t stream) {
  rope(qkv, B, T, NH, NKV, hs, pos_offset, inv_freq, dtype, 1.0f, "rope_fwd", stream);
}

void rope_bwd(void* dqkv, int B, int T, int NH, int NKV, int hs, int pos_offset,
              const float* inv_freq, DType dtype, cudaStream_t stream) {
  rope(dqkv, B, T, NH, NKV, hs, pos_offset, inv_freq, dtype, -1.0f, "rope_bwd", stream);
}

}  // namespace strata::kernels::cuda
