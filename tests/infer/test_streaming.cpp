// ZeRO-Inference on the host backend: a LLaMA model whose blocks are streamed through the
// device from pinned host memory or NVMe (runtime/zero/inference_engine.h) generates exactly
// what the same model resident on the device generates — the same logits bit for bit (the same
// ops on the same parameters) — and the plan keeps what fits resident: the embedding and the
// head first, then the first blocks, with room for the streaming slots.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/units.h"
#include "infer/generator.h"
#include "models/llama/llama_spec.h"
#include "runtime/comm/comm.h"
#include "runtime/config/config.h"
#include "runtime/device/device.h"
#include "runtime/tiers/plan.h"
#include "runtime/trace/trace.h"
#include "runtime/zero/inference_engine.h"
#include "tests/models/model_test_util.h"

namespace strata::infer {
namespace {

using models::test::TempDir;

models::LlamaConfig model_config() {
  models::LlamaConfig c;
  c.vocab_size = 61;
  c.hidden_size = 64;
  c.intermediate_size = 96;
  c.num_hidden_layers = 6;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.head_dim = 16;
  c.max_position_embeddings = 64;
  c.tie_word_embeddings = false;
  return c;
}

runtime::config::Config make_config(runtime::config::OffloadDevice params, const std::string& nvme,
                                    std::uint64_t device_bytes) {
  runtime::config::Config c;
  c.train_micro_batch_size_per_gpu = std::uint64_t{1};
  c.zero_optimization.stage = 3;  // DeepSpeed's ZeRO-Inference configs: stage 3 with offload_param
  c.zero_optimization.offload_param.device = params;
  if (params == runtime::config::OffloadDevice::kNvme) c.zero_optimization.offload_param.nvme_path = {nvme};
  c.zero_optimization.offload_param.buffer_count = 3;
  c.aio.block_size = 65'536;
  c.strata.device = runtime::config::DeviceKind::kHost;
  c.strata.device_memory_bytes = device_bytes;
  runtime::config::ResolveInputs in;
  in.host_memory_bytes = 8 * kGiB;
  in.cpu_count = 2;
  in.hidden_size = 64;
  return resolve_config(c, in);
}

struct Generated {
  std::vector<float> first_logits;            // of the prefill
  std::vector<std::vector<std::int32_t>> out;  // per prompt
  runtime::zero::EngineCounters counters;
  int resident = 0, modules = 0;
  bool kv_line = false;            // the plan's pinned "KV cache" line
  std::uint64_t kv_pinned_peak = 0;  // the pinned pool's peak while generating
};

Generated generate(runtime::config::OffloadDevice params, const std::string& nvme, std::uint64_t device_bytes,
                   models::KvPlacement kv = models::KvPlacement::device) {
  const models::LlamaSpec spec(model_config());
  const runtime::config::Config config = make_config(params, nvme, device_bytes);
  runtime::trace::Tracer tracer("", "test", false);
  auto device = runtime::device::Device::create({.kind = "host", .memory_bytes = device_bytes});
  auto comm = runtime::comm::create_communicator(*device);
  auto compute = device->create_stream("compute");
  const models::ModelLayout layout = spec.layout();
  const int B = 3, max_T = 24;
  Generated r;
  runtime::zero::EngineSetup setup;
  setup.module_numels = layout.module_numels();
  setup.module_names = layout.module_names();
  setup.activation_bytes = spec.inference_bytes({}, B, 8, max_T, kv);
  setup.kv_cache_pinned_bytes = models::KvCache::host_bytes(spec.kv_shape(), DType::f32, B, max_T, kv);
  runtime::zero::InferenceEngine engine(config, setup, *device, *compute, *comm, tracer);
  for (const runtime::tiers::PlanLine& line : engine.plan().lines) {
    r.kv_line |= line.tier == runtime::tiers::Tier::pinned && line.what.starts_with("KV cache") &&
                 line.bytes == setup.kv_cache_pinned_bytes;
  }
  for (std::size_t m = 0; m < layout.modules.size(); ++m) {
    std::vector<float> values(layout.modules[m].numel);
    spec.init_module(layout.modules[m], 5, values.data());
    for (float& v : values) v *= 3.0f;
    engine.load_module(static_cast<int>(m), values.data());
  }
  auto model = spec.make_model({}, *device, *compute, engine);
  r.resident = engine.resident_modules();
  r.modules = engine.module_count();
  std::vector<Prompt> prompts(4);
  for (std::size_t i = 0; i < prompts.size(); ++i) {
    prompts[i].index = i;
    prompts[i].ids = models::test::random_tokens(3 + 2 * i, 61, static_cast<std::uint32_t>(i + 1));
  }
  GenerateOptions gen;
  gen.max_new_tokens = 10;
  gen.batch = B;
  gen.sampling.temperature = 0.8f;
  gen.sampling.seed = 3;
  gen.kv_cache = {kv, kv == models::KvPlacement::host ? &engine.tiers().pinned() : nullptr};
  Generator g(*model, 61, gen, max_T, PassHooks{[&] { engine.begin_pass(); }, [&] { engine.end_pass(); }});
  r.out.resize(prompts.size());
  g.run(prompts, [&](Completion c) { r.out[c.index] = c.ids; });
  r.kv_pinned_peak = engine.tiers().pinned().stats().peak_bytes;
  // The prefill's logits of one batch, to compare bit for bit.
  models::KvCache cache = model->make_kv_cache(1, 8);
  r.first_logits.resize(61);
  const int len = 3;
  engine.begin_pass();
  model->prefill(cache, prompts[0].ids.data(), &len, 1, 3, r.first_logits.data());
  engine.end_pass();
  r.counters = engine.counters();
  return r;
}

TEST(Streaming, CpuAndNvmeGenerateWhatTheResidentModelGenerates) {
  TempDir dir;
  const Generated resident = generate(runtime::config::OffloadDevice::kNone, "", 64 * kMiB);
  EXPECT_EQ(resident.resident, resident.modules);
  EXPECT_EQ(resident.counters.fetches, 0u);
  // A device budget that holds a few modules besides the slots: the rest is streamed.
  for (auto params : {runtime::config::OffloadDevice::kCpu, runtime::config::OffloadDevice::kNvme}) {
    SCOPED_TRACE(params == runtime::config::OffloadDevice::kCpu ? "cpu" : "nvme");
    const Generated streamed = generate(params, dir.path(), 2 * kMiB);
    EXPECT_GT(streamed.resident, 0);
    EXPECT_LT(streamed.resident, streamed.modules);
    EXPECT_GT(streamed.counters.fetches, 0u);
    EXPECT_GT(streamed.counters.prefetched, 0u);  // fetched ahead along the previous pass
    if (params == runtime::config::OffloadDevice::kNvme) {
      EXPECT_GT(streamed.counters.nvme_read_bytes, 0u);
    }
    EXPECT_EQ(streamed.out, resident.out);
    EXPECT_TRUE(models::test::same_bits(streamed.first_logits, resident.first_logits));
  }
}

// The KV cache in pinned host memory (models/kv_cache.h), taken from the engine's pinned pool and
// counted by the plan, with the layers resident or streamed: the same tokens and logits.
TEST(Streaming, HostPlacedKvCacheGeneratesWhatTheDeviceCacheGenerates) {
  const Generated resident = generate(runtime::config::OffloadDevice::kNone, "", 64 * kMiB);
  EXPECT_FALSE(resident.kv_line);
  for (auto params : {runtime::config::OffloadDevice::kNone, runtime::config::OffloadDevice::kCpu}) {
    SCOPED_TRACE(params == runtime::config::OffloadDevice::kCpu ? "cpu" : "resident");
    const Generated host_kv =
        generate(params, "", params == runtime::config::OffloadDevice::kCpu ? 2 * kMiB : 64 * kMiB,
                 models::KvPlacement::host);
    EXPECT_TRUE(host_kv.kv_line);
    EXPECT_GE(host_kv.kv_pinned_peak, models::KvCache::host_bytes(models::LlamaSpec(model_config()).kv_shape(),
                                                                  DType::f32, 3, 24, models::KvPlacement::host));
    EXPECT_EQ(host_kv.out, resident.out);
  }
}

// The least device memory a run needs shrinks by the KV cache less its 2 slots when the cache is
// in pinned host memory (what --kv-cache auto compares with the device budget).
TEST(Streaming, DeviceMinimumCountsOnlyTheSlotsOfAHostPlacedCache) {
  const models::LlamaSpec spec(model_config());
  const models::ModelLayout layout = spec.layout();
  const runtime::config::Config config = make_config(runtime::config::OffloadDevice::kCpu, "", 2 * kMiB);
  runtime::tiers::PlanInputs in;
  in.module_numels = layout.module_numels();
  in.module_names = layout.module_names();
  in.optimizer = false;
  in.activation_bytes = spec.inference_bytes({}, 16, 8, 64, models::KvPlacement::device);
  const std::uint64_t on_device = runtime::tiers::inference_device_minimum_bytes(config, in);
  in.activation_bytes = spec.inference_bytes({}, 16, 8, 64, models::KvPlacement::host);
  const std::uint64_t on_host = runtime::tiers::inference_device_minimum_bytes(config, in);
  EXPECT_EQ(on_device - on_host,
            models::KvCache::bytes(spec.kv_shape(), DType::f32, 16, 64) -
                models::KvCache::device_bytes(spec.kv_shape(), DType::f32, 16, 64, models::KvPlacement::host));
  // With a 2.5 MiB device, --kv-cache auto would place this cache in pinned host memory.
  EXPECT_GT(on_device, 5 * kMiB / 2);
  EXPECT_LT(on_host, 5 * kMiB / 2);
}

// The greedy plan: with a budget that grows, more modules stay resident, embedding and head first.
TEST(Streaming, PlanKeepsWhatFitsResidentEmbeddingAndHeadFirst) {
  const models::LlamaSpec spec(model_config());
  const models::ModelLayout layout = spec.layout();
  int last = -1;
  for (std::uint64_t budget : {1 * kMiB, 2 * kMiB, 3 * kMiB, 64 * kMiB}) {
    const runtime::config::Config config = make_config(runtime::config::OffloadDevice::kCpu, "", budget);
    runtime::trace::Tracer tracer("", "test", false);
    auto device = runtime::device::Device::create({.kind = "host", .memory_bytes = budget});
    auto comm = runtime::comm::create_communicator(*device);
    auto compute = device->create_stream("compute");
    runtime::zero::EngineSetup setup;
    setup.module_numels = layout.module_numels();
    setup.module_names = layout.module_names();
    setup.activation_bytes = spec.inference_bytes({}, 1, 8, 16);
    try {
      runtime::zero::InferenceEngine engine(config, setup, *device, *compute, *comm, tracer);
      const auto& mods = engine.plan().modules;
      const int resident = engine.resident_modules();
      EXPECT_GE(resident, last) << budget;
      last = resident;
      if (resident > 0) {
        EXPECT_TRUE(mods.front().resident) << "the embedding first";
      }
      if (resident > 1) {
        EXPECT_TRUE(mods.back().resident) << "then the head";
      }
      for (std::size_t m = 2; m + 1 < mods.size(); ++m) {
        if (mods[m].resident) {
          EXPECT_TRUE(mods[m - 1].resident) << "blocks in forward order";
        }
      }
      EXPECT_LE(engine.device_memory().peak_bytes, budget);
    } catch (const Error& e) {
      // Only the smallest budget may be too small, and then the error shows the table.
      EXPECT_EQ(budget, 1 * kMiB) << e.what();
      EXPECT_NE(std::string(e.what()).find("do not fit"), std::string::npos) << e.what();
    }
  }
  EXPECT_EQ(last, static_cast<int>(layout.modules.size()));  // 64 MiB holds everything
}

}  // namespace
}  // namespace strata::infer
