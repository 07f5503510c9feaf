#include "models/model_parts.h"

#include <algorithm>
#include <vector>

#include <fmt/format.h>

#include "core/error.h"
#include "models/model.h"

namespace strata::models {

ModuleAccess::ModuleAccess(const ModelLayout& layout, DType dtype, runtime::device::Device& device,
                           runtime::device::Stream& compute, runtime::params::ParamProvider& params)
    : layout_(layout), dtype_(dtype), compute_(compute), params_(params), done_(device.create_event()) {
  if (params.module_count() != static_cast<int>(layout_.modules.size())) {
    throw Error(fmt::format("the parameter provider has {} modules, the model {}", params.module_count(),
                            layout_.modules.size()));
  }
  for (int m = 0; m < params.module_count(); ++m) {
    const ModuleLayout& module = layout_.modules[static_cast<std::size_t>(m)];
    if (params.module_numel(m) != module.numel) {
      throw Error(fmt::format("module {} has {} elements in the provider, the model needs {}", module.name,
                              params.module_numel(m), module.numel));
    }
  }
}

runtime::params::ModuleView ModuleAccess::acquire(int module) {
  runtime::params::ModuleView v = params_.acquire(module);
  STRATA_ASSERT(v.dtype == dtype_ && v.numel == layout_.modules[static_cast<std::size_t>(module)].numel,
                "the provider's view does not match the layout");
  if (v.ready != nullptr) compute_.wait(*v.ready);
  return v;
}

void ModuleAccess::release(int module) {
  done_->record(compute_);
  params_.release(module, *done_);
}

runtime::params::ModuleView ModuleAccess::resident_view(int module) {
  runtime::params::ModuleView v = params_.resident_view(module);
  if (v.data == nullptr) return v;
  STRATA_ASSERT(v.dtype == dtype_ && v.numel == layout_.modules[static_cast<std::size_t>(module)].numel,
                "the provider's view does not match the layout");
  if (v.ready != nullptr) compute_.wait(*v.ready);
  return v;
}

runtime::params::ModuleView ModuleAccess::acquire_grads(int module) {
  runtime::params::ModuleView v = params_.acquire_grads(module);
  STRATA_ASSERT(v.dtype == dtype_ && v.numel == layout_.modules[static_cast<std::size_t>(module)].numel,
                "the provider's gradient view does not match the layout");
  if (v.ready != nullptr) compute_.wait(*v.ready);
  return v;
}

void ModuleAccess::grads_ready(int module) {
  done_->record(compute_);
  params_.grads_ready(module, *done_);
}

void ModuleAccess::grads_none(int module) {
  done_->record(compute_);
  params_.grads_none(module, *done_);
}

void check_tokens(const std::int32_t* tokens, std::size_t n, int vocab, const char* what) {
  for (std::size_t i = 0; i < n; ++i) {
    if (tokens[i] < 0 || tokens[i] >= vocab) {
      throw Error(fmt::format("{} token {} at position {} is outside the vocabulary [0, {})", what, tokens[i], i,
                              vocab),
                  "", "the data was made for another vocabulary: check --data / --model");
    }
  }
}

void upload_tokens(runtime::device::Stream& stream, std::vector<std::int32_t>& host, std::int32_t* inputs,
                   std::int32_t* targets, const std::int32_t* host_inputs, const std::int32_t* host_targets,
                   std::size_t n) {
  host.assign(host_inputs, host_inputs + n);
  if (host_targets != nullptr) host.insert(host.end(), host_targets, host_targets + n);
  stream.copy_async(inputs, host.data(), n * sizeof(std::int32_t));
  if (host_targets != nullptr) stream.copy_async(targets, host.data() + n, n * sizeof(std::int32_t));
}

void check_decode(const KvCache& cache, int B, int T_new, const int* prefill_lengths) {
  if (B != cache.batch()) {
    throw Error(fmt::format("decoding a batch of {} with a KV cache made for {}", B, cache.batch()));
  }
  if (T_new <= 0 || cache.length() + T_new > cache.max_T()) {
    throw Error(fmt::format("decoding {} more tokens after {}: the KV cache holds {}", T_new, cache.length(),
                            cache.max_T()),
                "", "make a longer cache (at most the model's longest sequence)");
  }
  for (int b = 0; prefill_lengths != nullptr && b < B; ++b) {
    if (prefill_lengths[b] < 1 || prefill_lengths[b] > T_new) {
      throw Error(fmt::format("prompt {} has {} tokens in a prefill of {} positions", b, prefill_lengths[b], T_new));
    }
  }
}

void gather_last_tokens(runtime::device::Stream& stream, void* out, const void* x, const int* last_of_row, int B,
                        int T, std::size_t row_bytes) {
  for (int b = 0; b < B; ++b) {
    const std::size_t row = static_cast<std::size_t>(b) * static_cast<std::size_t>(T) +
                            static_cast<std::size_t>(last_of_row[b] - 1);
    stream.copy_async(static_cast<std::byte*>(out) + static_cast<std::size_t>(b) * row_bytes,
                      static_cast<const std::byte*>(x) + row * row_bytes, row_bytes);
  }
}

std::uint64_t generation_bytes(const KvShape& kv, DType dtype, int batch, int max_T, KvPlacement placement,
                               std::uint64_t prefill_scratch_bytes, std::uint64_t step_scratch_bytes) {
  return KvCache::device_bytes(kv, dtype, batch, max_T, placement) +
         std::max(prefill_scratch_bytes, step_scratch_bytes) +
         kCarveAlign * (2 * static_cast<std::uint64_t>(kv.layers) + 2);
}

float mean_loss(const std::vector<float>& losses) {
  double sum = 0.0;
  for (float x : losses) sum += x;
  return static_cast<float>(sum / static_cast<double>(losses.size()));
}

void copy_to_device(runtime::device::Stream& stream, void* dst, DType dtype, const float* src,
                    std::size_t n) {
  if (dtype == DType::f32) {
    stream.copy_async(dst, src, n * sizeof(float));
    stream.synchronize();
    return;
  }
  std::vector<std::uint16_t> half(n);
  convert(src, DType::f32, half.data(), dtype, n);
  stream.copy_async(dst, half.data(), n * sizeof(std::uint16_t));
  stream.synchronize();
}

void copy_from_device(runtime::device::Stream& stream, float* dst, const void* src, DType dtype,
                      std::size_t n) {
  if (dtype == DType::f32) {
    stream.copy_async(dst, src, n * sizeof(float));
    stream.synchronize();
    return;
  }
  std::vector<std::uint16_t> half(n);
  stream.copy_async(half.data(), src, n * sizeof(std::uint16_t));
  stream.synchronize();
  convert(half.data(), dtype, dst, DType::f32, n);
}

}  // namespace strata::models
