// ZeRO-Inference on the host backend: a LLaMA model whose blocks are streamed through the
// device from pinned host memory or NVMe (runtime/zero/inference_engine.h) generates exactly
// what the same model resident on the device generates — the same logits bit for bit (the same
// ops on the same parameters) — and the plan keeps what fits resident: the embedding and the
// head first, then the first blocks, with room for the streaming slots. Quantized streaming
// (INT8 / INT4 shards, dequantized on the device) stays close to the unquantized bf16 model and
// moves exactly the quantized bytes.
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
#include "kernels/host/quantize.h"
#include "infer/generator.h"
#include "runtime/tiers/plan.h"
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
  return test::streaming_config(params, nvme, device_bytes, 3);
}

struct Generated {
  std::vector<float> first_logits;            // of the prefill
  std::vector<std::vector<std::int32_t>> out;  // per prompt
  runtime::zero::EngineCounters counters;
  int resident = 0, modules = 0;
  runtime::tiers::ZeroPlan plan;
  runtime::zero::EngineCounters loaded;
  std::uint64_t streamed_h2d() const { return counters.h2d_bytes - loaded.h2d_bytes; }
  bool kv_line = false;              // the plan's pinned "KV cache" line
  std::uint64_t kv_pinned_peak = 0;  // the pinned pool's peak while generating
};

Generated generate(runtime::config::OffloadDevice params, const std::string& nvme, std::uint64_t device_bytes,
                   DType dtype = DType::f32, runtime::tiers::WeightQuant quant = {},
                   models::KvPlacement kv = models::KvPlacement::device) {
  const models::LlamaSpec spec(model_config());
  models::ModelOptions options;
  options.dtype = dtype;
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
  setup.activation_bytes = spec.inference_bytes(options, B, 8, max_T, kv);
  setup.kv_cache_pinned_bytes = models::KvCache::host_bytes(spec.kv_shape(), dtype, B, max_T, kv);
  setup.dtype = dtype;
  setup.quant = quant;
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
  auto model = spec.make_model(options, *device, *compute, engine);
  r.loaded = engine.counters();  // the resident modules' loads are H2D copies too
  r.resident = engine.resident_modules();
  r.modules = engine.module_count();
  r.plan = engine.plan();
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

// The greedy plan: with a budget that grows, more modules stay resident, embedding and head first.
TEST(Streaming, HostPlacedKvCacheGeneratesWhatTheDeviceCacheGenerates) {
  const Generated resident = generate(runtime::config::OffloadDevice::kNone, "", 64 * kMiB);
  EXPECT_FALSE(resident.kv_line);
  for (auto params : {runtime::config::OffloadDevice::kNone, runtime::config::OffloadDevice::kCpu}) {
    SCOPED_TRACE(params == runtime::config::OffloadDevice::kCpu ? "cpu" : "resident");
    const Generated host_kv =
        generate(params, "", params == runtime::config::OffloadDevice::kCpu ? 2 * kMiB : 64 * kMiB, DType::f32, {},
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

// Quantized streaming against the unquantized bf16 model streamed the same way: the logits stay
// close (INT4 looser than INT8), the sampled tokens mostly agree, and every fetch moves exactly
// the quantized bytes of a block (packed values + bf16 scales): 130/256 (INT8, group 128) and
// 66/256 (INT4) of the bf16 block's bytes.
TEST(Streaming, QuantizedStreamingIsCloseAndMovesTheQuantizedBytes) {
  TempDir dir;
  const std::uint64_t budget = 1 * kMiB + 512 * kKiB;
  const models::LlamaSpec spec(model_config());
  const std::size_t block_numel = runtime::tiers::partition_module(spec.layout().modules[1].numel, 1).padded_numel;
  for (auto params : {runtime::config::OffloadDevice::kCpu, runtime::config::OffloadDevice::kNvme}) {
    const bool on_nvme = params == runtime::config::OffloadDevice::kNvme;
    SCOPED_TRACE(on_nvme ? "nvme" : "cpu");
    const Generated ref = generate(params, dir.path(), budget, DType::bf16);
    ASSERT_LT(ref.resident, ref.modules);
    ASSERT_GT(ref.counters.fetches, 0u);
    // Only blocks are streamed (the embedding and the head stay resident): every fetch is one block.
    auto only_blocks_streamed = [](const Generated& g) {
      return g.plan.modules.front().resident && g.plan.modules.back().resident;
    };
    ASSERT_TRUE(only_blocks_streamed(ref));
    EXPECT_EQ(ref.streamed_h2d(), ref.counters.fetches * block_numel * 2);
    float ref_max = 0.0f;
    for (float v : ref.first_logits) ref_max = std::max(ref_max, std::fabs(v));
    for (int bits : {8, 4}) {
      SCOPED_TRACE(bits == 8 ? "int8" : "int4");
      const runtime::tiers::WeightQuant quant{bits, 128};
      const Generated q = generate(params, dir.path(), budget, DType::bf16, quant);
      ASSERT_LT(q.resident, q.modules);
      ASSERT_TRUE(only_blocks_streamed(q));
      for (std::size_t m = 0; m < q.plan.modules.size(); ++m) {
        EXPECT_EQ(q.plan.modules[m].quantized, !q.plan.modules[m].resident) << m;
      }
      ASSERT_GT(q.counters.fetches, 0u);
      const std::uint64_t block_bytes = kernels::host::quant_bytes(block_numel, 128, bits);
      EXPECT_EQ(block_bytes, block_numel * (bits == 8 ? 130 : 66) / 128);
      EXPECT_EQ(q.streamed_h2d(), q.counters.fetches * block_bytes);
      if (on_nvme) {
        EXPECT_GE(q.counters.nvme_read_bytes, q.counters.fetches * block_bytes);
        EXPECT_LT(q.counters.nvme_read_bytes, ref.counters.nvme_read_bytes);
      }
      // Per fetch: 130/256 (int8) and 66/256 (int4) of bf16's bytes.
      const double per_fetch = static_cast<double>(q.streamed_h2d()) / static_cast<double>(q.counters.fetches);
      const double ref_per_fetch = static_cast<double>(ref.streamed_h2d()) / static_cast<double>(ref.counters.fetches);
      EXPECT_DOUBLE_EQ(per_fetch / ref_per_fetch, bits == 8 ? 130.0 / 256.0 : 66.0 / 256.0);

      float err = 0.0f;
      for (std::size_t i = 0; i < ref.first_logits.size(); ++i) {
        err = std::max(err, std::fabs(q.first_logits[i] - ref.first_logits[i]));
      }
      std::printf("%s %s: max |logit - bf16 logit| = %.4f (max |logit| %.3f)\n", on_nvme ? "nvme" : "cpu",
                  bits == 8 ? "int8" : "int4", static_cast<double>(err), static_cast<double>(ref_max));
      EXPECT_LE(err, (bits == 8 ? 0.04f : 0.25f) * ref_max);
      EXPECT_FALSE(models::test::same_bits(q.first_logits, ref.first_logits)) << "quantization changes something";
    }
  }
}

// The plan of a quantized run: the streamed shards in their quantized bytes, named by their
// format, and the dequantization buffers on the device; several ranks are refused.
TEST(Streaming, QuantizedPlanCountsTheQuantizedBytes) {
  const models::LlamaSpec spec(model_config());
  const models::ModelLayout layout = spec.layout();
  runtime::tiers::PlanInputs in;
  in.module_numels = layout.module_numels();
  in.module_names = layout.module_names();
  in.dtype = DType::bf16;
  in.optimizer = false;
  in.device_budget_bytes = 1 * kMiB + 512 * kKiB;
  in.pinned_budget_bytes = 1 * kGiB;
  in.quant = {8, 64};
  const runtime::config::Config config = make_config(runtime::config::OffloadDevice::kCpu, "", in.device_budget_bytes);
  const runtime::tiers::ZeroPlan plan = runtime::tiers::make_inference_plan(config, in);
  std::uint64_t shards = 0;
  std::size_t largest = 0;
  for (const runtime::tiers::ModulePlan& mp : plan.modules) {
    if (mp.resident) continue;
    ASSERT_TRUE(mp.quantized);
    EXPECT_EQ(mp.shard_bytes, kernels::host::quant_bytes(mp.part.padded_numel, 64, 8));
    shards += (mp.shard_bytes + 4095) / 4096 * 4096;
    largest = std::max(largest, mp.part.padded_numel);
  }
  ASSERT_GT(shards, 0u);
  bool saw_shards = false, saw_dequant = false;
  for (const runtime::tiers::PlanLine& l : plan.lines) {
    if (l.what == "parameter shards (int8, group 64, bf16 scales)") {
      EXPECT_EQ(l.tier, runtime::tiers::Tier::pinned);
      EXPECT_EQ(l.bytes, shards);
      saw_shards = true;
    }
    if (l.what.rfind("dequantized parameters", 0) == 0) {
      EXPECT_EQ(l.bytes, runtime::tiers::dequant_buffer_bytes(plan, DType::bf16));
      EXPECT_GE(l.bytes, 2 * largest * 2);
      saw_dequant = true;
    }
  }
  EXPECT_TRUE(saw_shards) << plan.table(in);
  EXPECT_TRUE(saw_dequant) << plan.table(in);
  // A budget that holds every module: nothing is quantized, no dequantization buffers.
  {
    runtime::tiers::PlanInputs all = in;
    all.device_budget_bytes = 64 * kMiB;
    const runtime::config::Config big = make_config(runtime::config::OffloadDevice::kCpu, "", 64 * kMiB);
    const runtime::tiers::ZeroPlan p = runtime::tiers::make_inference_plan(big, all);
    for (const runtime::tiers::ModulePlan& mp : p.modules) EXPECT_TRUE(mp.resident && !mp.quantized);
    EXPECT_EQ(runtime::tiers::dequant_buffer_bytes(p, DType::bf16), 0u);
  }
  in.world = 2;
  EXPECT_THROW(runtime::tiers::make_inference_plan(config, in), Error);
  in.world = 1;
  in.quant = {3, 128};
  EXPECT_THROW(runtime::tiers::make_inference_plan(config, in), Error);
}

}  // namespace
}  // namespace strata::infer
