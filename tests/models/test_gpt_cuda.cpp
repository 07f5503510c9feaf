// models/gpt on the CUDA backend against the host backend (the oracle), on the fused block
// (c_fc + GELU and c_proj's backward through it as cuBLASLt epilogues, res2 + ln_2 in one
// kernel, every bias as an epilogue):
//   - loss, logits and every module's gradient agree with the host within tolerance;
//   - two CUDA runs give the same bits (and so does activation checkpointing);
//   - in bf16 every matmul took its fused path (kernels::cuda::matmul_unfused_epilogue_count).
// Tolerances, norm-wise relative per output: fp32 3e-3 (different GEMM summation orders, ~1e-6,
// and cuBLASLt's GELU, which may evaluate tanh with the hardware approximation: <= 2.5e-4 on
// gelu and ~1e-3 on gelu' norm-wise, through two blocks), bf16 5e-2 (every activation rounded to 8 bits of
// mantissa on both sides, at different places: a few 2^-9 per op, compounded over ~20 ops).
// A wrong fused op (a lost bias, a missing gelu', c_fc's bias gradient dropped) is off by far
// more. Exits 77 (skipped) where no GPU is usable.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "kernels/cuda/ops.h"
#include "models/gpt/gpt_config.h"
#include "models/gpt/gpt_init.h"
#include "models/gpt/gpt_layout.h"
#include "models/gpt/gpt_model.h"
#include "models/gpt/gpt_spec.h"
#include "models/hf_weights.h"
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

// GPT-shaped: C and 4C multiples of 8 (the GELU epilogues' rule), B*T odd.
GptConfig config() {
  GptConfig c;
  c.vocab_size = 101;
  c.n_positions = 32;
  c.n_embd = 64;
  c.n_layer = 2;
  c.n_head = 4;
  return c;
}

// One forward + backward on a device of `kind`, parameters initialized with seed 1.
struct Result {
  float loss = 0;
  std::vector<float> logits;
  std::vector<std::vector<float>> grads;  // per module
};

Result run(const std::string& kind, DType dtype, bool checkpointing, int B, int T,
           const std::vector<std::int32_t>& in, const std::vector<std::int32_t>& tg) {
  const GptConfig c = config();
  const ModelLayout layout = gpt_layout(c);
  auto device = runtime::device::Device::create({.kind = kind, .memory_bytes = 256ull << 20});
  auto stream = device->create_stream("compute");
  runtime::params::ResidentParams params(*device, layout.module_numels(), layout.module_names(),
                                         dtype, true);
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> noise(-0.02f, 0.02f);
  for (std::size_t m = 0; m < layout.modules.size(); ++m) {
    std::vector<float> host(layout.modules[m].numel);
    init_module(c, layout.modules[m], 1, host.data());
    // GPT-2's init has zero biases and unit LayerNorm weights, which would hide a lost bias:
    // perturb every tensor (not the alignment gaps, which stay zero).
    for (const TensorSlot& t : layout.modules[m].tensors)
      for (std::size_t i = 0; i < t.numel; ++i) host[t.offset + i] += noise(rng);
    copy_to_device(*stream, params.params(static_cast<int>(m)), dtype, host.data(), host.size());
  }
  GptModel model(c, {.dtype = dtype, .checkpointing = checkpointing}, *device, *stream, params);
  Result r;
  r.logits.resize(static_cast<std::size_t>(B) * T * c.vocab_size);
  r.loss = model.forward(in.data(), tg.data(), B, T, true, r.logits.data());
  params.zero_grads(*stream);
  model.backward();
  stream->synchronize();
  for (std::size_t m = 0; m < layout.modules.size(); ++m) {
    std::vector<float> g(layout.modules[m].numel);
    copy_from_device(*stream, g.data(), params.grads(static_cast<int>(m)), dtype, g.size());
    r.grads.push_back(std::move(g));
  }
  return r;
}

TEST(GptCuda, MatchesTheHostBackend) {
  const int B = 3, T = 23;
  const auto in = random_tokens(B * T, config().vocab_size, 3);
  const auto tg = random_tokens(B * T, config().vocab_size, 4);
  for (DType dt : {DType::f32, DType::bf16}) {
    SCOPED_TRACE(std::string(dtype_name(dt)));
    const double tol = dt == DType::f32 ? 3e-3 : 5e-2;
    const Result host = run("host", dt, false, B, T, in, tg);
    const Result cuda = run("cuda", dt, false, B, T, in, tg);
    std::printf("%s: loss host %.7f cuda %.7f\n", std::string(dtype_name(dt)).c_str(), host.loss,
                cuda.loss);
    EXPECT_NEAR(cuda.loss, host.loss, tol * std::fabs(host.loss));
    const double logits_err = norm_rel(cuda.logits, host.logits);
    std::printf("  logits norm_rel %.3e\n", logits_err);
    EXPECT_LE(logits_err, tol);
    for (std::size_t m = 0; m < host.grads.size(); ++m) {
      const double e = norm_rel(cuda.grads[m], host.grads[m]);
      std::printf("  module %zu grads norm_rel %.3e\n", m, e);
      EXPECT_LE(e, tol) << "module " << m;
    }
  }
}

TEST(GptCuda, DeterministicFusedAndCheckpointingIsBitwiseIdentical) {
  const int B = 3, T = 23;
  const auto in = random_tokens(B * T, config().vocab_size, 5);
  const auto tg = random_tokens(B * T, config().vocab_size, 6);
  for (DType dt : {DType::f32, DType::bf16}) {
    SCOPED_TRACE(std::string(dtype_name(dt)));
    const std::uint64_t unfused0 = kernels::cuda::matmul_unfused_epilogue_count();
    const Result a = run("cuda", dt, false, B, T, in, tg);
    if (dt == DType::bf16) {
      EXPECT_EQ(kernels::cuda::matmul_unfused_epilogue_count(), unfused0)
          << "a matmul of the GPT step took its unfused path";
    }
    const Result b = run("cuda", dt, false, B, T, in, tg);
    const Result ck = run("cuda", dt, true, B, T, in, tg);
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
