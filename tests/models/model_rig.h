#pragma once
// A model of any family on the host backend for tests: a host device, resident parameters
// initialised from `seed` (norm weights and biases perturbed so that they matter) and the model
// over them.
#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "models/kv_cache.h"
#include "models/model_parts.h"
#include "models/model_spec.h"
#include "runtime/device/device.h"
#include "runtime/params/resident_params.h"

namespace strata::models::test {

struct ModelRig {
  ModelRig(ModelSpecPtr model_spec, ModelOptions options, std::uint64_t seed = 1,
           std::uint64_t memory_bytes = 256ull << 20)
      : spec(std::move(model_spec)), layout(spec->layout()) {
    device = runtime::device::Device::create({.kind = "host", .memory_bytes = memory_bytes});
    stream = device->create_stream("compute");
    params = std::make_unique<runtime::params::ResidentParams>(*device, layout.module_numels(),
                                                               layout.module_names(), options.dtype, true);
    for (std::size_t m = 0; m < layout.modules.size(); ++m) {
      std::vector<float> host = initial(m, seed);
      copy_to_device(*stream, params->params(static_cast<int>(m)), options.dtype, host.data(), host.size());
    }
    model = spec->make_model(options, *device, *stream, *params);
  }
  std::vector<float> initial(std::size_t m, std::uint64_t seed) const {
    std::vector<float> host(layout.modules[m].numel);
    spec->init_module(layout.modules[m], seed, host.data());
    std::mt19937 rng(static_cast<std::uint32_t>(seed + m));
    std::normal_distribution<float> noise(0.0f, 0.1f);
    for (const TensorSlot& t : layout.modules[m].tensors) {
      if (t.name.find("norm") != std::string::npos || t.name.find("bias") != std::string::npos) {
        for (std::size_t i = 0; i < t.numel; ++i) host[t.offset + i] += noise(rng);
      }
    }
    return host;
  }
  std::vector<float> grads(int m) {
    std::vector<float> g(layout.modules[static_cast<std::size_t>(m)].numel);
    copy_from_device(*stream, g.data(), params->grads(m), model->options().dtype, g.size());
    return g;
  }
  ModelSpecPtr spec;
  ModelLayout layout;
  std::unique_ptr<runtime::device::Device> device;
  std::unique_ptr<runtime::device::Stream> stream;
  std::unique_ptr<runtime::params::ResidentParams> params;
  std::unique_ptr<Model> model;
};

// Tokens (B, T) through the full forward, then through a KV cache (a prefix of `prefix` tokens,
// then one at a time): the largest |difference| between the two passes' logits.
inline double decode_vs_forward(Model& model, const std::vector<std::int32_t>& in, int B, int T, int prefix, int V) {
  std::vector<float> full(static_cast<std::size_t>(B * T * V));
  model.forward(in.data(), nullptr, B, T, false, full.data());
  KvCache cache = model.make_kv_cache(B, T);
  std::vector<std::int32_t> chunk;
  std::vector<float> out;
  double max_diff = 0;
  for (int t = 0; t < T;) {
    const int n = t == 0 ? prefix : 1;
    chunk.clear();
    for (int b = 0; b < B; ++b) {
      for (int i = 0; i < n; ++i) chunk.push_back(in[static_cast<std::size_t>(b * T + t + i)]);
    }
    out.resize(static_cast<std::size_t>(B * n * V));
    model.forward_decode(cache, chunk.data(), B, n, out.data());
    for (int b = 0; b < B; ++b) {
      for (int i = 0; i < n; ++i) {
        for (int v = 0; v < V; ++v) {
          const float want = full[static_cast<std::size_t>((b * T + t + i) * V + v)];
          const float got = out[static_cast<std::size_t>((b * n + i) * V + v)];
          max_diff = std::max(max_diff, static_cast<double>(std::fabs(want - got)));
        }
      }
    }
    t += n;
  }
  return cache.length() == T ? max_diff : std::numeric_limits<double>::infinity();
}

}  // namespace strata::models::test
