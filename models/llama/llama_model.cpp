#include "models/llama/llama_model.h"

#include <algorithm>
#include <memory>
#include <optional>
#include <vector>

#include <fmt/format.h>

#include "core/error.h"
#include "models/llama/llama_layout.h"
#include "models/model_parts.h"
#include "models/moe/moe_mlp.h"
#include "runtime/ops/ops.h"

namespace strata::models {
namespace {
namespace ops = runtime::ops;
using runtime::device::Stream;
using runtime::params::ModuleView;

// What one block's forward keeps for its backward. Shapes with BT = B*T, A = NH hs (the
// attention width), QKV = (NH + 2 NKV) hs.
struct BlockActs {
  void* n1;       // (BT, C)   input_layernorm's output
  float* rstd1;   // (BT)
  void* qkv_raw;  // (BT, QKV) q/k/v before the q/k norms (qk_norm only, else null)
  float* rstd_qk; // (BT, NH + NKV) the q/k norms' statistics (qk_norm only)
  void* qkv;      // (BT, QKV) after the q/k norms and the rotary embedding
  void* atty;     // (BT, A)   attention output, before o_proj
  float* lse;     // (B, NH, T)
  void* res2;     // (BT, C)   residual after attention
  void* n2;       // (BT, C)   post_attention_layernorm's output
  float* rstd2;   // (BT)
  void* gu;       // (BT, 2F)  [gate | up]; its gradient in place in backward (dense MLP)
  void* h;        // (BT, F)   silu(gate) * up (dense MLP)
  MoeMlp::Saved moe;  // the sparse MLP's (sparse layers)
};

// LLaMA's buffers in the driver's training allocation (block_stack.h gives the order).
struct TrainBuffers {
  std::vector<BlockActs> blocks;  // L, or 1 with checkpointing (the block being recomputed)
  void* proj = nullptr;           // (BT, C)  a projection before its residual add
  float* rstd_f = nullptr;        // (BT)     the final norm's statistics
  void* dqkv = nullptr;           // (BT, QKV)
  void* dh = nullptr;             // (BT, F)  (dense MLP)
  float* daux = nullptr;          // (E) fp32 the load-balancing loss's gradient (MoE)
  bool has_daux = false;          // this backward has one
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
  const std::byte* q_norm;    // null without qk_norm
  const std::byte* k_norm;
  const std::byte* mlp_norm;
  const std::byte* gate_up;   // dense MLP, else null
  const std::byte* down;
  const std::byte* router;    // sparse MLP, else null
};

class LlamaParts final : public StackParts {
 public:
  LlamaParts(const LlamaConfig& config, DType dtype)
      : config_(config),
        dtype_(dtype),
        layout_(llama_layout(config)),
        dense_slots_(LlamaBlockSlots::of(config, false)),
        sparse_slots_(LlamaBlockSlots::of(config, true)) {
    for (int l = 0; l < config.num_hidden_layers; ++l) {
      (config.sparse_layer(l) ? any_sparse_ : any_dense_) = true;
    }
    if (any_sparse_) {
      moe_.emplace(MoeShape{config.hidden_size, config.num_experts, config.num_experts_per_tok,
                            config.moe_intermediate_size, config.norm_topk_prob, config.num_hidden_layers},
                   dtype);
    }
  }

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
  void attach(runtime::device::Device& device, Stream& compute, const ModelOptions& options) override {
    lookahead_ = options.moe_lookahead;
    if (moe_) moe_->attach(device, options.moe_cpu_expert_rows, options.moe_fetch_every_expert);
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
      // Saved block l is layer l's, or (checkpointing) every layer's in turn.
      const bool all = saved != config_.num_hidden_layers;
      const bool dense = all ? any_dense_ : !config_.sparse_layer(l);
      const bool sparse = all ? any_sparse_ : config_.sparse_layer(l);
      BlockActs b{};
      b.n1 = act(c, BT * C);
      b.rstd1 = f32(c, BT);
      if (config_.qk_norm()) {
        b.qkv_raw = act(c, BT * qkv_width());
        b.rstd_qk = f32(c, BT * static_cast<std::size_t>(config_.num_attention_heads + config_.num_key_value_heads));
      }
      b.qkv = act(c, BT * qkv_width());
      b.atty = act(c, BT * A);
      b.lse = f32(c, BT * static_cast<std::size_t>(config_.num_attention_heads));
      b.res2 = act(c, BT * C);
      b.n2 = act(c, BT * C);
      b.rstd2 = f32(c, BT);
      if (dense) {
        b.gu = act(c, BT * 2 * F);
        b.h = act(c, BT * F);
      }
      if (sparse) moe_->carve_saved(c, b.moe, BT);
      train_.blocks.push_back(std::move(b));
    }
    train_.proj = act(c, BT * C);
    if (any_sparse_) moe_->carve_forward_scratch(c, BT);
  }
  void carve_final_norm(Carver& c, std::size_t BT) override { train_.rstd_f = f32(c, BT); }
  // Attention's output may be wider than C (A = NH hs), and its gradient goes through dx.
  std::size_t grad_width() const override {
    return std::max(static_cast<std::size_t>(config_.hidden_size), a_width());
  }
  void carve_block_grads(Carver& c, int B, int T) override {
    const std::size_t BT = static_cast<std::size_t>(B) * static_cast<std::size_t>(T);
    train_.dqkv = act(c, BT * qkv_width());
    train_.dh = any_dense_ ? act(c, BT * f_width()) : nullptr;
    if (any_sparse_) {
      moe_->carve_backward_scratch(c, BT);
      train_.daux = f32(c, static_cast<std::size_t>(config_.num_experts));
    }
  }
  void carve_decode(Carver& c, int B, int T_new) override {
    const std::size_t N = static_cast<std::size_t>(B) * static_cast<std::size_t>(T_new);
    const std::size_t C = static_cast<std::size_t>(config_.hidden_size), F = f_width();
    decode_.qkv = static_cast<std::byte*>(act(c, N * qkv_width()));
    decode_.atty = static_cast<std::byte*>(act(c, N * a_width()));
    decode_.proj = act(c, N * C);
    decode_.gu = any_dense_ ? act(c, N * 2 * F) : nullptr;
    decode_.h = any_dense_ ? act(c, N * F) : nullptr;
    if (any_sparse_) moe_->carve_decode(c, N);
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
    const BlockParams p = block_params(call.params, call.layer);
    BlockActs& a = train_.blocks[static_cast<std::size_t>(saved)];
    const DType dt = dtype_;
    const int B = call.B, T = call.T;
    const std::int64_t BT = static_cast<std::int64_t>(B) * T;
    const auto [C, F, NH, NKV, hs, A, QKV] = dims();
    const float eps = config_.rms_norm_eps;
    ops::rmsnorm_fwd(s, a.n1, a.rstd1, res_in, p.attn_norm, BT, C, eps, dt);
    if (p.q_norm != nullptr) {
      ops::matmul_fwd(s, a.qkv_raw, a.n1, p.qkv, p.qkv_bias, BT, C, QKV, dt);
      ops::qk_rmsnorm_fwd(s, a.qkv, a.rstd_qk, a.qkv_raw, p.q_norm, p.k_norm, BT, NH, NKV, hs, eps, dt);
    } else {
      ops::matmul_fwd(s, a.qkv, a.n1, p.qkv, p.qkv_bias, BT, C, QKV, dt);
    }
    ops::rope_fwd(s, a.qkv, B, T, NH, NKV, hs, 0, inv_freq(), dt);
    ops::attention_fwd(s, a.atty, a.lse, a.qkv, B, T, NH, NKV, hs, dt);
    ops::matmul_fwd(s, train_.proj, a.atty, p.o_proj, nullptr, BT, A, C, dt);
    ops::residual_fwd(s, a.res2, res_in, train_.proj, BT * C, dt);
    ops::rmsnorm_fwd(s, a.n2, a.rstd2, a.res2, p.mlp_norm, BT, C, eps, dt);
    if (p.router != nullptr) {
      moe_->forward(s, call.modules, layout_, call.layer, p.router, a.n2, train_.proj, a.moe, BT, true);
    } else {
      ops::matmul_fwd(s, a.gu, a.n2, p.gate_up, nullptr, BT, C, 2 * F, dt);
      ops::swiglu_fwd(s, a.h, a.gu, BT, F, dt);
      ops::matmul_fwd(s, train_.proj, a.h, p.down, nullptr, BT, F, C, dt);
    }
    ops::residual_fwd(s, res_out, a.res2, train_.proj, BT * C, dt);
  }

  void block_backward(const BlockCall& call, int saved, const void* res_in, void* dres, void* dx) override {
    Stream& s = call.compute;
    const BlockParams p = block_params(call.params, call.layer);
    const BlockParams g = block_params(*call.grads, call.layer);
    BlockActs& a = train_.blocks[static_cast<std::size_t>(saved)];
    const DType dt = dtype_;
    const int B = call.B, T = call.T;
    const std::int64_t BT = static_cast<std::int64_t>(B) * T;
    const auto [C, F, NH, NKV, hs, A, QKV] = dims();
    auto gw = [](const std::byte* x) { return const_cast<std::byte*>(x); };
    // MLP: out = res2 + mlp(n2); dres is d(out) and becomes d(res2). dx = d(n2).
    if (p.router != nullptr) {
      moe_->backward(s, call.modules, layout_, call.layer, p.router, gw(g.router), a.n2, dres, dx, a.moe, BT,
                     train_.has_daux ? train_.daux : nullptr);
    } else {
      ops::matmul_bwd(s, train_.dh, gw(g.down), nullptr, dres, a.h, p.down, BT, F, C, dt);
      ops::swiglu_bwd(s, a.gu, a.gu, train_.dh, BT, F, dt);  // d(gate_up), in place of gate_up
      ops::matmul_bwd(s, dx, gw(g.gate_up), nullptr, a.gu, a.n2, p.gate_up, BT, C, 2 * F, dt);
    }
    ops::rmsnorm_bwd(s, dres, gw(g.mlp_norm), dx, a.res2, p.mlp_norm, a.rstd2, BT, C, dt);
    // Attention: res2 = res_in + o_proj(attn(rope(qk_norm(qkv(n1))))); dres becomes d(res_in).
    ops::matmul_bwd(s, dx, gw(g.o_proj), nullptr, dres, a.atty, p.o_proj, BT, A, C, dt);
    ops::attention_bwd(s, train_.dqkv, dx, a.qkv, a.atty, a.lse, B, T, NH, NKV, hs, dt);
    ops::rope_bwd(s, train_.dqkv, B, T, NH, NKV, hs, 0, inv_freq(), dt);
    if (p.q_norm != nullptr) {
      ops::qk_rmsnorm_bwd(s, train_.dqkv, gw(g.q_norm), gw(g.k_norm), a.qkv_raw, p.q_norm, p.k_norm, a.rstd_qk, BT,
                          NH, NKV, hs, dt);
    }
    ops::matmul_bwd(s, dx, gw(g.qkv), g.qkv_bias != nullptr ? gw(g.qkv_bias) : nullptr, train_.dqkv, a.n1, p.qkv,
                    BT, C, QKV, dt);
    ops::rmsnorm_bwd(s, dres, gw(g.attn_norm), dx, res_in, p.attn_norm, a.rstd1, BT, C, dt);
  }

  // x = block(x) over N = B*T_new tokens at the cache's positions.
  void block_decode(const BlockCall& call, KvCache& cache, void* x, void* n) override {
    Stream& s = call.compute;
    const BlockParams p = block_params(call.params, call.layer);
    const DecodeScratch& d = decode_;
    const DType dt = dtype_;
    const int l = call.layer, B = call.B, T_new = call.T;
    const auto [C, F, NH, NKV, hs, A, QKV] = dims();
    const std::size_t es = dtype_size(dt);
    const auto N = static_cast<std::int64_t>(B) * T_new;
    const float eps = config_.rms_norm_eps;
    ops::rmsnorm_fwd(s, n, nullptr, x, p.attn_norm, N, C, eps, dt);
    ops::matmul_fwd(s, d.qkv, n, p.qkv, p.qkv_bias, N, C, QKV, dt);
    if (p.q_norm != nullptr) {
      ops::qk_rmsnorm_fwd(s, d.qkv, nullptr, d.qkv, p.q_norm, p.k_norm, N, NH, NKV, hs, eps, dt);  // in place
    }
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
    if (p.router != nullptr) {
      // With the lookahead, the next layer's experts are guessed from x:
      // Note [Guessing the next layer's experts] in models/moe/moe_mlp.cpp.
      const bool guess = lookahead_ && l + 1 < config_.num_hidden_layers && config_.sparse_layer(l + 1);
      const MoeMlp::Lookahead next{l + 1, sparse_slots_.mlp_norm, sparse_slots_.router, x, eps};
      moe_->decode(s, call.modules, layout_, l, p.router, n, d.proj, N, guess ? &next : nullptr);
    } else {
      ops::matmul_fwd(s, d.gu, n, p.gate_up, nullptr, N, C, 2 * F, dt);
      ops::swiglu_fwd(s, d.h, d.gu, N, F, dt);
      ops::matmul_fwd(s, d.proj, d.h, p.down, nullptr, N, F, C, dt);
    }
    ops::residual_fwd(s, x, x, d.proj, N * C, dt);
  }

  // The load-balancing loss joins the training loss when the config asks (HF's rule).
  double extra_loss(int B, int T) override {
    if (!moe_ || !config_.output_router_logits) return 0.0;
    return static_cast<double>(config_.router_aux_loss_coef) * moe_->aux_loss(static_cast<std::int64_t>(B) * T);
  }
  void begin_backward(Stream& s, float loss_scale, int B, int T) override {
    train_.has_daux = moe_ && config_.output_router_logits;
    if (!train_.has_daux) return;
    host_daux_ = moe_->aux_gradient(static_cast<std::int64_t>(B) * T,
                                    static_cast<double>(loss_scale) * static_cast<double>(config_.router_aux_loss_coef));
    // host_daux_ stays unchanged until the next backward, after this one's work has run.
    s.copy_async(train_.daux, host_daux_.data(), host_daux_.size() * sizeof(float));
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
  // Layer l's tensors in its block module's view (dense blocks share offsets, as sparse ones do).
  BlockParams block_params(const ModuleView& view, int layer) const {
    const ModuleLayout& m = layout_.modules[static_cast<std::size_t>(layout_.block_module(layer))];
    const LlamaBlockSlots& slots = config_.sparse_layer(layer) ? sparse_slots_ : dense_slots_;
    auto t = [&](int i) { return i >= 0 ? tensor_at(view, m.tensors[static_cast<std::size_t>(i)]) : nullptr; };
    BlockParams p{};
    p.attn_norm = t(slots.attn_norm);
    p.qkv = t(slots.qkv);
    p.qkv_bias = t(slots.qkv_bias);
    p.o_proj = t(slots.o_proj);
    p.q_norm = t(slots.q_norm);
    p.k_norm = t(slots.k_norm);
    p.mlp_norm = t(slots.mlp_norm);
    p.gate_up = t(slots.gate_up);
    p.down = t(slots.down);
    p.router = t(slots.router);
    return p;
  }

  LlamaConfig config_;
  DType dtype_;
  ModelLayout layout_;
  LlamaBlockSlots dense_slots_, sparse_slots_;
  bool any_dense_ = false, any_sparse_ = false;
  std::optional<MoeMlp> moe_;     // with sparse layers
  bool lookahead_ = false;        // ModelOptions::moe_lookahead
  std::vector<float> host_daux_;  // (E), the last backward's load-balancing gradient
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
