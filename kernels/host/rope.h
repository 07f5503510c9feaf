#pragma once
// Rotary position embeddings (RoPE) of the LLaMA family (Llama 3, Qwen2, Mistral), applied in
// place to the queries and keys inside the packed qkv buffer of kernels/host/attention.h:
// qkv (B, T, (NH + 2 NKV) hs), per token [q (NH hs) | k (NKV hs) | v (NKV hs)].
//
// Hugging Face's "rotate_half" convention: channel i of a head is paired with channel
// i + hs/2 (NOT the interleaved pairs (2i, 2i+1) of the original paper / Meta's checkpoints),
// and for i < hs/2, with angle a = (pos_offset + t) * inv_freq[i]:
//   x'[i]        = x[i] cos a - x[i + hs/2] sin a
//   x'[i + hs/2] = x[i + hs/2] cos a + x[i] sin a
// which is HF's q * cos + rotate_half(q) * sin with cos = cat(cos(freqs), cos(freqs)).
//
// Precision: the angle is the fp32 product float(pos_offset + t) * inv_freq[i], as HF's fp32
// inv_freq @ position_ids; cos and sin of it in fp32; the rotation in fp32; each output rounded
// once to the storage dtype. (HF casts cos and sin to the model dtype and rounds both products
// and the sum there; in bf16 the two differ by about an ulp of the output.)
#include <cstdint>
#include <vector>

#include "core/dtype.h"

namespace strata::kernels::host {

// Rotates q and k of every head of every token in place (v untouched). inv_freq (hs/2) fp32.
// hs must be even, NH a multiple of NKV (else a strata::Error); pos_offset >= 0 is the position
// of token t = 0 (the number of tokens already in a KV cache).
void rope_fwd(void* qkv, int B, int T, int NH, int NKV, int hs, int pos_offset,
              const float* inv_freq, DType dtype);

// The backward of rope_fwd, in place on dqkv (qkv's layout): the q and k parts become the
// inverse (transposed) rotation of themselves, x[i] cos a + x[i + hs/2] sin a and
// x[i + hs/2] cos a - x[i] sin a; the v part is untouched.
void rope_bwd(void* dqkv, int B, int T, int NH, int NKV, int hs, int pos_offset,
              const float* inv_freq, DType dtype);

// config.json's "rope_scaling" with "rope_type": "llama3" (Llama 3.1 / 3.2).
struct RopeLlama3Scaling {
  double factor = 8.0;
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  double original_max_position_embeddings = 8192.0;
  bool operator==(const RopeLlama3Scaling&) const = default;
};

// The rotary frequencies, hs/2 of them: inv_freq[i] = 1 / theta^(2i / head_dim), then, with
// llama3 scaling, HF's _compute_llama3_parameters: with wavelen = 2 pi / inv_freq,
// low_freq_wavelen = orig / low_freq_factor and high_freq_wavelen = orig / high_freq_factor,
//   wavelen > low_freq_wavelen  : inv_freq / factor             (long wavelengths)
//   wavelen < high_freq_wavelen : inv_freq                      (short wavelengths)
//   otherwise                   : (1 - smooth) inv_freq / factor + smooth inv_freq,
//                                 smooth = (orig / wavelen - low) / (high - low).
// Computed in double, rounded once to fp32 (HF computes in fp32: it may differ in the last
// bit). A bad head_dim, theta or scaling (odd or non-positive head_dim, theta <= 0, factor <= 0,
// high_freq_factor <= low_freq_factor, ...) is a strata::Error.
std::vector<float> rope_inv_freq(int head_dim, double theta,
                                 const RopeLlama3Scaling* llama3 = nullptr);

}  // namespace strata::kernels::host
