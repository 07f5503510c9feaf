// models/llama on the CUDA backend against the host backend (the oracle): loss, logits and
// every module's gradient agree within tolerance in fp32 and bf16, for a tied GQA model and an
// untied Qwen2-style model with q/k/v biases; two CUDA runs give the same bits, and so does
// activation checkpointing. Tolerances, norm-wise relative per output: fp32 3e-3 (different
// summation orders), bf16 5e-2 (every activation rounded to 8 bits of mantissa on both sides, at
// different places, compounded over ~25 ops). Exits 77 (skipped) where no GPU is usable.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "models/llama/llama_config.h"
#include "models/llama/llama_spec.h"
#include "models/model_parts.h"
#include "runtime/device/device.h"
#include "tests/models/model_test_util.h"
#include "runtime/params/resident_params.h"

namespace strata::models {
namespace {

using test::norm_rel;
using test::random_tokens;
using test::same_bits;
using test::TempDir;

// GQA 4:2 with head size 32 (the CUDA attention's sizes), an MLP width that is a multiple of 8,
// llama3 rope scaling that changes some frequencies.
LlamaConfig config(bool tied) {
  LlamaConfig c;
  c.architecture = tied ? "LlamaForCausalLM" : "Qwen2ForCausalLM";
  c.vocab_size = 101;
  c.hidden_size = 128;
  c.intermediate_size = 344;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.head_dim = 32;
  c.max_position_embeddings = 64;
  c.rope_theta = 500000.0;
  c.rope_scaling = kernels::host::RopeLlama3Scaling{8.0, 1.0, 4.0, 32.0};
  c.rms_norm_eps = 1e-5f;
  c.tie_word_embeddings = tied;
  c.attention_bias = !tied;
  return c;
}

struct Result {
  float loss = 0;
  std::vector<float> logits;
  std::vector<std::vector<float>> grads;  // per module
};

Result run(const LlamaConfig& c, const std::string& kind, DType dtype, bool checkpointing, int B, int T,
           const std::vector<std::int32_t>& in, const std::vector<std::int32_t>& tg) {
  const LlamaSpec spec(c);
  const ModelLayout layout = spec.layout();
  auto device = runtime::device::Device::create({.kind = kind, .memory_bytes = 256ull << 20});
  auto stream = device->create_stream("compute");
  runtime::params::ResidentParams params(*device, layout.module_numels(), layout.module_names(), dtype, true);
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> noise(-0.05f, 0.05f);
  for (std::size_t m = 0; m < layout.modules.size(); ++m) {
    std::vector<float> host(layout.modules[m].numel);
    spec.init_module(layout.modules[m], 1, host.data());
    // Unit norm weights and zero biases would hide a lost weight or bias: perturb every tensor.
    for (const TensorSlot& t : layout.modules[m].tensors)
      for (std::size_t i = 0; i < t.numel; ++i) host[t.offset + i] += noise(rng);
    copy_to_device(*stream, params.params(static_cast<int>(m)), dtype, host.data(), host.size());
  }
  const std::unique_ptr<Model> model =
      spec.make_model({.dtype = dtype, .checkpointing = checkpointing}, *device, *stream, params);
  Result r;
  r.logits.resize(static_cast<std::size_t>(B) * T * c.vocab_size);
  r.loss = model->forward(in.data(), tg.data(), B, T, true, r.logits.data());
  params.zero_grads(*stream);
  model->backward();
  stream->synchronize();
  for (std::size_t m = 0; m < layout.modules.size(); ++m) {
    std::vector<float> g(layout.modules[m].numel);
    copy_from_device(*stream, g.data(), params.grads(static_cast<int>(m)), dtype, g.size());
    r.grads.push_back(std::move(g));
  }
  return r;
}

TEST(LlamaCuda, MatchesTheHostBackend) {
  const int B = 3, T = 23;
  for (bool tied : {true, false}) {
    const LlamaConfig c = config(tied);
    const auto in = random_tokens(B * T, c.vocab_size, 3);
    const auto tg = random_tokens(B * T, c.vocab_size, 4);
    for (DType dt : {DType::f32, DType::bf16}) {
      SCOPED_TRACE(std::string(dtype_name(dt)) + (tied ? " tied" : " untied, biases"));
      const double tol = dt == DType::f32 ? 3e-3 : 5e-2;
      const Result host = run(c, "host", dt, false, B, T, in, tg);
      const Result cuda = run(c, "cuda", dt, false, B, T, in, tg);
      std::printf("%s %s: loss host %.7f cuda %.7f, logits norm_rel %.3e\n", std::string(dtype_name(dt)).c_str(),
                  tied ? "tied" : "untied", host.loss, cuda.loss, norm_rel(cuda.logits, host.logits));
      EXPECT_NEAR(cuda.loss, host.loss, tol * std::fabs(host.loss));
      EXPECT_LE(norm_rel(cuda.logits, host.logits), tol);
      for (std::size_t m = 0; m < host.grads.size(); ++m) {
        const double e = norm_rel(cuda.grads[m], host.grads[m]);
        std::printf("  module %zu grads norm_rel %.3e\n", m, e);
        EXPECT_LE(e, tol) << "module " << m;
      }
    }
  }
}

TEST(LlamaCuda, DeterministicAndCheckpointingIsBitwiseIdentical) {
  const int B = 3, T = 23;
  const LlamaConfig c = config(false);
  const auto in = random_tokens(B * T, c.vocab_size, 5);
  const auto tg = random_tokens(B * T, c.vocab_size, 6);
  for (DType dt : {DType::f32, DType::bf16}) {
    SCOPED_TRACE(std::string(dtype_name(dt)));
    const Result a = run(c, "cuda", dt, false, B, T, in, tg);
    const Result b = run(c, "cuda", dt, false, B, T, in, tg);
    const Result ck = run(c, "cuda", dt, true, B, T, in, tg);
    EXPECT_EQ(std::memcmp(&a.loss, &b.loss, sizeof a.loss), 0);
    EXPECT_EQ(std::memcmp(&a.loss, &ck.loss, sizeof a.loss), 0);
    EXPECT_TRUE(same_bits(a.logits, b.logits));
    for (std::size_t m = 0; m < a.grads.size(); ++m) {
      EXPECT_TRUE(same_bits(a.grads[m], b.grads[m])) << "module " << m << ": two runs differ";
      EXPECT_TRUE(same_bits(a.grads[m], ck.grads[m])) << "module " << m << ": checkpointing";
    }
  }
}

}  // namespace
}  // namespace strata::models
