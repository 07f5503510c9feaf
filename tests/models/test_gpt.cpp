// models/gpt on the host backend: config and layout, initialization, the provider protocol,
// determinism, activation checkpointing (bitwise), the KV cache against the full forward,
// activation accounting and the errors. The PyTorch comparison is tests/reference/gpt_vs_torch.py.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "core/error.h"
#include "models/gpt/gpt_config.h"
#include "models/gpt/gpt_init.h"
#include "models/gpt/gpt_layout.h"
#include "models/gpt/gpt_model.h"
#include "models/gpt/gpt_spec.h"
#include "models/hf_weights.h"
#include "models/model_parts.h"
#include "models/io/safetensors.h"
#include "runtime/device/device.h"
#include "tests/models/model_test_util.h"
#include "runtime/params/resident_params.h"

namespace strata::models {
namespace {

using test::norm_rel;
using test::random_tokens;
using test::same_bits;
using test::TempDir;

GptConfig small_config() {
  GptConfig c;
  c.vocab_size = 37;  // not a multiple of 8
  c.n_positions = 16;
  c.n_embd = 24;      // not a multiple of 64; head size 8
  c.n_layer = 2;
  c.n_head = 3;
  return c;
}

// A host device, resident parameters initialized with `seed`, and a model over them.
struct Rig {
  Rig(const GptConfig& config, ModelOptions options, std::uint64_t seed = 1,
      std::uint64_t memory_bytes = 256ull << 20)
      : layout(gpt_layout(config)) {
    device = runtime::device::Device::create({.kind = "host", .memory_bytes = memory_bytes});
    stream = device->create_stream("compute");
    params = std::make_unique<runtime::params::ResidentParams>(*device, layout.module_numels(),
                                                       layout.module_names(), options.dtype, true);
    for (std::size_t m = 0; m < layout.modules.size(); ++m) {
      std::vector<float> host(layout.modules[m].numel);
      init_module(config, layout.modules[m], seed, host.data());
      copy_to_device(*stream, params->params(static_cast<int>(m)), options.dtype, host.data(),
                     host.size());
    }
    model = std::make_unique<GptModel>(config, options, *device, *stream, *params);
  }
  std::vector<float> grads(int m) {
    std::vector<float> g(layout.modules[static_cast<std::size_t>(m)].numel);
    copy_from_device(*stream, g.data(), params->grads(m), model->options().dtype, g.size());
    return g;
  }
  ModelLayout layout;
  std::unique_ptr<runtime::device::Device> device;
  std::unique_ptr<runtime::device::Stream> stream;
  std::unique_ptr<runtime::params::ResidentParams> params;
  std::unique_ptr<GptModel> model;
};

TEST(GptConfig, PresetsAndParameterCounts) {
  EXPECT_EQ(GptConfig::preset("gpt2").num_params(), 124439808);  // HF's GPT-2 small
  EXPECT_EQ(GptConfig::preset("gpt2-medium").num_params(), 354823168);
  for (const std::string& name : GptConfig::preset_names()) {
    const GptConfig c = GptConfig::preset(name);
    c.validate();
    // The layout holds every parameter once (the gaps are alignment only).
    std::size_t n = 0;
    for (const ModuleLayout& m : gpt_layout(c).modules) {
      for (const TensorSlot& t : m.tensors) n += t.numel;
    }
    EXPECT_EQ(static_cast<std::int64_t>(n), c.num_params()) << name;
  }
  EXPECT_THROW(GptConfig::preset("gpt3"), Error);
}

TEST(GptConfig, JsonRoundTripAndRefusals) {
  const GptConfig c = small_config();
  EXPECT_EQ(GptConfig::from_json(c.to_json()), c);
  auto message = [](const std::string& json) {
    try {
      GptConfig::from_json(json);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  EXPECT_NE(message(R"({"vocab_size": 10, "n_positions": 8, "n_embd": 8, "n_layer": 1})")
                .find("n_head"), std::string::npos);
  EXPECT_NE(message(R"({"vocab_size": 10, "n_positions": 8, "n_embd": 10, "n_layer": 1, "n_head": 3})")
                .find("multiple of n_head"), std::string::npos);
  EXPECT_NE(message(R"({"vocab_size": 10, "n_positions": 8, "n_embd": 8, "n_layer": 1, "n_head": 2,
                        "activation_function": "relu"})").find("activation_function"),
            std::string::npos);
  EXPECT_NE(message(R"({"vocab_size": 10.5, "n_positions": 8, "n_embd": 8, "n_layer": 1, "n_head": 2})")
                .find("integer"), std::string::npos);
  EXPECT_NE(message("{not json").find("not valid JSON"), std::string::npos);
  // A number beyond a double (nlohmann's out_of_range, not a parse_error; tests/fuzz found it).
  EXPECT_NE(message(R"({"vocab_size": 1e309})").find("not valid JSON"), std::string::npos);
  EXPECT_NE(message(R"({"vocab_size": 0, "n_positions": 8, "n_embd": 8, "n_layer": 1, "n_head": 2})")
                .find("vocab_size"), std::string::npos);
}

TEST(GptInit, DeterministicWithGpt2Statistics) {
  const GptConfig c = GptConfig::preset("tiny");
  const ModelLayout layout = gpt_layout(c);
  const ModuleLayout& block = layout.modules[1];
  std::vector<float> a(block.numel), b(block.numel), other(block.numel);
  init_module(c, block, 7, a.data());
  init_module(c, block, 7, b.data());
  init_module(c, block, 8, other.data());
  EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0);
  EXPECT_NE(std::memcmp(a.data(), other.data(), a.size() * sizeof(float)), 0);
  auto stddev = [&](int t) {
    const TensorSlot& s = block.tensors[static_cast<std::size_t>(t)];
    double sum = 0, sq = 0;
    for (std::size_t i = 0; i < s.numel; ++i) {
      sum += a[s.offset + i];
      sq += double(a[s.offset + i]) * a[s.offset + i];
    }
    const double n = static_cast<double>(s.numel);
    return std::sqrt(sq / n - (sum / n) * (sum / n));
  };
  EXPECT_NEAR(stddev(kQkvW), 0.02, 0.001);
  EXPECT_NEAR(stddev(kFcProjW), 0.02 / std::sqrt(2.0 * c.n_layer), 0.001);
  EXPECT_EQ(a[block.tensors[kLn1W].offset], 1.0f);
  EXPECT_EQ(a[block.tensors[kQkvB].offset], 0.0f);
}

TEST(GptModel, LossAtInitIsNearLogVocabAndProtocolIsFollowed) {
  const GptConfig c = small_config();
  Rig rig(c, {});
  const int B = 2, T = 7;
  auto in = random_tokens(B * T, c.vocab_size, 1), tg = random_tokens(B * T, c.vocab_size, 2);
  const float loss = rig.model->forward(in.data(), tg.data(), B, T, true);
  EXPECT_NEAR(loss, std::log(static_cast<float>(c.vocab_size)), 0.2);
  rig.params->zero_grads(*rig.stream);
  rig.model->backward();
  rig.stream->synchronize();
  const int L = c.n_layer;
  // Embedding: once for the tokens, once for the tied LM head; gradients acquired once (at the
  // head) and final once (after the embedding's backward).
  EXPECT_EQ(rig.params->counts(0).acquires, 2);
  EXPECT_EQ(rig.params->counts(0).releases, 2);
  EXPECT_EQ(rig.params->counts(0).grad_acquires, 1);
  EXPECT_EQ(rig.params->counts(0).grads_ready, 1);
  for (int m = 1; m <= L + 1; ++m) {
    EXPECT_EQ(rig.params->counts(m).acquires, 2) << m;  // forward and backward
    EXPECT_EQ(rig.params->counts(m).releases, 2) << m;
    EXPECT_EQ(rig.params->counts(m).grad_acquires, 1) << m;
    EXPECT_EQ(rig.params->counts(m).grads_ready, 1) << m;
  }
  // Every module got a gradient.
  for (int m = 0; m <= L + 1; ++m) {
    double norm = 0;
    for (float g : rig.grads(m)) norm += double(g) * g;
    EXPECT_GT(norm, 0.0) << m;
  }
}

// Same inputs, fresh model and device: the same bits. Checkpointing: the same bits too.
TEST(GptModel, DeterministicAndCheckpointingIsBitwiseIdentical) {
  const GptConfig c = small_config();
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

// The LM head padded to an aligned vocabulary and run in chunks (lm_head.h) computes the same
// function as the plain head: the padded logits never enter the softmax and get no gradient, and
// each chunk's logits are recomputed in backward. Losses, logits and every gradient agree to
// rounding (the padded dx GEMM sums more zeros in another order; dW is rounded per chunk).
TEST(GptModel, PaddedChunkedLmHeadMatchesThePlainHead) {
  const GptConfig c = small_config();  // V = 37
  const int B = 3, T = 16;             // 48 rows
  auto in = random_tokens(B * T, c.vocab_size, 30), tg = random_tokens(B * T, c.vocab_size, 31);
  struct Run {
    float loss;
    std::vector<float> logits;
    std::vector<std::vector<float>> grads;
  };
  auto run = [&](int vocab_multiple, std::uint64_t chunk_bytes) {
    Rig rig(c, {.dtype = DType::f32, .vocab_multiple = vocab_multiple, .head_chunk_bytes = chunk_bytes});
    Run r;
    r.logits.resize(static_cast<std::size_t>(B * T * c.vocab_size));
    r.loss = rig.model->forward(in.data(), tg.data(), B, T, true, r.logits.data());
    rig.params->zero_grads(*rig.stream);
    rig.model->backward();
    rig.stream->synchronize();
    for (int m = 0; m < static_cast<int>(rig.layout.modules.size()); ++m) r.grads.push_back(rig.grads(m));
    return r;
  };
  const Run plain = run(1, 1ull << 30);
  // Vp = 128; 20 rows of 128 fp32 logits per chunk: chunks of 20, 20 and 8 rows.
  const Run padded = run(128, 20 * 128 * sizeof(float));
  const Run chunked_only = run(1, 20 * 37 * sizeof(float));
  for (const Run* r : {&padded, &chunked_only}) {
    EXPECT_NEAR(r->loss, plain.loss, 1e-6 * std::abs(plain.loss));
    for (std::size_t i = 0; i < plain.logits.size(); ++i) {
      ASSERT_NEAR(r->logits[i], plain.logits[i], 1e-6f) << "logit " << i;
    }
    for (std::size_t m = 0; m < plain.grads.size(); ++m) {
      double err = 0, ref = 0;
      for (std::size_t i = 0; i < plain.grads[m].size(); ++i) {
        err = std::max(err, std::abs(double(r->grads[m][i]) - plain.grads[m][i]));
        ref = std::max(ref, std::abs(double(plain.grads[m][i])));
      }
      EXPECT_LE(err, 1e-5 * ref) << "module " << m;
    }
  }
  // The host backend's own choice is no padding; the CUDA one's (what activation_bytes counts
  // when the device decides) is 128.
  Rig host_choice(c, {});
  EXPECT_EQ(host_choice.model->options().vocab_multiple, 1);
  EXPECT_EQ(GptModel::activation_bytes(c, {}, B, T), GptModel::activation_bytes(c, {.vocab_multiple = 128}, B, T));
  // The head's memory: a chunk of logits instead of all of them.
  const auto all = GptModel::activation_bytes(c, {.vocab_multiple = 1}, B, T);
  const auto chunked = GptModel::activation_bytes(c, {.vocab_multiple = 1, .head_chunk_bytes = 20 * 37 * 4}, B, T);
  // 28 rows of 37 fp32 logits fewer, up to the 256-byte alignment of the carved buffers.
  const std::uint64_t saved = (48 - 20) * 37 * sizeof(float);
  EXPECT_GE(all - chunked + 256, saved);
  EXPECT_LE(all - chunked, saved + 256);
}

TEST(GptModel, CheckpointingNeedsLessMemory) {
  const GptConfig c = GptConfig::preset("tiny");
  const auto full = GptModel::activation_bytes(c, {.dtype = DType::f32, .checkpointing = false}, 4, 64);
  const auto ckpt = GptModel::activation_bytes(c, {.dtype = DType::f32, .checkpointing = true}, 4, 64);
  const auto half = GptModel::activation_bytes(c, {.dtype = DType::bf16, .checkpointing = false}, 4, 64);
  EXPECT_LT(ckpt, full);
  EXPECT_LT(half, full);
  // reserve() takes exactly what activation_bytes() says.
  Rig rig(c, {.dtype = DType::f32, .checkpointing = true});
  const auto before = rig.device->memory_stats().current_bytes;
  rig.model->reserve(4, 64);
  EXPECT_EQ(rig.device->memory_stats().current_bytes - before, ckpt);
}

TEST(GptModel, TooSmallADeviceIsAClearError) {
  const GptConfig c = GptConfig::preset("tiny");
  const ModelLayout layout = gpt_layout(c);
  const std::uint64_t params_bytes = 2 * layout.total_numel() * sizeof(float);
  Rig rig(c, {}, 1, params_bytes + (1 << 20));  // room for params and grads, not activations
  auto in = random_tokens(8 * 128, c.vocab_size, 5);
  try {
    rig.model->forward(in.data(), in.data(), 8, 128, true);
    FAIL() << "expected OutOfMemory";
  } catch (const runtime::device::OutOfMemory& e) {
    EXPECT_NE(std::string(e.what()).find("activations"), std::string::npos) << e.what();
  }
}

TEST(GptModel, BadTokensAndLengthsAreErrors) {
  const GptConfig c = small_config();
  Rig rig(c, {});
  auto in = random_tokens(2 * 4, c.vocab_size, 6);
  in[5] = c.vocab_size;
  EXPECT_THROW(rig.model->forward(in.data(), nullptr, 2, 4, false), Error);
  in[5] = -1;
  EXPECT_THROW(rig.model->forward(in.data(), nullptr, 2, 4, false), Error);
  auto longer = random_tokens(c.n_positions + 1, c.vocab_size, 7);
  EXPECT_THROW(rig.model->forward(longer.data(), nullptr, 1, c.n_positions + 1, false), Error);
  EXPECT_THROW(rig.model->backward(), Error);  // no forward for backward before it
}

// Prefix then one token at a time through the KV cache: the logits of the full forward.
TEST(GptModel, KvCacheDecodingMatchesTheFullForward) {
  const GptConfig c = small_config();
  Rig rig(c, {});
  const int B = 2, T = 11, prefix = 4, V = c.vocab_size;
  auto in = random_tokens(B * T, V, 8);
  std::vector<float> full(static_cast<std::size_t>(B * T * V));
  rig.model->forward(in.data(), nullptr, B, T, false, full.data());

  KvCache cache = rig.model->make_kv_cache(B, T);
  std::vector<std::int32_t> chunk;
  std::vector<float> out;
  double max_diff = 0;
  int t = 0;
  while (t < T) {
    const int n = t == 0 ? prefix : 1;
    chunk.clear();
    for (int b = 0; b < B; ++b) {
      for (int i = 0; i < n; ++i) chunk.push_back(in[static_cast<std::size_t>(b * T + t + i)]);
    }
    out.resize(static_cast<std::size_t>(B * n * V));
    rig.model->forward_decode(cache, chunk.data(), B, n, out.data());
    for (int b = 0; b < B; ++b) {
      for (int i = 0; i < n; ++i) {
        for (int v = 0; v < V; ++v) {
          const float want = full[(static_cast<std::size_t>(b * T + t + i)) * V + v];
          const float got = out[(static_cast<std::size_t>(b * n + i)) * V + v];
          max_diff = std::max(max_diff, static_cast<double>(std::fabs(want - got)));
        }
      }
    }
    t += n;
  }
  EXPECT_EQ(cache.length(), T);
  EXPECT_LT(max_diff, 1e-5);
  std::vector<std::int32_t> one(B, 1);
  EXPECT_THROW(rig.model->forward_decode(cache, one.data(), B, 1, out.data()), Error);  // full
}

// bf16 / fp16 storage with fp32 arithmetic: the loss and the gradients within the storage
// format's precision of the fp32 run (bf16 keeps 8 bits of mantissa, fp16 11). fp16 runs with
// a loss scale of 1024, as dynamic loss scaling would, and its gradients are unscaled here.
class GptHalfStorage : public ::testing::TestWithParam<DType> {};

TEST_P(GptHalfStorage, TracksFp32) {
  const DType dtype = GetParam();
  const float loss_scale = dtype == DType::f16 ? 1024.0f : 1.0f;
  const double loss_tol = dtype == DType::bf16 ? 2e-2 : 3e-3;
  const double grad_tol = dtype == DType::bf16 ? 5e-2 : 1e-2;
  const GptConfig c = small_config();
  const int B = 2, T = 8;
  auto in = random_tokens(B * T, c.vocab_size, 9), tg = random_tokens(B * T, c.vocab_size, 10);
  Rig f32(c, {.dtype = DType::f32}), half(c, {.dtype = dtype});
  const float l32 = f32.model->forward(in.data(), tg.data(), B, T, true);
  const float l16 = half.model->forward(in.data(), tg.data(), B, T, true);
  EXPECT_NEAR(l16, l32, loss_tol * l32);
  half.params->zero_grads(*half.stream);
  half.model->backward(loss_scale);
  f32.params->zero_grads(*f32.stream);
  f32.model->backward();
  for (int m = 0; m < static_cast<int>(f32.layout.modules.size()); ++m) {
    const auto g32 = f32.grads(m), g16 = half.grads(m);
    double num = 0, den = 0;
    for (std::size_t i = 0; i < g32.size(); ++i) {
      const double d = double(g16[i]) / loss_scale - g32[i];
      num += d * d;
      den += double(g32[i]) * g32[i];
    }
    EXPECT_LT(std::sqrt(num / den), grad_tol) << "module " << m;
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, GptHalfStorage, ::testing::Values(DType::bf16, DType::f16),
                         [](const ::testing::TestParamInfo<DType>& p) { return std::string(dtype_name(p.param)); });

// ---- HF safetensors in and out ------------------------------------------------------------

std::vector<std::vector<float>> init_all(const GptConfig& c, const ModelLayout& layout) {
  std::vector<std::vector<float>> modules;
  for (const ModuleLayout& m : layout.modules) {
    modules.emplace_back(m.numel);
    init_module(c, m, 3, modules.back().data());
  }
  return modules;
}

TEST(GptWeights, HfRoundTripInEveryDtype) {
  const GptConfig c = small_config();
  const ModelLayout layout = gpt_layout(c);
  const auto modules = init_all(c, layout);
  TempDir dir;
  for (DType dtype : {DType::f32, DType::bf16, DType::f16}) {
    const std::string path = dir.file(std::string(dtype_name(dtype)) + ".safetensors");
    write_hf_model(path, GptSpec(c), [&](int m) { return modules[static_cast<std::size_t>(m)].data(); }, dtype);
    // HF's layout on disk: Conv1D weights (in, out).
    const SafetensorsFile file = SafetensorsFile::open(path);
    const TensorInfo* qkv = file.find("h.0.attn.c_attn.weight");
    ASSERT_NE(qkv, nullptr);
    EXPECT_EQ(qkv->shape, (std::vector<std::int64_t>{c.n_embd, 3 * c.n_embd}));
    const HfWeightsReader reader(path, GptSpec(c));
    for (std::size_t m = 0; m < layout.modules.size(); ++m) {
      std::vector<float> back(layout.modules[m].numel), want(modules[m]);
      reader.read_module(static_cast<int>(m), back.data());
      // What the dtype keeps of each value: round to it and back.
      if (dtype != DType::f32) {
        std::vector<std::uint16_t> h(want.size());
        convert(want.data(), DType::f32, h.data(), dtype, want.size());
        convert(h.data(), dtype, want.data(), DType::f32, want.size());
      }
      EXPECT_EQ(std::memcmp(back.data(), want.data(), want.size() * sizeof(float)), 0)
          << layout.modules[m].name << " " << dtype_name(dtype);
    }
  }
}

// A file written by hand: the "transformer." prefix, an ignored attention-mask buffer and a
// tied lm_head.weight are accepted; a missing tensor, a wrong shape, an unknown tensor and an
// untied head are refused with the tensor's name.
TEST(GptWeights, PrefixIgnorablesAndRefusals) {
  GptConfig c = small_config();
  c.n_layer = 1;
  const ModelLayout layout = gpt_layout(c);
  const auto modules = init_all(c, layout);
  TempDir dir;
  struct Extra {
    std::string name;
    std::vector<std::int64_t> shape;
    std::vector<float> data;
  };
  auto write = [&](const std::string& path, const std::string& prefix, const std::string& skip,
                   const std::string& reshape, const std::vector<Extra>& extras) {
    SafetensorsWriter w;
    std::vector<std::vector<float>> keep;
    for (std::size_t m = 0; m < layout.modules.size(); ++m) {
      for (const TensorSlot& t : layout.modules[m].tensors) {
        if (t.name == skip) continue;
        keep.push_back(to_hf_layout(t, modules[m].data()));
        std::vector<std::int64_t> shape = t.shape;
        // HF's (in, out) for Conv1D weights; `reshape` gets the other orientation (wrong).
        if (t.hf_transposed != (t.name == reshape)) std::swap(shape[0], shape[1]);
        w.add(prefix + t.name, TensorDType::f32, shape, keep.back().data());
      }
    }
    for (const Extra& e : extras) w.add(e.name, TensorDType::f32, e.shape, e.data.data());
    w.write(path);
  };
  const TensorSlot& wte = layout.modules[0].tensors[kWte];
  const std::vector<float> wte_values(modules[0].begin(), modules[0].begin() + static_cast<std::ptrdiff_t>(wte.numel));
  const std::vector<float> mask(static_cast<std::size_t>(c.n_positions * c.n_positions), 1.0f);
  const std::string good = dir.file("good.safetensors");
  write(good, "transformer.", "", "",
        {{"transformer.h.0.attn.bias", {1, 1, c.n_positions, c.n_positions}, mask},
         {"lm_head.weight", wte.shape, wte_values}});
  const HfWeightsReader reader(good, GptSpec(c));
  std::vector<float> block(layout.modules[1].numel);
  reader.read_module(1, block.data());
  EXPECT_EQ(std::memcmp(block.data(), modules[1].data(), block.size() * sizeof(float)), 0);

  auto refusal = [&](const std::string& path) {
    try {
      HfWeightsReader r(path, GptSpec(c));
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  const std::string missing = dir.file("missing.safetensors");
  write(missing, "", "h.0.mlp.c_fc.bias", "", {});
  EXPECT_NE(refusal(missing).find("h.0.mlp.c_fc.bias is missing"), std::string::npos) << refusal(missing);
  const std::string shape = dir.file("shape.safetensors");
  write(shape, "", "", "h.0.mlp.c_fc.weight", {});
  EXPECT_NE(refusal(shape).find("h.0.mlp.c_fc.weight has shape"), std::string::npos) << refusal(shape);
  const std::string unknown = dir.file("unknown.safetensors");
  write(unknown, "", "", "", {{"h.1.ln_1.weight", {c.n_embd}, std::vector<float>(static_cast<std::size_t>(c.n_embd))}});
  EXPECT_NE(refusal(unknown).find("unexpected tensor h.1.ln_1.weight"), std::string::npos) << refusal(unknown);
  std::vector<float> untied = wte_values;
  untied[0] += 1.0f;
  const std::string head = dir.file("head.safetensors");
  write(head, "", "", "", {{"lm_head.weight", wte.shape, untied}});
  EXPECT_NE(refusal(head).find("ties them"), std::string::npos) << refusal(head);
  EXPECT_THROW(HfWeightsReader(dir.file("absent.safetensors"), GptSpec(c)), Error);
}

}  // namespace
}  // namespace strata::models
