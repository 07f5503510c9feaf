#include "models/gpt/gpt_model.h"

#include <cmath>
#include <cstring>
#include <limits>

#include <fmt/format.h>

#include "core/error.h"
#include "models/model_parts.h"
#include "runtime/ops/ops.h"

namespace strata::models {
namespace ops = runtime::ops;


// What one block's forward keeps for its backward. Shapes with BT = B*T.
struct GptModel::BlockActs {
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

struct GptModel::BlockParams {
  const std::byte* t[kBlockTensors];
};

// The whole reserve(B, T) allocation, carved (see Carver) in a fixed order.
struct GptModel::Activations {
  runtime::device::DeviceBuffer buffer;
  std::vector<void*> residual;     // L + 1 of (BT, C): the input of block l, then the output
  std::vector<BlockActs> blocks;   // L, or 1 with checkpointing (the block being recomputed)
  void* proj;                      // (BT, C)  scratch: a projection before its residual add
  void* lnf;                       // (BT, C)
  float* lnf_mean;                 // (BT)
  float* lnf_rstd;                 // (BT)
  LmHeadBuffers head;              // padded W and dW, one chunk of logits (lm_head.h)
  float* losses;                   // (BT)
  void* dres;                      // (BT, C)  gradient of the residual stream
  void* dbtc;                      // (BT, C)  gradient scratch
  void* dqkv;                      // (BT, 3C)
  void* d4c;                       // (BT, 4C)
  std::int32_t* inputs;            // (BT)
  std::int32_t* targets;           // (BT)

  // Lays out (or measures, with base == nullptr) the buffers for (B, T).
  static std::size_t carve(Activations* a, std::byte* base, const GptConfig& cfg,
                           const ModelOptions& options, int B, int T) {
    Carver c(base);
    const DType dtype = options.dtype;
    const bool checkpointing = options.checkpointing;
    const std::size_t BT = static_cast<std::size_t>(B) * static_cast<std::size_t>(T);
    const std::size_t C = static_cast<std::size_t>(cfg.n_embd);
    const LmHeadGeometry g =
        LmHeadGeometry::make(cfg.vocab_size, cfg.n_embd, static_cast<std::int64_t>(BT),
                             options.vocab_multiple, options.head_chunk_bytes, dtype);
    const std::size_t es = dtype_size(dtype);
    auto act = [&](std::size_t n) { return c.take(n * es); };
    auto f32 = [&](std::size_t n) { return static_cast<float*>(c.take(n * sizeof(float))); };
    const int L = cfg.n_layer;
    std::vector<void*> residual;
    for (int l = 0; l <= L; ++l) residual.push_back(act(BT * C));
    std::vector<BlockActs> blocks;
    for (int l = 0; l < (checkpointing ? 1 : L); ++l) {
      BlockActs b{};
      b.ln1 = act(BT * C);
      b.ln1_mean = f32(BT);
      b.ln1_rstd = f32(BT);
      b.qkv = act(BT * 3 * C);
      b.atty = act(BT * C);
      b.lse = f32(BT * static_cast<std::size_t>(cfg.n_head));
      b.res2 = act(BT * C);
      b.ln2 = act(BT * C);
      b.ln2_mean = f32(BT);
      b.ln2_rstd = f32(BT);
      b.fch = act(BT * 4 * C);
      b.fch_gelu = act(BT * 4 * C);
      blocks.push_back(b);
    }
    void* proj = act(BT * C);
    void* lnf = act(BT * C);
    float* lnf_mean = f32(BT);
    float* lnf_rstd = f32(BT);
    LmHeadBuffers head;
    if (g.padded()) {
      head.weight = c.take(g.weight_bytes(dtype));
      head.dweight = c.take(g.weight_bytes(dtype));
    }
    head.logits = c.take(g.logits_bytes(dtype));
    float* losses = f32(BT);
    void* dres = act(BT * C);
    void* dbtc = act(BT * C);
    void* dqkv = act(BT * 3 * C);
    void* d4c = act(BT * 4 * C);
    auto* inputs = static_cast<std::int32_t*>(c.take(BT * sizeof(std::int32_t)));
    auto* targets = static_cast<std::int32_t*>(c.take(BT * sizeof(std::int32_t)));
    if (a != nullptr) {
      a->residual = std::move(residual);
      a->blocks = std::move(blocks);
      a->proj = proj;
      a->lnf = lnf;
      a->lnf_mean = lnf_mean;
      a->lnf_rstd = lnf_rstd;
      a->head = head;
      a->losses = losses;
      a->dres = dres;
      a->dbtc = dbtc;
      a->dqkv = dqkv;
      a->d4c = d4c;
      a->inputs = inputs;
      a->targets = targets;
    }
    return c.bytes();
  }
};

// ---- model ----------------------------------------------------------------------------------

GptModel::GptModel(const GptConfig& config, ModelOptions options, runtime::device::Device& device,
                   runtime::device::Stream& compute, runtime::params::ParamProvider& params)
    : config_(config),
      options_(resolved_options(options, device.backend())),
      layout_(gpt_layout(config)),
      device_(device),
      compute_(compute),
      modules_(layout_, options.dtype, device, compute, params) {
}

GptModel::~GptModel() {
  // Enqueued work may still use the activations: let it finish before they go.
  try {
    compute_.synchronize();
  } catch (...) {  // NOLINT(bugprone-empty-catch): the error belongs to whoever waits next
  }
}

std::uint64_t GptModel::activation_bytes(const GptConfig& config, const ModelOptions& options,
                                         int B, int T) {
  config.validate();
  const ModelOptions counted = resolved_options(options, runtime::device::Backend::cuda);
  return Activations::carve(nullptr, nullptr, config, counted, B, T);
}

LmHeadGeometry GptModel::head_geometry(std::int64_t rows) const {
  return LmHeadGeometry::make(config_.vocab_size, config_.n_embd, rows, options_.vocab_multiple,
                              options_.head_chunk_bytes, options_.dtype);
}

void GptModel::reserve(int B, int T) {
  if (B <= 0 || T <= 0) throw Error(fmt::format("batch {} x {} tokens: both must be positive", B, T));
  if (T > config_.n_positions) {
    throw Error(fmt::format("sequence length {} is longer than the model's n_positions ({})", T,
                            config_.n_positions),
                "", "lower --seq-len");
  }
  if (acts_ && B <= reserved_B_ && T <= reserved_T_ &&
      static_cast<std::int64_t>(B) * T <= static_cast<std::int64_t>(reserved_B_) * reserved_T_) {
    return;
  }
  compute_.synchronize();
  acts_.reset();
  auto a = std::make_unique<Activations>();
  const std::size_t bytes = Activations::carve(nullptr, nullptr, config_, options_, B, T);
  a->buffer = device_.allocate(
      bytes, fmt::format("activations for a micro-batch of {} x {} tokens{}", B, T,
                         options_.checkpointing ? " (checkpointed)" : ""));
  Activations::carve(a.get(), static_cast<std::byte*>(a->buffer.data()), config_, options_, B, T);
  acts_ = std::move(a);
  reserved_B_ = B;
  reserved_T_ = T;
}

GptModel::BlockParams GptModel::block_params(const runtime::params::ModuleView& view) const {
  const ModuleLayout& m = layout_.modules[1];  // every block has the same offsets
  BlockParams p{};
  for (int i = 0; i < kBlockTensors; ++i) p.t[i] = tensor_at(view, m.tensors[static_cast<std::size_t>(i)]);
  return p;
}

// res_out = block(res_in). Shapes: res (BT, C).
void GptModel::block_forward(const BlockParams& p, const BlockActs& a, const void* res_in,
                             void* res_out, int B, int T) {
  const DType dt = options_.dtype;
  const std::int64_t BT = static_cast<std::int64_t>(B) * T;
  const int C = config_.n_embd, NH = config_.n_head;
  const float eps = config_.layer_norm_epsilon;
  ops::layernorm_fwd(compute_, a.ln1, a.ln1_mean, a.ln1_rstd, res_in, p.t[kLn1W], p.t[kLn1B], BT,
                     C, eps, dt);
  ops::matmul_fwd(compute_, a.qkv, a.ln1, p.t[kQkvW], p.t[kQkvB], BT, C, 3 * C, dt);
  // GPT-2 has as many key/value heads as query heads (NKV = NH).
  ops::attention_fwd(compute_, a.atty, a.lse, a.qkv, B, T, NH, NH, C / NH, dt);
  ops::matmul_fwd(compute_, acts_->proj, a.atty, p.t[kAttProjW], p.t[kAttProjB], BT, C, C, dt);
  // res2 = res_in + proj and ln2 = ln_2(res2), one op.
  ops::residual_layernorm_fwd(compute_, a.res2, a.ln2, a.ln2_mean, a.ln2_rstd, res_in, acts_->proj,
                              p.t[kLn2W], p.t[kLn2B], BT, C, eps, dt);
  // fch = c_fc(ln2) (kept for the backward) and fch_gelu = gelu(fch), one op.
  ops::matmul_bias_gelu_fwd(compute_, a.fch_gelu, a.fch, a.ln2, p.t[kFcW], p.t[kFcB], BT, C, 4 * C,
                            dt);
  ops::matmul_fwd(compute_, acts_->proj, a.fch_gelu, p.t[kFcProjW], p.t[kFcProjB], BT, 4 * C, C,
                  dt);
  ops::residual_fwd(compute_, res_out, a.res2, acts_->proj, BT * C, dt);
}

// On entry acts_->dres holds d(block output); on exit d(block input). g: gradient views.
void GptModel::block_backward(const BlockParams& p, const BlockParams& g, const BlockActs& a,
                              const void* res_in, int B, int T) {
  const DType dt = options_.dtype;
  const std::int64_t BT = static_cast<std::int64_t>(B) * T;
  const int C = config_.n_embd, NH = config_.n_head;
  auto gw = [&](int i) { return const_cast<std::byte*>(g.t[i]); };
  Activations& s = *acts_;
  // MLP: out = res2 + c_proj(gelu(c_fc(ln_2(res2)))); dres is d(out) and becomes d(res2).
  // c_proj's backward through the GELU: d4c = d(fch), and c_fc's bias gradient with it.
  ops::matmul_bwd_dgelu(compute_, s.d4c, gw(kFcB), gw(kFcProjW), gw(kFcProjB), s.dres, a.fch_gelu,
                        a.fch, p.t[kFcProjW], BT, 4 * C, C, dt);
  ops::matmul_bwd(compute_, s.dbtc, gw(kFcW), nullptr, s.d4c, a.ln2, p.t[kFcW], BT, C, 4 * C, dt);
  ops::layernorm_bwd(compute_, s.dres, gw(kLn2W), gw(kLn2B), s.dbtc, a.res2, p.t[kLn2W],
                     a.ln2_mean, a.ln2_rstd, BT, C, dt);
  // Attention: res2 = res_in + c_proj(attn(c_attn(ln_1(res_in)))); dres becomes d(res_in).
  ops::matmul_bwd(compute_, s.dbtc, gw(kAttProjW), gw(kAttProjB), s.dres, a.atty,
                  p.t[kAttProjW], BT, C, C, dt);
  ops::attention_bwd(compute_, s.dqkv, s.dbtc, a.qkv, a.atty, a.lse, B, T, NH, NH, C / NH, dt);
  ops::matmul_bwd(compute_, s.dbtc, gw(kQkvW), gw(kQkvB), s.dqkv, a.ln1, p.t[kQkvW], BT, C,
                  3 * C, dt);
  ops::layernorm_bwd(compute_, s.dres, gw(kLn1W), gw(kLn1B), s.dbtc, res_in, p.t[kLn1W],
                     a.ln1_mean, a.ln1_rstd, BT, C, dt);
}

float GptModel::forward(const std::int32_t* inputs, const std::int32_t* targets, int B, int T,
                        bool for_backward, float* logits_out) {
  if (for_backward && targets == nullptr) {
    throw Error("forward for backward needs targets");
  }
  if (backward_ready_) {
    // A forward for backward whose backward never came: give the head back first.
    backward_ready_ = false;
    modules_.release(layout_.embedding_module());
  }
  reserve(B, T);
  const std::size_t BT = static_cast<std::size_t>(B) * static_cast<std::size_t>(T);
  check_tokens(inputs, BT, config_.vocab_size, "input");
  if (targets != nullptr) check_tokens(targets, BT, config_.vocab_size, "target");
  const DType dt = options_.dtype;
  const int C = config_.n_embd, L = config_.n_layer;
  Activations& s = *acts_;

  // Tokens: staged in host memory that stays put until the copies have run (the stream is
  // synchronized before this function returns).
  upload_tokens(compute_, host_tokens_, s.inputs, s.targets, inputs, targets, BT);

  const ModuleLayout& emb_layout = layout_.modules[0];
  runtime::params::ModuleView emb = modules_.acquire(layout_.embedding_module());
  ops::embedding_fwd(compute_, s.residual[0], s.inputs, tensor_at(emb, emb_layout.tensors[kWte]),
                     tensor_at(emb, emb_layout.tensors[kWpe]), B, T, C, 0, dt);
  modules_.release(layout_.embedding_module());

  for (int l = 0; l < L; ++l) {
    const int m = layout_.block_module(l);
    runtime::params::ModuleView view = modules_.acquire(m);
    const BlockActs& a = s.blocks[options_.checkpointing ? 0 : static_cast<std::size_t>(l)];
    block_forward(block_params(view), a, s.residual[static_cast<std::size_t>(l)],
                  s.residual[static_cast<std::size_t>(l) + 1], B, T);
    modules_.release(m);
  }

  const ModuleLayout& lnf_layout = layout_.modules.back();
  runtime::params::ModuleView lnf = modules_.acquire(layout_.head_module());
  ops::layernorm_fwd(compute_, s.lnf, s.lnf_mean, s.lnf_rstd, s.residual.back(),
                     tensor_at(lnf, lnf_layout.tensors[kLnfW]), tensor_at(lnf, lnf_layout.tensors[kLnfB]),
                     static_cast<std::int64_t>(BT), C, config_.layer_norm_epsilon, dt);
  modules_.release(layout_.head_module());

  // LM head, tied to wte (V, C): logits (BT, V) = lnf @ wte^T, and the losses (lm_head.h).
  head_ = modules_.acquire(layout_.embedding_module());
  head_forward(compute_, head_geometry(static_cast<std::int64_t>(reserved_B_) * reserved_T_), s.head,
               s.lnf, tensor_at(head_, emb_layout.tensors[kWte]), static_cast<std::int64_t>(BT),
               targets != nullptr ? s.targets : nullptr, targets != nullptr ? s.losses : nullptr, dt,
               logits_out);
  if (!for_backward) modules_.release(layout_.embedding_module());

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

void GptModel::backward(float loss_scale) {
  if (!backward_ready_) {
    throw Error("backward() without a forward(..., for_backward = true) before it");
  }
  backward_ready_ = false;
  const DType dt = options_.dtype;
  const int B = B_, T = T_;
  const std::int64_t BT = static_cast<std::int64_t>(B) * T;
  const int C = config_.n_embd, L = config_.n_layer;
  Activations& s = *acts_;

  const ModuleLayout& emb_layout = layout_.modules[0];
  runtime::params::ModuleView gemb = modules_.acquire_grads(layout_.embedding_module());
  // LM head: dlnf (BT, C) = dlogits @ wte; dwte += dlogits^T @ lnf. Mean loss: d(mean)/d(loss_n)
  // = 1 / BT.
  head_backward(compute_, head_geometry(static_cast<std::int64_t>(reserved_B_) * reserved_T_), s.head,
                s.lnf, tensor_at(head_, emb_layout.tensors[kWte]), s.dbtc, tensor_at(gemb, emb_layout.tensors[kWte]),
                BT, s.targets, loss_scale / static_cast<float>(BT), dt);
  modules_.release(layout_.embedding_module());

  const ModuleLayout& lnf_layout = layout_.modules.back();
  runtime::params::ModuleView lnf = modules_.acquire(layout_.head_module());
  runtime::params::ModuleView glnf = modules_.acquire_grads(layout_.head_module());
  compute_.memset_async(s.dres, 0, static_cast<std::size_t>(BT) * static_cast<std::size_t>(C) * dtype_size(dt));
  ops::layernorm_bwd(compute_, s.dres, tensor_at(glnf, lnf_layout.tensors[kLnfW]),
                     tensor_at(glnf, lnf_layout.tensors[kLnfB]), s.dbtc, s.residual.back(),
                     tensor_at(lnf, lnf_layout.tensors[kLnfW]), s.lnf_mean, s.lnf_rstd, BT, C, dt);
  modules_.release(layout_.head_module());
  modules_.grads_ready(layout_.head_module());

  for (int l = L - 1; l >= 0; --l) {
    const int m = layout_.block_module(l);
    runtime::params::ModuleView view = modules_.acquire(m);
    runtime::params::ModuleView grad = modules_.acquire_grads(m);
    const BlockParams p = block_params(view);
    const BlockActs& a = s.blocks[options_.checkpointing ? 0 : static_cast<std::size_t>(l)];
    if (options_.checkpointing) {
      // The same ops on the same inputs: the block's output comes out bit for bit as saved.
      block_forward(p, a, s.residual[static_cast<std::size_t>(l)],
                    s.residual[static_cast<std::size_t>(l) + 1], B, T);
    }
    block_backward(p, block_params(grad), a, s.residual[static_cast<std::size_t>(l)], B, T);
    modules_.release(m);
    modules_.grads_ready(m);
  }

  ops::embedding_bwd(compute_, tensor_at(gemb, emb_layout.tensors[kWte]),
                     tensor_at(gemb, emb_layout.tensors[kWpe]), s.dres, s.inputs, B, T, C, dt);
  modules_.grads_ready(layout_.embedding_module());
}

// The decoding scratch of (B, T_new) tokens, in carving order: x, ln, qkv, atty, proj, fc, the
// head's logits chunk and padded weight, the token ids, and a prefill's last tokens.
std::vector<std::size_t> GptModel::decode_sizes(const GptConfig& cfg, const ModelOptions& options, int B, int T_new,
                                                bool prefill) {
  const DType dt = options.dtype;
  const std::size_t es = dtype_size(dt);
  const std::size_t BT = static_cast<std::size_t>(B) * static_cast<std::size_t>(T_new);
  const std::size_t C = static_cast<std::size_t>(cfg.n_embd);
  const std::int64_t head_rows = prefill ? B : static_cast<std::int64_t>(BT);
  const LmHeadGeometry g = LmHeadGeometry::make(cfg.vocab_size, cfg.n_embd, head_rows, options.vocab_multiple,
                                                options.head_chunk_bytes, dt);
  return {BT * C * es,        BT * C * es,       BT * 3 * C * es,          BT * C * es,
          BT * C * es,        BT * 4 * C * es,   g.logits_bytes(dt),       g.weight_bytes(dt),
          BT * sizeof(std::int32_t), prefill ? static_cast<std::size_t>(B) * C * es : 0};
}

std::uint64_t GptModel::inference_bytes(const GptConfig& config, const ModelOptions& options, int batch, int prompt_T,
                                        int max_T, KvPlacement kv) {
  const ModelOptions counted = resolved_options(options, runtime::device::Backend::cuda);
  return generation_bytes(kv_shape(config), options.dtype, batch, max_T, kv,
                          decode_sizes(config, counted, batch, prompt_T, true),
                          decode_sizes(config, counted, batch, 1, false));
}

KvShape GptModel::kv_shape(const GptConfig& config) { return {config.n_layer, config.n_embd}; }

KvCache GptModel::make_kv_cache(int batch, int max_T, const KvCacheOptions& kv) {
  if (max_T > config_.n_positions) {
    throw Error(fmt::format("a KV cache of {} positions is longer than the model's n_positions ({})", max_T,
                            config_.n_positions));
  }
  return KvCache(device_, kv_shape(config_), options_.dtype, batch, max_T, kv);
}

void GptModel::forward_decode(KvCache& cache, const std::int32_t* tokens, int B, int T_new,
                              float* logits_out) {
  check_decode(cache, B, T_new, nullptr);
  decode(cache, tokens, B, T_new, nullptr, logits_out);
  cache.advance(T_new);
}

void GptModel::prefill(KvCache& cache, const std::int32_t* tokens, const int* lengths, int B, int T,
                       float* last_logits) {
  check_decode(cache, B, T, lengths);
  decode(cache, tokens, B, T, lengths, last_logits);
  for (int b = 0; b < B; ++b) cache.set_length(b, lengths[b]);
}

// The forward of `tokens` (B, T_new) at each row's positions of the cache. With `last_of_row`
// (prefill), the head runs on row b's token last_of_row[b] - 1 only: (B, V) logits.
void GptModel::decode(KvCache& cache, const std::int32_t* tokens, int B, int T_new, const int* last_of_row,
                      float* logits_out) {
  const std::size_t BT = static_cast<std::size_t>(B) * static_cast<std::size_t>(T_new);
  check_tokens(tokens, BT, config_.vocab_size, "input");
  const DType dt = options_.dtype;
  const int C = config_.n_embd, NH = config_.n_head;
  const std::size_t Cs = static_cast<std::size_t>(C);
  const std::size_t es = dtype_size(dt);
  const float eps = config_.layer_norm_epsilon;
  const auto N = static_cast<std::int64_t>(BT);
  const std::int64_t head_rows = last_of_row != nullptr ? B : N;

  // Scratch for these tokens only.
  const LmHeadGeometry g = head_geometry(head_rows);
  const std::vector<std::size_t> sizes = decode_sizes(config_, options_, B, T_new, last_of_row != nullptr);
  Carver measure(nullptr);
  for (std::size_t b : sizes) measure.take(b);
  runtime::device::DeviceBuffer scratch =
      device_.allocate(measure.bytes(), fmt::format("decoding scratch for {} x {} tokens", B, T_new));
  Carver c(static_cast<std::byte*>(scratch.data()));
  auto* x = static_cast<std::byte*>(c.take(sizes[0]));
  void* ln = c.take(sizes[1]);
  auto* qkv = static_cast<std::byte*>(c.take(sizes[2]));
  auto* atty = static_cast<std::byte*>(c.take(sizes[3]));
  void* proj = c.take(sizes[4]);
  void* fc = c.take(sizes[5]);
  LmHeadBuffers head_buffers;
  head_buffers.logits = c.take(sizes[6]);
  head_buffers.weight = g.padded() ? c.take(sizes[7]) : nullptr;
  auto* tok = static_cast<std::int32_t*>(c.take(sizes[8]));
  void* last = c.take(sizes[9]);

  upload_tokens(compute_, host_tokens_, tok, nullptr, tokens, nullptr, BT);
  const bool uniform = cache.uniform();
  const std::size_t row_tokens = static_cast<std::size_t>(T_new);
  const ModuleLayout& emb_layout = layout_.modules[0];
  runtime::params::ModuleView emb = modules_.acquire(layout_.embedding_module());
  const void* wte = tensor_at(emb, emb_layout.tensors[kWte]);
  const void* wpe = tensor_at(emb, emb_layout.tensors[kWpe]);
  if (uniform) {
    ops::embedding_fwd(compute_, x, tok, wte, wpe, B, T_new, C, cache.length(0), dt);
  } else {
    for (int b = 0; b < B; ++b) {  // each row at its own positions
      ops::embedding_fwd(compute_, x + static_cast<std::size_t>(b) * row_tokens * Cs * es,
                         tok + static_cast<std::size_t>(b) * row_tokens, wte, wpe, 1, T_new, C, cache.length(b), dt);
    }
  }
  modules_.release(layout_.embedding_module());
  cache.begin_pass(compute_, T_new, last_of_row);
  for (int l = 0; l < config_.n_layer; ++l) {
    const int m = layout_.block_module(l);
    const BlockParams p = block_params(modules_.acquire(m));
    ops::layernorm_fwd(compute_, ln, nullptr, nullptr, x, p.t[kLn1W], p.t[kLn1B], N, C, eps, dt);
    ops::matmul_fwd(compute_, qkv, ln, p.t[kQkvW], p.t[kQkvB], N, C, 3 * C, dt);
    cache.begin_layer(l, compute_);
    if (uniform) {
      ops::attention_decode(compute_, atty, cache.keys(l), cache.values(l), qkv, B, T_new, cache.length(0),
                            cache.max_T(), NH, NH, C / NH, dt);
    } else {
      for (int b = 0; b < B; ++b) {
        ops::attention_decode(compute_, atty + static_cast<std::size_t>(b) * row_tokens * Cs * es, cache.keys(l, b),
                              cache.values(l, b), qkv + static_cast<std::size_t>(b) * row_tokens * 3 * Cs * es, 1,
                              T_new, cache.length(b), cache.max_T(), NH, NH, C / NH, dt);
      }
    }
    cache.end_layer(l, compute_);
    ops::matmul_fwd(compute_, proj, atty, p.t[kAttProjW], p.t[kAttProjB], N, C, C, dt);
    ops::residual_fwd(compute_, x, x, proj, N * C, dt);
    ops::layernorm_fwd(compute_, ln, nullptr, nullptr, x, p.t[kLn2W], p.t[kLn2B], N, C, eps, dt);
    ops::matmul_fwd(compute_, fc, ln, p.t[kFcW], p.t[kFcB], N, C, 4 * C, dt);
    ops::gelu_fwd(compute_, fc, fc, N * 4 * C, dt);
    ops::matmul_fwd(compute_, proj, fc, p.t[kFcProjW], p.t[kFcProjB], N, 4 * C, C, dt);
    ops::residual_fwd(compute_, x, x, proj, N * C, dt);
    modules_.release(m);
  }
  const ModuleLayout& lnf_layout = layout_.modules.back();
  runtime::params::ModuleView lnf = modules_.acquire(layout_.head_module());
  ops::layernorm_fwd(compute_, ln, nullptr, nullptr, x, tensor_at(lnf, lnf_layout.tensors[kLnfW]),
                     tensor_at(lnf, lnf_layout.tensors[kLnfB]), N, C, eps, dt);
  modules_.release(layout_.head_module());
  const void* head_in = ln;
  if (last_of_row != nullptr) {
    gather_last_tokens(compute_, last, ln, last_of_row, B, T_new, Cs * es);
    head_in = last;
  }
  runtime::params::ModuleView head = modules_.acquire(layout_.embedding_module());
  head_forward(compute_, g, head_buffers, head_in, tensor_at(head, emb_layout.tensors[kWte]), head_rows, nullptr,
               nullptr, dt, logits_out);  // synchronizes
  modules_.release(layout_.embedding_module());
}

}  // namespace strata::models
