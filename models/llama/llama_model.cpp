#include "models/llama/llama_model.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include <fmt/format.h>

#include "core/error.h"
#include "runtime/ops/ops.h"

namespace strata::models {
namespace ops = runtime::ops;

// What one block's forward keeps for its backward. Shapes with BT = B*T, A = NH hs (the
// attention width), QKV = (NH + 2 NKV) hs.
struct LlamaModel::BlockActs {
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

struct LlamaModel::BlockParams {
  const std::byte* attn_norm;
  const std::byte* qkv;
  const std::byte* qkv_bias;  // null without biases
  const std::byte* o_proj;
  const std::byte* mlp_norm;
  const std::byte* gate_up;
  const std::byte* down;
};

struct LlamaModel::Activations {
  runtime::device::DeviceBuffer buffer;
  std::vector<void*> residual;     // L + 1 of (BT, C): the input of block l, then the output
  std::vector<BlockActs> blocks;   // L, or 1 with checkpointing (the block being recomputed)
  void* proj;                      // (BT, C)  a projection before its residual add
  void* nf;                        // (BT, C)  the final norm's output
  float* rstd_f;                   // (BT)
  LmHeadBuffers head;
  float* losses;                   // (BT)
  void* dres;                      // (BT, C)  gradient of the residual stream
  void* dbtc;                      // (BT, max(C, A))  gradient scratch
  void* dqkv;                      // (BT, QKV)
  void* dh;                        // (BT, F)
  std::int32_t* inputs;            // (BT)
  std::int32_t* targets;           // (BT)

  static std::size_t carve(Activations* a, std::byte* base, const LlamaConfig& cfg, const ModelOptions& options,
                           int B, int T) {
    Carver c(base);
    const DType dtype = options.dtype;
    const std::size_t BT = static_cast<std::size_t>(B) * static_cast<std::size_t>(T);
    const std::size_t C = static_cast<std::size_t>(cfg.hidden_size);
    const std::size_t F = static_cast<std::size_t>(cfg.intermediate_size);
    const std::size_t A = static_cast<std::size_t>(cfg.num_attention_heads) * static_cast<std::size_t>(cfg.head_dim);
    const std::size_t QKV = A + 2 * static_cast<std::size_t>(cfg.num_key_value_heads) *
                                    static_cast<std::size_t>(cfg.head_dim);
    const LmHeadGeometry g = LmHeadGeometry::make(cfg.vocab_size, cfg.hidden_size, static_cast<std::int64_t>(BT),
                                                  options.vocab_multiple, options.head_chunk_bytes, dtype);
    const std::size_t es = dtype_size(dtype);
    auto act = [&](std::size_t n) { return c.take(n * es); };
    auto f32 = [&](std::size_t n) { return static_cast<float*>(c.take(n * sizeof(float))); };
    const int L = cfg.num_hidden_layers;
    std::vector<void*> residual;
    for (int l = 0; l <= L; ++l) residual.push_back(act(BT * C));
    std::vector<BlockActs> blocks;
    for (int l = 0; l < (options.checkpointing ? 1 : L); ++l) {
      BlockActs b{};
      b.n1 = act(BT * C);
      b.rstd1 = f32(BT);
      b.qkv = act(BT * QKV);
      b.atty = act(BT * A);
      b.lse = f32(BT * static_cast<std::size_t>(cfg.num_attention_heads));
      b.res2 = act(BT * C);
      b.n2 = act(BT * C);
      b.rstd2 = f32(BT);
      b.gu = act(BT * 2 * F);
      b.h = act(BT * F);
      blocks.push_back(b);
    }
    void* proj = act(BT * C);
    void* nf = act(BT * C);
    float* rstd_f = f32(BT);
    LmHeadBuffers head;
    if (g.padded()) {
      head.weight = c.take(g.weight_bytes(dtype));
      head.dweight = c.take(g.weight_bytes(dtype));
    }
    head.logits = c.take(g.logits_bytes(dtype));
    float* losses = f32(BT);
    void* dres = act(BT * C);
    void* dbtc = act(BT * std::max(C, A));
    void* dqkv = act(BT * QKV);
    void* dh = act(BT * F);
    auto* inputs = static_cast<std::int32_t*>(c.take(BT * sizeof(std::int32_t)));
    auto* targets = static_cast<std::int32_t*>(c.take(BT * sizeof(std::int32_t)));
    if (a != nullptr) {
      a->residual = std::move(residual);
      a->blocks = std::move(blocks);
      a->proj = proj;
      a->nf = nf;
      a->rstd_f = rstd_f;
      a->head = head;
      a->losses = losses;
      a->dres = dres;
      a->dbtc = dbtc;
      a->dqkv = dqkv;
      a->dh = dh;
      a->inputs = inputs;
      a->targets = targets;
    }
    return c.bytes();
  }
};

LlamaModel::LlamaModel(const LlamaConfig& config, ModelOptions options, runtime::device::Device& device,
                       runtime::device::Stream& compute, runtime::params::ParamProvider& params)
    : config_(config),
      options_(resolved_options(options, device.backend())),
      layout_(llama_layout(config)),
      slots_(LlamaBlockSlots::of(config)),
      device_(device),
      compute_(compute),
      modules_(layout_, options.dtype, device, compute, params) {
  host_inv_freq_ = config_.rope_inv_freq();
  inv_freq_ = device_.allocate(host_inv_freq_.size() * sizeof(float), "rotary frequencies");
  compute_.copy_async(inv_freq_.data(), host_inv_freq_.data(), host_inv_freq_.size() * sizeof(float));
  compute_.synchronize();
}

LlamaModel::~LlamaModel() {
  try {
    compute_.synchronize();
  } catch (...) {  // NOLINT(bugprone-empty-catch): the error belongs to whoever waits next
  }
}

std::uint64_t LlamaModel::activation_bytes(const LlamaConfig& config, const ModelOptions& options, int B, int T) {
  config.validate();
  const ModelOptions counted = resolved_options(options, runtime::device::Backend::cuda);
  return Activations::carve(nullptr, nullptr, config, counted, B, T);
}

LmHeadGeometry LlamaModel::head_geometry(std::int64_t rows) const {
  return LmHeadGeometry::make(config_.vocab_size, config_.hidden_size, rows, options_.vocab_multiple,
                              options_.head_chunk_bytes, options_.dtype);
}

int LlamaModel::head_weight_module() const {
  return config_.tie_word_embeddings ? layout_.embedding_module() : layout_.head_module();
}

const TensorSlot& LlamaModel::head_weight_slot() const {
  // The embedding's only tensor, or the head's second (after model.norm.weight).
  return config_.tie_word_embeddings ? layout_.modules.front().tensors[0] : layout_.modules.back().tensors[1];
}

void LlamaModel::check_length(int T) const {
  if (T > config_.max_position_embeddings) {
    throw Error(fmt::format("sequence length {} is longer than the model's max_position_embeddings ({})", T,
                            config_.max_position_embeddings),
                "", "lower --seq-len");
  }
  if (config_.sliding_window > 0 && T > config_.sliding_window) {
    throw Error(fmt::format("sequence length {} is longer than the model's sliding_window ({}): strata's attention "
                            "has no sliding window",
                            T, config_.sliding_window),
                "", fmt::format("use --seq-len {} or less", config_.sliding_window));
  }
}

void LlamaModel::reserve(int B, int T) {
  if (B <= 0 || T <= 0) throw Error(fmt::format("batch {} x {} tokens: both must be positive", B, T));
  check_length(T);
  if (acts_ && B <= reserved_B_ && T <= reserved_T_ &&
      static_cast<std::int64_t>(B) * T <= static_cast<std::int64_t>(reserved_B_) * reserved_T_) {
    return;
  }
  compute_.synchronize();
  acts_.reset();
  auto a = std::make_unique<Activations>();
  const std::size_t bytes = Activations::carve(nullptr, nullptr, config_, options_, B, T);
  a->buffer = device_.allocate(bytes, fmt::format("activations for a micro-batch of {} x {} tokens{}", B, T,
                                                  options_.checkpointing ? " (checkpointed)" : ""));
  Activations::carve(a.get(), static_cast<std::byte*>(a->buffer.data()), config_, options_, B, T);
  acts_ = std::move(a);
  reserved_B_ = B;
  reserved_T_ = T;
}

LlamaModel::BlockParams LlamaModel::block_params(const runtime::params::ModuleView& view) const {
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

// res_out = block(res_in). Shapes: res (BT, C).
void LlamaModel::block_forward(const BlockParams& p, const BlockActs& a, const void* res_in, void* res_out, int B,
                               int T) {
  const DType dt = options_.dtype;
  const std::int64_t BT = static_cast<std::int64_t>(B) * T;
  const int C = config_.hidden_size, F = config_.intermediate_size;
  const int NH = config_.num_attention_heads, NKV = config_.num_key_value_heads, hs = config_.head_dim;
  const int A = NH * hs, QKV = (NH + 2 * NKV) * hs;
  const float eps = config_.rms_norm_eps;
  ops::rmsnorm_fwd(compute_, a.n1, a.rstd1, res_in, p.attn_norm, BT, C, eps, dt);
  ops::matmul_fwd(compute_, a.qkv, a.n1, p.qkv, p.qkv_bias, BT, C, QKV, dt);
  ops::rope_fwd(compute_, a.qkv, B, T, NH, NKV, hs, 0, static_cast<const float*>(inv_freq_.data()), dt);
  ops::attention_fwd(compute_, a.atty, a.lse, a.qkv, B, T, NH, NKV, hs, dt);
  ops::matmul_fwd(compute_, acts_->proj, a.atty, p.o_proj, nullptr, BT, A, C, dt);
  ops::residual_fwd(compute_, a.res2, res_in, acts_->proj, BT * C, dt);
  ops::rmsnorm_fwd(compute_, a.n2, a.rstd2, a.res2, p.mlp_norm, BT, C, eps, dt);
  ops::matmul_fwd(compute_, a.gu, a.n2, p.gate_up, nullptr, BT, C, 2 * F, dt);
  ops::swiglu_fwd(compute_, a.h, a.gu, BT, F, dt);
  ops::matmul_fwd(compute_, acts_->proj, a.h, p.down, nullptr, BT, F, C, dt);
  ops::residual_fwd(compute_, res_out, a.res2, acts_->proj, BT * C, dt);
}

// On entry acts_->dres holds d(block output); on exit d(block input). g: gradient views.
void LlamaModel::block_backward(const BlockParams& p, const BlockParams& g, const BlockActs& a, const void* res_in,
                                int B, int T) {
  const DType dt = options_.dtype;
  const std::int64_t BT = static_cast<std::int64_t>(B) * T;
  const int C = config_.hidden_size, F = config_.intermediate_size;
  const int NH = config_.num_attention_heads, NKV = config_.num_key_value_heads, hs = config_.head_dim;
  const int A = NH * hs, QKV = (NH + 2 * NKV) * hs;
  auto gw = [](const std::byte* x) { return const_cast<std::byte*>(x); };
  Activations& s = *acts_;
  // MLP: out = res2 + down(swiglu(gate_up(n2))); dres is d(out) and becomes d(res2).
  ops::matmul_bwd(compute_, s.dh, gw(g.down), nullptr, s.dres, a.h, p.down, BT, F, C, dt);
  ops::swiglu_bwd(compute_, a.gu, a.gu, s.dh, BT, F, dt);  // d(gate_up), in place of gate_up
  ops::matmul_bwd(compute_, s.dbtc, gw(g.gate_up), nullptr, a.gu, a.n2, p.gate_up, BT, C, 2 * F, dt);
  ops::rmsnorm_bwd(compute_, s.dres, gw(g.mlp_norm), s.dbtc, a.res2, p.mlp_norm, a.rstd2, BT, C, dt);
  // Attention: res2 = res_in + o_proj(attn(rope(qkv(n1)))); dres becomes d(res_in).
  ops::matmul_bwd(compute_, s.dbtc, gw(g.o_proj), nullptr, s.dres, a.atty, p.o_proj, BT, A, C, dt);
  ops::attention_bwd(compute_, s.dqkv, s.dbtc, a.qkv, a.atty, a.lse, B, T, NH, NKV, hs, dt);
  ops::rope_bwd(compute_, s.dqkv, B, T, NH, NKV, hs, 0, static_cast<const float*>(inv_freq_.data()), dt);
  ops::matmul_bwd(compute_, s.dbtc, gw(g.qkv), g.qkv_bias != nullptr ? gw(g.qkv_bias) : nullptr, s.dqkv, a.n1,
                  p.qkv, BT, C, QKV, dt);
  ops::rmsnorm_bwd(compute_, s.dres, gw(g.attn_norm), s.dbtc, res_in, p.attn_norm, a.rstd1, BT, C, dt);
}

float LlamaModel::forward(const std::int32_t* inputs, const std::int32_t* targets, int B, int T, bool for_backward,
                          float* logits_out) {
  if (for_backward && targets == nullptr) throw Error("forward for backward needs targets");
  if (backward_ready_) {
    // A forward for backward whose backward never came: give the head back first.
    backward_ready_ = false;
    modules_.release(head_weight_module());
  }
  reserve(B, T);
  const std::size_t BT = static_cast<std::size_t>(B) * static_cast<std::size_t>(T);
  check_tokens(inputs, BT, config_.vocab_size, "input");
  if (targets != nullptr) check_tokens(targets, BT, config_.vocab_size, "target");
  const DType dt = options_.dtype;
  const int C = config_.hidden_size, L = config_.num_hidden_layers;
  Activations& s = *acts_;
  upload_tokens(compute_, host_tokens_, s.inputs, s.targets, inputs, targets, BT);

  const int E = layout_.embedding_module(), H = layout_.head_module();
  runtime::params::ModuleView emb = modules_.acquire(E);
  ops::embedding_fwd(compute_, s.residual[0], s.inputs, tensor_at(emb, layout_.modules[0].tensors[0]), nullptr, B,
                     T, C, 0, dt);
  modules_.release(E);

  for (int l = 0; l < L; ++l) {
    const int m = layout_.block_module(l);
    runtime::params::ModuleView view = modules_.acquire(m);
    const BlockActs& a = s.blocks[options_.checkpointing ? 0 : static_cast<std::size_t>(l)];
    block_forward(block_params(view), a, s.residual[static_cast<std::size_t>(l)],
                  s.residual[static_cast<std::size_t>(l) + 1], B, T);
    modules_.release(m);
  }

  runtime::params::ModuleView head = modules_.acquire(H);
  ops::rmsnorm_fwd(compute_, s.nf, s.rstd_f, s.residual.back(), tensor_at(head, layout_.modules.back().tensors[0]),
                   static_cast<std::int64_t>(BT), C, config_.rms_norm_eps, dt);
  if (config_.tie_word_embeddings) {
    modules_.release(H);
    head_ = modules_.acquire(E);
  } else {
    head_ = head;
  }
  head_forward(compute_, head_geometry(static_cast<std::int64_t>(reserved_B_) * reserved_T_), s.head, s.nf,
               tensor_at(head_, head_weight_slot()), static_cast<std::int64_t>(BT),
               targets != nullptr ? s.targets : nullptr, targets != nullptr ? s.losses : nullptr, dt, logits_out);
  if (!for_backward) modules_.release(head_weight_module());

  float loss = std::numeric_limits<float>::quiet_NaN();
  if (targets != nullptr) {
    host_losses_.resize(BT);
    compute_.copy_async(host_losses_.data(), s.losses, BT * sizeof(float));
  }
  compute_.synchronize();
  if (targets != nullptr) loss = mean_loss(host_losses_);
  B_ = B;
  T_ = T;
  backward_ready_ = for_backward;
  return loss;
}

void LlamaModel::backward(float loss_scale) {
  if (!backward_ready_) throw Error("backward() without a forward(..., for_backward = true) before it");
  backward_ready_ = false;
  const DType dt = options_.dtype;
  const int B = B_, T = T_;
  const std::int64_t BT = static_cast<std::int64_t>(B) * T;
  const int C = config_.hidden_size, L = config_.num_hidden_layers;
  const bool tied = config_.tie_word_embeddings;
  const int E = layout_.embedding_module(), H = layout_.head_module();
  Activations& s = *acts_;

  // LM head: dnf (BT, C) = dlogits @ W; dW += dlogits^T @ nf. Mean loss: d(mean)/d(loss_n) = 1 / BT.
  const int W = head_weight_module();
  runtime::params::ModuleView gw = modules_.acquire_grads(W);
  head_backward(compute_, head_geometry(static_cast<std::int64_t>(reserved_B_) * reserved_T_), s.head, s.nf,
                tensor_at(head_, head_weight_slot()), s.dbtc, tensor_at(gw, head_weight_slot()), BT, s.targets,
                loss_scale / static_cast<float>(BT), dt);
  runtime::params::ModuleView head = head_;
  runtime::params::ModuleView ghead = gw;
  if (tied) {
    modules_.release(E);
    head = modules_.acquire(H);
    ghead = modules_.acquire_grads(H);
  }
  const TensorSlot& norm = layout_.modules.back().tensors[0];
  compute_.memset_async(s.dres, 0, static_cast<std::size_t>(BT) * static_cast<std::size_t>(C) * dtype_size(dt));
  ops::rmsnorm_bwd(compute_, s.dres, tensor_at(ghead, norm), s.dbtc, s.residual.back(), tensor_at(head, norm),
                   s.rstd_f, BT, C, dt);
  modules_.release(H);
  modules_.grads_ready(H);

  for (int l = L - 1; l >= 0; --l) {
    const int m = layout_.block_module(l);
    runtime::params::ModuleView view = modules_.acquire(m);
    runtime::params::ModuleView grad = modules_.acquire_grads(m);
    const BlockParams p = block_params(view);
    const BlockActs& a = s.blocks[options_.checkpointing ? 0 : static_cast<std::size_t>(l)];
    if (options_.checkpointing) {
      // The same ops on the same inputs: the block's output comes out bit for bit as saved.
      block_forward(p, a, s.residual[static_cast<std::size_t>(l)], s.residual[static_cast<std::size_t>(l) + 1], B,
                    T);
    }
    block_backward(p, block_params(grad), a, s.residual[static_cast<std::size_t>(l)], B, T);
    modules_.release(m);
    modules_.grads_ready(m);
  }

  const runtime::params::ModuleView gemb = tied ? gw : modules_.acquire_grads(E);
  ops::embedding_bwd(compute_, tensor_at(gemb, layout_.modules[0].tensors[0]), nullptr, s.dres, s.inputs, B, T, C,
                     dt);
  modules_.grads_ready(E);
}

// The decoding scratch of (B, T_new) tokens, in carving order: x, n, qkv, atty, proj, gate_up, h,
// the head's logits chunk and padded weight, the token ids, and a prefill's last tokens.
std::vector<std::size_t> LlamaModel::decode_sizes(const LlamaConfig& cfg, const ModelOptions& options, int B,
                                                  int T_new, bool prefill) {
  const DType dt = options.dtype;
  const std::size_t es = dtype_size(dt);
  const std::size_t BT = static_cast<std::size_t>(B) * static_cast<std::size_t>(T_new);
  const std::size_t C = static_cast<std::size_t>(cfg.hidden_size), F = static_cast<std::size_t>(cfg.intermediate_size);
  const std::size_t A = static_cast<std::size_t>(cfg.num_attention_heads) * static_cast<std::size_t>(cfg.head_dim);
  const std::size_t QKV = A + 2 * static_cast<std::size_t>(cfg.num_key_value_heads) * static_cast<std::size_t>(cfg.head_dim);
  const std::int64_t head_rows = prefill ? B : static_cast<std::int64_t>(BT);
  const LmHeadGeometry g = LmHeadGeometry::make(cfg.vocab_size, cfg.hidden_size, head_rows, options.vocab_multiple,
                                                options.head_chunk_bytes, dt);
  return {BT * C * es,      BT * C * es,       BT * QKV * es,           BT * A * es,
          BT * C * es,      BT * 2 * F * es,   BT * F * es,             g.logits_bytes(dt),
          g.weight_bytes(dt), BT * sizeof(std::int32_t), prefill ? static_cast<std::size_t>(B) * C * es : 0};
}

std::uint64_t LlamaModel::inference_bytes(const LlamaConfig& config, const ModelOptions& options, int batch,
                                          int prompt_T, int max_T, KvPlacement kv) {
  const ModelOptions counted = resolved_options(options, runtime::device::Backend::cuda);
  return generation_bytes(kv_shape(config), options.dtype, batch, max_T, kv,
                          decode_sizes(config, counted, batch, prompt_T, true),
                          decode_sizes(config, counted, batch, 1, false));
}

KvShape LlamaModel::kv_shape(const LlamaConfig& config) {
  return {config.num_hidden_layers, config.num_key_value_heads * config.head_dim};
}

KvCache LlamaModel::make_kv_cache(int batch, int max_T, const KvCacheOptions& kv) {
  check_length(max_T);
  return KvCache(device_, kv_shape(config_), options_.dtype, batch, max_T, kv);
}

void LlamaModel::forward_decode(KvCache& cache, const std::int32_t* tokens, int B, int T_new, float* logits_out) {
  check_decode(cache, B, T_new, nullptr);
  decode(cache, tokens, B, T_new, nullptr, logits_out);
  cache.advance(T_new);
}

void LlamaModel::prefill(KvCache& cache, const std::int32_t* tokens, const int* lengths, int B, int T,
                         float* last_logits) {
  check_decode(cache, B, T, lengths);
  decode(cache, tokens, B, T, lengths, last_logits);
  for (int b = 0; b < B; ++b) cache.set_length(b, lengths[b]);
}

// The forward of `tokens` (B, T_new) at each row's positions of the cache. With
// `last_of_row` (prefill), the head runs on row b's token last_of_row[b] - 1 only: (B, V) logits.
void LlamaModel::decode(KvCache& cache, const std::int32_t* tokens, int B, int T_new, const int* last_of_row,
                        float* logits_out) {
  const std::size_t BT = static_cast<std::size_t>(B) * static_cast<std::size_t>(T_new);
  check_tokens(tokens, BT, config_.vocab_size, "input");
  const DType dt = options_.dtype;
  const int C = config_.hidden_size, F = config_.intermediate_size;
  const int NH = config_.num_attention_heads, NKV = config_.num_key_value_heads, hs = config_.head_dim;
  const int A = NH * hs, QKV = (NH + 2 * NKV) * hs;
  const std::size_t es = dtype_size(dt);
  const float eps = config_.rms_norm_eps;
  const auto N = static_cast<std::int64_t>(BT);
  const auto* inv_freq = static_cast<const float*>(inv_freq_.data());
  const std::int64_t head_rows = last_of_row != nullptr ? B : N;
  const std::size_t Cs = static_cast<std::size_t>(C);

  // Scratch for these tokens only.
  const LmHeadGeometry g = head_geometry(head_rows);
  const std::vector<std::size_t> sizes = decode_sizes(config_, options_, B, T_new, last_of_row != nullptr);
  Carver measure(nullptr);
  for (std::size_t b : sizes) measure.take(b);
  runtime::device::DeviceBuffer scratch =
      device_.allocate(measure.bytes(), fmt::format("decoding scratch for {} x {} tokens", B, T_new));
  Carver c(static_cast<std::byte*>(scratch.data()));
  auto* x = static_cast<std::byte*>(c.take(sizes[0]));
  auto* n = static_cast<std::byte*>(c.take(sizes[1]));
  auto* qkv = static_cast<std::byte*>(c.take(sizes[2]));
  auto* atty = static_cast<std::byte*>(c.take(sizes[3]));
  void* proj = c.take(sizes[4]);
  void* gu = c.take(sizes[5]);
  void* h = c.take(sizes[6]);
  LmHeadBuffers head_buffers;
  head_buffers.logits = c.take(sizes[7]);
  head_buffers.weight = g.padded() ? c.take(sizes[8]) : nullptr;
  auto* tok = static_cast<std::int32_t*>(c.take(sizes[9]));
  auto* last = static_cast<std::byte*>(c.take(sizes[10]));

  upload_tokens(compute_, host_tokens_, tok, nullptr, tokens, nullptr, BT);
  const int E = layout_.embedding_module(), H = layout_.head_module();
  runtime::params::ModuleView emb = modules_.acquire(E);
  ops::embedding_fwd(compute_, x, tok, tensor_at(emb, layout_.modules[0].tensors[0]), nullptr, B, T_new, C, 0, dt);
  modules_.release(E);
  const bool uniform = cache.uniform();
  const std::size_t row_tokens = static_cast<std::size_t>(T_new);
  cache.begin_pass(compute_, T_new, last_of_row);
  for (int l = 0; l < config_.num_hidden_layers; ++l) {
    const int m = layout_.block_module(l);
    const BlockParams p = block_params(modules_.acquire(m));
    ops::rmsnorm_fwd(compute_, n, nullptr, x, p.attn_norm, N, C, eps, dt);
    ops::matmul_fwd(compute_, qkv, n, p.qkv, p.qkv_bias, N, C, QKV, dt);
    cache.begin_layer(l, compute_);
    if (uniform) {
      ops::rope_fwd(compute_, qkv, B, T_new, NH, NKV, hs, cache.length(0), inv_freq, dt);
      ops::attention_decode(compute_, atty, cache.keys(l), cache.values(l), qkv, B, T_new, cache.length(0),
                            cache.max_T(), NH, NKV, hs, dt);
    } else {
      // Rows at different positions: the rotary angle and the attended past are per row.
      for (int b = 0; b < B; ++b) {
        std::byte* q = qkv + static_cast<std::size_t>(b) * row_tokens * static_cast<std::size_t>(QKV) * es;
        std::byte* y = atty + static_cast<std::size_t>(b) * row_tokens * static_cast<std::size_t>(A) * es;
        ops::rope_fwd(compute_, q, 1, T_new, NH, NKV, hs, cache.length(b), inv_freq, dt);
        ops::attention_decode(compute_, y, cache.keys(l, b), cache.values(l, b), q, 1, T_new, cache.length(b),
                              cache.max_T(), NH, NKV, hs, dt);
      }
    }
    cache.end_layer(l, compute_);
    ops::matmul_fwd(compute_, proj, atty, p.o_proj, nullptr, N, A, C, dt);
    ops::residual_fwd(compute_, x, x, proj, N * C, dt);
    ops::rmsnorm_fwd(compute_, n, nullptr, x, p.mlp_norm, N, C, eps, dt);
    ops::matmul_fwd(compute_, gu, n, p.gate_up, nullptr, N, C, 2 * F, dt);
    ops::swiglu_fwd(compute_, h, gu, N, F, dt);
    ops::matmul_fwd(compute_, proj, h, p.down, nullptr, N, F, C, dt);
    ops::residual_fwd(compute_, x, x, proj, N * C, dt);
    modules_.release(m);
  }
  runtime::params::ModuleView head = modules_.acquire(H);
  ops::rmsnorm_fwd(compute_, n, nullptr, x, tensor_at(head, layout_.modules.back().tensors[0]), N, C, eps, dt);
  const void* head_in = n;
  if (last_of_row != nullptr) {
    gather_last_tokens(compute_, last, n, last_of_row, B, T_new, Cs * es);
    head_in = last;
  }
  if (config_.tie_word_embeddings) {
    modules_.release(H);
    head = modules_.acquire(E);
  }
  head_forward(compute_, g, head_buffers, head_in, tensor_at(head, head_weight_slot()), head_rows, nullptr, nullptr,
               dt, logits_out);  // synchronizes
  modules_.release(head_weight_module());
}

}  // namespace strata::models
