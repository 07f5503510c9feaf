#include "kernels/host/rope.h"

#include <cmath>
#include <cstddef>
#include <numbers>
#include <string>
#include <vector>

#include "core/error.h"
#include "kernels/host/kernel_impl.h"

namespace strata::kernels::host {
namespace {

using detail::load_row;
using detail::store_row;

void check_heads(int NH, int NKV, int hs, const char* op) {
  if (NH <= 0 || NKV <= 0 || hs <= 0 || NH % NKV != 0 || hs % 2 != 0)
    throw Error("rope: " + std::to_string(NH) + " query heads, " + std::to_string(NKV) +
                    " key/value heads, head size " + std::to_string(hs) +
                    ": the heads must be positive, NH a multiple of NKV and hs even",
                std::string("kernels::host::") + op,
                "check num_attention_heads / num_key_value_heads / head_dim in the model config");
}

// Rotates the q and k heads of every token by +a (sign = 1, forward) or -a (sign = -1, the
// transpose, backward). One token per work item: each owns its row, so any thread count gives
// the same bits.
void rotate(void* qkv, int B, int T, int NH, int NKV, int hs, int pos_offset,
            const float* inv_freq, DType dtype, float sign, const char* op) {
  check_heads(NH, NKV, hs, op);
  STRATA_ASSERT(B >= 0 && T >= 0 && pos_offset >= 0);
  if (B == 0 || T == 0) return;
  STRATA_ASSERT(qkv != nullptr && inv_freq != nullptr);
  const auto half = static_cast<std::size_t>(hs / 2);
  const auto heads = static_cast<std::size_t>(NH + NKV);  // q and k heads: the row's first part
  const std::size_t row = static_cast<std::size_t>(NH + 2 * NKV) * static_cast<std::size_t>(hs);
  const std::int64_t tokens = static_cast<std::int64_t>(B) * T;
#pragma omp parallel
  {
    std::vector<float> x(heads * 2 * half), cs(half), sn(half);
#pragma omp for schedule(static)
    for (std::int64_t bt = 0; bt < tokens; ++bt) {
      const auto pos = static_cast<float>(pos_offset + static_cast<int>(bt % T));
      for (std::size_t i = 0; i < half; ++i) {
        const float a = pos * inv_freq[i];  // fp32, as HF
        cs[i] = std::cos(a);
        sn[i] = sign * std::sin(a);
      }
      const std::size_t base = static_cast<std::size_t>(bt) * row;
      load_row(qkv, dtype, base, x.size(), x.data());
      for (std::size_t h = 0; h < heads; ++h) {
        float* v = x.data() + h * 2 * half;
        for (std::size_t i = 0; i < half; ++i) {
          const float x1 = v[i], x2 = v[i + half];
          v[i] = x1 * cs[i] - x2 * sn[i];
          v[i + half] = x2 * cs[i] + x1 * sn[i];
        }
      }
      store_row(x.data(), qkv, dtype, base, x.size());
    }
  }
}

}  // namespace

void rope_fwd(void* qkv, int B, int T, int NH, int NKV, int hs, int pos_offset,
              const float* inv_freq, DType dtype) {
  rotate(qkv, B, T, NH, NKV, hs, pos_offset, inv_freq, dtype, 1.0f, "rope_fwd");
}

void rope_bwd(void* dqkv, int B, int T, int NH, int NKV, int hs, int pos_offset,
              const float* inv_freq, DType dtype) {
  rotate(dqkv, B, T, NH, NKV, hs, pos_offset, inv_freq, dtype, -1.0f, "rope_bwd");
}

std::vector<float> rope_inv_freq(int head_dim, double theta, const RopeLlama3Scaling* llama3) {
  if (head_dim <= 0 || head_dim % 2 != 0 || !(theta > 0.0))
    throw Error("rope: head_dim " + std::to_string(head_dim) + ", rope_theta " +
                    std::to_string(theta) + ": head_dim must be positive and even, theta > 0",
                "kernels::host::rope_inv_freq", "check head_dim / rope_theta in the model config");
  const int half = head_dim / 2;
  std::vector<double> inv(static_cast<std::size_t>(half));
  for (int i = 0; i < half; ++i)
    inv[static_cast<std::size_t>(i)] = 1.0 / std::pow(theta, 2.0 * i / head_dim);
  if (llama3 != nullptr) {
    const double factor = llama3->factor, low = llama3->low_freq_factor,
                 high = llama3->high_freq_factor, orig = llama3->original_max_position_embeddings;
    if (!(factor > 0.0) || !(low > 0.0) || !(high > low) || !(orig > 0.0))
      throw Error("rope: llama3 rope_scaling with factor " + std::to_string(factor) +
                      ", low_freq_factor " + std::to_string(low) + ", high_freq_factor " +
                      std::to_string(high) + ", original_max_position_embeddings " +
                      std::to_string(orig) +
                      ": factor, low_freq_factor and the context must be positive, "
                      "high_freq_factor > low_freq_factor",
                  "kernels::host::rope_inv_freq", "check rope_scaling in the model config");
    const double low_freq_wavelen = orig / low, high_freq_wavelen = orig / high;
    for (double& f : inv) {
      const double wavelen = 2.0 * std::numbers::pi / f;
      if (wavelen > low_freq_wavelen) {
        f = f / factor;
      } else if (!(wavelen < high_freq_wavelen)) {
        const double smooth = (orig / wavelen - low) / (high - low);
        f = (1.0 - smooth) * f / factor + smooth * f;
      }
    }
  }
  std::vector<float> out(inv.size());
  for (std::size_t i = 0; i < inv.size(); ++i) out[i] = static_cast<float>(inv[i]);
  return out;
}

}  // namespace strata::kernels::host
