#pragma once
// The sparse MLP of a mixture-of-experts layer (Mixtral, Qwen3-MoE), for the families that have
// one (models/llama/llama_model.cpp): the router, dropless routing over the experts the router
// picked, the weighted combine and the load-balancing loss, in forward, backward and decoding.
//
// Note [Mixture of experts]
// ~~~~~~~~~~~~~~~~~~~~~~~~~
// For N tokens n (N, C) (the layer's normalised residual stream):
//   logits = n @ router^T (N, E); probs = softmax(logits) in fp32; per token the k largest
//   probs and their experts, renormalised to sum 1 when the family says so; then
//   out[t] = sum_j w[t, j] expert_{idx[t, j]}(n[t]), expert(x) = down(silu(gate x) * up x).
// Dropless: every (token, slot) pair is computed. The N*k pairs are sorted by expert
// (kernels/host/moe.h: moe_sort) so that each expert's rows are one contiguous block of a
// gathered copy of n: an expert is two matmuls over its rows, and experts without a row are
// never touched. When every routed expert is resident, the layer's experts run as grouped
// matmuls (one op for all experts' gate|up, one for their down: Note [Grouped experts]). The
// routing (offsets per expert) is read on the host after the router ran -- one synchronization
// per layer -- because the host decides which expert modules to acquire:
// each expert is its own module (models/llama/llama_layout.h), acquired only when a row was
// routed to it, so a tiered or streaming provider moves only the experts the router picked.
//
// Backward: every expert of the layer reports a gradient each micro-batch (the engine steps
// every parameter every update, as AdamW does: an expert that saw no token gets a zero gradient
// and its decay and moments still move); only the routed ones are acquired and computed, the
// others report grads_none (no buffer, no copy on one rank: runtime/params/param_provider.h).
//
// The load-balancing loss (HF's load_balancing_loss_func without a mask, over the sparse layers'
// router logits concatenated): with R = (sparse layers) x N rows, cnt_e the (row, slot) pairs
// routed to e and P_e the sum of probs[., e] over all R rows,
//   aux = E * sum_e (cnt_e / R) (P_e / R);  d aux / d probs[row, e] = E cnt_e / R^2
// (the counts have no gradient). The forward records cnt and P per layer; aux needs every
// layer's, so its gradient (the same E-vector for every layer) is made once the forward is done.
//
// Experts on the host (ModelOptions::moe_cpu_expert_rows, Note [Experts on the host] in
// moe_mlp.cpp): a routed expert with few rows that the provider keeps in pinned host memory and
// has not fetched (ParamProvider::acquire_host) runs on the host where it lives; only its rows
// cross the link, both ways. The device's experts are enqueued first, so on a GPU the device
// computes its experts while the host computes its own. Forward only: those experts keep no
// activations for a backward.
//
// Threading: one thread at a time, as the model that owns it.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "core/dtype.h"
#include "models/model_layout.h"
#include "models/model_parts.h"
#include "runtime/device/device.h"

namespace strata::models {

// An expert module's tensors (ModuleLayout::tensors): [gate | up] (2F, C) at kExpertGateUp (two
// packed slots), down (C, F) at kExpertDown.
inline constexpr int kExpertGateUp = 0;
inline constexpr int kExpertDown = 2;

struct MoeShape {
  int C = 0;         // the residual stream's width
  int E = 0;         // experts per sparse layer
  int k = 0;         // experts per token
  int F = 0;         // an expert's MLP width
  bool renormalize = true;
  int layers = 0;    // the model's layers (sparse or not): the statistics are per layer
};

class MoeMlp {
 public:
  // One sparse layer's activations kept from its forward for its backward (carved per saved
  // block by carve_saved). Shapes with N tokens, Nk = N*k.
  struct Saved {
    float* probs = nullptr;           // (N, E) fp32
    std::int32_t* idx = nullptr;      // (N, k)
    float* weights = nullptr;         // (N, k) fp32
    std::int32_t* offsets = nullptr;  // (E + 1)
    std::int32_t* order = nullptr;    // (Nk)
    std::int32_t* position = nullptr; // (Nk)
    void* xs = nullptr;               // (Nk, C)  the gathered input rows, by expert
    void* gu = nullptr;               // (Nk, 2F) [gate | up]; its gradient in place in backward
    void* h = nullptr;                // (Nk, F)
    void* ys = nullptr;               // (Nk, C)  the experts' outputs
    std::vector<std::int32_t> host_offsets;  // (E + 1), read after the router ran
    // (E): fetched this pass: routed here or, ranks sharding the parameters, on any rank (Note
    // [Experts on every rank] in runtime/zero/expert_union.h); without rows here: fetched only.
    std::vector<std::uint8_t> fetched;
    bool on_host = false;  // some experts ran on the host: gu, h of their rows never written
  };

  MoeMlp(const MoeShape& shape, DType dtype);

  const MoeShape& shape() const { return shape_; }

  // Experts with at most `host_expert_rows` routed rows run on the host where the provider keeps
  // them (0: never). With `fetch_every_expert` every expert of a layer is fetched each pass, the
  // unpicked ones only acquired and released (ModelOptions::moe_fetch_every_expert). Before the
  // first forward; `device` outlives the MoeMlp.
  void attach(runtime::device::Device& device, std::int64_t host_expert_rows, bool fetch_every_expert = false);

  // ---- Storage (Carver order is the caller's; each carves where the caller's comment says).
  void carve_saved(Carver& c, Saved& saved, std::size_t N);
  void carve_forward_scratch(Carver& c, std::size_t N);  // the router's logits, P's device sum
  void carve_backward_scratch(Carver& c, std::size_t N);  // gradients of the routed rows
  // A decoding pass of N tokens: its own Saved (not kept), the forward scratch and the
  // lookahead's buffers (decode with a Lookahead).
  void carve_decode(Carver& c, std::size_t N);

  // out (N, C) = the sparse MLP of n (N, C). `router` is the layer's (E, C) matrix; experts are
  // acquired through `modules` (layout.expert_module(layer, e)) when rows were routed to them.
  // Records the layer's routing statistics for the load-balancing loss when `record`.
  void forward(runtime::device::Stream& s, ModuleAccess& modules, const ModelLayout& layout, int layer,
               const void* router, const void* n, void* out, Saved& a, std::int64_t N, bool record);
  // From dout (N, C) (the gradient of forward's out): dn (N, C) = d(n) (overwritten), the
  // router's gradient += into grad_router, and every expert's gradient reported (above). daux
  // (E) fp32, device: the load-balancing loss's d/d probs (aux_gradient), or null.
  void backward(runtime::device::Stream& s, ModuleAccess& modules, const ModelLayout& layout, int layer,
                const void* router, void* grad_router, const void* n, const void* dout, void* dn, Saved& a,
                std::int64_t N, const float* daux);
  // The next sparse layer's guess input for decode() (ModelOptions::moe_lookahead): where its
  // block module (layout.block_module(layer)) keeps its MLP norm's weight (C) and its router
  // (E, C) (indices into the module's tensors), and the residual stream x (N, C) that this
  // layer's MLP adds to. The block is read where it stays (ModuleAccess::resident_view), never
  // acquired: with the next block streamed, nothing is guessed.
  struct Lookahead {
    int layer = -1;
    int norm_slot = -1;
    int router_slot = -1;
    const void* x = nullptr;
    float eps = 0.0f;
  };
  // forward() over a decoding pass's N tokens, on carve_decode's buffers; no statistics. With
  // `next`, once this layer's experts are hinted, guesses next.layer's experts and hints them too
  // (Note [Guessing the next layer's experts] in moe_mlp.cpp); a guess the next layer's router
  // does not confirm is withdrawn (ModuleAccess::cancel_prefetch) when that layer routes.
  void decode(runtime::device::Stream& s, ModuleAccess& modules, const ModelLayout& layout, int layer,
              const void* router, const void* n, void* out, std::int64_t N, const Lookahead* next);

  // The load-balancing loss of the last forward over N tokens (above), from every sparse layer's
  // recorded statistics; 0 before any.
  double aux_loss(std::int64_t N) const;
  // d(scale x aux) / d probs[row, e] for every row of every sparse layer: (E) values.
  std::vector<float> aux_gradient(std::int64_t N, double scale) const;

 private:
  // The routing and the experts, shared by forward and decode.
  void route_and_compute(runtime::device::Stream& s, ModuleAccess& modules, const ModelLayout& layout, int layer,
                         const void* router, const void* n, void* out, Saved& a, std::int64_t N, float* prob_sum,
                         const Lookahead* next);
  // Every routed expert resident: gate|up, SwiGLU and down over all rows at once (Note
  // [Grouped experts] in moe_mlp.cpp).
  void compute_grouped(runtime::device::Stream& s, ModuleAccess& modules, const ModelLayout& layout, int layer,
                       Saved& a);
  // The lookahead: next's router on next's norm of next.x; its picks hinted, kept in guessed_.
  void guess(runtime::device::Stream& s, ModuleAccess& modules, const ModelLayout& layout, const Lookahead& next,
             std::int64_t N);
  // The most rows (tokens) a guess is made for: past it, the batch is expected to pick more than
  // half the experts (E (1 - (1 - k/E)^N) > E / 2) and nothing is guessed.
  std::int64_t lookahead_rows() const;
  // Withdraws the guesses of `layer` that its routing (offsets, E + 1) gave no row or sent to
  // the host (on_host_).
  void withdraw_guesses(ModuleAccess& modules, const ModelLayout& layout, int layer,
                        const std::vector<std::int32_t>& offsets);
  void* act(Carver& c, std::size_t n) const { return c.take(n * dtype_size(dtype_)); }
  // The routed experts the host computes (acquire_host gave their weights): their rows to the
  // host, then, once the device's experts are enqueued, their SwiGLU there and their outputs back.
  void send_host_rows(runtime::device::Stream& s, const Saved& a);
  void compute_on_host(runtime::device::Stream& s, const ModelLayout& layout, int layer, Saved& a);
  // Every sparse layer's recorded statistics summed: (row, slot) pairs and probs per expert.
  struct Totals {
    std::vector<double> counts, prob_sums;  // (E)
    std::int64_t sparse_layers = 0;         // the layers that recorded
  };
  Totals totals() const;

  MoeShape shape_;
  DType dtype_;
  // Forward scratch.
  void* logits_ = nullptr;     // (N, E) dtype
  float* prob_sum_ = nullptr;  // (E) fp32
  // Backward scratch.
  void* dy_ = nullptr;         // (Nk, C)
  float* dweights_ = nullptr;  // (N, k) fp32
  void* dlogits_ = nullptr;    // (N, E)
  void* dh_ = nullptr;         // (Nk, F)
  void* dxs_ = nullptr;        // (Nk, C)
  Saved decode_;               // a decoding pass's routing and rows
  // Per layer, from the last forward that recorded (every sparse layer records in every forward;
  // a checkpointed block's recomputation records the same values again): (row, slot) pairs per
  // expert and the sum of probs per expert (host). Empty for a dense layer.
  std::vector<std::vector<std::int64_t>> counts_;
  std::vector<std::vector<double>> prob_sums_;
  std::vector<float> host_prob_sum_;  // (E), the copy of prob_sum_
  // The lookahead (decode with a Lookahead): its normalised input, routing and picks.
  void* guess_n_ = nullptr;                 // (N, C)
  float* guess_probs_ = nullptr;            // (N, E) fp32
  std::int32_t* guess_idx_ = nullptr;       // (N, k)
  float* guess_weights_ = nullptr;          // (N, k) fp32
  std::vector<std::int32_t> host_picks_;    // (N, k), guess()'s
  int guessed_layer_ = -1;                  // the layer guessed_ holds experts of
  std::vector<int> guessed_;                // its hinted experts
  // Experts on the host.
  struct HostExpert {
    int expert = 0;
    const void* weights = nullptr;  // its module's parameters in host memory
    std::int64_t first = 0, count = 0;  // its rows in the sorted order
    std::int64_t at = 0;                // and where they start in host_rows_
  };
  std::int64_t host_expert_rows_ = 0;
  bool fetch_every_expert_ = false;  // ModelOptions::moe_fetch_every_expert
  std::int64_t host_rows_count_ = 0;       // the layer's host experts' rows
  bool host_backend_ = false;  // the device's kernels run on the host's cores too
  std::unique_ptr<runtime::device::Event> rows_sent_;  // after the rows' copy to the host
  std::vector<HostExpert> host_experts_;   // this layer's
  std::vector<char> on_host_;              // (E): computed on the host this layer
  std::vector<std::byte> host_rows_;       // the host experts' rows (compute_on_host)
};

}  // namespace strata::models
