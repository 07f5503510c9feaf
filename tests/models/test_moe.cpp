// Mixtures of experts (Mixtral, Qwen3-MoE) and Qwen3 in the LLaMA family on the host backend:
// expert modules in the layout, the published sizes, routed-only expert access with every
// expert's gradient reported, the load-balancing loss's gradient (finite differences),
// determinism and checkpointing (bitwise), KV-cached decoding against the full forward, the HF
// folder round trip and the config and weight errors. The float64 PyTorch comparison is
// tests/reference/moe_vs_torch.py.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"
#include "models/hf_weights.h"
#include "models/io/safetensors.h"
#include "models/llama/llama_config.h"
#include "models/llama/llama_layout.h"
#include "models/llama/llama_spec.h"
#include "models/moe/moe_mlp.h"
#include "models/registry.h"
#include "tests/models/model_rig.h"
#include "tests/models/model_test_util.h"

namespace strata::models {
namespace {

using test::random_tokens;
using test::TempDir;

// Odd sizes: E 7 experts of width 20, k 3, GQA 4:2, head_dim 12 (NH hs != C); Qwen3-MoE with
// layer 1 dense.
LlamaConfig moe_config(const char* architecture, bool aux = true) {
  LlamaConfig c;
  c.architecture = architecture;
  c.vocab_size = 41;
  c.hidden_size = 36;
  c.intermediate_size = 20;
  c.num_hidden_layers = 3;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.head_dim = 12;
  c.max_position_embeddings = 64;
  c.rope_theta = 10000.0;
  c.rms_norm_eps = 1e-5f;
  c.num_experts = 7;
  c.num_experts_per_tok = 3;
  c.moe_intermediate_size = 20;
  c.norm_topk_prob = true;
  c.output_router_logits = aux;
  c.router_aux_loss_coef = 0.3f;  // large, so that its gradient shows
  if (std::string(architecture) == "Qwen3MoeForCausalLM") {
    c.moe_intermediate_size = 16;
    c.mlp_only_layers = {1};
    c.norm_topk_prob = false;
  }
  return c;
}

struct Rig : test::ModelRig {
  Rig(const LlamaConfig& config, ModelOptions options, std::uint64_t seed = 1)
      : ModelRig(std::make_shared<LlamaSpec>(config), options, seed) {}
};

std::vector<float> all_grads(Rig& rig) {
  std::vector<float> g;
  for (int m = 0; m < static_cast<int>(rig.layout.modules.size()); ++m) {
    const std::vector<float> x = rig.grads(m);
    g.insert(g.end(), x.begin(), x.end());
  }
  return g;
}

TEST(MoeLayout, ExpertsFollowTheirBlockWithHfNames) {
  for (const char* arch : {"MixtralForCausalLM", "Qwen3MoeForCausalLM"}) {
    const LlamaConfig c = moe_config(arch);
    const ModelLayout layout = llama_layout(c);
    std::int64_t n = 0;
    for (const ModuleLayout& m : layout.modules) {
      for (const TensorSlot& t : m.tensors) n += static_cast<std::int64_t>(t.numel);
    }
    EXPECT_EQ(n, c.num_params()) << arch;
    int expected_module = 1;
    for (int l = 0; l < c.num_hidden_layers; ++l) {
      EXPECT_EQ(layout.block_module(l), expected_module) << arch << " layer " << l;
      const ModuleLayout& block = layout.modules[static_cast<std::size_t>(layout.block_module(l))];
      EXPECT_EQ(block.kind, ModuleKind::block);
      EXPECT_EQ(block.layer, l);
      ++expected_module;
      if (!c.sparse_layer(l)) continue;
      for (int e = 0; e < c.num_experts; ++e) {
        const ModuleLayout& x = layout.modules[static_cast<std::size_t>(layout.expert_module(l, e))];
        EXPECT_EQ(x.kind, ModuleKind::expert);
        EXPECT_EQ(x.layer, l);
        EXPECT_EQ(x.expert, e);
        ASSERT_EQ(x.tensors.size(), 3u);
        // [gate | up] packed: consecutive rows of one matrix.
        EXPECT_EQ(x.tensors[1].offset, x.tensors[0].offset + x.tensors[0].numel);
        ++expected_module;
      }
    }
    EXPECT_EQ(layout.head_module(), expected_module);
    EXPECT_EQ(layout.head_module(), static_cast<int>(layout.modules.size()) - 1);
  }
  const ModelLayout mixtral = llama_layout(moe_config("MixtralForCausalLM"));
  const ModuleLayout& x = mixtral.modules[static_cast<std::size_t>(mixtral.expert_module(2, 6))];
  EXPECT_EQ(x.name, "layers.2.experts.6");
  EXPECT_EQ(x.tensors[kExpertGateUp].name, "model.layers.2.block_sparse_moe.experts.6.w1.weight");
  EXPECT_EQ(x.tensors[1].name, "model.layers.2.block_sparse_moe.experts.6.w3.weight");
  EXPECT_EQ(x.tensors[kExpertDown].name, "model.layers.2.block_sparse_moe.experts.6.w2.weight");
  EXPECT_EQ(mixtral.modules[1].tensors.back().name, "model.layers.0.block_sparse_moe.gate.weight");
  const LlamaConfig qc = moe_config("Qwen3MoeForCausalLM");
  const ModelLayout qwen = llama_layout(qc);
  EXPECT_FALSE(qc.sparse_layer(1));
  EXPECT_EQ(qwen.block_module(2), qwen.block_module(1) + 1);  // layer 1 is dense: no experts after it
  EXPECT_EQ(qwen.modules[static_cast<std::size_t>(qwen.expert_module(0, 3))].tensors[0].name,
            "model.layers.0.mlp.experts.3.gate_proj.weight");
  EXPECT_EQ(qwen.modules[1].tensors[3 + 1 + 0].name, "model.layers.0.self_attn.o_proj.weight");
  EXPECT_EQ(qwen.modules[1].tensors[5].name, "model.layers.0.self_attn.q_norm.weight");
  EXPECT_EQ(qwen.modules[1].tensors[6].name, "model.layers.0.self_attn.k_norm.weight");
}

// The published sizes (the model cards' and the safetensors' totals).
TEST(MoeLayout, PresetsHaveThePublishedParameterCounts) {
  EXPECT_EQ(LlamaConfig::preset("mixtral-8x7b").num_params(), 46'702'792'704);
  EXPECT_EQ(LlamaConfig::preset("qwen3-30b-a3b").num_params(), 30'532'122'624);
  EXPECT_EQ(LlamaConfig::preset("qwen3-8b").num_params(), 8'190'735'360);
  // Active: the cards say 12.9 B and 3.3 B (rounded; the embedding and head counted here).
  EXPECT_EQ(LlamaConfig::preset("mixtral-8x7b").active_params(), 12'879'925'248);
  EXPECT_EQ(LlamaConfig::preset("qwen3-30b-a3b").active_params(), 3'353'032'704);
  EXPECT_EQ(LlamaConfig::preset("qwen3-8b").active_params(), LlamaConfig::preset("qwen3-8b").num_params());
}

// A forward and backward over few tokens: only the experts a token was routed to are acquired
// (once in forward, once in backward); every expert reports its gradient once; the others'
// gradients are zero and the routed ones' are not.
TEST(MoeModel, OnlyRoutedExpertsAreAcquiredAndEveryExpertReportsItsGradient) {
  for (const char* arch : {"MixtralForCausalLM", "Qwen3MoeForCausalLM"}) {
    const LlamaConfig c = moe_config(arch);
    Rig rig(c, {});
    const int B = 1, T = 2;  // 2 tokens x 3 picks: at most 6 of 7 experts per layer
    auto in = random_tokens(B * T, c.vocab_size, 11), tg = random_tokens(B * T, c.vocab_size, 12);
    rig.model->forward(in.data(), tg.data(), B, T, true);
    rig.params->zero_grads(*rig.stream);
    rig.model->backward();
    rig.stream->synchronize();
    int routed_total = 0, unrouted_total = 0;
    for (int l = 0; l < c.num_hidden_layers; ++l) {
      if (!c.sparse_layer(l)) continue;
      int routed = 0;
      for (int e = 0; e < c.num_experts; ++e) {
        const int m = rig.layout.expert_module(l, e);
        const auto& n = rig.params->counts(m);
        EXPECT_EQ(n.grad_acquires, 1) << arch << " " << m;
        EXPECT_EQ(n.grads_ready, 1) << arch << " " << m;
        EXPECT_EQ(n.acquires, n.releases);
        EXPECT_TRUE(n.acquires == 0 || n.acquires == 2) << arch << " " << m << ": " << n.acquires;
        double norm = 0;
        for (float g : rig.grads(m)) norm += double(g) * g;
        EXPECT_EQ(norm > 0.0, n.acquires == 2) << arch << " layer " << l << " expert " << e;
        routed += n.acquires == 2 ? 1 : 0;
      }
      EXPECT_GE(routed, c.num_experts_per_tok) << arch;
      EXPECT_LE(routed, B * T * c.num_experts_per_tok) << arch;
      routed_total += routed;
      unrouted_total += c.num_experts - routed;
    }
    EXPECT_GT(unrouted_total, 0) << arch << ": the test needs experts that saw no token";
    EXPECT_GT(routed_total, 0);
  }
}

// d(loss)/d(router weight) by central differences in fp32, with the load-balancing loss counted
// (a large coefficient, so that its share of the gradient is as large as the cross-entropy's):
// the backward's gradient. Routing is piecewise constant: an element whose differences at h and
// h/2 disagree crossed a routing change and is skipped (most do not).
TEST(MoeModel, GradientsIncludingTheLoadBalancingLossMatchFiniteDifferences) {
  for (const char* arch : {"MixtralForCausalLM", "Qwen3MoeForCausalLM"}) {
    const int B = 2, T = 5;
    auto in = random_tokens(B * T, 41, 21), tg = random_tokens(B * T, 41, 22);
    std::vector<float> with_aux;
    for (bool aux : {false, true}) {
      const LlamaConfig c = moe_config(arch, aux);
      Rig rig(c, {});
      rig.model->forward(in.data(), tg.data(), B, T, true);
      rig.params->zero_grads(*rig.stream);
      rig.model->backward();
      rig.stream->synchronize();
      const int block = rig.layout.block_module(0);
      const TensorSlot& router = rig.layout.modules[static_cast<std::size_t>(block)].tensors.back();
      ASSERT_NE(router.name.find("gate.weight"), std::string::npos);
      const std::vector<float> g_block = rig.grads(block);
      const std::vector<float> g_router(g_block.begin() + static_cast<std::ptrdiff_t>(router.offset),
                                        g_block.begin() + static_cast<std::ptrdiff_t>(router.offset + router.numel));
      if (!aux) {
        with_aux = g_router;
        continue;
      }
      // The load-balancing loss moves the router's gradient.
      EXPECT_GT(test::norm_rel(g_router, with_aux), 0.05) << arch;
      std::vector<float> values(rig.layout.modules[static_cast<std::size_t>(block)].numel);
      copy_from_device(*rig.stream, values.data(), rig.params->params(block), DType::f32, values.size());
      auto loss_at = [&](std::size_t i, float x) {
        std::vector<float> v = values;
        v[i] = x;
        copy_to_device(*rig.stream, rig.params->params(block), DType::f32, v.data(), v.size());
        const float l = rig.model->forward(in.data(), tg.data(), B, T, true);
        copy_to_device(*rig.stream, rig.params->params(block), DType::f32, values.data(), values.size());
        return static_cast<double>(l);
      };
      int checked = 0;
      for (std::size_t j = 0; j < router.numel; j += 19) {
        const std::size_t i = router.offset + j;
        const float h = 1e-3f;
        const double fd = (loss_at(i, values[i] + h) - loss_at(i, values[i] - h)) / (2.0 * h);
        const double fd_half = (loss_at(i, values[i] + h / 2) - loss_at(i, values[i] - h / 2)) / static_cast<double>(h);
        if (std::fabs(fd - fd_half) > 0.1 * std::max(std::fabs(fd), 1e-2)) continue;  // a routing change
        ++checked;
        const double got = g_router[j];
        EXPECT_LT(std::fabs(fd - got), 0.05 * std::fabs(got) + 1e-3) << arch << " element " << j << ": " << fd
                                                                        << " by differences, " << got;
      }
      EXPECT_GE(checked, 8) << arch;
    }
  }
}

// With output_router_logits false the loss is the cross-entropy alone, and the load-balancing
// loss's share (loss with it minus loss without) is positive and of its size: coef x ~1.
TEST(MoeModel, TheLoadBalancingLossJoinsOnlyTrainingLossesWhenTheConfigAsks) {
  const int B = 2, T = 6;
  const LlamaConfig with = moe_config("MixtralForCausalLM", true), without = moe_config("MixtralForCausalLM", false);
  auto in = random_tokens(B * T, with.vocab_size, 31), tg = random_tokens(B * T, with.vocab_size, 32);
  Rig a(with, {}), b(without, {});
  const float la = a.model->forward(in.data(), tg.data(), B, T, true);
  const float lb = b.model->forward(in.data(), tg.data(), B, T, true);
  const float eval = a.model->forward(in.data(), tg.data(), B, T, false);
  EXPECT_EQ(eval, lb);  // not for evaluation
  // aux = E sum_e f_e P_e with f_e <= 1 the share of tokens routed to e (summing to k) and P_e
  // the mean prob (summing to 1): at most E, and k when both are uniform; the top-k picks the
  // likelier experts, so near k or above.
  const double aux = (la - lb) / with.router_aux_loss_coef;
  EXPECT_GT(aux, 0.9 * with.num_experts_per_tok) << aux;
  EXPECT_LE(aux, with.num_experts) << aux;
}

TEST(MoeModel, DeterministicAndCheckpointingIsBitwiseIdentical) {
  for (const char* arch : {"MixtralForCausalLM", "Qwen3MoeForCausalLM"}) {
    const LlamaConfig c = moe_config(arch);
    const int B = 2, T = 7;
    auto in = random_tokens(B * T, c.vocab_size, 3), tg = random_tokens(B * T, c.vocab_size, 4);
    auto run = [&](bool checkpointing, float* loss) {
      Rig rig(c, {.dtype = DType::f32, .checkpointing = checkpointing});
      *loss = rig.model->forward(in.data(), tg.data(), B, T, true);
      rig.params->zero_grads(*rig.stream);
      rig.model->backward();
      rig.stream->synchronize();
      return all_grads(rig);
    };
    float l1 = 0, l2 = 0, l3 = 0;
    const auto g1 = run(false, &l1), g2 = run(false, &l2), g3 = run(true, &l3);
    EXPECT_EQ(std::memcmp(&l1, &l2, sizeof l1), 0) << arch;
    EXPECT_EQ(std::memcmp(&l1, &l3, sizeof l1), 0) << arch;
    EXPECT_TRUE(test::same_bits(g1, g2)) << arch;
    EXPECT_TRUE(test::same_bits(g1, g3)) << arch;
  }
}

// A prefix then one token at a time through the KV cache: the full forward's logits (Qwen3
// dense with its q/k norms too).
TEST(MoeModel, KvCacheDecodingMatchesTheFullForward) {
  LlamaConfig qwen3 = moe_config("Qwen3MoeForCausalLM");
  qwen3.architecture = "Qwen3ForCausalLM";
  qwen3.num_experts = qwen3.num_experts_per_tok = qwen3.moe_intermediate_size = 0;
  qwen3.mlp_only_layers.clear();
  qwen3.output_router_logits = false;
  for (const LlamaConfig& c : {moe_config("MixtralForCausalLM"), moe_config("Qwen3MoeForCausalLM"), qwen3}) {
    Rig rig(c, {});
    const int B = 2, T = 9;
    const double max_diff = test::decode_vs_forward(*rig.model, random_tokens(B * T, c.vocab_size, 8), B, T, 4,
                                                    c.vocab_size);
    EXPECT_LT(max_diff, 1e-5) << c.architecture;
  }
}

// Decoding hints the provider (ParamProvider::prefetch) with every expert a layer's router picked,
// before acquiring them; with moe_lookahead also with the next layer's guesses, a layer early,
// and a guess the next layer's router did not pick is withdrawn (cancel_prefetch), no other.
TEST(MoeModel, DecodingHintsTheRoutedExpertsAndTheLookaheadGuessesMore) {
  const LlamaConfig c = moe_config("MixtralForCausalLM");
  struct Seen {
    int hints = 0, first_layer_hints = 0, cancels = 0;
  };
  constexpr int kSteps = 8;  // decoding steps: wrong guesses come with some tokens, not all
  auto count = [&](bool lookahead) {
    Rig rig(c, {.moe_lookahead = lookahead});
    KvCache cache = rig.model->make_kv_cache(1, 4 + kSteps);
    const std::vector<std::int32_t> prompt = random_tokens(4, c.vocab_size, 9);
    const int len = 4;
    std::vector<float> logits(static_cast<std::size_t>(c.vocab_size));
    rig.model->prefill(cache, prompt.data(), &len, 1, len, logits.data());
    Seen seen;
    for (int step = 0; step < kSteps; ++step) {
      // One decoding step of one token: per layer, k experts acquired once.
      std::vector<runtime::params::ResidentParams::Counts> before;
      for (std::size_t m = 0; m < rig.layout.modules.size(); ++m) before.push_back(rig.params->counts(static_cast<int>(m)));
      const std::int32_t next = (3 + 7 * step) % c.vocab_size;
      rig.model->forward_decode(cache, &next, 1, 1, logits.data());
      int acquired = 0;
      for (int l = 0; l < c.num_hidden_layers; ++l) {
        for (int e = 0; e < c.num_experts; ++e) {
          const int m = rig.layout.expert_module(l, e);
          const auto& now = rig.params->counts(m);
          const auto& was = before[static_cast<std::size_t>(m)];
          const int acquires = now.acquires - was.acquires, hints = now.prefetches - was.prefetches,
                    cancels = now.cancels - was.cancels;
          // A routed expert is hinted before its acquire; a guess is one more hint.
          EXPECT_GE(hints, acquires) << "step " << step << " layer " << l << " expert " << e;
          const bool guessed = hints > acquires;
          // Withdrawn exactly when guessed and not picked.
          EXPECT_EQ(cancels, guessed && acquires == 0 ? 1 : 0) << "step " << step << " layer " << l << " expert " << e;
          seen.hints += hints;
          seen.cancels += cancels;
          acquired += acquires;
          if (l == 0) seen.first_layer_hints += hints;
        }
      }
      EXPECT_EQ(acquired, c.num_hidden_layers * c.num_experts_per_tok) << "step " << step;
    }
    return seen;
  };
  const Seen plain = count(false);
  const Seen ahead = count(true);
  EXPECT_EQ(plain.hints, kSteps * c.num_hidden_layers * c.num_experts_per_tok);
  EXPECT_EQ(plain.cancels, 0);
  EXPECT_GT(ahead.hints, plain.hints);                    // the guesses for layers 1 and 2
  EXPECT_EQ(ahead.first_layer_hints, plain.first_layer_hints);  // nothing guesses layer 0
  EXPECT_GT(ahead.cancels, 0) << "the test needs a wrong guess in " << kSteps << " steps (seeded weights)";
}

// The lookahead guesses nothing for a batch expected to pick more than half the experts: 7
// experts, 3 per token, 2 rows pick 7 (1 - (4/7)^2) = 4.7 of them on average. A guess is a hint
// beyond the acquires.
TEST(MoeModel, TheLookaheadSitsOutABatchThatPicksMostExperts) {
  const LlamaConfig c = moe_config("MixtralForCausalLM");
  for (const int B : {1, 2}) {
    Rig rig(c, {.moe_lookahead = true});
    KvCache cache = rig.model->make_kv_cache(B, 8);
    const std::vector<std::int32_t> prompt = random_tokens(B * 4, c.vocab_size, 9);
    const std::vector<int> lengths(static_cast<std::size_t>(B), 4);
    std::vector<float> logits(static_cast<std::size_t>(B) * static_cast<std::size_t>(c.vocab_size));
    rig.model->prefill(cache, prompt.data(), lengths.data(), B, 4, logits.data());
    int hints = 0, acquires = 0;
    for (int l = 0; l < c.num_hidden_layers; ++l) {
      for (int e = 0; e < c.num_experts; ++e) {
        hints -= rig.params->counts(rig.layout.expert_module(l, e)).prefetches;
        acquires -= rig.params->counts(rig.layout.expert_module(l, e)).acquires;
      }
    }
    const std::vector<std::int32_t> next(static_cast<std::size_t>(B), 3);
    rig.model->forward_decode(cache, next.data(), B, 1, logits.data());
    for (int l = 0; l < c.num_hidden_layers; ++l) {
      for (int e = 0; e < c.num_experts; ++e) {
        hints += rig.params->counts(rig.layout.expert_module(l, e)).prefetches;
        acquires += rig.params->counts(rig.layout.expert_module(l, e)).acquires;
      }
    }
    if (B == 1) {
      EXPECT_GT(hints, acquires) << "one row picks 3 of 7: guessed";
    } else {
      EXPECT_EQ(hints, acquires) << "two rows pick most of the 7: nothing guessed";
    }
  }
}

// With every expert resident (ResidentParams), a layer holds all its routed experts at once and
// runs them as grouped matmuls (Note [Grouped experts] in models/moe/moe_mlp.cpp); one expert at a
// time, the most modules ever held would be a block and one expert (and the embedding or head).
TEST(MoeModel, ResidentExpertsRunGrouped) {
  const LlamaConfig c = moe_config("MixtralForCausalLM");
  Rig rig(c, {});
  const int B = 2, T = 9;
  const auto in = random_tokens(B * T, c.vocab_size, 12), tg = random_tokens(B * T, c.vocab_size, 13);
  rig.model->forward(in.data(), tg.data(), B, T, true);
  EXPECT_GE(rig.params->most_held(), 1 + c.num_experts_per_tok + 1) << "experts held one at a time";
}

// bf16 storage with fp32 arithmetic tracks fp32 (routing decided on the same logits up to bf16).
TEST(MoeModel, Bf16StorageTracksFp32) {
  const LlamaConfig c = moe_config("Qwen3MoeForCausalLM");
  const int B = 2, T = 6;
  auto in = random_tokens(B * T, c.vocab_size, 5), tg = random_tokens(B * T, c.vocab_size, 6);
  Rig f32(c, {.dtype = DType::f32});
  Rig bf16(c, {.dtype = DType::bf16});
  const float l32 = f32.model->forward(in.data(), tg.data(), B, T, true);
  const float l16 = bf16.model->forward(in.data(), tg.data(), B, T, true);
  EXPECT_NEAR(l16, l32, 3e-2 * std::fabs(l32));
}

std::string config_error(const std::string& json) {
  try {
    LlamaConfig::from_json(json);
  } catch (const Error& e) {
    return e.what();
  }
  return "accepted";
}

TEST(MoeConfig, HfKeysDefaultsAndRefusals) {
  const LlamaConfig m = LlamaConfig::from_json(R"({"architectures": ["MixtralForCausalLM"], "vocab_size": 32000,
      "hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 2, "num_attention_heads": 8})");
  EXPECT_EQ(m.num_experts, 8);
  EXPECT_EQ(m.num_experts_per_tok, 2);
  EXPECT_EQ(m.moe_intermediate_size, 96);
  EXPECT_TRUE(m.norm_topk_prob);
  EXPECT_EQ(m.num_key_value_heads, 8);
  EXPECT_EQ(m.rope_theta, 1e6);
  EXPECT_FLOAT_EQ(m.rms_norm_eps, 1e-5f);
  EXPECT_FALSE(m.qk_norm());
  const LlamaConfig q = LlamaConfig::from_json(R"({"model_type": "qwen3_moe", "vocab_size": 100, "hidden_size": 64,
      "intermediate_size": 96, "num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 2,
      "num_experts": 6, "num_experts_per_tok": 2, "moe_intermediate_size": 8, "decoder_sparse_step": 2,
      "mlp_only_layers": [3], "norm_topk_prob": true, "output_router_logits": true})");
  EXPECT_EQ(q.architecture, "Qwen3MoeForCausalLM");
  EXPECT_TRUE(q.qk_norm());
  EXPECT_EQ(q.head_dim, 16);  // C / NH: Qwen3MoeConfig has no head_dim default
  // (l + 1) % 2 == 0 and not in mlp_only_layers: only layer 1 is sparse.
  EXPECT_FALSE(q.sparse_layer(0));
  EXPECT_TRUE(q.sparse_layer(1));
  EXPECT_FALSE(q.sparse_layer(2));
  EXPECT_FALSE(q.sparse_layer(3));
  EXPECT_EQ(LlamaConfig::from_json(q.to_json()), q);
  EXPECT_EQ(LlamaConfig::from_json(m.to_json()), m);
  const LlamaConfig d = LlamaConfig::from_json(R"({"architectures": ["Qwen3ForCausalLM"], "vocab_size": 100,
      "hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 2, "num_attention_heads": 32})");
  EXPECT_EQ(d.head_dim, 128);  // Qwen3Config's default
  EXPECT_EQ(d.num_key_value_heads, 32);
  EXPECT_TRUE(d.qk_norm());
  EXPECT_FALSE(d.moe());

  const std::string base = R"({"architectures": ["MixtralForCausalLM"], "vocab_size": 100, "hidden_size": 64,
      "intermediate_size": 96, "num_hidden_layers": 2, "num_attention_heads": 8)";
  EXPECT_NE(config_error(base + R"(, "num_local_experts": 4, "num_experts_per_tok": 5})").find("num_experts_per_tok (5)"),
            std::string::npos)
      << config_error(base + R"(, "num_local_experts": 4, "num_experts_per_tok": 5})");
  EXPECT_NE(config_error(base + R"(, "scoring_func": "sigmoid"})").find("scoring_func"), std::string::npos);
  EXPECT_NE(config_error(base + R"(, "router_jitter_noise": 0.01})").find("router_jitter_noise"), std::string::npos);
  EXPECT_NE(config_error(base + R"(, "n_shared_experts": 2})").find("n_shared_experts"), std::string::npos);
  EXPECT_NE(config_error(base + R"(, "num_local_experts": 0})").find("num_local_experts"), std::string::npos);
  const std::string qbase = R"({"architectures": ["Qwen3MoeForCausalLM"], "vocab_size": 100, "hidden_size": 64,
      "intermediate_size": 96, "num_hidden_layers": 2, "num_attention_heads": 4)";
  EXPECT_NE(config_error(qbase + R"(, "mlp_only_layers": [2]})").find("mlp_only_layers"), std::string::npos)
      << config_error(qbase + R"(, "mlp_only_layers": [2]})");
  EXPECT_NE(config_error(qbase + R"(, "decoder_sparse_step": 0})").find("decoder_sparse_step"), std::string::npos);
  EXPECT_NE(config_error(qbase + R"(, "use_sliding_window": true})").find("use_sliding_window"), std::string::npos);
  EXPECT_EQ(config_error(qbase + "}"), "accepted");
}

// A Mixtral folder written and read back bit for bit; a folder missing an expert is refused with
// the tensor's name.
TEST(MoeWeights, FolderRoundTripAndAMissingExpertIsNamed) {
  const LlamaSpec spec(moe_config("MixtralForCausalLM"));
  const ModelLayout layout = spec.layout();
  std::vector<std::vector<float>> modules;
  for (const ModuleLayout& m : layout.modules) {
    modules.emplace_back(m.numel);
    spec.init_module(m, 3, modules.back().data());
  }
  TempDir dir;
  const std::string folder = dir.file("mixtral");
  write_hf_model(folder, spec, [&](int m) { return modules[static_cast<std::size_t>(m)].data(); }, DType::f32,
                 40'000);
  const ModelSpecPtr back = model_from_path(folder);
  EXPECT_TRUE(back->same_model(spec));
  const HfWeightsReader reader(folder, *back);
  for (std::size_t m = 0; m < modules.size(); ++m) {
    std::vector<float> got(modules[m].size());
    reader.read_module(static_cast<int>(m), got.data());
    EXPECT_TRUE(test::same_bits(got, modules[m])) << m;
  }
  // The same weights without expert 3 of layer 1, as one file: refused, naming the tensor.
  SafetensorsWriter w;
  std::vector<std::vector<float>> keep;
  const std::string gone = "model.layers.1.block_sparse_moe.experts.3.w2.weight";
  for (std::size_t m = 0; m < layout.modules.size(); ++m) {
    for (const TensorSlot& t : layout.modules[m].tensors) {
      if (t.name == gone) continue;
      keep.push_back(to_hf_layout(t, modules[m].data()));
      w.add(t.name, TensorDType::f32, t.shape, keep.back().data());
    }
  }
  w.write(dir.file("short.safetensors"));
  try {
    HfWeightsReader r(dir.file("short.safetensors"), spec);
    ADD_FAILURE() << "weights without an expert were accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(gone + " is missing"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace strata::models
