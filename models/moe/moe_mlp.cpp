#include "models/moe/moe_mlp.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "kernels/host/matmul.h"
#include "kernels/host/swiglu.h"
#include "runtime/ops/ops.h"

namespace strata::models {
namespace {

namespace ops = runtime::ops;
using runtime::device::Stream;
using runtime::params::ModuleView;

std::byte* rows(void* base, std::int64_t first, std::size_t width, DType dtype) {
  return static_cast<std::byte*>(base) + static_cast<std::size_t>(first) * width * dtype_size(dtype);
}

}  // namespace

MoeMlp::MoeMlp(const MoeShape& shape, DType dtype)
    : shape_(shape),
      dtype_(dtype),
      counts_(static_cast<std::size_t>(shape.layers)),
      prob_sums_(static_cast<std::size_t>(shape.layers)) {
  STRATA_ASSERT(shape.E > 0 && shape.k >= 1 && shape.k <= shape.E && shape.F > 0 && shape.C > 0,
                "a validated mixture-of-experts shape");
}

void MoeMlp::attach(runtime::device::Device& device, std::int64_t host_expert_rows, bool fetch_every_expert) {
  host_expert_rows_ = std::max<std::int64_t>(0, host_expert_rows);
  fetch_every_expert_ = fetch_every_expert;
  host_backend_ = device.backend() == runtime::device::Backend::host;
  rows_sent_ = device.create_event();
}

void MoeMlp::carve_saved(Carver& c, Saved& a, std::size_t N) {
  const std::size_t E = static_cast<std::size_t>(shape_.E), k = static_cast<std::size_t>(shape_.k);
  const std::size_t C = static_cast<std::size_t>(shape_.C), F = static_cast<std::size_t>(shape_.F);
  const std::size_t Nk = N * k;
  a.probs = static_cast<float*>(c.take(N * E * sizeof(float)));
  a.idx = static_cast<std::int32_t*>(c.take(Nk * sizeof(std::int32_t)));
  a.weights = static_cast<float*>(c.take(Nk * sizeof(float)));
  a.offsets = static_cast<std::int32_t*>(c.take((E + 1) * sizeof(std::int32_t)));
  a.order = static_cast<std::int32_t*>(c.take(Nk * sizeof(std::int32_t)));
  a.position = static_cast<std::int32_t*>(c.take(Nk * sizeof(std::int32_t)));
  a.xs = act(c, Nk * C);
  a.gu = act(c, Nk * 2 * F);
  a.h = act(c, Nk * F);
  a.ys = act(c, Nk * C);
  a.host_offsets.assign(E + 1, 0);
}

void MoeMlp::carve_forward_scratch(Carver& c, std::size_t N) {
  logits_ = act(c, N * static_cast<std::size_t>(shape_.E));
  prob_sum_ = static_cast<float*>(c.take(static_cast<std::size_t>(shape_.E) * sizeof(float)));
}

void MoeMlp::carve_backward_scratch(Carver& c, std::size_t N) {
  const std::size_t Nk = N * static_cast<std::size_t>(shape_.k);
  const std::size_t C = static_cast<std::size_t>(shape_.C), F = static_cast<std::size_t>(shape_.F);
  dy_ = act(c, Nk * C);
  dweights_ = static_cast<float*>(c.take(Nk * sizeof(float)));
  dlogits_ = act(c, N * static_cast<std::size_t>(shape_.E));
  dh_ = act(c, Nk * F);
  dxs_ = act(c, Nk * C);
}

void MoeMlp::carve_decode(Carver& c, std::size_t N) {
  carve_saved(c, decode_, N);
  carve_forward_scratch(c, N);
  // The lookahead's (decode with a Lookahead) whether or not it is on: the sizes the model
  // reports for the device (inference_bytes) do not depend on the model's options.
  const std::size_t E = static_cast<std::size_t>(shape_.E), k = static_cast<std::size_t>(shape_.k);
  const std::size_t G = std::min(N, static_cast<std::size_t>(lookahead_rows()));  // the rows a guess may have
  guess_n_ = act(c, G * static_cast<std::size_t>(shape_.C));
  guess_probs_ = static_cast<float*>(c.take(G * E * sizeof(float)));
  guess_idx_ = static_cast<std::int32_t*>(c.take(G * k * sizeof(std::int32_t)));
  guess_weights_ = static_cast<float*>(c.take(G * k * sizeof(float)));
}

void MoeMlp::route_and_compute(Stream& s, ModuleAccess& modules, const ModelLayout& layout, int layer,
                               const void* router, const void* n, void* out, Saved& a, std::int64_t N,
                               float* prob_sum, const Lookahead* next) {
  const int C = shape_.C, E = shape_.E, k = shape_.k, F = shape_.F;
  const DType dt = dtype_;
  ops::matmul_fwd(s, logits_, n, router, nullptr, N, C, E, dt);
  ops::moe_router_fwd(s, a.probs, a.idx, a.weights, prob_sum, logits_, N, E, k, shape_.renormalize, dt);
  ops::moe_sort(s, a.offsets, a.order, a.position, a.idx, N, E, k);
  // The host decides which experts to acquire: it waits for the routing.
  a.host_offsets.resize(static_cast<std::size_t>(E) + 1);
  s.copy_async(a.host_offsets.data(), a.offsets, a.host_offsets.size() * sizeof(std::int32_t));
  if (prob_sum != nullptr) {
    host_prob_sum_.resize(static_cast<std::size_t>(E));
    s.copy_async(host_prob_sum_.data(), prob_sum, host_prob_sum_.size() * sizeof(float));
  }
  ops::moe_gather(s, a.xs, n, a.order, N, k, C, dt);
  s.synchronize();
  // Where each routed expert runs: on the host where it lives when few rows were routed to it and
  // the provider keeps it there, else on the device, whose fetches may all start now (NVMe reads
  // side by side), before the first runs.
  host_experts_.clear();
  on_host_.assign(static_cast<std::size_t>(E), 0);
  // The experts this pass fetches, in expert order: the routed ones, and with several ranks
  // sharding the parameters those routed on another rank too (Note [Experts on every rank]).
  a.fetched.assign(static_cast<std::size_t>(E), 0);
  for (std::size_t e = 0; e < a.fetched.size(); ++e) a.fetched[e] = a.host_offsets[e + 1] > a.host_offsets[e] ? 1 : 0;
  modules.picked_on_any_rank(a.fetched);
  bool all_resident = true;  // every fetched expert on the device for good: one grouped matmul
  std::vector<int> device_experts;
  std::vector<int> unpicked;  // --moe-fetch all: fetched beside the routed experts, never computed
  for (int e = 0; e < E; ++e) {
    const std::int64_t count =
        a.host_offsets[static_cast<std::size_t>(e) + 1] - a.host_offsets[static_cast<std::size_t>(e)];
    if (count == 0 && a.fetched[static_cast<std::size_t>(e)] == 0) {
      if (fetch_every_expert_) unpicked.push_back(layout.expert_module(layer, e));
      continue;
    }
    const int m = layout.expert_module(layer, e);
    const void* host = count > 0 && count <= host_expert_rows_ ? modules.acquire_host(m) : nullptr;
    if (host != nullptr) {
      host_experts_.push_back({e, host});
      on_host_[static_cast<std::size_t>(e)] = 1;
    } else {
      device_experts.push_back(m);
      all_resident = all_resident && modules.resident(m);
    }
  }
  // Wrong guesses out of the way first, so that a read not started yet never goes before this
  // layer's own (Note [Guessing the next layer's experts]).
  withdraw_guesses(modules, layout, layer, a.host_offsets);
  for (int m : device_experts) modules.prefetch(m);
  for (int m : unpicked) modules.prefetch(m);  // behind the routed ones
  if (next != nullptr) guess(s, modules, layout, *next, N);
  // The unpicked experts are brought in and let go, as a dense stream moves them.
  auto take_unpicked = [&] {
    for (int m : unpicked) {
      modules.acquire(m);
      modules.release(m);
    }
  };
  a.on_host = !host_experts_.empty();
  if (a.on_host) {
    send_host_rows(s, a);
  } else if (all_resident) {
    compute_grouped(s, modules, layout, layer, a);
    take_unpicked();
    ops::moe_combine_fwd(s, out, a.ys, a.weights, a.position, N, k, C, dt);
    return;
  }
  const std::size_t uC = static_cast<std::size_t>(C), uF = static_cast<std::size_t>(F);
  for (int e = 0; e < E; ++e) {
    const std::int64_t first = a.host_offsets[static_cast<std::size_t>(e)];
    const std::int64_t count = a.host_offsets[static_cast<std::size_t>(e) + 1] - first;
    if (a.fetched[static_cast<std::size_t>(e)] == 0 || on_host_[static_cast<std::size_t>(e)] != 0) continue;
    const int m = layout.expert_module(layer, e);
    const ModuleLayout& ml = layout.modules[static_cast<std::size_t>(m)];
    const ModuleView w = modules.acquire(m);
    if (count == 0) {  // routed on another rank only: fetched in its turn, nothing to compute
      modules.release(m);
      continue;
    }
    void* gu = rows(a.gu, first, 2 * uF, dt);
    void* h = rows(a.h, first, uF, dt);
    ops::matmul_fwd(s, gu, rows(a.xs, first, uC, dt), tensor_at(w, ml.tensors[kExpertGateUp]), nullptr, count, C,
                    2 * F, dt);
    ops::swiglu_fwd(s, h, gu, count, F, dt);
    ops::matmul_fwd(s, rows(a.ys, first, uC, dt), h, tensor_at(w, ml.tensors[kExpertDown]), nullptr, count, F, C,
                    dt);
    modules.release(m);
  }
  take_unpicked();
  if (a.on_host) compute_on_host(s, layout, layer, a);
  ops::moe_combine_fwd(s, out, a.ys, a.weights, a.position, N, k, C, dt);
}

// Note [Grouped experts]: when every routed expert of the layer is resident on the device
// (ParamProvider::resident: nothing to fetch, no memory to find), the layer holds them all at
// once and runs gate|up as one grouped matmul over the sorted rows, one SwiGLU over all N k rows
// (they are the routed experts' rows, contiguous), and down as one grouped matmul: three ops
// instead of three per expert (on CUDA one cublasGemmGroupedBatchedEx each:
// Note [Grouped expert matmuls] in kernels/cuda/matmul.cu; on the host the same matmuls in turn,
// bit for bit the per-expert path). A streamed expert needs the plan's memory for one expert at a
// time beside its block, so a layer with any streamed (or host) expert takes the per-expert path.
// The backward stays per expert (each expert's gradients are acquired and reported on their own).
void MoeMlp::compute_grouped(Stream& s, ModuleAccess& modules, const ModelLayout& layout, int layer, Saved& a) {
  const int E = shape_.E, C = shape_.C, F = shape_.F;
  std::vector<const void*> gate_up(static_cast<std::size_t>(E), nullptr), down(static_cast<std::size_t>(E), nullptr);
  std::vector<int> held;
  for (int e = 0; e < E; ++e) {
    const auto u = static_cast<std::size_t>(e);
    if (a.fetched[u] == 0) continue;
    const int m = layout.expert_module(layer, e);
    const ModuleLayout& ml = layout.modules[static_cast<std::size_t>(m)];
    const ModuleView w = modules.acquire(m);
    held.push_back(m);
    if (a.host_offsets[u + 1] == a.host_offsets[u]) continue;  // fetched for another rank's rows
    gate_up[u] = tensor_at(w, ml.tensors[kExpertGateUp]);
    down[u] = tensor_at(w, ml.tensors[kExpertDown]);
  }
  const std::int64_t rows = a.host_offsets[static_cast<std::size_t>(E)];
  ops::matmul_grouped_fwd(s, a.gu, a.xs, gate_up, a.host_offsets, C, 2 * F, dtype_);
  ops::swiglu_fwd(s, a.h, a.gu, rows, F, dtype_);
  ops::matmul_grouped_fwd(s, a.ys, a.h, down, a.host_offsets, F, C, dtype_);
  for (int m : held) modules.release(m);
}

// Note [Experts on the host]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~
// Streaming an expert costs its whole weight over the link whatever its rows; computing it on
// the host where it lives costs reading the weight from host memory once plus each row's flops,
// and only the rows (and their outputs) cross the link. With one or a few rows -- decoding, a
// cold expert -- the host wins when its memory reads faster than the link copies (Fiddler,
// llama.cpp's --n-cpu-moe); runtime/estimate/cpu_experts.h says up to how many rows. Per layer:
//   1. the host experts' rows go to host memory (one copy per expert on the compute stream, an
//      event after them);
//   2. the device's experts are enqueued (their fetches were hinted already);
//   3. the host waits for the event -- on a GPU while the device computes its experts -- runs
//      each host expert's gate|up matmul, SwiGLU and down matmul with kernels/host on its rows,
//      then copies the outputs into ys on the compute stream, before the combine.
// The host rows are the host experts' only, one after another, in a pageable buffer (a copy
// from the device to pageable memory returns once done; one to the device has left the buffer
// when it returns), resized only after the next layer's s.synchronize(). Experts on the host
// keep no activations in Saved: a forward that a backward follows must not use them (backward
// checks; only the inference engine gives acquire_host).
// The matmuls are kernels/host's matmul_fwd (for few rows the weight read once in its dtype,
// Note [Few-row matmuls] in kernels/host/matmul_rows.cpp): the host backend's own matmul, so on
// the host backend the tokens are bit for bit those of the device path. On the host backend the
// host waits for the whole stream first (the device's kernels run on the same cores: overlapping
// gains nothing, and OpenBLAS is called from one thread at a time).

void MoeMlp::send_host_rows(Stream& s, const Saved& a) {
  const std::size_t C = static_cast<std::size_t>(shape_.C), F = static_cast<std::size_t>(shape_.F);
  host_rows_count_ = 0;
  for (HostExpert& x : host_experts_) {
    x.first = a.host_offsets[static_cast<std::size_t>(x.expert)];
    x.count = a.host_offsets[static_cast<std::size_t>(x.expert) + 1] - x.first;
    x.at = host_rows_count_;
    host_rows_count_ += x.count;
  }
  host_rows_.resize(static_cast<std::size_t>(host_rows_count_) * (2 * C + 3 * F) * dtype_size(dtype_));
  for (const HostExpert& x : host_experts_) {
    s.copy_async(rows(host_rows_.data(), x.at, C, dtype_), rows(a.xs, x.first, C, dtype_),
                 static_cast<std::size_t>(x.count) * C * dtype_size(dtype_));
  }
  rows_sent_->record(s);
}

void MoeMlp::compute_on_host(Stream& s, const ModelLayout& layout, int layer, Saved& a) {
  namespace host = kernels::host;
  const int C = shape_.C, F = shape_.F;
  const DType dt = dtype_;
  const std::size_t uC = static_cast<std::size_t>(C), uF = static_cast<std::size_t>(F);
  // The host experts' rows one after another (HostExpert::at): xs (R, C), gu (R, 2F), h (R, F), ys (R, C).
  std::byte* xs = host_rows_.data();
  std::byte* gu = rows(xs, host_rows_count_, uC, dt);
  std::byte* h = rows(gu, host_rows_count_, 2 * uF, dt);
  std::byte* ys = rows(h, host_rows_count_, uF, dt);
  if (host_backend_) {
    s.synchronize();
  } else {
    rows_sent_->synchronize();
  }
  for (const HostExpert& x : host_experts_) {
    const ModuleLayout& ml = layout.modules[static_cast<std::size_t>(layout.expert_module(layer, x.expert))];
    std::byte* x_gu = rows(gu, x.at, 2 * uF, dt);
    std::byte* x_h = rows(h, x.at, uF, dt);
    host::matmul_fwd(x_gu, rows(xs, x.at, uC, dt), host_tensor(x.weights, ml.tensors[kExpertGateUp], dt), nullptr,
                     x.count, C, 2 * F, dt);
    host::swiglu_fwd(x_h, x_gu, x.count, F, dt);
    host::matmul_fwd(rows(ys, x.at, uC, dt), x_h, host_tensor(x.weights, ml.tensors[kExpertDown], dt), nullptr,
                     x.count, F, C, dt);
  }
  // The outputs go back once every host expert is done: a copy from pageable memory may wait for
  // the stream's work before it (the device's experts), which must not hold up the host's.
  for (const HostExpert& x : host_experts_) {
    s.copy_async(rows(a.ys, x.first, uC, dt), rows(ys, x.at, uC, dt), static_cast<std::size_t>(x.count) * uC * dtype_size(dt));
  }
}

void MoeMlp::forward(Stream& s, ModuleAccess& modules, const ModelLayout& layout, int layer, const void* router,
                     const void* n, void* out, Saved& a, std::int64_t N, bool record) {
  route_and_compute(s, modules, layout, layer, router, n, out, a, N, record ? prob_sum_ : nullptr, nullptr);
  if (!record) return;
  // host_offsets and host_prob_sum_ are final: route_and_compute synchronized after copying them.
  const std::size_t E = static_cast<std::size_t>(shape_.E);
  std::vector<std::int64_t>& counts = counts_[static_cast<std::size_t>(layer)];
  std::vector<double>& sums = prob_sums_[static_cast<std::size_t>(layer)];
  counts.assign(E, 0);
  sums.assign(E, 0.0);
  for (std::size_t e = 0; e < E; ++e) {
    counts[e] = a.host_offsets[e + 1] - a.host_offsets[e];
    sums[e] = host_prob_sum_[e];
  }
}

void MoeMlp::backward(Stream& s, ModuleAccess& modules, const ModelLayout& layout, int layer, const void* router,
                      void* grad_router, const void* n, const void* dout, void* dn, Saved& a, std::int64_t N,
                      const float* daux) {
  const int C = shape_.C, E = shape_.E, k = shape_.k, F = shape_.F;
  const DType dt = dtype_;
  const std::size_t uC = static_cast<std::size_t>(C), uF = static_cast<std::size_t>(F);
  STRATA_ASSERT(!a.on_host, "a backward through experts computed on the host (they keep no activations)");
  // The combine, then the router: dn = d(logits) @ router (overwritten).
  ops::moe_combine_bwd(s, dy_, dweights_, dout, a.ys, a.weights, a.position, N, k, C, dt);
  ops::moe_router_bwd(s, dlogits_, dweights_, a.probs, a.idx, daux, N, E, k, shape_.renormalize, dt);
  ops::matmul_bwd(s, dn, grad_router, nullptr, dlogits_, n, router, N, C, E, dt);
  // The experts: each reports its gradient; the routed ones compute it.
  for (int e = 0; e < E; ++e) {
    const std::int64_t first = a.host_offsets[static_cast<std::size_t>(e)];
    const std::int64_t count = a.host_offsets[static_cast<std::size_t>(e) + 1] - first;
    const int m = layout.expert_module(layer, e);
    const ModuleLayout& ml = layout.modules[static_cast<std::size_t>(m)];
    if (count == 0 && a.fetched[static_cast<std::size_t>(e)] != 0) {
      // Another rank's rows only: the calls of a routed expert, in its turn, adding nothing.
      modules.acquire_grads(m);
      modules.acquire(m);
      modules.release(m);
      modules.grads_ready(m);
      continue;
    }
    if (count == 0) {
      modules.grads_none(m);  // no token: a zero gradient, without a buffer where the provider can
      continue;
    }
    const ModuleView g = modules.acquire_grads(m);
    const ModuleView w = modules.acquire(m);
    void* gu = rows(a.gu, first, 2 * uF, dt);
    void* dh = rows(dh_, first, uF, dt);
    ops::matmul_bwd(s, dh, tensor_at(g, ml.tensors[kExpertDown]), nullptr, rows(dy_, first, uC, dt),
                    rows(a.h, first, uF, dt), tensor_at(w, ml.tensors[kExpertDown]), count, F, C, dt);
    ops::swiglu_bwd(s, gu, gu, dh, count, F, dt);  // d(gate | up), in place of gate | up
    ops::matmul_bwd(s, rows(dxs_, first, uC, dt), tensor_at(g, ml.tensors[kExpertGateUp]), nullptr, gu,
                    rows(a.xs, first, uC, dt), tensor_at(w, ml.tensors[kExpertGateUp]), count, C, 2 * F, dt);
    modules.release(m);
    modules.grads_ready(m);
  }
  ops::moe_scatter_add(s, dn, dxs_, a.position, N, k, C, dt);
}

void MoeMlp::decode(Stream& s, ModuleAccess& modules, const ModelLayout& layout, int layer, const void* router,
                    const void* n, void* out, std::int64_t N, const Lookahead* next) {
  route_and_compute(s, modules, layout, layer, router, n, out, decode_, N, nullptr, next);
}

// Note [Guessing the next layer's experts]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// Streaming at batch 1, a layer's expert reads can start only once its router ran: the link or
// the disk idles while the previous layer's last expert computes and the layer's attention runs.
// The residual stream changes little from one layer to the next, so the next layer's router on
// this layer's input (x before this layer's MLP adds to it, normalised with the next layer's
// norm) picks mostly the experts it will pick (Mixtral-offloading's speculative loading). The
// guess is made right after this layer's own experts are hinted, so the provider queues the
// guessed fetches behind them: they use the time the link would idle, from this layer's experts
// to the next router. The router and norm are read where they stay
// (ParamProvider::resident_view): with the next block streamed there is no guess. When the next
// layer routes, the guesses it did not confirm (or sends to the host) are withdrawn before its
// own experts are hinted (ModuleAccess::cancel_prefetch): a read not started yet is dropped, a
// fetched one gives its memory back. A wrong guess costs bytes, never tokens: the router decides
// what is computed. With experts on the host (Note [Experts on the host]) for the
// pass's row count, nothing is guessed: a guessed expert would be copied, not computed where
// it lives. Nor when the batch is expected to pick more than half the experts: then the
// guesses' reads and memory crowd out the layer's own (measured at batch 16 of
// configs/qwen3-moe-bytes.json: 692 MiB read per step for 405 MiB copied).
void MoeMlp::guess(Stream& s, ModuleAccess& modules, const ModelLayout& layout, const Lookahead& next,
                   std::int64_t N) {
  const int E = shape_.E, k = shape_.k;
  // Experts on the host for this many rows: a guessed expert in pinned memory would be copied
  // instead of computed where it lives, so nothing is guessed.
  if (host_expert_rows_ >= N) return;
  // A batch whose tokens are expected to pick more than half the experts needs most of them
  // anyway: guesses would only take the staging buffers and memory the layer's own experts need.
  if (N > lookahead_rows()) return;
  // The next block's router and norm where they stay (a resident block): acquiring the block
  // here, out of its turn, would fetch it early, pass this layer in the provider's order (its
  // experts no longer awaited) and change the recorded fetch order with the batch size.
  const int block = layout.block_module(next.layer);
  const ModuleLayout& bl = layout.modules[static_cast<std::size_t>(block)];
  const ModuleView v = modules.resident_view(block);
  if (v.data == nullptr) return;
  // This layer's routing (probs, idx, weights) is still to be used: the guess has its own.
  ops::rmsnorm_fwd(s, guess_n_, nullptr, next.x, tensor_at(v, bl.tensors[static_cast<std::size_t>(next.norm_slot)]),
                   N, shape_.C, next.eps, dtype_);
  ops::matmul_fwd(s, logits_, guess_n_, tensor_at(v, bl.tensors[static_cast<std::size_t>(next.router_slot)]),
                  nullptr, N, shape_.C, E, dtype_);
  ops::moe_router_fwd(s, guess_probs_, guess_idx_, guess_weights_, nullptr, logits_, N, E, k, shape_.renormalize,
                      dtype_);
  host_picks_.resize(static_cast<std::size_t>(N) * static_cast<std::size_t>(k));
  s.copy_async(host_picks_.data(), guess_idx_, host_picks_.size() * sizeof(std::int32_t));
  s.synchronize();
  std::vector<char> picked(static_cast<std::size_t>(E), 0);
  for (std::int32_t e : host_picks_) picked[static_cast<std::size_t>(e)] = 1;
  guessed_layer_ = next.layer;
  guessed_.clear();
  for (int e = 0; e < E; ++e) {
    if (picked[static_cast<std::size_t>(e)] == 0) continue;
    guessed_.push_back(e);
    modules.prefetch(layout.expert_module(next.layer, e));
  }
}

std::int64_t MoeMlp::lookahead_rows() const {
  // The largest N with E (1 - (1 - k/E)^N) <= E / 2 expected distinct picks: (1 - k/E)^N >= 1/2.
  const double keep = 1.0 - static_cast<double>(shape_.k) / shape_.E;
  if (keep <= 0.0) return 0;  // k = E: every expert, whatever the rows
  return static_cast<std::int64_t>(std::floor(std::log(0.5) / std::log(keep)));
}

void MoeMlp::withdraw_guesses(ModuleAccess& modules, const ModelLayout& layout, int layer,
                              const std::vector<std::int32_t>& offsets) {
  if (guessed_layer_ != layer) return;
  for (int e : guessed_) {
    const auto u = static_cast<std::size_t>(e);
    // Not picked, or picked for the host (a fetch it does not need).
    if (offsets[u + 1] == offsets[u] || on_host_[u] != 0) modules.cancel_prefetch(layout.expert_module(layer, e));
  }
  guessed_layer_ = -1;
  guessed_.clear();
}

MoeMlp::Totals MoeMlp::totals() const {
  const std::size_t E = static_cast<std::size_t>(shape_.E);
  Totals t{std::vector<double>(E, 0.0), std::vector<double>(E, 0.0), 0};
  for (std::size_t l = 0; l < counts_.size(); ++l) {
    if (counts_[l].empty()) continue;
    ++t.sparse_layers;
    for (std::size_t e = 0; e < E; ++e) {
      t.counts[e] += static_cast<double>(counts_[l][e]);
      t.prob_sums[e] += prob_sums_[l][e];
    }
  }
  return t;
}

double MoeMlp::aux_loss(std::int64_t N) const {
  const Totals t = totals();
  if (t.sparse_layers == 0 || N == 0) return 0.0;
  const double R = static_cast<double>(t.sparse_layers) * static_cast<double>(N);
  double sum = 0.0;
  for (std::size_t e = 0; e < t.counts.size(); ++e) sum += (t.counts[e] / R) * (t.prob_sums[e] / R);
  return static_cast<double>(shape_.E) * sum;
}

std::vector<float> MoeMlp::aux_gradient(std::int64_t N, double scale) const {
  const Totals t = totals();
  std::vector<float> g(t.counts.size(), 0.0f);
  if (t.sparse_layers == 0 || N == 0) return g;
  const double R = static_cast<double>(t.sparse_layers) * static_cast<double>(N);
  for (std::size_t e = 0; e < g.size(); ++e) {
    g[e] = static_cast<float>(scale * static_cast<double>(shape_.E) * t.counts[e] / (R * R));
  }
  return g;
}

}  // namespace strata::models
