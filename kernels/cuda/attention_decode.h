#pragma once
// Internal to kernels/cuda: the split-KV decoding attention (attention_decode.cu), called by
// attention.cu's attention_decode for a few new tokens once their keys and values are in the
// caches. Shapes and meaning as in kernels/host/attention.h. Includes no CUDA header.
#include "core/dtype.h"
#include "kernels/cuda/ops.h"

namespace strata::kernels::cuda::detail {

// The most new tokens per call the split kernel takes: its blocks hold at most 8 query rows
// (query heads x new tokens) and read the keys again for every 8 more, so longer prefills go to
// the forward kernels (flash or fp32), which tile the queries.
constexpr int kDecodeSplitMaxTokens = 16;

// True where attention_decode_split handles (dtype, hs, T_new): 1 <= T_new <=
// kDecodeSplitMaxTokens and hs <= 256 with a head row a whole number of 16-byte copies (hs a
// multiple of 8 for bf16 / fp16, of 4 for fp32). The caches must also be 16-byte aligned
// (flash_aligned); qkv and out need no alignment.
bool decode_split_supported(DType dtype, int hs, int T_new);

// out (B, T_new, NH hs) from the queries of qkv (B, T_new, (NH + 2 NKV) hs) and the keys and
// values at positions [0, past + T_new) of k_cache, v_cache (B, max_T, NKV hs), the new ones
// already appended; new token t (position past + t) sees positions [0, past + t].
void attention_decode_split(void* out, const void* qkv, const void* k_cache, const void* v_cache,
                            int B, int T_new, int past, int max_T, int NH, int NKV, int hs,
                            DType dtype, cudaStream_t stream);

}  // namespace strata::kernels::cuda::detail
