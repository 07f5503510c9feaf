#include "models/block_stack.h"

#include <limits>

#include <fmt/format.h>

#include "core/error.h"

namespace strata::models {

// The driver's part of the reserve(B, T) allocation, carved (see Carver) in the order of
// StackParts' comment, the family's parts at their turns. Shapes with BT = B*T.
struct BlockStack::Activations {
  runtime::device::DeviceBuffer buffer;
  std::vector<void*> residual;  // L + 1 of (BT, C): the input of block l, then the output
  void* norm_out = nullptr;     // (BT, C)  the final norm's output, the LM head's input
  LmHeadBuffers head;           // padded W and dW, one chunk of logits (lm_head.h)
  float* losses = nullptr;      // (BT)
  void* dres = nullptr;         // (BT, C)  gradient of the residual stream
  void* dx = nullptr;           // (BT, grad_width)  d(final norm output), then the blocks' scratch
  std::int32_t* inputs = nullptr;   // (BT)
  std::int32_t* targets = nullptr;  // (BT)

  // Lays out (or measures, with base == nullptr) the buffers for (B, T).
  static std::size_t carve(Activations* a, std::byte* base, StackParts& parts, const ModelOptions& options,
                           int B, int T) {
    Carver c(base);
    const DType dtype = options.dtype;
    const std::size_t BT = static_cast<std::size_t>(B) * static_cast<std::size_t>(T);
    const std::size_t C = static_cast<std::size_t>(parts.width());
    const LmHeadGeometry g = LmHeadGeometry::make(parts.vocab(), parts.width(), static_cast<std::int64_t>(BT),
                                                  options.vocab_multiple, options.head_chunk_bytes, dtype);
    const std::size_t es = dtype_size(dtype);
    auto act = [&](std::size_t n) { return c.take(n * es); };
    const int L = parts.layers();
    Activations s;
    for (int l = 0; l <= L; ++l) s.residual.push_back(act(BT * C));
    parts.carve_blocks(c, B, T, options.checkpointing ? 1 : L);
    s.norm_out = act(BT * C);
    parts.carve_final_norm(c, BT);
    if (g.padded()) {
      s.head.weight = c.take(g.weight_bytes(dtype));
      s.head.dweight = c.take(g.weight_bytes(dtype));
    }
    s.head.logits = c.take(g.logits_bytes(dtype));
    s.losses = static_cast<float*>(c.take(BT * sizeof(float)));
    s.dres = act(BT * C);
    s.dx = act(BT * parts.grad_width());
    parts.carve_block_grads(c, B, T);
    s.inputs = static_cast<std::int32_t*>(c.take(BT * sizeof(std::int32_t)));
    s.targets = static_cast<std::int32_t*>(c.take(BT * sizeof(std::int32_t)));
    if (a != nullptr) {
      s.buffer = std::move(a->buffer);
      *a = std::move(s);
    }
    return c.bytes();
  }
};

// The scratch of one decoding pass of (B, T_new) tokens, carved in the order of StackParts'
// comment. Shapes with N = B*T_new.
struct BlockStack::DecodeBuffers {
  std::byte* x = nullptr;    // (N, C)  the residual stream
  std::byte* n = nullptr;    // (N, C)  a norm's output: the blocks' scratch, then the final norm's
  LmHeadBuffers head;        // one chunk of logits, and the padded weight
  std::int32_t* tokens = nullptr;  // (N)
  std::byte* last = nullptr;       // (B, C)  a prefill's last token of each row; else unused

  // Lays out (or measures) the buffers; `g` is the head's geometry for this pass.
  static DecodeBuffers carve(Carver& c, StackParts& parts, DType dtype, const LmHeadGeometry& g, int B,
                             int T_new, bool prefill) {
    const std::size_t es = dtype_size(dtype);
    const std::size_t N = static_cast<std::size_t>(B) * static_cast<std::size_t>(T_new);
    const std::size_t C = static_cast<std::size_t>(parts.width());
    DecodeBuffers d;
    d.x = static_cast<std::byte*>(c.take(N * C * es));
    d.n = static_cast<std::byte*>(c.take(N * C * es));
    parts.carve_decode(c, B, T_new);
    d.head.logits = c.take(g.logits_bytes(dtype));
    d.head.weight = g.padded() ? c.take(g.weight_bytes(dtype)) : nullptr;
    d.tokens = static_cast<std::int32_t*>(c.take(N * sizeof(std::int32_t)));
    d.last = static_cast<std::byte*>(c.take(prefill ? static_cast<std::size_t>(B) * C * es : 0));
    return d;
  }

  // Bytes of one pass's scratch.
  static std::uint64_t bytes(StackParts& parts, const ModelOptions& options, int B, int T_new, bool prefill) {
    const std::int64_t head_rows = prefill ? B : static_cast<std::int64_t>(B) * T_new;
    const LmHeadGeometry g = LmHeadGeometry::make(parts.vocab(), parts.width(), head_rows, options.vocab_multiple,
                                                  options.head_chunk_bytes, options.dtype);
    Carver measure(nullptr);
    carve(measure, parts, options.dtype, g, B, T_new, prefill);
    return measure.bytes();
  }
};

BlockStack::BlockStack(std::unique_ptr<StackParts> parts, ModelOptions options, runtime::device::Device& device,
                       runtime::device::Stream& compute, runtime::params::ParamProvider& params)
    : parts_(std::move(parts)),
      options_(resolved_options(options, device.backend())),
      device_(device),
      compute_(compute),
      modules_(parts_->layout(), options.dtype, device, compute, params) {
  parts_->attach(device_, compute_, options_);
}

BlockStack::~BlockStack() {
  // Enqueued work may still use the activations: let it finish before they go.
  try {
    compute_.synchronize();
  } catch (...) {  // NOLINT(bugprone-empty-catch): the error belongs to whoever waits next
  }
}

// Sizing comes before a device exists: Backend::cuda counts the larger vocabulary padding.
std::uint64_t BlockStack::activation_bytes(StackParts& parts, const ModelOptions& options, int B, int T) {
  const ModelOptions counted = resolved_options(options, runtime::device::Backend::cuda);
  return Activations::carve(nullptr, nullptr, parts, counted, B, T);
}

std::uint64_t BlockStack::inference_bytes(StackParts& parts, const ModelOptions& options, int batch, int prompt_T,
                                          int max_T, KvPlacement kv) {
  const ModelOptions counted = resolved_options(options, runtime::device::Backend::cuda);
  return generation_bytes(parts.kv_shape(), options.dtype, batch, max_T, kv,
                          DecodeBuffers::bytes(parts, counted, batch, prompt_T, true),
                          DecodeBuffers::bytes(parts, counted, batch, 1, false));
}

LmHeadGeometry BlockStack::head_geometry(std::int64_t rows) const {
  return LmHeadGeometry::make(parts_->vocab(), parts_->width(), rows, options_.vocab_multiple,
                              options_.head_chunk_bytes, options_.dtype);
}

int BlockStack::head_weight_module() const {
  return parts_->tied_head() ? layout().embedding_module() : layout().head_module();
}

BlockCall BlockStack::block_call(int layer, const runtime::params::ModuleView& view,
                                 const runtime::params::ModuleView* grads, int B, int T) {
  return BlockCall{compute_, modules_, layer, view, grads, B, T};
}

void BlockStack::reserve(int B, int T) {
  if (B <= 0 || T <= 0) throw Error(fmt::format("batch {} x {} tokens: both must be positive", B, T));
  parts_->check_length(T);
  if (acts_ && B <= reserved_B_ && T <= reserved_T_ &&
      static_cast<std::int64_t>(B) * T <= static_cast<std::int64_t>(reserved_B_) * reserved_T_) {
    return;
  }
  compute_.synchronize();
  acts_.reset();
  auto a = std::make_unique<Activations>();
  const std::size_t bytes = Activations::carve(nullptr, nullptr, *parts_, options_, B, T);
  a->buffer = device_.allocate(bytes, fmt::format("activations for a micro-batch of {} x {} tokens{}", B, T,
                                                  options_.checkpointing ? " (checkpointed)" : ""));
  Activations::carve(a.get(), static_cast<std::byte*>(a->buffer.data()), *parts_, options_, B, T);
  acts_ = std::move(a);
  reserved_B_ = B;
  reserved_T_ = T;
}

float BlockStack::forward(const std::int32_t* inputs, const std::int32_t* targets, int B, int T, bool for_backward,
                          float* logits_out) {
  if (for_backward && targets == nullptr) throw Error("forward for backward needs targets");
  if (backward_ready_) {
    // A forward for backward whose backward never came: give the head back first.
    backward_ready_ = false;
    modules_.release(head_weight_module());
  }
  reserve(B, T);
  const std::size_t BT = static_cast<std::size_t>(B) * static_cast<std::size_t>(T);
  check_tokens(inputs, BT, parts_->vocab(), "input");
  if (targets != nullptr) check_tokens(targets, BT, parts_->vocab(), "target");
  const DType dt = options_.dtype;
  Activations& s = *acts_;
  // Tokens: staged in host memory that stays put until the copies have run (the stream is
  // synchronized before this function returns).
  upload_tokens(compute_, host_tokens_, s.inputs, s.targets, inputs, targets, BT);

  const int E = layout().embedding_module(), H = layout().head_module();
  runtime::params::ModuleView emb = modules_.acquire(E);
  parts_->embed(compute_, emb, s.residual[0], s.inputs, B, T, nullptr);
  modules_.release(E);

  for (int l = 0; l < parts_->layers(); ++l) {
    const int m = layout().block_module(l);
    runtime::params::ModuleView view = modules_.acquire(m);
    parts_->block_forward(block_call(l, view, nullptr, B, T), saved_block(l), s.residual[static_cast<std::size_t>(l)],
                          s.residual[static_cast<std::size_t>(l) + 1]);
    modules_.release(m);
  }

  runtime::params::ModuleView head = modules_.acquire(H);
  parts_->final_norm(compute_, head, s.norm_out, s.residual.back(), static_cast<std::int64_t>(BT), true);
  if (parts_->tied_head()) {
    modules_.release(H);
    head_ = modules_.acquire(E);
  } else {
    head_ = head;
  }
  // LM head: logits (BT, V) = norm_out @ W^T, and the losses (lm_head.h).
  head_forward(compute_, head_geometry(static_cast<std::int64_t>(reserved_B_) * reserved_T_), s.head, s.norm_out,
               tensor_at(head_, parts_->head_weight_slot()), static_cast<std::int64_t>(BT),
               targets != nullptr ? s.targets : nullptr, targets != nullptr ? s.losses : nullptr, dt, logits_out);
  if (!for_backward) modules_.release(head_weight_module());

  float loss = std::numeric_limits<float>::quiet_NaN();
  if (targets != nullptr) {
    host_losses_.resize(BT);
    compute_.copy_async(host_losses_.data(), s.losses, BT * sizeof(float));
  }
  compute_.synchronize();
  if (targets != nullptr) {
    loss = mean_loss(host_losses_);
    if (for_backward) loss = static_cast<float>(static_cast<double>(loss) + parts_->extra_loss(B, T));
  }
  B_ = B;
  T_ = T;
  backward_ready_ = for_backward;
  return loss;
}

void BlockStack::backward(float loss_scale) {
  if (!backward_ready_) throw Error("backward() without a forward(..., for_backward = true) before it");
  backward_ready_ = false;
  const DType dt = options_.dtype;
  const int B = B_, T = T_;
  const std::int64_t BT = static_cast<std::int64_t>(B) * T;
  const bool tied = parts_->tied_head();
  const int E = layout().embedding_module(), H = layout().head_module();
  Activations& s = *acts_;

  // LM head: dx (BT, C) = dlogits @ W; dW += dlogits^T @ norm_out. Mean loss: d(mean)/d(loss_n)
  // = 1 / BT.
  const int W = head_weight_module();
  runtime::params::ModuleView gw = modules_.acquire_grads(W);
  const TensorSlot& w = parts_->head_weight_slot();
  head_backward(compute_, head_geometry(static_cast<std::int64_t>(reserved_B_) * reserved_T_), s.head, s.norm_out,
                tensor_at(head_, w), s.dx, tensor_at(gw, w), BT, s.targets, loss_scale / static_cast<float>(BT), dt);
  runtime::params::ModuleView head = head_;
  runtime::params::ModuleView ghead = gw;
  if (tied) {
    // The embedding's gradient is final only after the embedding's backward (below).
    modules_.release(E);
    head = modules_.acquire(H);
    ghead = modules_.acquire_grads(H);
  }
  compute_.memset_async(s.dres, 0,
                        static_cast<std::size_t>(BT) * static_cast<std::size_t>(parts_->width()) * dtype_size(dt));
  parts_->begin_backward(compute_, loss_scale, B, T);
  parts_->final_norm_backward(compute_, head, ghead, s.dres, s.dx, s.residual.back(), BT);
  modules_.release(H);
  modules_.grads_ready(H);

  for (int l = parts_->layers() - 1; l >= 0; --l) {
    const int m = layout().block_module(l);
    runtime::params::ModuleView view = modules_.acquire(m);
    runtime::params::ModuleView grad = modules_.acquire_grads(m);
    const BlockCall call = block_call(l, view, &grad, B, T);
    const std::size_t in = static_cast<std::size_t>(l);
    if (options_.checkpointing) {
      // The same ops on the same inputs: the block's output comes out bit for bit as saved.
      parts_->block_forward(call, saved_block(l), s.residual[in], s.residual[in + 1]);
    }
    parts_->block_backward(call, saved_block(l), s.residual[in], s.dres, s.dx);
    modules_.release(m);
    modules_.grads_ready(m);
  }

  const runtime::params::ModuleView gemb = tied ? gw : modules_.acquire_grads(E);
  parts_->embed_backward(compute_, gemb, s.dres, s.inputs, B, T);
  modules_.grads_ready(E);
}

KvCache BlockStack::make_kv_cache(int batch, int max_T, const KvCacheOptions& kv) {
  parts_->check_cache_length(max_T);
  return KvCache(device_, parts_->kv_shape(), options_.dtype, batch, max_T, kv);
}

void BlockStack::forward_decode(KvCache& cache, const std::int32_t* tokens, int B, int T_new, float* logits_out) {
  check_decode(cache, B, T_new, nullptr);
  decode(cache, tokens, B, T_new, nullptr, logits_out);
  cache.advance(T_new);
}

void BlockStack::prefill(KvCache& cache, const std::int32_t* tokens, const int* lengths, int B, int T,
                         float* last_logits) {
  check_decode(cache, B, T, lengths);
  decode(cache, tokens, B, T, lengths, last_logits);
  for (int b = 0; b < B; ++b) cache.set_length(b, cache.length(b) + lengths[b]);
}

// The forward of `tokens` (B, T_new) at each row's positions of the cache. With `last_of_row`
// (prefill), the head runs on row b's token last_of_row[b] - 1 only: (B, V) logits.
void BlockStack::decode(KvCache& cache, const std::int32_t* tokens, int B, int T_new, const int* last_of_row,
                        float* logits_out) {
  const std::size_t BT = static_cast<std::size_t>(B) * static_cast<std::size_t>(T_new);
  check_tokens(tokens, BT, parts_->vocab(), "input");
  const DType dt = options_.dtype;
  const auto N = static_cast<std::int64_t>(BT);
  const std::int64_t head_rows = last_of_row != nullptr ? B : N;

  // Scratch for these tokens only.
  const LmHeadGeometry g = head_geometry(head_rows);
  const bool prefill = last_of_row != nullptr;
  runtime::device::DeviceBuffer scratch =
      device_.allocate(DecodeBuffers::bytes(*parts_, options_, B, T_new, prefill),
                       fmt::format("decoding scratch for {} x {} tokens", B, T_new));
  Carver c(static_cast<std::byte*>(scratch.data()));
  const DecodeBuffers d = DecodeBuffers::carve(c, *parts_, dt, g, B, T_new, prefill);

  upload_tokens(compute_, host_tokens_, d.tokens, nullptr, tokens, nullptr, BT);
  const int E = layout().embedding_module(), H = layout().head_module();
  runtime::params::ModuleView emb = modules_.acquire(E);
  parts_->embed(compute_, emb, d.x, d.tokens, B, T_new, &cache);
  modules_.release(E);
  cache.begin_pass(compute_, T_new, last_of_row);
  for (int l = 0; l < parts_->layers(); ++l) {
    const int m = layout().block_module(l);
    runtime::params::ModuleView view = modules_.acquire(m);
    parts_->block_decode(block_call(l, view, nullptr, B, T_new), cache, d.x, d.n);
    modules_.release(m);
  }
  runtime::params::ModuleView head = modules_.acquire(H);
  parts_->final_norm(compute_, head, d.n, d.x, N, false);
  // A tied head is done with the head module: give it back before the LM head needs the embedding.
  if (parts_->tied_head()) modules_.release(H);
  const void* head_in = d.n;
  if (prefill) {
    gather_last_tokens(compute_, d.last, d.n, last_of_row, B, T_new,
                       static_cast<std::size_t>(parts_->width()) * dtype_size(dt));
    head_in = d.last;
  }
  if (parts_->tied_head()) head = modules_.acquire(E);
  head_forward(compute_, g, d.head, head_in, tensor_at(head, parts_->head_weight_slot()), head_rows, nullptr,
               nullptr, dt, logits_out);  // synchronizes
  modules_.release(head_weight_module());
}

}  // namespace strata::models
