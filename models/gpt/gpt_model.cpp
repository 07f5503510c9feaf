#include "models/gpt/gpt_model.h"

#include <memory>
#include <vector>

#include <fmt/format.h>

#include "core/error.h"
#include "models/gpt/gpt_layout.h"
#include "models/model_parts.h"
#include "runtime/ops/ops.h"

namespace strata::models {
namespace {
namespace ops = runtime::ops;
using runtime::device::Stream;
using runtime::params::ModuleView;

// What one block's forward keeps for its backward. Shapes with BT = B*T.
struct BlockActs {
  void* ln1;        // (BT, C)
  float* ln1_mean;  // (BT)
  float* ln1_rstd;  // (BT)
  void* qkv;        // (BT, 3C)
  void* atty;       // (BT, C)   attention output, before c_proj
  float* lse;       // (B, NH, T)
  void* res2;       // (BT, C)   residual after attention
  void* ln2;        // (BT, C)
  float* ln2_mean;  // (BT)
  float* ln2_rstd;  // (BT)
  void* fch;        // (BT, 4C)  c_fc output, before GELU
  void* fch_gelu;   // (BT, 4C)
};

// GPT-2's buffers in the driver's training allocation (block_stack.h gives the order).
struct TrainBuffers {
  std::vector<BlockActs> blocks;  // L, or 1 with checkpointing (the block being recomputed)
  void* proj = nullptr;           // (BT, C)  scratch: a projection before its residual add
  float* lnf_mean = nullptr;      // (BT)     the final LayerNorm's statistics
  float* lnf_rstd = nullptr;      // (BT)
  void* dqkv = nullptr;           // (BT, 3C)
  void* d4c = nullptr;            // (BT, 4C)
};

// A decoding pass's block scratch, N = B*T_new tokens.
struct DecodeScratch {
  std::byte* qkv = nullptr;   // (N, 3C)
  std::byte* atty = nullptr;  // (N, C)
  void* proj = nullptr;       // (N, C)
  void* fc = nullptr;         // (N, 4C)
};

struct BlockParams {
  const std::byte* t[kBlockTensors];
};

class GptParts final : public StackParts {
 public:
  GptParts(const GptConfig& config, DType dtype) : config_(config), dtype_(dtype), layout_(gpt_layout(config)) {}

  const ModelLayout& layout() const override { return layout_; }
  int width() const override { return config_.n_embd; }
  int vocab() const override { return config_.vocab_size; }
  int layers() const override { return config_.n_layer; }
  bool tied_head() const override { return true; }
  const TensorSlot& head_weight_slot() const override { return layout_.modules.front().tensors[kWte]; }
  KvShape kv_shape() const override { return {config_.n_layer, config_.n_embd}; }

  void check_length(int T) const override {
    if (T > config_.n_positions) {
      throw Error(fmt::format("sequence length {} is longer than the model's n_positions ({})", T,
                              config_.n_positions),
                  "", "lower --seq-len");
    }
  }
  void check_cache_length(int max_T) const override {
    if (max_T > config_.n_positions) {
      throw Error(fmt::format("a KV cache of {} positions is longer than the model's n_positions ({})", max_T,
                              config_.n_positions));
    }
  }

  void carve_blocks(Carver& c, int B, int T, int saved) override {
    const std::size_t BT = static_cast<std::size_t>(B) * static_cast<std::size_t>(T);
    const std::size_t C = static_cast<std::size_t>(config_.n_embd);
    train_.blocks.clear();
    for (int l = 0; l < saved; ++l) {
      BlockActs b{};
      b.ln1 = act(c, BT * C);
      b.ln1_mean = f32(c, BT);
      b.ln1_rstd = f32(c, BT);
      b.qkv = act(c, BT * 3 * C);
      b.atty = act(c, BT * C);
      b.lse = f32(c, BT * static_cast<std::size_t>(config_.n_head));
      b.res2 = act(c, BT * C);
      b.ln2 = act(c, BT * C);
      b.ln2_mean = f32(c, BT);
      b.ln2_rstd = f32(c, BT);
      b.fch = act(c, BT * 4 * C);
      b.fch_gelu = act(c, BT * 4 * C);
      train_.blocks.push_back(b);
    }
    train_.proj = act(c, BT * C);
  }
  void carve_final_norm(Carver& c, std::size_t BT) override {
    train_.lnf_mean = f32(c, BT);
    train_.lnf_rstd = f32(c, BT);
  }
  std::size_t grad_width() const override { return static_cast<std::size_t>(config_.n_embd); }
  void carve_block_grads(Carver& c, int B, int T) override {
    const std::size_t BT = static_cast<std::size_t>(B) * static_cast<std::size_t>(T);
    const std::size_t C = static_cast<std::size_t>(config_.n_embd);
    train_.dqkv = act(c, BT * 3 * C);
    train_.d4c = act(c, BT * 4 * C);
  }
  void carve_decode(Carver& c, int B, int T_new) override {
    const std::size_t N = static_cast<std::size_t>(B) * static_cast<std::size_t>(T_new);
    const std::size_t C = static_cast<std::size_t>(config_.n_embd);
    decode_.qkv = static_cast<std::byte*>(act(c, N * 3 * C));
    decode_.atty = static_cast<std::byte*>(act(c, N * C));
    decode_.proj = act(c, N * C);
    decode_.fc = act(c, N * 4 * C);
  }

  // Token and learned position embeddings; decoding rows at different positions one by one.
  void embed(Stream& s, const ModuleView& emb, void* x, const std::int32_t* tokens, int B, int T,
             const KvCache* cache) override {
    const int C = config_.n_embd;
    const ModuleLayout& e = layout_.modules.front();
    const void* wte = tensor_at(emb, e.tensors[kWte]);
    const void* wpe = tensor_at(emb, e.tensors[kWpe]);
    if (cache == nullptr || cache->uniform()) {
      ops::embedding_fwd(s, x, tokens, wte, wpe, B, T, C, cache == nullptr ? 0 : cache->length(0), dtype_);
      return;
    }
    const std::size_t row_tokens = static_cast<std::size_t>(T);
    for (int b = 0; b < B; ++b) {  // each row at its own positions
      ops::embedding_fwd(s, static_cast<std::byte*>(x) + static_cast<std::size_t>(b) * row_tokens * row_bytes(),
                         tokens + static_cast<std::size_t>(b) * row_tokens, wte, wpe, 1, T, C, cache->length(b),
                         dtype_);
    }
  }
  void embed_backward(Stream& s, const ModuleView& grads, const void* dx, const std::int32_t* tokens, int B,
                      int T) override {
    const ModuleLayout& e = layout_.modules.front();
    ops::embedding_bwd(s, tensor_at(grads, e.tensors[kWte]), tensor_at(grads, e.tensors[kWpe]), dx, tokens, B, T,
                       config_.n_embd, dtype_);
  }

  // res_out = block(res_in). Shapes: res (BT, C).
  void block_forward(const BlockCall& call, int saved, const void* res_in, void* res_out) override {
    Stream& s = call.compute;
    const BlockParams p = block_params(call.params);
    const BlockActs& a = train_.blocks[static_cast<std::size_t>(saved)];
    const DType dt = dtype_;
    const std::int64_t BT = static_cast<std::int64_t>(call.B) * call.T;
    const int C = config_.n_embd, NH = config_.n_head;
    const float eps = config_.layer_norm_epsilon;
    ops::layernorm_fwd(s, a.ln1, a.ln1_mean, a.ln1_rstd, res_in, p.t[kLn1W], p.t[kLn1B], BT, C, eps, dt);
    ops::matmul_fwd(s, a.qkv, a.ln1, p.t[kQkvW], p.t[kQkvB], BT, C, 3 * C, dt);
    // GPT-2 has as many key/value heads as query heads (NKV = NH).
    ops::attention_fwd(s, a.atty, a.lse, a.qkv, call.B, call.T, NH, NH, C / NH, dt);
    ops::matmul_fwd(s, train_.proj, a.atty, p.t[kAttProjW], p.t[kAttProjB], BT, C, C, dt);
    // res2 = res_in + proj and ln2 = ln_2(res2), one op.
    ops::residual_layernorm_fwd(s, a.res2, a.ln2, a.ln2_mean, a.ln2_rstd, res_in, train_.proj, p.t[kLn2W],
                                p.t[kLn2B], BT, C, eps, dt);
    // fch = c_fc(ln2) (kept for the backward) and fch_gelu = gelu(fch), one op.
    ops::matmul_bias_gelu_fwd(s, a.fch_gelu, a.fch, a.ln2, p.t[kFcW], p.t[kFcB], BT, C, 4 * C, dt);
    ops::matmul_fwd(s, train_.proj, a.fch_gelu, p.t[kFcProjW], p.t[kFcProjB], BT, 4 * C, C, dt);
    ops::residual_fwd(s, res_out, a.res2, train_.proj, BT * C, dt);
  }

  void block_backward(const BlockCall& call, int saved, const void* res_in, void* dres, void* dx) override {
    Stream& s = call.compute;
    const BlockParams p = block_params(call.params);
    const BlockParams g = block_params(*call.grads);
    const BlockActs& a = train_.blocks[static_cast<std::size_t>(saved)];
    const DType dt = dtype_;
    const std::int64_t BT = static_cast<std::int64_t>(call.B) * call.T;
    const int C = config_.n_embd, NH = config_.n_head;
    auto gw = [&](int i) { return const_cast<std::byte*>(g.t[i]); };
    // MLP: out = res2 + c_proj(gelu(c_fc(ln_2(res2)))); dres is d(out) and becomes d(res2).
    // c_proj's backward through the GELU: d4c = d(fch), and c_fc's bias gradient with it.
    ops::matmul_bwd_dgelu(s, train_.d4c, gw(kFcB), gw(kFcProjW), gw(kFcProjB), dres, a.fch_gelu, a.fch,
                          p.t[kFcProjW], BT, 4 * C, C, dt);
    ops::matmul_bwd(s, dx, gw(kFcW), nullptr, train_.d4c, a.ln2, p.t[kFcW], BT, C, 4 * C, dt);
    ops::layernorm_bwd(s, dres, gw(kLn2W), gw(kLn2B), dx, a.res2, p.t[kLn2W], a.ln2_mean, a.ln2_rstd, BT, C, dt);
    // Attention: res2 = res_in + c_proj(attn(c_attn(ln_1(res_in)))); dres becomes d(res_in).
    ops::matmul_bwd(s, dx, gw(kAttProjW), gw(kAttProjB), dres, a.atty, p.t[kAttProjW], BT, C, C, dt);
    ops::attention_bwd(s, train_.dqkv, dx, a.qkv, a.atty, a.lse, call.B, call.T, NH, NH, C / NH, dt);
    ops::matmul_bwd(s, dx, gw(kQkvW), gw(kQkvB), train_.dqkv, a.ln1, p.t[kQkvW], BT, C, 3 * C, dt);
    ops::layernorm_bwd(s, dres, gw(kLn1W), gw(kLn1B), dx, res_in, p.t[kLn1W], a.ln1_mean, a.ln1_rstd, BT, C, dt);
  }

  // x = block(x) over N = B*T_new tokens at the cache's positions.
  void block_decode(const BlockCall& call, KvCache& cache, void* x, void* n) override {
    Stream& s = call.compute;
    const BlockParams p = block_params(call.params);
    const DecodeScratch& d = decode_;
    const DType dt = dtype_;
    const int C = config_.n_embd, NH = config_.n_head, l = call.layer, B = call.B, T_new = call.T;
    const auto N = static_cast<std::int64_t>(B) * T_new;
    const float eps = config_.layer_norm_epsilon;
    ops::layernorm_fwd(s, n, nullptr, nullptr, x, p.t[kLn1W], p.t[kLn1B], N, C, eps, dt);
    ops::matmul_fwd(s, d.qkv, n, p.t[kQkvW], p.t[kQkvB], N, C, 3 * C, dt);
    cache.begin_layer(l, s);
    if (cache.uniform()) {
      ops::attention_decode(s, d.atty, cache.keys(l), cache.values(l), d.qkv, B, T_new, cache.length(0),
                            cache.max_T(), NH, NH, C / NH, dt);
    } else {
      const std::size_t row_tokens = static_cast<std::size_t>(T_new);
      for (int b = 0; b < B; ++b) {  // each row attends to its own past
        ops::attention_decode(s, d.atty + static_cast<std::size_t>(b) * row_tokens * row_bytes(), cache.keys(l, b),
                              cache.values(l, b), d.qkv + static_cast<std::size_t>(b) * row_tokens * 3 * row_bytes(),
                              1, T_new, cache.length(b), cache.max_T(), NH, NH, C / NH, dt);
      }
    }
    cache.end_layer(l, s);
    ops::matmul_fwd(s, d.proj, d.atty, p.t[kAttProjW], p.t[kAttProjB], N, C, C, dt);
    ops::residual_fwd(s, x, x, d.proj, N * C, dt);
    ops::layernorm_fwd(s, n, nullptr, nullptr, x, p.t[kLn2W], p.t[kLn2B], N, C, eps, dt);
    ops::matmul_fwd(s, d.fc, n, p.t[kFcW], p.t[kFcB], N, C, 4 * C, dt);
    ops::gelu_fwd(s, d.fc, d.fc, N * 4 * C, dt);
    ops::matmul_fwd(s, d.proj, d.fc, p.t[kFcProjW], p.t[kFcProjB], N, 4 * C, C, dt);
    ops::residual_fwd(s, x, x, d.proj, N * C, dt);
  }

  void final_norm(Stream& s, const ModuleView& head, void* out, const void* in, std::int64_t rows,
                  bool save) override {
    const ModuleLayout& h = layout_.modules.back();
    ops::layernorm_fwd(s, out, save ? train_.lnf_mean : nullptr, save ? train_.lnf_rstd : nullptr, in,
                       tensor_at(head, h.tensors[kLnfW]), tensor_at(head, h.tensors[kLnfB]), rows, config_.n_embd,
                       config_.layer_norm_epsilon, dtype_);
  }
  void final_norm_backward(Stream& s, const ModuleView& head, const ModuleView& grads, void* dres, const void* dout,
                           const void* in, std::int64_t rows) override {
    const ModuleLayout& h = layout_.modules.back();
    ops::layernorm_bwd(s, dres, tensor_at(grads, h.tensors[kLnfW]), tensor_at(grads, h.tensors[kLnfB]), dout, in,
                       tensor_at(head, h.tensors[kLnfW]), train_.lnf_mean, train_.lnf_rstd, rows, config_.n_embd,
                       dtype_);
  }

 private:
  std::size_t row_bytes() const { return static_cast<std::size_t>(config_.n_embd) * dtype_size(dtype_); }
  void* act(Carver& c, std::size_t n) const { return c.take(n * dtype_size(dtype_)); }
  static float* f32(Carver& c, std::size_t n) { return static_cast<float*>(c.take(n * sizeof(float))); }
  BlockParams block_params(const ModuleView& view) const {
    const ModuleLayout& m = layout_.modules[1];  // every block has the same offsets
    BlockParams p{};
    for (int i = 0; i < kBlockTensors; ++i) p.t[i] = tensor_at(view, m.tensors[static_cast<std::size_t>(i)]);
    return p;
  }

  GptConfig config_;
  DType dtype_;
  ModelLayout layout_;
  TrainBuffers train_;
  DecodeScratch decode_;
};

}  // namespace

std::unique_ptr<StackParts> GptSpec::make_parts(const GptConfig& config, DType dtype) {
  return std::make_unique<GptParts>(config, dtype);
}

}  // namespace strata::models
