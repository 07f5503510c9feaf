#include "models/llama/llama_model.h"

#include <algorithm>
#include <memory>
#include <vector>

#include <fmt/format.h>

#include "core/error.h"
#include "models/llama/llama_layout.h"
#include "models/model_parts.h"
#include "runtime/ops/ops.h"

namespace strata::models {
namespace {
namespace ops = runtime::ops;
using runtime::device::Stream;
using runtime::params::ModuleView;

// What one block's forward keeps for its backward. Shapes with BT = B*T, A = NH hs (the
// attention width), QKV = (NH + 2 NKV) hs.
struct BlockActs {
  void* n1;      // (BT, C)   input_layernorm's output
  float* rstd1;  // (BT)
  void* qkv;     // (BT, QKV) after the rotary embedding
  void* atty;    // (BT, A)   attention output, before o_proj
  float* lse;    // (B, NH, T)
  void* res2;    // (BT, C)   residual after attention
  void* n2;      // (BT, C)   post_attention_layernorm's output
  float* rstd2;  // (BT)
  void* gu;      // (BT, 2F)  [gate | up]; its gradient in place in backward
  void* h;       // (BT, F)   silu(gate) * up
};

// LLaMA's buffers in the driver's training allocation (block_stack.h gives the order).
struct TrainBuffers {
  std::vector<BlockActs> blocks;  // L, or 1 with checkpointing (the block being recomputed)
  void* proj = nullptr;           // (BT, C)  a projection before its residual add
  float* rstd_f = nullptr;        // (BT)     the final norm's statistics
  void* dqkv = nullptr;           // (BT, QKV)
  void* dh = nullptr;             // (BT, F)
};

// A decoding pass's block scratch, N = B*T_new tokens.
struct DecodeScratch {
  std::byte* qkv = nullptr;   // (N, QKV)
  std::byte* atty = nullptr;  // (N, A)
  void* proj = nullptr;       // (N, C)
  void* gu = nullptr;         // (N, 2F)
  void* h = nullptr;          // (N, F)
};

struct BlockParams {
  const std::byte* attn_norm;
  const std::byte* qkv;
  const std::byte* qkv_bias;  // null without biases
  const std::byte* o_proj;
  const std::byte* mlp_norm;
  const std::byte* gate_up;
  const std::byte* down;
};

class LlamaParts final : public StackParts {
 public:
  LlamaParts(const LlamaConfig& config, DType dtype)
      : config_(config), dtype_(dtype), layout_(llama_layout(config)), slots_(LlamaBlockSlots::of(config)) {}

  const ModelLayout& layout() const override { return layout_; }
  int width() const override { return config_.hidden_size; }
  int vocab() const override { return config_.vocab_size; }
  int layers() const override { return config_.num_hidden_layers; }
  bool tied_head() const override { return config_.tie_word_embeddings; }
  const TensorSlot& head_weight_slot() const override {
    // The embedding's only tensor, or the head's second (after model.norm.weight).
    return config_.tie_word_embeddings ? layout_.modules.front().tensors[0] : layout_.modules.back().tensors[1];
  }
  KvShape kv_shape() const override {
    return {config_.num_hidden_layers, config_.num_key_value_heads * config_.head_dim};
  }

  void check_length(int T) const override {
    if (T > config_.max_position_embeddings) {
      throw Error(fmt::format("sequence length {} is longer than the model's max_position_embeddings ({})", T,
                              config_.max_position_embeddings),
                  "", "lower --seq-len");
    }
    if (config_.sliding_window > 0 && T > config_.sliding_window) {
      throw Error(fmt::format("sequence length {} is longer than the model's sliding_window ({}): strata's "
                              "attention has no sliding window",
                              T, config_.sliding_window),
                  "", fmt::format("use --seq-len {} or less", config_.sliding_window));
    }
  }

  // The rotary frequencies, (head_dim / 2) fp32, on the device for the model's life.
  void attach(runtime::device::Device& device, Stream& compute) override {
    host_inv_freq_ = config_.rope_inv_freq();
    inv_freq_ = device.allocate(host_inv_freq_.size() * sizeof(float), "rotary frequencies");
    compute.copy_async(inv_freq_.data(), host_inv_freq_.data(), host_inv_freq_.size() * sizeof(float));
    compute.synchronize();
  }

  void carve_blocks(Carver& c, int B, int T, int saved) override {
    const std::size_t BT = static_cast<std::size_t>(B) * static_cast<std::size_t>(T);
    const std::size_t C = static_cast<std::size_t>(config_.hidden_size), F = f_width(), A = a_width();
    train_.blocks.clear();
    for (int l = 0; l < saved; ++l) {
      BlockActs b{};
      b.n1 = act(c, BT * C);
      b.rstd1 = f32(c, BT);
      b.qkv = act(c, BT * qkv_width());
      b.atty = act(c, BT * A);
      b.lse = f32(c, BT * static_cast<std::size_t>(config_.num_attention_heads));
      b.res2 = act(c, BT * C);
      b.n2 = act(c, BT * C);
      b.rstd2 = f32(c, BT);
      b.gu = act(c, BT * 2 * F);
      b.h = act(c, BT * F);
      train_.blocks.push_back(b);
    }
    train_.proj = act(c, BT * C);
  }
  void carve_final_norm(Carver& c, std::size_t BT) override { train_.rstd_f = f32(c, BT); }
  // Attention's output may be wider than C (A = NH hs), and its gradient goes through dx.
  std::size_t grad_width() const override {
    return std::max(static_cast<std::size_t>(config_.hidden_size), a_width());
  }
  void carve_block_grads(Carver& c, int B, int T) override {
    const std::size_t BT = static_cast<std::size_t>(B) * static_cast<std::size_t>(T);
    train_.dqkv = act(c, BT * qkv_width());
    train_.dh = act(c, BT * f_width());
  }
  void carve_decode(Carver& c, int B, int T_new) override {
    const std::size_t N = static_cast<std::size_t>(B) * static_cast<std::size_t>(T_new);
    const std::size_t C = static_cast<std::size_t>(config_.hidden_size), F = f_width();
    decode_.qkv = static_cast<std::byte*>(act(c, N * qkv_width()));
    decode_.atty = static_cast<std::byte*>(act(c, N * a_width()));
    decode_.proj = act(c, N * C);
    decode_.gu = act(c, N * 2 * F);
    decode_.h = act(c, N * F);
  }

  // Token embeddings only: the positions enter through the rotary embedding.
  void embed(Stream& s, const ModuleView& emb, void* x, const std::int32_t* tokens, int B, int T,
             const KvCache* /*cache*/) override {
    ops::embedding_fwd(s, x, tokens, tensor_at(emb, layout_.modules[0].tensors[0]), nullptr, B, T,
                       config_.hidden_size, 0, dtype_);
  }
  void embed_backward(Stream& s, const ModuleView& grads, const void* dx, const std::int32_t* tokens, int B,
                      int T) override {
    ops::embedding_bwd(s, tensor_at(grads, layout_.modules[0].tensors[0]), nullptr, dx, tokens, B, T,
                       config_.hidden_size, dtype_);
  }

  // res_out = block(res_in). Shapes: res (BT, C).
  void block_forward(const BlockCall& call, int saved, const void* res_in, void* res_out) override {
    Stream& s = call.compute;
    const BlockParams p = block_params(call.params);
    const BlockActs& a = train_.blocks[static_cast<std::size_t>(saved)];
    const DType dt = dtype_;
    const int B = call.B, T = call.T;
    const std::int64_t BT = static_cast<std::int64_t>(B) * T;
    const auto [C, F, NH, NKV, hs, A, QKV] = dims();
    const float eps = config_.rms_norm_eps;
    ops::rmsnorm_fwd(s, a.n1, a.rstd1, res_in, p.attn_norm, BT, C, eps, dt);
    ops::matmul_fwd(s, a.qkv, a.n1, p.qkv, p.qkv_bias, BT, C, QKV, dt);
    ops::rope_fwd(s, a.qkv, B, T, NH, NKV, hs, 0, inv_freq(), dt);
    ops::attention_fwd(s, a.atty, a.lse, a.qkv, B, T, NH, NKV, hs, dt);
    ops::matmul_fwd(s, train_.proj, a.atty, p.o_proj, nullptr, BT, A, C, dt);
    ops::residual_fwd(s, a.res2, res_in, train_.proj, BT * C, dt);
    ops::rmsnorm_fwd(s, a.n2, a.rstd2, a.res2, p.mlp_norm, BT, C, eps, dt);
    ops::matmul_fwd(s, a.gu, a.n2, p.gate_up, nullptr, BT, C, 2 * F, dt);
    ops::swiglu_fwd(s, a.h, a.gu, BT, F, dt);
    ops::matmul_fwd(s, train_.proj, a.h, p.down, nullptr, BT, F, C, dt);
    ops::residual_fwd(s, res_out, a.res2, train_.proj, BT * C, dt);
  }

  void block_backward(const BlockCall& call, int saved, const void* res_in, void* dres, void* dx) override {
    Stream& s = call.compute;
    const BlockParams p = block_params(call.params);
    const BlockParams g = block_params(*call.grads);
    const BlockActs& a = train_.blocks[static_cast<std::size_t>(saved)];
    const DType dt = dtype_;
    const int B = call.B, T = call.T;
    const std::int64_t BT = static_cast<std::int64_t>(B) * T;
    const auto [C, F, NH, NKV, hs, A, QKV] = dims();
    auto gw = [](const std::byte* x) { return const_cast<std::byte*>(x); };
    // MLP: out = res2 + down(swiglu(gate_up(n2))); dres is d(out) and becomes d(res2).
    ops::matmul_bwd(s, train_.dh, gw(g.down), nullptr, dres, a.h, p.down, BT, F, C, dt);
    ops::swiglu_bwd(s, a.gu, a.gu, train_.dh, BT, F, dt);  // d(gate_up), in place of gate_up
    ops::matmul_bwd(s, dx, gw(g.gate_up), nullptr, a.gu, a.n2, p.gate_up, BT, C, 2 * F, dt);
    ops::rmsnorm_bwd(s, dres, gw(g.mlp_norm), dx, a.res2, p.mlp_norm, a.rstd2, BT, C, dt);
    // Attention: res2 = res_in + o_proj(attn(rope(qkv(n1)))); dres becomes d(res_in).
    ops::matmul_bwd(s, dx, gw(g.o_proj), nullptr, dres, a.atty, p.o_proj, BT, A, C, dt);
    ops::attention_bwd(s, train_.dqkv, dx, a.qkv, a.atty, a.lse, B, T, NH, NKV, hs, dt);
    ops::rope_bwd(s, train_.dqkv, B, T, NH, NKV, hs, 0, inv_freq(), dt);
    ops::matmul_bwd(s, dx, gw(g.qkv), g.qkv_bias != nullptr ? gw(g.qkv_bias) : nullptr, train_.dqkv, a.n1, p.qkv,
                    BT, C, QKV, dt);
    ops::rmsnorm_bwd(s, dres, gw(g.attn_norm), dx, res_in, p.attn_norm, a.rstd1, BT, C, dt);
  }

  // x = block(x) over N = B*T_new tokens at the cache's positions.
  void block_decode(const BlockCall& call, KvCache& cache, void* x, void* n) override {
    Stream& s = call.compute;
    const BlockParams p = block_params(call.params);
    const DecodeScratch& d = decode_;
    const DType dt = dtype_;
    const int l = call.layer, B = call.B, T_new = call.T;
    const auto [C, F, NH, NKV, hs, A, QKV] = dims();
    const std::size_t es = dtype_size(dt);
    const auto N = static_cast<std::int64_t>(B) * T_new;
    const float eps = config_.rms_norm_eps;
    ops::rmsnorm_fwd(s, n, nullptr, x, p.attn_norm, N, C, eps, dt);
    ops::matmul_fwd(s, d.qkv, n, p.qkv, p.qkv_bias, N, C, QKV, dt);
    cache.begin_layer(l, s);
    if (cache.uniform()) {
      ops::rope_fwd(s, d.qkv, B, T_new, NH, NKV, hs, cache.length(0), inv_freq(), dt);
      ops::attention_decode(s, d.atty, cache.keys(l), cache.values(l), d.qkv, B, T_new, cache.length(0),
                            cache.max_T(), NH, NKV, hs, dt);
    } else {
      // Rows at different positions: the rotary angle and the attended past are per row.
      const std::size_t row_tokens = static_cast<std::size_t>(T_new);
      for (int b = 0; b < B; ++b) {
        std::byte* q = d.qkv + static_cast<std::size_t>(b) * row_tokens * static_cast<std::size_t>(QKV) * es;
        std::byte* y = d.atty + static_cast<std::size_t>(b) * row_tokens * static_cast<std::size_t>(A) * es;
        ops::rope_fwd(s, q, 1, T_new, NH, NKV, hs, cache.length(b), inv_freq(), dt);
        ops::attention_decode(s, y, cache.keys(l, b), cache.values(l, b), q, 1, T_new, cache.length(b),
                              cache.max_T(), NH, NKV, hs, dt);
      }
    }
    cache.end_layer(l, s);
    ops::matmul_fwd(s, d.proj, d.atty, p.o_proj, nullptr, N, A, C, dt);
    ops::residual_fwd(s, x, x, d.proj, N * C, dt);
    ops::rmsnorm_fwd(s, n, nullptr, x, p.mlp_norm, N, C, eps, dt);
    ops::matmul_fwd(s, d.gu, n, p.gate_up, nullptr, N, C, 2 * F, dt);
    ops::swiglu_fwd(s, d.h, d.gu, N, F, dt);
    ops::matmul_fwd(s, d.proj, d.h, p.down, nullptr, N, F, C, dt);
    ops::residual_fwd(s, x, x, d.proj, N * C, dt);
  }

  // model.norm, the head module's first tensor.
  void final_norm(Stream& s, const ModuleView& head, void* out, const void* in, std::int64_t rows,
                  bool save) override {
    ops::rmsnorm_fwd(s, out, save ? train_.rstd_f : nullptr, in, tensor_at(head, layout_.modules.back().tensors[0]),
                     rows, config_.hidden_size, config_.rms_norm_eps, dtype_);
  }
  void final_norm_backward(Stream& s, const ModuleView& head, const ModuleView& grads, void* dres, const void* dout,
                           const void* in, std::int64_t rows) override {
    const TensorSlot& norm = layout_.modules.back().tensors[0];
    ops::rmsnorm_bwd(s, dres, tensor_at(grads, norm), dout, in, tensor_at(head, norm), train_.rstd_f, rows,
                     config_.hidden_size, dtype_);
  }

 private:
  std::size_t f_width() const { return static_cast<std::size_t>(config_.intermediate_size); }
  std::size_t a_width() const {
    return static_cast<std::size_t>(config_.num_attention_heads) * static_cast<std::size_t>(config_.head_dim);
  }
  std::size_t qkv_width() const {
    return a_width() + 2 * static_cast<std::size_t>(config_.num_key_value_heads) *
                           static_cast<std::size_t>(config_.head_dim);
  }
  // The block's widths: C, F (the MLP's), NH, NKV, hs, A = NH hs (attention's output), QKV =
  // (NH + 2 NKV) hs (the packed q/k/v).
  struct Dims {
    int C, F, NH, NKV, hs, A, QKV;
  };
  Dims dims() const {
    const int NH = config_.num_attention_heads, NKV = config_.num_key_value_heads, hs = config_.head_dim;
    return {config_.hidden_size, config_.intermediate_size, NH, NKV, hs, NH * hs, (NH + 2 * NKV) * hs};
  }
  const float* inv_freq() const { return static_cast<const float*>(inv_freq_.data()); }
  void* act(Carver& c, std::size_t n) const { return c.take(n * dtype_size(dtype_)); }
  static float* f32(Carver& c, std::size_t n) { return static_cast<float*>(c.take(n * sizeof(float))); }
  BlockParams block_params(const ModuleView& view) const {
    const ModuleLayout& m = layout_.modules[1];  // every block has the same offsets
    auto t = [&](int i) { return tensor_at(view, m.tensors[static_cast<std::size_t>(i)]); };
    BlockParams p{};
    p.attn_norm = t(slots_.attn_norm);
    p.qkv = t(slots_.qkv);
    p.qkv_bias = slots_.qkv_bias >= 0 ? t(slots_.qkv_bias) : nullptr;
    p.o_proj = t(slots_.o_proj);
    p.mlp_norm = t(slots_.mlp_norm);
    p.gate_up = t(slots_.gate_up);
    p.down = t(slots_.down);
    return p;
  }

  LlamaConfig config_;
  DType dtype_;
  ModelLayout layout_;
  LlamaBlockSlots slots_;
  runtime::device::DeviceBuffer inv_freq_;  // (head_dim / 2) fp32, the rotary frequencies
  std::vector<float> host_inv_freq_;
  TrainBuffers train_;
  DecodeScratch decode_;
};

}  // namespace

std::unique_ptr<StackParts> LlamaSpec::make_parts(const LlamaConfig& config, DType dtype) {
  return std::make_unique<LlamaParts>(config, dtype);
}

}  // namespace strata::models
