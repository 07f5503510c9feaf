// models/llama on the host backend, through the family registry: the layout, the provider
// protocol with a tied and an untied head, determinism and activation checkpointing (bitwise),
// the KV cache against the full forward (rotary positions included), half storage, the HF
// layout in and out (a sharded model folder), and the errors. The float64 PyTorch comparison is
// tests/reference/llama_vs_torch.py.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <unistd.h>

#include "core/error.h"
#include "models/hf_weights.h"
#include "models/io/hf_checkpoint.h"
#include "models/llama/llama_config.h"
#include "models/llama/llama_layout.h"
#include "models/llama/llama_spec.h"
#include "models/model_parts.h"
#include "models/registry.h"
#include "runtime/device/device.h"
#include "tests/models/model_rig.h"
#include "tests/models/model_test_util.h"
#include "runtime/params/resident_params.h"

namespace strata::models {
namespace {

using test::norm_rel;
using test::random_tokens;
using test::same_bits;
using test::TempDir;

namespace fs = std::filesystem;

// GQA 6:2 with head size 8, an MLP width and vocabulary that are no multiples of 8, rope
// scaling that changes some frequencies, q/k/v biases.
LlamaConfig small_config(bool tied, bool biases = false) {
  LlamaConfig c;
  c.architecture = biases ? "Qwen2ForCausalLM" : "LlamaForCausalLM";
  c.vocab_size = 37;
  c.hidden_size = 40;
  c.intermediate_size = 52;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 6;
  c.num_key_value_heads = 2;
  c.head_dim = 8;  // NH hs = 48 != C
  c.max_position_embeddings = 32;
  c.rope_theta = 500000.0;
  c.rope_scaling = kernels::host::RopeLlama3Scaling{8.0, 1.0, 4.0, 16.0};
  c.rms_norm_eps = 1e-5f;
  c.tie_word_embeddings = tied;
  c.attention_bias = biases;
  return c;
}

// The rig of model_rig.h over a LLaMA config.
struct Rig : test::ModelRig {
  Rig(const LlamaConfig& config, ModelOptions options, std::uint64_t seed = 1)
      : ModelRig(std::make_shared<LlamaSpec>(config), options, seed) {}
};

TEST(LlamaLayout, CountsPackingAndTheHead) {
  for (const std::string& name : LlamaConfig::preset_names()) {
    const LlamaConfig c = LlamaConfig::preset(name);
    const ModelLayout layout = llama_layout(c);
    std::int64_t n = 0;
    for (const ModuleLayout& m : layout.modules) {
      for (const TensorSlot& t : m.tensors) n += static_cast<std::int64_t>(t.numel);
    }
    EXPECT_EQ(n, c.num_params()) << name;
    std::size_t experts = 0;
    for (int l = 0; l < c.num_hidden_layers; ++l) experts += c.sparse_layer(l) ? c.num_experts : 0;
    EXPECT_EQ(layout.modules.size(), static_cast<std::size_t>(c.num_hidden_layers) + 2 + experts) << name;
    EXPECT_EQ(layout.modules.back().tensors.size(), c.tie_word_embeddings ? 1u : 2u) << name;
  }
  // q/k/v (and gate/up) are consecutive rows of one matrix: the fused kernels read them as one.
  const LlamaConfig c = small_config(false, true);
  const ModelLayout layout = llama_layout(c);
  const ModuleLayout& block = layout.modules[1];
  const LlamaBlockSlots s = LlamaBlockSlots::of(c, false);
  for (int first : {s.qkv, s.qkv_bias, s.gate_up}) {
    const int parts = first == s.gate_up ? 2 : 3;
    for (int i = 1; i < parts; ++i) {
      const TensorSlot& prev = block.tensors[static_cast<std::size_t>(first + i - 1)];
      EXPECT_EQ(block.tensors[static_cast<std::size_t>(first + i)].offset, prev.offset + prev.numel) << prev.name;
    }
  }
  EXPECT_EQ(block.tensors[static_cast<std::size_t>(s.qkv)].name, "model.layers.0.self_attn.q_proj.weight");
  EXPECT_EQ(block.tensors[static_cast<std::size_t>(s.down)].name, "model.layers.0.mlp.down_proj.weight");
}

TEST(LlamaModel, ProtocolWithATiedAndAnUntiedHead) {
  for (bool tied : {true, false}) {
    const LlamaConfig c = small_config(tied);
    Rig rig(c, {});
    const int B = 2, T = 7;
    auto in = random_tokens(B * T, c.vocab_size, 1), tg = random_tokens(B * T, c.vocab_size, 2);
    const float loss = rig.model->forward(in.data(), tg.data(), B, T, true);
    EXPECT_NEAR(loss, std::log(static_cast<float>(c.vocab_size)), 0.3);
    rig.params->zero_grads(*rig.stream);
    rig.model->backward();
    rig.stream->synchronize();
    const int L = c.num_hidden_layers, H = L + 1;
    // Tied: the embedding is read twice (tokens, LM head); untied: once, and the head module
    // holds the LM head from its forward to its backward (one acquire for both).
    EXPECT_EQ(rig.params->counts(0).acquires, tied ? 2 : 1) << tied;
    EXPECT_EQ(rig.params->counts(0).releases, tied ? 2 : 1) << tied;
    EXPECT_EQ(rig.params->counts(H).acquires, tied ? 2 : 1) << tied;
    EXPECT_EQ(rig.params->counts(H).releases, tied ? 2 : 1) << tied;
    for (int m = 0; m <= H; ++m) {
      EXPECT_EQ(rig.params->counts(m).grad_acquires, 1) << m;
      EXPECT_EQ(rig.params->counts(m).grads_ready, 1) << m;
      double norm = 0;
      for (float g : rig.grads(m)) norm += double(g) * g;
      EXPECT_GT(norm, 0.0) << m << " tied " << tied;
    }
    for (int m = 1; m <= L; ++m) EXPECT_EQ(rig.params->counts(m).acquires, 2) << m;
  }
}

TEST(LlamaModel, DeterministicAndCheckpointingIsBitwiseIdentical) {
  const LlamaConfig c = small_config(false, true);
  const int B = 2, T = 9;
  auto in = random_tokens(B * T, c.vocab_size, 3), tg = random_tokens(B * T, c.vocab_size, 4);
  auto run = [&](bool checkpointing, float* loss) {
    Rig rig(c, {.dtype = DType::f32, .checkpointing = checkpointing});
    *loss = rig.model->forward(in.data(), tg.data(), B, T, true);
    rig.params->zero_grads(*rig.stream);
    rig.model->backward();
    rig.stream->synchronize();
    std::vector<std::vector<float>> g;
    for (int m = 0; m < static_cast<int>(rig.layout.modules.size()); ++m) g.push_back(rig.grads(m));
    return g;
  };
  float l1 = 0, l2 = 0, l3 = 0;
  const auto g1 = run(false, &l1), g2 = run(false, &l2), g3 = run(true, &l3);
  EXPECT_EQ(std::memcmp(&l1, &l2, sizeof l1), 0);
  EXPECT_EQ(std::memcmp(&l1, &l3, sizeof l1), 0);
  for (std::size_t m = 0; m < g1.size(); ++m) {
    EXPECT_EQ(std::memcmp(g1[m].data(), g2[m].data(), g1[m].size() * sizeof(float)), 0) << m;
    EXPECT_EQ(std::memcmp(g1[m].data(), g3[m].data(), g1[m].size() * sizeof(float)), 0) << m;
  }
}

// Prefix then one token at a time through the KV cache (the rotary embedding at each position
// offset): the logits of the full forward.
TEST(LlamaModel, KvCacheDecodingMatchesTheFullForward) {
  for (bool tied : {true, false}) {
    const LlamaConfig c = small_config(tied, !tied);
    Rig rig(c, {});
    const int B = 2, T = 11;
    const double max_diff =
        test::decode_vs_forward(*rig.model, random_tokens(B * T, c.vocab_size, 8), B, T, 4, c.vocab_size);
    EXPECT_LT(max_diff, 1e-5) << "tied " << tied;
  }
}

// bf16 storage with fp32 arithmetic: the loss and gradients within bf16's precision of fp32.
TEST(LlamaModel, Bf16StorageTracksFp32) {
  const LlamaConfig c = small_config(true);
  const int B = 2, T = 8;
  auto in = random_tokens(B * T, c.vocab_size, 5), tg = random_tokens(B * T, c.vocab_size, 6);
  Rig f32(c, {.dtype = DType::f32});
  Rig bf16(c, {.dtype = DType::bf16});
  const float l32 = f32.model->forward(in.data(), tg.data(), B, T, true);
  const float l16 = bf16.model->forward(in.data(), tg.data(), B, T, true);
  EXPECT_NEAR(l16, l32, 2e-2 * std::fabs(l32));
  for (Rig* r : {&f32, &bf16}) {
    r->params->zero_grads(*r->stream);
    r->model->backward();
    r->stream->synchronize();
  }
  for (int m = 0; m < static_cast<int>(f32.layout.modules.size()); ++m) {
    const auto a = f32.grads(m), b = bf16.grads(m);
    double diff = 0, norm = 0;
    for (std::size_t i = 0; i < a.size(); ++i) {
      diff += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
      norm += double(a[i]) * a[i];
    }
    EXPECT_LT(std::sqrt(diff / norm), 5e-2) << m;
  }
}

TEST(LlamaModel, LengthsTokensAndWindowsAreErrors) {
  LlamaConfig c = small_config(true);
  c.architecture = "MistralForCausalLM";
  c.sliding_window = 12;
  Rig rig(c, {});
  auto in = random_tokens(32, c.vocab_size, 7);
  EXPECT_THROW(rig.model->forward(in.data(), nullptr, 1, 13, false), Error);  // past the window
  EXPECT_NO_THROW(rig.model->forward(in.data(), nullptr, 1, 12, false));
  in[3] = c.vocab_size;
  EXPECT_THROW(rig.model->forward(in.data(), nullptr, 1, 8, false), Error);
  EXPECT_THROW(rig.model->make_kv_cache(1, 33), Error);  // past max_position_embeddings
  EXPECT_THROW(rig.model->backward(), Error);
}

std::vector<std::vector<float>> init_all(const ModelSpec& spec) {
  const ModelLayout layout = spec.layout();
  std::vector<std::vector<float>> modules;
  for (const ModuleLayout& m : layout.modules) {
    modules.emplace_back(m.numel);
    spec.init_module(m, 3, modules.back().data());
  }
  return modules;
}

// A model folder in the HF layout, sharded (an index), read back through the registry and the
// weights reader: the same config, the same bits; in bf16, each value rounded once.
TEST(LlamaWeights, ModelFolderRoundTrip) {
  for (bool tied : {true, false}) {
    const LlamaSpec spec(small_config(tied, true));
    const auto modules = init_all(spec);
    TempDir dir;
    const std::string folder = dir.file("model");
    write_hf_model(folder, spec, [&](int m) { return modules[static_cast<std::size_t>(m)].data(); }, DType::f32,
                   20'000);
    EXPECT_TRUE(fs::exists(folder + "/config.json"));
    EXPECT_TRUE(fs::exists(folder + "/" + kHfIndexFile));
    const HfCheckpoint files = HfCheckpoint::open(folder);
    EXPECT_GT(files.shard_count(), 2u);
    EXPECT_EQ(files.find("lm_head.weight") != nullptr, !tied);
    const ModelSpecPtr back = model_from_path(folder);
    EXPECT_EQ(back->family(), "llama");
    EXPECT_TRUE(back->same_model(spec)) << back->to_json();
    const HfWeightsReader reader(folder, *back);
    for (std::size_t m = 0; m < modules.size(); ++m) {
      std::vector<float> got(modules[m].size());
      reader.read_module(static_cast<int>(m), got.data());
      EXPECT_EQ(std::memcmp(got.data(), modules[m].data(), got.size() * sizeof(float)), 0) << m;
    }
  }
}

// bf16 weights in three or more shards (as HF publishes them): each value comes back as its
// bf16 rounding, exactly.
TEST(LlamaWeights, ShardedBf16FolderLoadsAsItsRounding) {
  const LlamaSpec spec(small_config(true, true));
  const auto modules = init_all(spec);
  TempDir dir;
  const std::string folder = dir.file("bf16");
  write_hf_model(folder, spec, [&](int m) { return modules[static_cast<std::size_t>(m)].data(); }, DType::bf16, 12'000);
  const HfCheckpoint files = HfCheckpoint::open(folder);
  EXPECT_GE(files.shard_count(), 3u);
  for (const std::string& name : files.names()) EXPECT_EQ(files.find(name)->dtype, TensorDType::bf16) << name;
  const HfWeightsReader reader(folder, *model_from_path(folder));
  for (std::size_t m = 0; m < modules.size(); ++m) {
    std::vector<float> want(modules[m].size()), got(modules[m].size());
    std::vector<std::uint16_t> half(want.size());
    convert(modules[m].data(), DType::f32, half.data(), DType::bf16, half.size());
    convert(half.data(), DType::bf16, want.data(), DType::f32, half.size());
    reader.read_module(static_cast<int>(m), got.data());
    EXPECT_TRUE(same_bits(got, want)) << m;
  }
}

std::string refusal(const std::string& path, const ModelSpec& spec) {
  try {
    HfWeightsReader r(path, spec);
  } catch (const Error& e) {
    return std::string(e.what()) + " [" + e.where() + "]";
  }
  return "accepted";
}

TEST(LlamaWeights, MissingExtraMisshapedAndMistypedTensorsAreNamed) {
  const LlamaSpec spec(small_config(false));
  const ModelLayout layout = spec.layout();
  const auto modules = init_all(spec);
  TempDir dir;
  // Every tensor of the model, optionally with one changed, as one file.
  auto write = [&](const std::string& name, const std::string& skip, const std::string& extra,
                   const std::string& reshape, bool as_int) {
    SafetensorsWriter w;
    std::vector<std::vector<float>> keep;
    for (std::size_t m = 0; m < layout.modules.size(); ++m) {
      for (const TensorSlot& t : layout.modules[m].tensors) {
        if (t.name == skip) continue;
        keep.push_back(to_hf_layout(t, modules[m].data()));
        std::vector<std::int64_t> shape = t.shape;
        if (t.name == reshape) shape = {shape[0] * (shape.size() > 1 ? shape[1] : 1)};
        w.add(t.name, t.name == reshape && as_int ? TensorDType::i32 : TensorDType::f32, shape, keep.back().data());
      }
    }
    if (!extra.empty()) w.add(extra, TensorDType::f32, {2}, keep.back().data());
    w.write(dir.file(name));
    return dir.file(name);
  };
  const std::string q = "model.layers.1.self_attn.q_proj.weight";
  EXPECT_EQ(refusal(write("good.safetensors", "", "", "", false), spec), "accepted");
  EXPECT_NE(refusal(write("missing.safetensors", q, "", "", false), spec).find(q + " is missing"), std::string::npos);
  const std::string extra = "model.layers.2.mlp.gate_proj.weight";
  EXPECT_NE(refusal(write("extra.safetensors", "", extra, "", false), spec).find("unexpected tensor " + extra),
            std::string::npos);
  EXPECT_NE(refusal(write("shape.safetensors", "", "", q, false), spec).find(q + " has shape"), std::string::npos);
  EXPECT_NE(refusal(write("dtype.safetensors", "", "", q, true), spec).find(q + " is I32"), std::string::npos);
  // The rotary buffers of older checkpoints are not parameters: skipped.
  EXPECT_EQ(refusal(write("inv_freq.safetensors", "", "model.layers.0.self_attn.rotary_emb.inv_freq", "", false),
                    spec),
            "accepted");
}

TEST(Registry, ArchitecturesPresetsAndRefusals) {
  const ModelSpecPtr qwen = model_preset("qwen2.5-0.5b");
  EXPECT_EQ(qwen->architecture(), "Qwen2ForCausalLM");
  EXPECT_EQ(qwen->num_params(), 494032768);
  EXPECT_EQ(model_preset("gpt2")->family(), "gpt2");
  EXPECT_EQ(model_from_json(LlamaConfig::preset("mistral-7b").to_json())->architecture(), "MistralForCausalLM");
  // strata's older GPT-2 configs name no architecture.
  EXPECT_EQ(model_from_json(R"({"vocab_size": 50, "n_positions": 8, "n_embd": 16, "n_layer": 1, "n_head": 2})")
                ->family(),
            "gpt2");
  try {
    model_from_json(R"({"architectures": ["GemmaForCausalLM"], "vocab_size": 3})");
    ADD_FAILURE() << "an unknown architecture was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("GemmaForCausalLM"), std::string::npos);
    EXPECT_NE(std::string(e.hint()).find("Qwen2ForCausalLM"), std::string::npos);
  }
  EXPECT_THROW(model_preset("llama-9"), Error);
  std::vector<std::string> names = preset_names();
  for (const char* want : {"gpt2", "tiny", "llama-3.2-1b", "llama-3.2-3b", "llama-3-8b", "qwen2.5-0.5b",
                           "mistral-7b", "llama-tiny"}) {
    EXPECT_NE(std::find(names.begin(), names.end(), want), names.end()) << want;
  }
}

}  // namespace
}  // namespace strata::models

namespace strata::models {
namespace {

using test::TempDir;

// This process's resident bytes (anonymous and file-backed), from /proc/self/statm.
std::uint64_t resident_bytes() {
  std::ifstream statm("/proc/self/statm");
  std::uint64_t size = 0, resident = 0;
  statm >> size >> resident;
  return resident * static_cast<std::uint64_t>(::sysconf(_SC_PAGESIZE));
}

// Reading a model folder module by module never holds the model: after every module the
// resident memory is within a few tensors of where it started, although every tensor of a
// 96 MiB folder was read. Fails when the reader keeps what it read resident (the mapped pages).
TEST(LlamaWeights, ReadingAFolderKeepsAboutOneTensorResident) {
#if defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "ASan's shadow memory of the mapped file makes resident memory no measure here";
#endif
  LlamaConfig c = small_config(false);
  c.hidden_size = 256;
  c.head_dim = 32;
  c.num_attention_heads = 8;
  c.num_key_value_heads = 4;
  c.intermediate_size = 1024;
  c.num_hidden_layers = 24;
  c.vocab_size = 1024;
  const LlamaSpec spec(c);
  const ModelLayout layout = spec.layout();
  std::size_t largest = 0;
  for (const ModuleLayout& m : layout.modules) largest = std::max(largest, m.numel);
  std::vector<float> values(largest);
  TempDir dir;
  const std::string folder = dir.file("model");
  std::uint64_t total = 0;
  write_hf_model(
      folder, spec,
      [&](int m) {
        spec.init_module(layout.modules[static_cast<std::size_t>(m)], 1, values.data());
        total += layout.modules[static_cast<std::size_t>(m)].numel * sizeof(float);
        return static_cast<const float*>(values.data());
      },
      DType::f32, 8'000'000);
  ASSERT_GT(total, 90ull << 20);
  const HfWeightsReader reader(folder, spec);
  const std::uint64_t start = resident_bytes();
  std::uint64_t peak = start;
  for (int m = 0; m < static_cast<int>(layout.modules.size()); ++m) {
    reader.read_module(m, values.data());
    peak = std::max(peak, resident_bytes());
  }
  EXPECT_LT(peak - start, 16ull << 20) << "read " << (total >> 20) << " MiB; resident grew by "
                                       << ((peak - start) >> 20) << " MiB";
}

}  // namespace
}  // namespace strata::models
