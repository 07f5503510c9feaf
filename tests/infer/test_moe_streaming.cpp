// ZeRO-Inference of a mixture of experts on the host backend: a Mixtral whose blocks and experts
// are streamed from pinned host memory or NVMe generates exactly what the resident model
// generates, and a decoding step at batch 1 with no expert cache moves only the experts its router
// picked: the engine's H2D bytes per step are at most 1.05 x (the streamed non-expert bytes + k of
// each sparse layer's E experts), far below streaming every expert (without the lookahead, whose
// wrong guesses cost bytes: with it, the same tokens). With the expert cache, the
// same prompt decoded a second time finds most of its experts on the device. With experts on the
// host (--moe-cpu-experts), a decoding step moves no expert bytes and the tokens are the same.
// Quantized (INT8 / INT4), the experts move their quantized bytes and stay close.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "core/units.h"
#include "models/kv_cache.h"
#include "models/llama/llama_spec.h"
#include "runtime/comm/comm.h"
#include "runtime/config/config.h"
#include "runtime/device/device.h"
#include "runtime/trace/trace.h"
#include "runtime/zero/inference_engine.h"
#include "tests/infer/streaming_config.h"
#include "tests/models/model_test_util.h"

namespace strata::infer {
namespace {

using models::test::TempDir;

// 8 experts of width 96 and 2 per token in each of 4 layers: the experts are most of the bytes.
models::LlamaConfig mixtral() {
  models::LlamaConfig c;
  c.architecture = "MixtralForCausalLM";
  c.vocab_size = 61;
  c.hidden_size = 64;
  c.intermediate_size = 96;
  c.num_hidden_layers = 4;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.head_dim = 16;
  c.max_position_embeddings = 64;
  c.rms_norm_eps = 1e-5f;
  c.num_experts = 8;
  c.num_experts_per_tok = 2;
  c.moe_intermediate_size = 96;
  c.norm_topk_prob = true;
  return c;
}

runtime::config::Config make_config(runtime::config::OffloadDevice params, const std::string& nvme,
                                    std::uint64_t device_bytes) {
  return test::streaming_config(params, nvme, device_bytes, 4);
}

struct Options {
  std::uint64_t expert_cache_bytes = 0;
  bool lookahead = false;       // models::ModelOptions::moe_lookahead
  std::int64_t host_rows = 0;   // models::ModelOptions::moe_cpu_expert_rows
  bool every_expert = false;    // models::ModelOptions::moe_fetch_every_expert
  DType dtype = DType::f32;     // the compute dtype
  runtime::tiers::WeightQuant quant = {};  // INT8 / INT4 streamed modules (bf16 only)
  int top_k = 0;                // experts per token (0: the config's 2 of 8)
};

struct Decoded {
  std::vector<std::int32_t> ids;                 // greedy, from one prompt
  std::vector<float> first_logits;               // the first run's prefill logits
  std::vector<std::uint64_t> step_h2d;           // H2D bytes of each decoding step
  std::vector<std::uint64_t> step_unused;        // of which fetched ahead and never acquired
  std::uint64_t unused_fetches = 0;              // the first run's decoding steps
  std::uint64_t non_expert = 0;                  // streamed non-expert bytes
  std::uint64_t bound = 0;                       // streamed non-expert bytes + k experts per layer
  std::uint64_t all_experts = 0;                 // streamed non-expert bytes + every expert
  int resident = 0, modules = 0;
  double first_hit_rate = 0, second_hit_rate = 0;  // the expert cache's, per run of the prompt
  // The first run's decoding steps: routed experts copied to the device, and computed on the host.
  std::uint64_t decode_misses = 0, decode_on_host = 0;
  std::uint64_t prefill_misses = 0;  // the first run's prefill: routed experts copied
};

Decoded decode(runtime::config::OffloadDevice params, const std::string& nvme, std::uint64_t device_bytes,
               const Options& o = {}) {
  models::LlamaConfig config = mixtral();
  if (o.top_k > 0) config.num_experts_per_tok = o.top_k;
  const models::LlamaSpec spec(config);
  const models::ModelLayout layout = spec.layout();
  const runtime::config::Config cfg = make_config(params, nvme, device_bytes);
  runtime::trace::Tracer tracer("", "test", false);
  auto device = runtime::device::Device::create({.kind = "host", .memory_bytes = device_bytes});
  auto comm = runtime::comm::create_communicator(*device);
  auto compute = device->create_stream("compute");
  const int max_T = 24;
  runtime::zero::EngineSetup setup;
  setup.module_numels = layout.module_numels();
  setup.module_names = layout.module_names();
  setup.routed_modules = layout.routed_modules();
  models::ModelOptions options;
  options.dtype = o.dtype;
  options.moe_lookahead = o.lookahead;
  options.moe_cpu_expert_rows = o.host_rows;
  options.moe_fetch_every_expert = o.every_expert;
  setup.activation_bytes = spec.inference_bytes(options, 1, 8, max_T);
  setup.expert_cache_bytes = o.expert_cache_bytes;
  setup.dtype = o.dtype;
  setup.quant = o.quant;
  runtime::zero::InferenceEngine engine(cfg, setup, *device, *compute, *comm, tracer);
  for (std::size_t m = 0; m < layout.modules.size(); ++m) {
    std::vector<float> values(layout.modules[m].numel);
    spec.init_module(layout.modules[m], 5, values.data());
    for (float& v : values) v *= 3.0f;
    engine.load_module(static_cast<int>(m), values.data());
  }
  auto model = spec.make_model(options, *device, *compute, engine);
  Decoded r;
  r.resident = engine.resident_modules();
  r.modules = engine.module_count();
  std::uint64_t experts = 0;
  for (std::size_t m = 0; m < layout.modules.size(); ++m) {
    const runtime::tiers::ModulePlan& mp = engine.plan().modules[m];
    if (mp.resident) continue;
    const bool expert = layout.modules[m].kind == models::ModuleKind::expert;
    (expert ? experts : r.bound) += mp.gathered_bytes;
  }
  r.non_expert = r.bound;
  r.all_experts = r.bound + experts;
  r.bound += experts * static_cast<std::uint64_t>(config.num_experts_per_tok) /
             static_cast<std::uint64_t>(config.num_experts);

  const std::vector<std::int32_t> prompt = models::test::random_tokens(6, config.vocab_size, 7);
  const int len = static_cast<int>(prompt.size());
  std::vector<float> logits(static_cast<std::size_t>(config.vocab_size));
  auto greedy = [&] {
    std::int32_t best = 0;
    for (int v = 1; v < config.vocab_size; ++v) {
      if (logits[static_cast<std::size_t>(v)] > logits[static_cast<std::size_t>(best)]) best = v;
    }
    return best;
  };
  // The prompt and 12 greedy tokens, twice.
  for (int run = 0; run < 2; ++run) {
    const runtime::zero::EngineCounters start = engine.counters();
    models::KvCache cache = model->make_kv_cache(1, max_T);
    std::vector<std::int32_t> ids;
    engine.begin_pass();
    model->prefill(cache, prompt.data(), &len, 1, len, logits.data());
    engine.end_pass();
    if (run == 0) r.first_logits = logits;
    ids.push_back(greedy());
    const runtime::zero::EngineCounters prefilled = engine.counters();
    for (int t = 0; t < 12; ++t) {
      const runtime::zero::EngineCounters before = engine.counters();
      engine.begin_pass();
      model->forward_decode(cache, &ids.back(), 1, 1, logits.data());
      engine.end_pass();
      const runtime::zero::EngineCounters after = engine.counters();
      if (run == 0) {
        r.step_h2d.push_back(after.h2d_bytes - before.h2d_bytes);
        r.step_unused.push_back(after.unused_h2d_bytes - before.unused_h2d_bytes);
      }
      ids.push_back(greedy());
    }
    const runtime::zero::EngineCounters end = engine.counters();
    if (run == 0) {
      r.prefill_misses = prefilled.expert_misses - start.expert_misses;
      r.decode_misses = end.expert_misses - prefilled.expert_misses;
      r.decode_on_host = end.expert_host - prefilled.expert_host;
      r.unused_fetches = end.unused_fetches - prefilled.unused_fetches;
    }
    const double hits = static_cast<double>(end.expert_hits - start.expert_hits);
    const double misses = static_cast<double>(end.expert_misses - start.expert_misses);
    (run == 0 ? r.first_hit_rate : r.second_hit_rate) = hits + misses > 0 ? hits / (hits + misses) : 0.0;
    if (run == 0) r.ids = ids;
    EXPECT_EQ(ids, r.ids);
  }
  return r;
}

TEST(MoeStreaming, ExpertsStreamedOnlyWhenRoutedGenerateTheResidentTokens) {
  TempDir dir;
  const Decoded resident = decode(runtime::config::OffloadDevice::kNone, "", 64 * kMiB);
  EXPECT_EQ(resident.resident, resident.modules);
  EXPECT_EQ(resident.first_hit_rate, 1.0);  // every expert resident
  for (auto params : {runtime::config::OffloadDevice::kCpu, runtime::config::OffloadDevice::kNvme}) {
    SCOPED_TRACE(params == runtime::config::OffloadDevice::kCpu ? "cpu" : "nvme");
    const Decoded streamed = decode(params, dir.path(), 3 * kMiB / 2);
    EXPECT_LT(streamed.resident, streamed.modules / 4) << "the test needs most modules streamed";
    EXPECT_EQ(streamed.ids, resident.ids);
    // Every decoding step after the first (whose trace the prefill recorded) moves at most 1.05 x
    // the bound; every step moves at least the routed experts' share.
    for (std::size_t t = 1; t < streamed.step_h2d.size(); ++t) {
      EXPECT_LE(static_cast<double>(streamed.step_h2d[t]), 1.05 * static_cast<double>(streamed.bound))
          << "step " << t << " moved " << streamed.step_h2d[t] << " bytes; bound " << streamed.bound
          << ", every expert " << streamed.all_experts;
    }
    EXPECT_LT(streamed.bound, streamed.all_experts / 2);
    EXPECT_LT(streamed.first_hit_rate, 0.5);  // no cache: the resident experts only
    // The lookahead's guesses cost bytes (within every expert's), never tokens; less the guesses
    // the router did not confirm (counted as fetched and never used), a step moves what it
    // moves without them, within the bound, and some guess was wrong in some step. 2 MiB: the
    // blocks resident (the lookahead reads the next router where it stays), the experts streamed.
    const Decoded guessed = decode(params, dir.path(), 2 * kMiB, {.lookahead = true});
    EXPECT_EQ(guessed.ids, resident.ids);
    for (std::size_t t = 0; t < guessed.step_h2d.size(); ++t) {
      EXPECT_LE(guessed.step_h2d[t], guessed.all_experts);
      EXPECT_LE(guessed.step_unused[t], guessed.step_h2d[t]);
      if (t > 0) {
        EXPECT_LE(static_cast<double>(guessed.step_h2d[t] - guessed.step_unused[t]),
                  1.05 * static_cast<double>(guessed.bound))
            << "step " << t;
      }
    }
    EXPECT_GT(guessed.unused_fetches, 0u) << "no guess was wrong: the test shows nothing";
    for (std::uint64_t u : streamed.step_unused) EXPECT_EQ(u, 0u) << "fetched and unused without the lookahead";
  }
}

// INT8 / INT4 apply to the experts as to any streamed module: against the same model streamed in
// bf16 (the same modules streamed), the bound of a decoding step (streamed non-expert bytes + k
// of E experts per layer) is the quantized share of bf16's, 130/256 (INT8, group 128) or 66/256
// (INT4), and every step moves at most 1.05 x it. The logits' closeness is checked with every
// expert routed (k = E): with 2 of 8 a weight's rounding may change which experts a later layer
// picks (here INT8 moved the prefill's logits by 13 % of their largest that way), a
// discontinuity of the model, not an error of the format.
TEST(MoeStreaming, QuantizedExpertsMoveTheirQuantizedBytes) {
  TempDir dir;
  const std::uint64_t budget = 3 * kMiB / 2;
  for (auto params : {runtime::config::OffloadDevice::kCpu, runtime::config::OffloadDevice::kNvme}) {
    SCOPED_TRACE(params == runtime::config::OffloadDevice::kCpu ? "cpu" : "nvme");
    const Decoded ref = decode(params, dir.path(), budget, {.dtype = DType::bf16});
    ASSERT_LT(ref.resident, ref.modules / 4) << "the test needs most modules streamed";
    const Decoded every = decode(params, dir.path(), budget, {.dtype = DType::bf16, .top_k = 8});
    float every_max = 0.0f;
    for (float v : every.first_logits) every_max = std::max(every_max, std::fabs(v));
    for (int bits : {8, 4}) {
      SCOPED_TRACE(bits == 8 ? "int8" : "int4");
      const runtime::tiers::WeightQuant quant{bits, 128};
      const Decoded q = decode(params, dir.path(), budget, {.dtype = DType::bf16, .quant = quant});
      ASSERT_EQ(q.resident, ref.resident);
      EXPECT_NEAR(static_cast<double>(q.bound) / static_cast<double>(ref.bound),
                  bits == 8 ? 130.0 / 256.0 : 66.0 / 256.0, 1e-3);
      EXPECT_LT(q.bound, q.all_experts / 2);
      for (std::size_t t = 1; t < q.step_h2d.size(); ++t) {
        EXPECT_LE(static_cast<double>(q.step_h2d[t]), 1.05 * static_cast<double>(q.bound)) << "step " << t;
      }
      const Decoded qe = decode(params, dir.path(), budget, {.dtype = DType::bf16, .quant = quant, .top_k = 8});
      float err = 0.0f;
      for (std::size_t i = 0; i < every.first_logits.size(); ++i) {
        err = std::max(err, std::fabs(qe.first_logits[i] - every.first_logits[i]));
      }
      std::printf("%s, every expert routed: max |logit - bf16 logit| = %.4f (max |logit| %.3f)\n",
                  bits == 8 ? "int8" : "int4", static_cast<double>(err), static_cast<double>(every_max));
      EXPECT_LE(err, (bits == 8 ? 0.04f : 0.25f) * every_max);
      EXPECT_GT(err, 0.0f) << "quantization changes something";
    }
  }
}

// --moe-fetch all (the dense-streaming baseline): every decoding step after the first moves every
// streamed expert, within 1.05 x, none of it unused, and the tokens are the resident model's.
// Without it the same steps move at most half of that (the test above).
TEST(MoeStreaming, FetchingEveryExpertMovesThemAllForTheSameTokens) {
  TempDir dir;
  const Decoded resident = decode(runtime::config::OffloadDevice::kNone, "", 64 * kMiB);
  for (auto params : {runtime::config::OffloadDevice::kCpu, runtime::config::OffloadDevice::kNvme}) {
    SCOPED_TRACE(params == runtime::config::OffloadDevice::kCpu ? "cpu" : "nvme");
    const Decoded every = decode(params, dir.path(), 3 * kMiB / 2, {.every_expert = true});
    EXPECT_EQ(every.ids, resident.ids);
    for (std::size_t t = 1; t < every.step_h2d.size(); ++t) {
      EXPECT_GE(static_cast<double>(every.step_h2d[t]), 0.95 * static_cast<double>(every.all_experts)) << "step " << t;
      EXPECT_LE(static_cast<double>(every.step_h2d[t]), 1.05 * static_cast<double>(every.all_experts)) << "step " << t;
      EXPECT_EQ(every.step_unused[t], 0u) << "step " << t;
    }
  }
}

// With the expert cache (as much as the transient device memory holds), the same prompt decoded
// again finds most of its experts on the device, and the tokens stay the resident model's.
TEST(MoeStreaming, TheExpertCacheServesARepeatedPrompt) {
  TempDir dir;
  const Decoded resident = decode(runtime::config::OffloadDevice::kNone, "", 64 * kMiB);
  // 3 MiB: the non-expert modules resident, the experts streamed (not all of them fit), and the
  // device memory left to the cache.
  const Decoded cached = decode(runtime::config::OffloadDevice::kCpu, dir.path(), 3 * kMiB,
                                {.expert_cache_bytes = std::numeric_limits<std::uint64_t>::max()});
  std::printf("expert cache: hit rate %.3f on the first run of the prompt, %.3f on the second\n",
              cached.first_hit_rate, cached.second_hit_rate);
  EXPECT_EQ(cached.ids, resident.ids);
  EXPECT_GT(cached.second_hit_rate, 0.5) << "first run " << cached.first_hit_rate;
  EXPECT_GE(cached.second_hit_rate, cached.first_hit_rate);
  const Decoded uncached = decode(runtime::config::OffloadDevice::kCpu, dir.path(), 3 * kMiB);
  EXPECT_GT(cached.second_hit_rate, uncached.second_hit_rate + 0.2);
}

// Experts on the host (models::ModelOptions::moe_cpu_expert_rows, --moe-cpu-experts): every routed
// expert kept in pinned memory with at most that many rows runs where it lives. The tokens are the
// resident model's, a decoding step copies no expert (only the non-expert modules' bytes move), and
// the row limit holds: at 1 row, the prefill's experts with several rows are copied. Experts on
// NVMe are not in host memory: they are copied as before.
TEST(MoeStreaming, ExpertsOnTheHostCopyNoExpertBytes) {
  TempDir dir;
  const Decoded resident = decode(runtime::config::OffloadDevice::kNone, "", 64 * kMiB);
  const Decoded copied = decode(runtime::config::OffloadDevice::kCpu, dir.path(), 3 * kMiB / 2);
  EXPECT_EQ(copied.decode_on_host, 0u);
  EXPECT_GT(copied.decode_misses, 0u);
  for (const std::int64_t rows : {std::numeric_limits<std::int64_t>::max(), std::int64_t{1}}) {
    SCOPED_TRACE(rows);
    const Decoded on_host = decode(runtime::config::OffloadDevice::kCpu, dir.path(), 3 * kMiB / 2, {.host_rows = rows});
    EXPECT_EQ(on_host.ids, resident.ids);
    EXPECT_EQ(on_host.decode_misses, 0u) << "a decoding step copied an expert";
    // One token, 2 distinct experts in each of 4 layers, 12 steps.
    EXPECT_EQ(on_host.decode_on_host, 12u * 4u * 2u);
    // The prefill routes 6 tokens x 2 to 8 experts: in each layer some expert has 2 rows or more.
    if (rows == 1) {
      EXPECT_GE(on_host.prefill_misses, 4u);
    } else {
      EXPECT_EQ(on_host.prefill_misses, 0u);
    }
    for (std::size_t t = 1; t < on_host.step_h2d.size(); ++t) {
      EXPECT_LE(on_host.step_h2d[t], on_host.non_expert) << "step " << t;
      EXPECT_LT(on_host.step_h2d[t], copied.step_h2d[t]) << "step " << t;
    }
  }
  const Decoded from_nvme = decode(runtime::config::OffloadDevice::kNvme, dir.path(), 3 * kMiB / 2,
                                   {.host_rows = std::numeric_limits<std::int64_t>::max()});
  EXPECT_EQ(from_nvme.ids, resident.ids);
  EXPECT_EQ(from_nvme.decode_on_host, 0u);
}

}  // namespace
}  // namespace strata::infer
