#pragma once
// Pieces every family's Model is made of (models/model.h): module access through the parameter
// provider, the carving of one activation allocation, and the token staging of a step.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "core/dtype.h"
#include "models/kv_cache.h"
#include "models/model_layout.h"
#include "runtime/device/device.h"
#include "runtime/params/param_provider.h"

namespace strata::models {

inline constexpr std::size_t kCarveAlign = 256;  // bytes; every sub-buffer starts on the arena's alignment

// Carves one allocation into sub-buffers. With base == nullptr it only measures.
class Carver {
 public:
  explicit Carver(std::byte* base) : base_(base) {}
  void* take(std::size_t bytes) {
    offset_ = (offset_ + kCarveAlign - 1) / kCarveAlign * kCarveAlign;
    void* p = base_ == nullptr ? nullptr : base_ + offset_;
    offset_ += bytes;
    return p;
  }
  std::size_t bytes() const { return (offset_ + kCarveAlign - 1) / kCarveAlign * kCarveAlign; }

 private:
  std::byte* base_;
  std::size_t offset_ = 0;
};

// The device address of tensor `t` inside a module view.
inline std::byte* tensor_at(const runtime::params::ModuleView& v, const TensorSlot& t) {
  return static_cast<std::byte*>(v.data) + t.offset * dtype_size(v.dtype);
}
// The same in a module's parameters in host memory (ParamProvider::acquire_host).
inline const std::byte* host_tensor(const void* module, const TensorSlot& t, DType dtype) {
  return static_cast<const std::byte*>(module) + t.offset * dtype_size(dtype);
}

// The provider's protocol (param_provider.h) on the model's compute stream: every acquire waits
// on the view's event; every release / grads_ready records where the compute stream is.
class ModuleAccess {
 public:
  // Checks that the provider has the layout's modules; throws strata::Error otherwise.
  ModuleAccess(const ModelLayout& layout, DType dtype, runtime::device::Device& device,
               runtime::device::Stream& compute, runtime::params::ParamProvider& params);

  runtime::params::ModuleView acquire(int module);
  void release(int module);
  runtime::params::ModuleView acquire_grads(int module);
  void grads_ready(int module);
  void grads_none(int module);  // no contribution this micro-batch (ParamProvider::grads_none)
  void prefetch(int module) { params_.prefetch(module); }  // a hint (ParamProvider::prefetch)
  void cancel_prefetch(int module) { params_.cancel_prefetch(module); }  // a hint withdrawn
  bool resident(int module) const { return params_.resident(module); }  // ParamProvider::resident
  // ParamProvider::resident_view, waited for on the compute stream; data null when not given.
  runtime::params::ModuleView resident_view(int module);
  // Host memory the host may compute on (ParamProvider::acquire_host), or null.
  const void* acquire_host(int module) { return params_.acquire_host(module); }
  // ParamProvider::picked_on_any_rank.
  void picked_on_any_rank(std::vector<std::uint8_t>& picked) { params_.picked_on_any_rank(picked); }

 private:
  const ModelLayout& layout_;
  DType dtype_;
  runtime::device::Stream& compute_;
  runtime::params::ParamProvider& params_;
  std::unique_ptr<runtime::device::Event> done_;  // recorded before each release / grads_ready
};

// Throws strata::Error when a token is outside [0, vocab).
void check_tokens(const std::int32_t* tokens, std::size_t n, int vocab, const char* what);

// Copies the step's tokens to the device: inputs (and targets, when given) staged in `host`,
// which must stay unchanged until the stream has run the copies.
void upload_tokens(runtime::device::Stream& stream, std::vector<std::int32_t>& host, std::int32_t* inputs,
                   std::int32_t* targets, const std::int32_t* host_inputs, const std::int32_t* host_targets,
                   std::size_t n);

// Device bytes of generation (ModelSpec::inference_bytes): the KV cache's device part and the
// larger of the prefill's and a decoding step's scratch (each one carved allocation), with
// alignment slack.
std::uint64_t generation_bytes(const KvShape& kv, DType dtype, int batch, int max_T, KvPlacement placement,
                               std::uint64_t prefill_scratch_bytes, std::uint64_t step_scratch_bytes);

// The mean of per-token losses, summed in token order in double (the same bits on every run).
float mean_loss(const std::vector<float>& losses);

class KvCache;  // models/kv_cache.h

// Throws strata::Error unless `cache` takes B rows of T_new more tokens (and, for a prefill, is
// empty and every lengths[b] is in [1, T_new]).
void check_decode(const KvCache& cache, int B, int T_new, const int* prefill_lengths);

// Copies row b's token last_of_row[b] - 1 of x (B, T, row_bytes) to out (B, row_bytes), on
// `stream`: the only positions whose logits a prefill needs.
void gather_last_tokens(runtime::device::Stream& stream, void* out, const void* x, const int* last_of_row, int B,
                        int T, std::size_t row_bytes);

}  // namespace strata::models

namespace strata::models {

// Blocking copies between host fp32 and device memory in `dtype` (converted on the host): for
// tests and tools that fill or read a model's buffers directly.
void copy_to_device(runtime::device::Stream& stream, void* dst, DType dtype, const float* src, std::size_t n);
void copy_from_device(runtime::device::Stream& stream, float* dst, const void* src, DType dtype, std::size_t n);

}  // namespace strata::models
