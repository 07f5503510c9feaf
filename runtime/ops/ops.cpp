// Each op: the CUDA launcher when the stream has a cudaStream_t, else a host task running the
// host kernel on the stream's worker thread. Lambdas capture the arguments by value.
#include "runtime/ops/ops.h"

#include "core/error.h"
#include "kernels/cuda/cast.h"
#include "kernels/cuda/moe.h"
#include "kernels/cuda/ops.h"
#include "kernels/host/attention.h"
#include "kernels/host/cast.h"
#include "kernels/host/cross_entropy.h"
#include "kernels/host/elementwise.h"
#include "kernels/host/embedding.h"
#include "kernels/host/layernorm.h"
#include "kernels/host/matmul.h"
#include "kernels/host/moe.h"
#include "kernels/host/qk_norm.h"
#include "kernels/host/quantize.h"
#include "kernels/host/rmsnorm.h"
#include "kernels/host/rope.h"
#include "kernels/host/swiglu.h"
#include "runtime/ops/dispatch_impl.h"

namespace strata::runtime::ops {
namespace {

namespace kh = strata::kernels::host;

}  // namespace

void embedding_fwd(device::Stream& s, void* out, const std::int32_t* tokens, const void* wte,
                   const void* wpe, int B, int T, int C, int pos_offset, DType dtype) {
  const OpScope scope(s, "embedding_fwd");
  if (cudaStream_t cs = cuda_stream(s)) {
    CUDA_OP(kc::embedding_fwd(out, tokens, wte, wpe, B, T, C, pos_offset, dtype, cs));
    return;
  }
  s.host_task([=] { kh::embedding_fwd(out, tokens, wte, wpe, B, T, C, pos_offset, dtype); },
              "embedding_fwd");
}

void embedding_bwd(device::Stream& s, void* dwte, void* dwpe, const void* dout,
                   const std::int32_t* tokens, int B, int T, int C, DType dtype) {
  const OpScope scope(s, "embedding_bwd");
  if (cudaStream_t cs = cuda_stream(s)) {
    CUDA_OP(kc::embedding_bwd(dwte, dwpe, dout, tokens, B, T, C, dtype, cs));
    return;
  }
  s.host_task([=] { kh::embedding_bwd(dwte, dwpe, dout, tokens, B, T, C, dtype); },
              "embedding_bwd");
}

void layernorm_fwd(device::Stream& s, void* out, float* mean, float* rstd, const void* inp,
                   const void* weight, const void* bias, std::int64_t N, int C, float eps,
                   DType dtype) {
  const OpScope scope(s, "layernorm_fwd");
  if (cudaStream_t cs = cuda_stream(s)) {
    CUDA_OP(kc::layernorm_fwd(out, mean, rstd, inp, weight, bias, N, C, eps, dtype, cs));
    return;
  }
  s.host_task([=] { kh::layernorm_fwd(out, mean, rstd, inp, weight, bias, N, C, eps, dtype); },
              "layernorm_fwd");
}

void residual_layernorm_fwd(device::Stream& s, void* res_out, void* ln_out, float* mean,
                            float* rstd, const void* a, const void* b, const void* weight,
                            const void* bias, std::int64_t N, int C, float eps, DType dtype) {
  const OpScope scope(s, "residual_layernorm_fwd");
  if (cudaStream_t cs = cuda_stream(s)) {
    CUDA_OP(kc::residual_layernorm_fwd(res_out, ln_out, mean, rstd, a, b, weight, bias, N, C, eps,
                                       dtype, cs));
    return;
  }
  s.host_task(
      [=] {
        kh::residual_layernorm_fwd(res_out, ln_out, mean, rstd, a, b, weight, bias, N, C, eps,
                                   dtype);
      },
      "residual_layernorm_fwd");
}

void layernorm_bwd(device::Stream& s, void* dinp, void* dweight, void* dbias, const void* dout,
                   const void* inp, const void* weight, const float* mean, const float* rstd,
                   std::int64_t N, int C, DType dtype) {
  const OpScope scope(s, "layernorm_bwd");
  if (cudaStream_t cs = cuda_stream(s)) {
    CUDA_OP(kc::layernorm_bwd(dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C, dtype,
                              cs));
    return;
  }
  s.host_task(
      [=] {
        kh::layernorm_bwd(dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C, dtype);
      },
      "layernorm_bwd");
}

void rmsnorm_fwd(device::Stream& s, void* out, float* rstd, const void* inp, const void* weight,
                 std::int64_t N, int C, float eps, DType dtype) {
  const OpScope scope(s, "rmsnorm_fwd");
  if (cudaStream_t cs = cuda_stream(s)) {
    CUDA_OP(kc::rmsnorm_fwd(out, rstd, inp, weight, N, C, eps, dtype, cs));
    return;
  }
  s.host_task([=] { kh::rmsnorm_fwd(out, rstd, inp, weight, N, C, eps, dtype); }, "rmsnorm_fwd");
}

void rmsnorm_bwd(device::Stream& s, void* dinp, void* dweight, const void* dout, const void* inp,
                 const void* weight, const float* rstd, std::int64_t N, int C, DType dtype) {
  const OpScope scope(s, "rmsnorm_bwd");
  if (cudaStream_t cs = cuda_stream(s)) {
    CUDA_OP(kc::rmsnorm_bwd(dinp, dweight, dout, inp, weight, rstd, N, C, dtype, cs));
    return;
  }
  s.host_task([=] { kh::rmsnorm_bwd(dinp, dweight, dout, inp, weight, rstd, N, C, dtype); },
              "rmsnorm_bwd");
}

void qk_rmsnorm_fwd(device::Stream& s, void* out, float* rstd, const void* qkv, const void* q_weight,
                    const void* k_weight, std::int64_t N, int NH, int NKV, int hs, float eps, DType dtype) {
  const OpScope scope(s, "qk_rmsnorm_fwd");
  if (cudaStream_t cs = cuda_stream(s)) {
    CUDA_OP(kc::qk_rmsnorm_fwd(out, rstd, qkv, q_weight, k_weight, N, NH, NKV, hs, eps, dtype, cs));
    return;
  }
  s.host_task([=] { kh::qk_rmsnorm_fwd(out, rstd, qkv, q_weight, k_weight, N, NH, NKV, hs, eps, dtype); },
              "qk_rmsnorm_fwd");
}

void qk_rmsnorm_bwd(device::Stream& s, void* dqkv, void* dq_weight, void* dk_weight, const void* qkv,
                    const void* q_weight, const void* k_weight, const float* rstd, std::int64_t N, int NH,
                    int NKV, int hs, DType dtype) {
  const OpScope scope(s, "qk_rmsnorm_bwd");
  if (cudaStream_t cs = cuda_stream(s)) {
    CUDA_OP(kc::qk_rmsnorm_bwd(dqkv, dq_weight, dk_weight, qkv, q_weight, k_weight, rstd, N, NH, NKV, hs,
                               dtype, cs));
    return;
  }
  s.host_task(
      [=] {
        kh::qk_rmsnorm_bwd(dqkv, dq_weight, dk_weight, qkv, q_weight, k_weight, rstd, N, NH, NKV, hs, dtype);
      },
      "qk_rmsnorm_bwd");
}

void matmul_fwd(device::Stream& s, void* out, const void* inp, const void* weight, const void* bias,
                std::int64_t N, int C, int OC, DType dtype) {
  const OpScope scope(s, "matmul_fwd");
  if (cudaStream_t cs = cuda_stream(s)) {
    CUDA_OP(kc::matmul_fwd(out, inp, weight, bias, N, C, OC, dtype, cs));
    return;
  }
  s.host_task([=] { kh::matmul_fwd(out, inp, weight, bias, N, C, OC, dtype); }, "matmul_fwd");
}

void matmul_grouped_fwd(device::Stream& s, void* out, const void* inp, const std::vector<const void*>& weights,
                        const std::vector<std::int32_t>& offsets, int C, int OC, DType dtype) {
  STRATA_ASSERT(offsets.size() == weights.size() + 1, "matmul_grouped_fwd: groups + 1 offsets");
  const int groups = static_cast<int>(weights.size());
  const OpScope scope(s, "matmul_grouped_fwd");
  if (cudaStream_t cs = cuda_stream(s)) {
    CUDA_OP(kc::matmul_grouped_fwd(out, inp, weights.data(), offsets.data(), groups, C, OC, dtype, cs));
    return;
  }
  s.host_task([=] { kh::matmul_grouped_fwd(out, inp, weights.data(), offsets.data(), groups, C, OC, dtype); },
              "matmul_grouped_fwd");
}

void matmul_bwd(device::Stream& s, void* dinp, void* dweight, void* dbias, const void* dout,
                const void* inp, const void* weight, std::int64_t N, int C, int OC,
                DType dtype) {
  const OpScope scope(s, "matmul_bwd");
  if (cudaStream_t cs = cuda_stream(s)) {
    CUDA_OP(kc::matmul_bwd(dinp, dweight, dbias, dout, inp, weight, N, C, OC, dtype, cs));
    return;
  }
  s.host_task([=] { kh::matmul_bwd(dinp, dweight, dbias, dout, inp, weight, N, C, OC, dtype); },
              "matmul_bwd");
}

void matmul_bias_gelu_fwd(device::Stream& s, void* out, void* pre, const void* inp,
                          const void* weight, const void* bias, std::int64_t N, int C, int OC,
                          DType dtype) {
  const OpScope scope(s, "matmul_bias_gelu_fwd");
  if (cudaStream_t cs = cuda_stream(s)) {
    CUDA_OP(kc::matmul_bias_gelu_fwd(out, pre, inp, weight, bias, N, C, OC, dtype, cs));
    return;
  }
  s.host_task([=] { kh::matmul_bias_gelu_fwd(out, pre, inp, weight, bias, N, C, OC, dtype); },
              "matmul_bias_gelu_fwd");
}

void matmul_bwd_dgelu(device::Stream& s, void* dpre, void* dpre_bias, void* dweight, void* dbias,
                      const void* dout, const void* inp, const void* pre, const void* weight,
                      std::int64_t N, int C, int OC, DType dtype) {
  const OpScope scope(s, "matmul_bwd_dgelu");
  if (cudaStream_t cs = cuda_stream(s)) {
    CUDA_OP(kc::matmul_bwd_dgelu(dpre, dpre_bias, dweight, dbias, dout, inp, pre, weight, N, C,
                                 OC, dtype, cs));
    return;
  }
  s.host_task(
      [=] {
        kh::matmul_bwd_dgelu(dpre, dpre_bias, dweight, dbias, dout, inp, pre, weight, N, C, OC,
                             dtype);
      },
      "matmul_bwd_dgelu");
}

void attention_fwd(device::Stream& s, void* out, float* lse, const void* qkv, int B, int T, int NH,
                   int NKV, int hs, DType dtype) {
  const OpScope scope(s, "attention_fwd");
  if (cudaStream_t cs = cuda_stream(s)) {
    CUDA_OP(kc::attention_fwd(out, lse, qkv, B, T, NH, NKV, hs, dtype, cs));
    return;
  }
  s.host_task([=] { kh::attention_fwd(out, lse, qkv, B, T, NH, NKV, hs, dtype); },
              "attention_fwd");
}

void attention_bwd(device::Stream& s, void* dqkv, const void* dout, const void* qkv, const void* out,
                   const float* lse, int B, int T, int NH, int NKV, int hs, DType dtype) {
  const OpScope scope(s, "attention_bwd");
  if (cudaStream_t cs = cuda_stream(s)) {
    CUDA_OP(kc::attention_bwd(dqkv, dout, qkv, out, lse, B, T, NH, NKV, hs, dtype, cs));
    return;
  }
  s.host_task([=] { kh::attention_bwd(dqkv, dout, qkv, out, lse, B, T, NH, NKV, hs, dtype); },
              "attention_bwd");
}

void attention_decode(device::Stream& s, void* out, void* k_cache, void* v_cache, const void* qkv,
                      int B, int T_new, int past, int max_T, int NH, int NKV, int hs, DType dtype) {
  const OpScope scope(s, "attention_decode");
  if (cudaStream_t cs = cuda_stream(s)) {
    CUDA_OP(kc::attention_decode(out, k_cache, v_cache, qkv, B, T_new, past, max_T, NH, NKV, hs,
                                 dtype, cs));
    return;
  }
  s.host_task(
      [=] {
        kh::attention_decode(out, k_cache, v_cache, qkv, B, T_new, past, max_T, NH, NKV, hs,
                             dtype);
      },
      "attention_decode");
}

void rope_fwd(device::Stream& s, void* qkv, int B, int T, int NH, int NKV, int hs, int pos_offset,
              const float* inv_freq, DType dtype) {
  const OpScope scope(s, "rope_fwd");
  if (cudaStream_t cs = cuda_stream(s)) {
    CUDA_OP(kc::rope_fwd(qkv, B, T, NH, NKV, hs, pos_offset, inv_freq, dtype, cs));
    return;
  }
  s.host_task([=] { kh::rope_fwd(qkv, B, T, NH, NKV, hs, pos_offset, inv_freq, dtype); },
              "rope_fwd");
}

void rope_bwd(device::Stream& s, void* dqkv, int B, int T, int NH, int NKV, int hs, int pos_offset,
              const float* inv_freq, DType dtype) {
  const OpScope scope(s, "rope_bwd");
  if (cudaStream_t cs = cuda_stream(s)) {
    CUDA_OP(kc::rope_bwd(dqkv, B, T, NH, NKV, hs, pos_offset, inv_freq, dtype, cs));
    return;
  }
  s.host_task([=] { kh::rope_bwd(dqkv, B, T, NH, NKV, hs, pos_offset, inv_freq, dtype); },
              "rope_bwd");
}

void gelu_fwd(device::Stream& s, void* out, const void* inp, std::int64_t n, DType dtype) {
  const OpScope scope(s, "gelu_fwd");
  if (cudaStream_t cs = cuda_stream(s)) {
    CUDA_OP(kc::gelu_fwd(out, inp, n, dtype, cs));
    return;
  }
  s.host_task([=] { kh::gelu_fwd(out, inp, n, dtype); }, "gelu_fwd");
}

void gelu_bwd(device::Stream& s, void* dinp, const void* inp, const void* dout, std::int64_t n,
              DType dtype) {
  const OpScope scope(s, "gelu_bwd");
  if (cudaStream_t cs = cuda_stream(s)) {
    CUDA_OP(kc::gelu_bwd(dinp, inp, dout, n, dtype, cs));
    return;
  }
  s.host_task([=] { kh::gelu_bwd(dinp, inp, dout, n, dtype); }, "gelu_bwd");
}

void residual_fwd(device::Stream& s, void* out, const void* a, const void* b, std::int64_t n,
                  DType dtype) {
  const OpScope scope(s, "residual_fwd");
  if (cudaStream_t cs = cuda_stream(s)) {
    CUDA_OP(kc::residual_fwd(out, a, b, n, dtype, cs));
    return;
  }
  s.host_task([=] { kh::residual_fwd(out, a, b, n, dtype); }, "residual_fwd");
}

void swiglu_fwd(device::Stream& s, void* out, const void* gate_up, std::int64_t N, int F,
                DType dtype) {
  const OpScope scope(s, "swiglu_fwd");
  if (cudaStream_t cs = cuda_stream(s)) {
    CUDA_OP(kc::swiglu_fwd(out, gate_up, N, F, dtype, cs));
    return;
  }
  s.host_task([=] { kh::swiglu_fwd(out, gate_up, N, F, dtype); }, "swiglu_fwd");
}

void swiglu_bwd(device::Stream& s, void* dgate_up, const void* gate_up, const void* dout,
                std::int64_t N, int F, DType dtype) {
  const OpScope scope(s, "swiglu_bwd");
  if (cudaStream_t cs = cuda_stream(s)) {
    CUDA_OP(kc::swiglu_bwd(dgate_up, gate_up, dout, N, F, dtype, cs));
    return;
  }
  s.host_task([=] { kh::swiglu_bwd(dgate_up, gate_up, dout, N, F, dtype); }, "swiglu_bwd");
}

void softmax_xent_fwd(device::Stream& s, float* losses, const void* logits,
                      const std::int32_t* targets, std::int64_t N, int V, int ld, DType dtype) {
  const OpScope scope(s, "softmax_xent_fwd");
  if (cudaStream_t cs = cuda_stream(s)) {
    CUDA_OP(kc::softmax_xent_fwd(losses, logits, targets, N, V, ld, dtype, cs));
    return;
  }
  s.host_task([=] { kh::softmax_xent_fwd(losses, logits, targets, N, V, ld, dtype); },
              "softmax_xent_fwd");
}

void softmax_xent_bwd(device::Stream& s, void* dlogits, const void* logits,
                      const std::int32_t* targets, std::int64_t N, int V, int ld, float dloss,
                      DType dtype) {
  const OpScope scope(s, "softmax_xent_bwd");
  if (cudaStream_t cs = cuda_stream(s)) {
    CUDA_OP(kc::softmax_xent_bwd(dlogits, logits, targets, N, V, ld, dloss, dtype, cs));
    return;
  }
  s.host_task([=] { kh::softmax_xent_bwd(dlogits, logits, targets, N, V, ld, dloss, dtype); },
              "softmax_xent_bwd");
}

void moe_router_fwd(device::Stream& s, float* probs, std::int32_t* idx, float* weights, float* prob_sum,
                    const void* logits, std::int64_t N, int E, int k, bool renormalize, DType dtype) {
  const OpScope scope(s, "moe_router_fwd");
  if (cudaStream_t cs = cuda_stream(s)) {
    CUDA_OP(kc::moe_router_fwd(probs, idx, weights, prob_sum, logits, N, E, k, renormalize, dtype, cs));
    return;
  }
  s.host_task([=] { kh::moe_router_fwd(probs, idx, weights, prob_sum, logits, N, E, k, renormalize, dtype); },
              "moe_router_fwd");
}

void moe_router_bwd(device::Stream& s, void* dlogits, const float* dweights, const float* probs,
                    const std::int32_t* idx, const float* daux, std::int64_t N, int E, int k, bool renormalize,
                    DType dtype) {
  const OpScope scope(s, "moe_router_bwd");
  if (cudaStream_t cs = cuda_stream(s)) {
    CUDA_OP(kc::moe_router_bwd(dlogits, dweights, probs, idx, daux, N, E, k, renormalize, dtype, cs));
    return;
  }
  s.host_task([=] { kh::moe_router_bwd(dlogits, dweights, probs, idx, daux, N, E, k, renormalize, dtype); },
              "moe_router_bwd");
}

void moe_sort(device::Stream& s, std::int32_t* offsets, std::int32_t* order, std::int32_t* position,
              const std::int32_t* idx, std::int64_t N, int E, int k) {
  const OpScope scope(s, "moe_sort");
  if (cudaStream_t cs = cuda_stream(s)) {
    CUDA_OP(kc::moe_sort(offsets, order, position, idx, N, E, k, cs));
    return;
  }
  s.host_task([=] { kh::moe_sort(offsets, order, position, idx, N, E, k); }, "moe_sort");
}

void moe_gather(device::Stream& s, void* out, const void* inp, const std::int32_t* order, std::int64_t N, int k,
                int C, DType dtype) {
  const OpScope scope(s, "moe_gather");
  if (cudaStream_t cs = cuda_stream(s)) {
    CUDA_OP(kc::moe_gather(out, inp, order, N, k, C, dtype, cs));
    return;
  }
  s.host_task([=] { kh::moe_gather(out, inp, order, N, k, C, dtype); }, "moe_gather");
}

void moe_combine_fwd(device::Stream& s, void* out, const void* y, const float* weights,
                     const std::int32_t* position, std::int64_t N, int k, int C, DType dtype) {
  const OpScope scope(s, "moe_combine_fwd");
  if (cudaStream_t cs = cuda_stream(s)) {
    CUDA_OP(kc::moe_combine_fwd(out, y, weights, position, N, k, C, dtype, cs));
    return;
  }
  s.host_task([=] { kh::moe_combine_fwd(out, y, weights, position, N, k, C, dtype); }, "moe_combine_fwd");
}

void moe_combine_bwd(device::Stream& s, void* dy, float* dweights, const void* dout, const void* y,
                     const float* weights, const std::int32_t* position, std::int64_t N, int k, int C,
                     DType dtype) {
  const OpScope scope(s, "moe_combine_bwd");
  if (cudaStream_t cs = cuda_stream(s)) {
    CUDA_OP(kc::moe_combine_bwd(dy, dweights, dout, y, weights, position, N, k, C, dtype, cs));
    return;
  }
  s.host_task([=] { kh::moe_combine_bwd(dy, dweights, dout, y, weights, position, N, k, C, dtype); },
              "moe_combine_bwd");
}

void moe_scatter_add(device::Stream& s, void* dinp, const void* dx, const std::int32_t* position, std::int64_t N,
                     int k, int C, DType dtype) {
  const OpScope scope(s, "moe_scatter_add");
  if (cudaStream_t cs = cuda_stream(s)) {
    CUDA_OP(kc::moe_scatter_add(dinp, dx, position, N, k, C, dtype, cs));
    return;
  }
  s.host_task([=] { kh::moe_scatter_add(dinp, dx, position, N, k, C, dtype); }, "moe_scatter_add");
}

void cast(device::Stream& s, const void* src, DType src_dtype, void* dst, DType dst_dtype,
          std::size_t n) {
  const OpScope scope(s, "cast");
  if (cudaStream_t cs = cuda_stream(s)) {
    CUDA_OP(kc::cast(src, src_dtype, dst, dst_dtype, n, cs));
    return;
  }
  s.host_task([=] { kh::cast(src, src_dtype, dst, dst_dtype, n); }, "cast");
}

void dequantize_groupwise(device::Stream& s, void* out, DType dtype, const void* in, std::size_t numel, int group,
                          int bits) {
  const OpScope scope(s, "dequantize_groupwise");
  if (cudaStream_t cs = cuda_stream(s)) {
    CUDA_OP(kc::dequantize_groupwise(out, dtype, in, numel, group, bits, cs));
    return;
  }
  s.host_task([=] { kh::dequantize_groupwise(out, dtype, in, numel, group, bits); }, "dequantize_groupwise");
}

}  // namespace strata::runtime::ops
