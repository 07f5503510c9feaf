// Batched generation through the KV cache, for every family (models/model.h): a prefill of
// prompts of different lengths (right-padded) and decoding steps at each row's own positions
// give the logits each prompt gets alone from the full forward; a KV cache in pinned host memory
// (models/kv_cache.h) gives the device cache's bits and moves only the filled positions.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "core/error.h"
#include "models/gpt/gpt_spec.h"
#include "models/llama/llama_spec.h"
#include "models/model_parts.h"
#include "offload/host_buffer.h"
#include "runtime/device/device.h"
#include "runtime/params/resident_params.h"
#include "tests/models/model_test_util.h"

namespace strata::models {
namespace {

using test::random_tokens;

ModelSpecPtr small_gpt(int layers = 2) {
  GptConfig c;
  c.vocab_size = 37;
  c.n_positions = 16;
  c.n_embd = 24;
  c.n_layer = layers;
  c.n_head = 3;
  return std::make_shared<GptSpec>(c);
}

ModelSpecPtr small_llama(bool tied, int layers = 2) {
  LlamaConfig c;
  c.architecture = tied ? "LlamaForCausalLM" : "Qwen2ForCausalLM";
  c.vocab_size = 37;
  c.hidden_size = 40;
  c.intermediate_size = 52;
  c.num_hidden_layers = layers;
  c.num_attention_heads = 6;
  c.num_key_value_heads = 2;
  c.head_dim = 8;
  c.max_position_embeddings = 16;
  c.rope_theta = 500000.0;
  c.rope_scaling = kernels::host::RopeLlama3Scaling{8.0, 1.0, 4.0, 4.0};
  c.tie_word_embeddings = tied;
  c.attention_bias = !tied;
  return std::make_shared<LlamaSpec>(c);
}

struct Rig {
  explicit Rig(ModelSpecPtr s) : spec(std::move(s)), layout(spec->layout()) {
    device = runtime::device::Device::create({.kind = "host", .memory_bytes = 64ull << 20});
    stream = device->create_stream("compute");
    params = std::make_unique<runtime::params::ResidentParams>(*device, layout.module_numels(),
                                                               layout.module_names(), DType::f32, false);
    for (std::size_t m = 0; m < layout.modules.size(); ++m) {
      std::vector<float> host(layout.modules[m].numel);
      spec->init_module(layout.modules[m], 11, host.data());
      for (float& v : host) v *= 4.0f;  // larger weights: position mistakes show in the logits
      copy_to_device(*stream, params->params(static_cast<int>(m)), DType::f32, host.data(), host.size());
    }
    model = spec->make_model({}, *device, *stream, *params);
  }
  ModelSpecPtr spec;
  ModelLayout layout;
  std::unique_ptr<runtime::device::Device> device;
  std::unique_ptr<runtime::device::Stream> stream;
  std::unique_ptr<runtime::params::ResidentParams> params;
  std::unique_ptr<Model> model;
};

TEST(Decode, RaggedPrefillAndStepsMatchEachPromptAlone) {
  for (const ModelSpecPtr& spec : {small_gpt(), small_llama(true), small_llama(false)}) {
    SCOPED_TRACE(spec->architecture());
    Rig rig(spec);
    const int V = spec->vocab_size(), B = 3, steps = 4;
    const std::vector<int> lengths = {3, 7, 5};
    const int T = *std::max_element(lengths.begin(), lengths.end());
    // Each row's whole sequence: its prompt, then the tokens fed while decoding.
    std::vector<std::vector<std::int32_t>> seq(B);
    for (int b = 0; b < B; ++b) seq[b] = random_tokens(static_cast<std::size_t>(lengths[b] + steps), V, 20 + b);
    std::vector<std::int32_t> padded(static_cast<std::size_t>(B * T), 0);
    for (int b = 0; b < B; ++b) std::copy_n(seq[b].begin(), lengths[b], padded.begin() + b * T);

    KvCache cache = rig.model->make_kv_cache(B, T + steps);
    // got[b][i]: the logits after row b's token at position lengths[b] - 1 + i.
    std::vector<std::vector<std::vector<float>>> got(B);
    std::vector<float> logits(static_cast<std::size_t>(B * V));
    rig.model->prefill(cache, padded.data(), lengths.data(), B, T, logits.data());
    for (int b = 0; b < B; ++b) got[b].emplace_back(logits.begin() + b * V, logits.begin() + (b + 1) * V);
    EXPECT_FALSE(cache.uniform());
    for (int s = 0; s < steps - 1; ++s) {
      std::vector<std::int32_t> next(B);
      for (int b = 0; b < B; ++b) next[b] = seq[b][static_cast<std::size_t>(lengths[b] + s)];
      rig.model->forward_decode(cache, next.data(), B, 1, logits.data());
      for (int b = 0; b < B; ++b) got[b].emplace_back(logits.begin() + b * V, logits.begin() + (b + 1) * V);
    }
    for (int b = 0; b < B; ++b) EXPECT_EQ(cache.length(b), lengths[b] + steps - 1);

    double max_diff = 0;
    for (int b = 0; b < B; ++b) {
      const int n = lengths[b] + steps - 1;
      std::vector<float> full(static_cast<std::size_t>(n * V));
      rig.model->forward(seq[b].data(), nullptr, 1, n, false, full.data());
      for (int i = 0; i < steps; ++i) {
        const int pos = lengths[b] - 1 + i;
        for (int v = 0; v < V; ++v) {
          max_diff = std::max(max_diff, static_cast<double>(std::fabs(
                                            full[static_cast<std::size_t>(pos * V + v)] - got[b][i][v])));
        }
      }
    }
    EXPECT_LT(max_diff, 2e-5);
  }
}

TEST(Decode, BadPrefillsAreErrors) {
  Rig rig(small_llama(true));
  KvCache cache = rig.model->make_kv_cache(2, 8);
  std::vector<std::int32_t> tokens(2 * 4, 1);
  std::vector<float> logits(2 * 37);
  const int zero[] = {4, 0}, long_row[] = {4, 5}, ok[] = {4, 2};
  EXPECT_THROW(rig.model->prefill(cache, tokens.data(), zero, 2, 4, logits.data()), Error);
  EXPECT_THROW(rig.model->prefill(cache, tokens.data(), long_row, 2, 4, logits.data()), Error);
  EXPECT_THROW(rig.model->prefill(cache, tokens.data(), ok, 1, 4, logits.data()), Error);  // batch
  rig.model->prefill(cache, tokens.data(), ok, 2, 4, logits.data());
  // A prefill appends after each row (a long prompt's next chunk) while the cache holds it.
  EXPECT_NO_THROW(rig.model->prefill(cache, tokens.data(), ok, 2, 4, logits.data()));
  EXPECT_EQ(cache.length(0), 8);
  EXPECT_EQ(cache.length(1), 4);
  EXPECT_THROW(rig.model->prefill(cache, tokens.data(), ok, 2, 4, logits.data()), Error);  // past max_T
  cache.reset();
  EXPECT_NO_THROW(rig.model->prefill(cache, tokens.data(), ok, 2, 4, logits.data()));
}

// A ragged (or uniform) prefill of `lengths`, then `steps` decoding steps: every pass's logits,
// in order.
std::vector<float> generate(Model& model, KvCache& cache, const std::vector<int>& lengths, int steps, int V) {
  const int B = static_cast<int>(lengths.size());
  const int T = *std::max_element(lengths.begin(), lengths.end());
  std::vector<std::int32_t> padded(static_cast<std::size_t>(B * T), 0);
  for (int b = 0; b < B; ++b) {
    const std::vector<std::int32_t> prompt = random_tokens(static_cast<std::size_t>(lengths[b]), V, 40 + b);
    std::copy(prompt.begin(), prompt.end(), padded.begin() + b * T);
  }
  std::vector<float> all;
  std::vector<float> logits(static_cast<std::size_t>(B * V));
  model.prefill(cache, padded.data(), lengths.data(), B, T, logits.data());
  all.insert(all.end(), logits.begin(), logits.end());
  for (int s = 0; s < steps; ++s) {
    const std::vector<std::int32_t> next = random_tokens(static_cast<std::size_t>(B), V, 60 + s);
    model.forward_decode(cache, next.data(), B, 1, logits.data());
    all.insert(all.end(), logits.begin(), logits.end());
  }
  return all;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

TEST(Decode, HostPlacedCacheGivesTheDeviceCacheBits) {
  // 5 layers: the ring's slots are refilled (layer l + 2 after layer l) and wrap across passes.
  for (const ModelSpecPtr& spec : {small_gpt(5), small_llama(true, 5), small_llama(false, 5)}) {
    for (const std::vector<int>& lengths : {std::vector<int>{3, 7, 5}, std::vector<int>{4, 4, 4}}) {
      SCOPED_TRACE(spec->architecture() + (lengths[0] == lengths[1] ? " uniform" : " ragged"));
      Rig rig(spec);
      const int V = spec->vocab_size(), B = 3, steps = 5, max_T = 14;
      KvCache on_device = rig.model->make_kv_cache(B, max_T);
      const std::vector<float> want = generate(*rig.model, on_device, lengths, steps, V);
      EXPECT_EQ(on_device.transfers().h2d_bytes + on_device.transfers().d2h_bytes, 0u);

      offload::HostPool pool(1ull << 20);
      KvCache on_host = rig.model->make_kv_cache(B, max_T, {KvPlacement::host, &pool});
      EXPECT_EQ(on_host.placement(), KvPlacement::host);
      const KvShape shape = spec->kv_shape();
      EXPECT_EQ(pool.stats().current_bytes, KvCache::host_bytes(shape, DType::f32, B, max_T, KvPlacement::host));
      EXPECT_TRUE(same_bits(generate(*rig.model, on_host, lengths, steps, V), want));
      for (int b = 0; b < B; ++b) EXPECT_EQ(on_host.length(b), lengths[static_cast<std::size_t>(b)] + steps);

      // Only the filled positions move: per layer and row, keys and values of the positions
      // before the pass (H2D) and of the positions it keeps (D2H; a prefill keeps the prompt).
      const std::uint64_t pos = static_cast<std::uint64_t>(shape.width) * sizeof(float);
      const std::uint64_t L = static_cast<std::uint64_t>(shape.layers);
      std::uint64_t h2d = 0, d2h = 0;
      for (int len : lengths) {
        d2h += 2 * L * static_cast<std::uint64_t>(len + steps) * pos;
        for (int s = 0; s < steps; ++s) h2d += 2 * L * static_cast<std::uint64_t>(len + s) * pos;
      }
      EXPECT_EQ(on_host.transfers().h2d_bytes, h2d);
      EXPECT_EQ(on_host.transfers().d2h_bytes, d2h);

      // The cache is reused for the next batch as the generator does.
      on_host.reset();
      EXPECT_TRUE(same_bits(generate(*rig.model, on_host, lengths, steps, V), want));
    }
  }
}

// Continuous batching's use of the cache (serve/batcher.h): each row prefilled alone in a window
// of one row (a long prompt in two chunks), a row moved down, then the rows decoded together as
// one window: every row's logits are those of its sequence alone (the full forward), with the
// cache on the device and in pinned host memory (the same bits).
TEST(Decode, WindowsChunksAndRowMovesKeepEachRowsLogits) {
  for (const ModelSpecPtr& spec : {small_gpt(3), small_llama(true, 3), small_llama(false, 3)}) {
    std::vector<std::vector<float>> per_placement;
    for (const bool host : {false, true}) {
      SCOPED_TRACE(spec->architecture() + (host ? " pinned host" : " device"));
      Rig rig(spec);
      const int V = spec->vocab_size(), steps = 3;
      offload::HostPool pool(1ull << 20);
      KvCache cache = host ? rig.model->make_kv_cache(3, 14, {KvPlacement::host, &pool}) : rig.model->make_kv_cache(3, 14);
      // Row 0: a prompt of 4; row 2: a prompt of 7 in chunks of 5 and 2, then moved to row 1.
      const std::vector<std::int32_t> a = random_tokens(4 + steps, V, 80), b = random_tokens(7 + steps, V, 81);
      std::vector<float> logits(static_cast<std::size_t>(2 * V)), first_a, first_b;
      cache.set_window(0, 1);
      const int la = 4;
      rig.model->prefill(cache, a.data(), &la, 1, 4, logits.data());
      first_a.assign(logits.begin(), logits.begin() + V);
      cache.set_window(2, 1);
      const int c1 = 5, c2 = 2;
      rig.model->prefill(cache, b.data(), &c1, 1, 5, logits.data());
      EXPECT_EQ(cache.length(0), 5);
      rig.model->prefill(cache, b.data() + 5, &c2, 1, 2, logits.data());
      EXPECT_EQ(cache.length(0), 7);
      first_b.assign(logits.begin(), logits.begin() + V);
      cache.move_row(2, 1, *rig.stream);
      cache.set_window(0, 2);
      EXPECT_EQ(cache.length(0), 4);
      EXPECT_EQ(cache.length(1), 7);
      std::vector<std::vector<float>> got_a = {first_a}, got_b = {first_b};
      for (int s = 0; s < steps - 1; ++s) {
        const std::int32_t next[2] = {a[static_cast<std::size_t>(4 + s)], b[static_cast<std::size_t>(7 + s)]};
        rig.model->forward_decode(cache, next, 2, 1, logits.data());
        got_a.emplace_back(logits.begin(), logits.begin() + V);
        got_b.emplace_back(logits.begin() + V, logits.end());
      }
      double max_diff = 0;
      std::vector<float> bits;
      for (const auto& [seq, got, len] : {std::tuple{a, got_a, 4}, std::tuple{b, got_b, 7}}) {
        const int n = len + steps - 1;
        std::vector<float> full(static_cast<std::size_t>(n * V));
        rig.model->forward(seq.data(), nullptr, 1, n, false, full.data());
        for (int i = 0; i < steps; ++i) {
          for (int v = 0; v < V; ++v) {
            max_diff = std::max(max_diff, static_cast<double>(std::fabs(
                                              full[static_cast<std::size_t>((len - 1 + i) * V + v)] - got[i][v])));
          }
          bits.insert(bits.end(), got[i].begin(), got[i].end());
        }
      }
      EXPECT_LT(max_diff, 2e-5);
      per_placement.push_back(bits);
    }
    EXPECT_TRUE(same_bits(per_placement[0], per_placement[1]));
  }
}

TEST(Decode, HostPlacedCacheSizes) {
  const KvShape shape{4, 24};
  // 2 bytes x 3 rows x 10 positions x 24 = 1440 bytes per layer's keys (or values).
  EXPECT_EQ(KvCache::bytes(shape, DType::bf16, 3, 10), 4u * 2 * 1440);
  EXPECT_EQ(KvCache::device_bytes(shape, DType::bf16, 3, 10, KvPlacement::device), 4u * 2 * 1440);
  EXPECT_EQ(KvCache::device_bytes(shape, DType::bf16, 3, 10, KvPlacement::host), 2u * 2 * 1440);
  EXPECT_EQ(KvCache::host_bytes(shape, DType::bf16, 3, 10, KvPlacement::device), 0u);
  EXPECT_EQ(KvCache::host_bytes(shape, DType::bf16, 3, 10, KvPlacement::host), 4u * 4096);
  // The device scratch a spec counts shrinks to the slots.
  const ModelSpecPtr spec = small_llama(true, 6);
  const std::uint64_t on_device = spec->inference_bytes({}, 3, 5, 12, KvPlacement::device);
  const std::uint64_t on_host = spec->inference_bytes({}, 3, 5, 12, KvPlacement::host);
  EXPECT_EQ(on_device - on_host, KvCache::bytes(spec->kv_shape(), DType::f32, 3, 12) -
                                     KvCache::device_bytes(spec->kv_shape(), DType::f32, 3, 12, KvPlacement::host));
}

TEST(Decode, HostPlacedCacheBeyondThePinnedBudgetIsAnError) {
  Rig rig(small_gpt(3));
  offload::HostPool pool(8192);  // two layers' buffers at most
  try {
    (void)rig.model->make_kv_cache(2, 16, {KvPlacement::host, &pool});
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("strata.pinned_memory"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("KV cache"), std::string::npos) << e.what();
  }
  EXPECT_EQ(pool.stats().current_bytes, 0u);  // what was taken went back
}

}  // namespace
}  // namespace strata::models
