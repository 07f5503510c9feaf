// runtime/config: overrides, resolution (batch-size rule, "auto" sizes, machine defaults),
// validation of configs built in code, and the printed config.
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "config_test_util.h"

namespace strata::runtime::test {
namespace {

// ---- overrides ---------------------------------------------------------------------------

TEST(ConfigOverride, SetsValuesBeforeValidation) {
  const config::Config c = parse(R"({"zero_optimization": {"stage": 2}, "optimizer": {"type": "Adam"}})",
                         {"zero_optimization.stage=3",          // a number
                          "strata.device=host",                 // not JSON: taken as a string
                          "strata.device_memory=2GiB",          // string, then parsed as bytes
                          "strata.pinned_memory=\"1GiB\"",      // quoted JSON string
                          "optimizer.params.betas=[0.8, 0.9]",  // JSON array
                          "optimizer.params.betas.1=0.95",      // one element of it
                          "zero_optimization.offload_param.device=cpu",
                          "train_batch_size=auto",
                          "zero_optimization.reduce_bucket_size=5e8",
                          "fp16.enabled = true"})
                       .config;
  EXPECT_EQ(c.zero_optimization.stage, 3);
  EXPECT_TRUE(c.zero_optimization.overlap_comm);  // the stage-3 default follows the override
  EXPECT_EQ(c.strata.device, config::DeviceKind::kHost);
  EXPECT_EQ(c.strata.device_memory_bytes, 2 * kGiB);
  EXPECT_EQ(c.strata.pinned_memory_bytes, 1 * kGiB);
  EXPECT_EQ(c.optimizer->betas.value()[0], 0.8);
  EXPECT_EQ(c.optimizer->betas.value()[1], 0.95);
  EXPECT_EQ(c.zero_optimization.offload_param.device, config::OffloadDevice::kCpu);
  EXPECT_TRUE(c.train_batch_size->is_auto());
  EXPECT_EQ(c.zero_optimization.reduce_bucket_size.value(), 500'000'000u);
  EXPECT_TRUE(c.fp16.enabled.value());
}

TEST(ConfigOverride, LaterOverrideWinsAndNullRestoresTheDefault) {
  const config::Config c = parse(R"({"zero_optimization": {"reduce_bucket_size": 7}})",
                         {"zero_optimization.stage=1", "zero_optimization.stage=2",
                          "zero_optimization.reduce_bucket_size=null"})
                       .config;
  EXPECT_EQ(c.zero_optimization.stage, 2);
  EXPECT_EQ(c.zero_optimization.reduce_bucket_size.value(), 500'000'000u);
}

TEST(ConfigOverride, ErrorsNameTheOverride) {
  const std::string ratio = "zero_optimization.offload_optimizer.ratio=2";
  Error bad_value = parse_error(R"({"zero_optimization": {"stage": 3}})", {ratio});
  EXPECT_EQ(bad_value.where(), "zero_optimization.offload_optimizer.ratio");
  EXPECT_NE(std::string(bad_value.what()).find("override '" + ratio + "'"), std::string::npos)
      << bad_value.what();

  Error bad_type = parse_error("{}", {"zero_optimization.stage=three"});
  EXPECT_EQ(bad_type.where(), "zero_optimization.stage");
  EXPECT_NE(std::string(bad_type.what()).find("zero_optimization.stage=three"), std::string::npos);

  Error typo = parse_error("{}", {"zero_optimization.stge=3"});
  EXPECT_EQ(typo.where(), "zero_optimization.stge");
  EXPECT_NE(std::string(typo.what()).find("override 'zero_optimization.stge=3'"), std::string::npos);
  EXPECT_EQ(typo.hint(), "did you mean 'zero_optimization.stage'?");

  Error new_section = parse_error("{}", {"zero_optimisation.stage=3"});
  EXPECT_EQ(new_section.where(), "zero_optimisation");

  Error no_equals = parse_error("{}", {"zero_optimization.stage"});
  EXPECT_NE(std::string(no_equals.what()).find("no '='"), std::string::npos);

  Error empty_part = parse_error("{}", {"zero_optimization..stage=3"});
  EXPECT_NE(std::string(empty_part.what()).find("empty part"), std::string::npos);

  // Found by tests/fuzz: a value (or key) that is not UTF-8 became a JSON string that no
  // message could quote (nlohmann's dump() threw its type_error instead of a strata::Error).
  for (const char* not_utf8 : {"zero_optimization.stage=\xe8\xe8", "zero_\xe8.stage=3",
                               "optimizer.params.lr=\xff"}) {
    Error e = parse_error("{}", {not_utf8});
    EXPECT_NE(std::string(e.what()).find("not valid UTF-8"), std::string::npos) << e.what();
  }

  Error into_scalar = parse_error(R"({"train_batch_size": 8})", {"train_batch_size.x=1"});
  EXPECT_EQ(into_scalar.where(), "train_batch_size");
  EXPECT_NE(std::string(into_scalar.what()).find("not an object"), std::string::npos);

  Error bad_index = parse_error(R"({"optimizer": {"type": "Adam", "params": {"betas": [0.9, 0.99]}}})",
                                {"optimizer.params.betas.2=0.5"});
  EXPECT_EQ(bad_index.where(), "optimizer.params.betas");
}

TEST(ConfigOverride, UnknownKeyInTheFileStaysAWarning) {
  config::ParsedConfig parsed = parse(R"({"colour": 1})", {"zero_optimization.stage=1"});
  ASSERT_EQ(parsed.warnings.size(), 1u);
  EXPECT_EQ(parsed.warnings[0].path, "colour");
}

// ---- batch sizes -------------------------------------------------------------------------

struct BatchCase {
  std::string json;
  std::uint32_t world;
  std::uint64_t train, micro, accum;
};

TEST(ConfigResolve, BatchSizesFollowDeepSpeedsRule) {
  const BatchCase cases[] = {
      {R"({"train_batch_size": 32, "train_micro_batch_size_per_gpu": 4})", 2, 32, 4, 4},
      {R"({"train_batch_size": 32, "gradient_accumulation_steps": 2})", 4, 32, 4, 2},
      {R"({"train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 2})", 3, 24, 4, 2},
      {R"({"train_batch_size": 16})", 4, 16, 4, 1},
      {R"({"train_micro_batch_size_per_gpu": 2})", 8, 16, 2, 1},
      {R"({"train_batch_size": 24, "train_micro_batch_size_per_gpu": 3,
           "gradient_accumulation_steps": 4})", 2, 24, 3, 4},
      // "auto" batch sizes count as absent.
      {R"({"train_batch_size": "auto", "train_micro_batch_size_per_gpu": 4,
           "gradient_accumulation_steps": "auto"})", 2, 8, 4, 1},
  };
  for (const BatchCase& c : cases) {
    config::ResolveInputs inputs;
    inputs.world_size = c.world;
    const config::Config r = resolve_config(parse(c.json).config, inputs);
    EXPECT_EQ(r.train_batch_size->value(), c.train) << c.json;
    EXPECT_EQ(r.train_micro_batch_size_per_gpu->value(), c.micro) << c.json;
    EXPECT_EQ(r.gradient_accumulation_steps->value(), c.accum) << c.json;
  }
}

TEST(ConfigResolve, InconsistentOrMissingBatchSizesAreErrors) {
  struct Bad {
    const char* json;
    std::uint32_t world;
    const char* where;
    const char* says;
  };
  const Bad cases[] = {
      {R"({"train_batch_size": 32, "train_micro_batch_size_per_gpu": 4,
           "gradient_accumulation_steps": 2})", 2, "train_batch_size",
       "train_batch_size (32) != train_micro_batch_size_per_gpu (4) * gradient_accumulation_steps "
       "(2) * world size (2)"},
      {R"({"train_batch_size": 30, "train_micro_batch_size_per_gpu": 4})", 2, "train_batch_size",
       "not divisible"},
      {R"({"train_batch_size": 10})", 4, "train_batch_size", "not divisible"},
      {R"({"gradient_accumulation_steps": 4})", 1, "train_micro_batch_size_per_gpu",
       "neither train_batch_size nor train_micro_batch_size_per_gpu"},
      {"{}", 1, "train_micro_batch_size_per_gpu", "neither"},
  };
  for (const Bad& c : cases) {
    config::ResolveInputs inputs;
    inputs.world_size = c.world;
    config::Config config = parse(c.json).config;
    Error e = expect_error([&] { resolve_config(config, inputs); });
    EXPECT_EQ(e.where(), c.where) << c.json;
    EXPECT_NE(std::string(e.what()).find(c.says), std::string::npos) << e.what();
  }
  config::ResolveInputs no_ranks;
  no_ranks.world_size = 0;
  expect_error([&] { resolve_config(parse(R"({"train_batch_size": 8})").config, no_ranks); });
}

// ---- "auto" sizes and machine defaults ---------------------------------------------------

TEST(ConfigResolve, HiddenSizeResolvesAutoBucketSizes) {
  const config::Config c = config::load_config_file(data_file("hf_zero3_auto.json")).config;
  config::ResolveInputs inputs;
  inputs.world_size = 1;
  config::Config without = c;
  without.train_micro_batch_size_per_gpu = config::AutoOr<std::uint64_t>(2);
  EXPECT_TRUE(resolve_config(without, inputs).zero_optimization.reduce_bucket_size.is_auto());

  inputs.hidden_size = 1024;
  const config::Config r = resolve_config(without, inputs);
  EXPECT_EQ(r.zero_optimization.reduce_bucket_size.value(), 1024u * 1024u);
  EXPECT_EQ(r.zero_optimization.stage3_prefetch_bucket_size.value(), 943'718u);  // 0.9 * h^2
  EXPECT_EQ(r.zero_optimization.stage3_param_persistence_threshold.value(), 10'240u);
  EXPECT_EQ(r.train_batch_size->value(), 2u);
  // What resolve cannot know stays "auto" and is listed.
  const std::vector<std::string> open = unresolved_auto_keys(r);
  EXPECT_EQ(open.front(), "gradient_clipping");
  EXPECT_EQ(open.size(), 11u);
}

TEST(ConfigResolve, StrataDefaultsComeFromTheMachine) {
  config::ResolveInputs inputs;
  inputs.host_memory_bytes = 64 * kGiB;
  inputs.cpu_count = 12;

  config::Config host = parse(R"({"train_batch_size": 1, "strata": {"device": "host"}})").config;
  config::Config r = resolve_config(host, inputs);
  EXPECT_EQ(r.strata.device_memory_bytes, config::kHostDeviceDefaultMemoryBytes);
  EXPECT_EQ(r.strata.device_memory_bytes, 512 * kMiB);
  EXPECT_EQ(r.strata.pinned_memory_bytes, 32 * kGiB);
  EXPECT_EQ(r.strata.cpu_threads, 12u);

  // A CUDA (or not yet known) device keeps 0: its backend decides.
  config::Config cuda = parse(R"({"train_batch_size": 1, "strata": {"device": "cuda"}})").config;
  EXPECT_EQ(resolve_config(cuda, inputs).strata.device_memory_bytes, 0u);
  config::Config any = parse(R"({"train_batch_size": 1})").config;
  EXPECT_EQ(resolve_config(any, inputs).strata.device_memory_bytes, 0u);

  // Given values are kept.
  config::Config given = parse(R"({"train_batch_size": 1, "strata": {"device": "host",
      "device_memory": "256MiB", "pinned_memory": 1048576, "cpu_threads": 3}})").config;
  r = resolve_config(given, inputs);
  EXPECT_EQ(r.strata.device_memory_bytes, 256 * kMiB);
  EXPECT_EQ(r.strata.pinned_memory_bytes, 1 * kMiB);
  EXPECT_EQ(r.strata.cpu_threads, 3u);

  // Without inputs, this machine answers.
  r = resolve_config(any, config::ResolveInputs{});
  EXPECT_GT(r.strata.pinned_memory_bytes, 0u);
  EXPECT_GE(r.strata.cpu_threads, 1u);
}

TEST(ConfigResolve, ResolvedConfigRoundTrips) {
  config::ResolveInputs inputs;
  inputs.world_size = 4;
  inputs.host_memory_bytes = 8 * kGiB;
  inputs.cpu_count = 4;
  const config::Config r = resolve_config(config::load_config_file(data_file("ds_zero3_nvme.json")).config, inputs);
  EXPECT_EQ(r.train_batch_size->value(), 32u);
  EXPECT_EQ(parse(config_to_json(r)).config, r);
  EXPECT_TRUE(unresolved_auto_keys(r).empty());
}

// ---- validation of configs built in code -------------------------------------------------

TEST(ConfigValidate, ChecksConfigsBuiltInCode) {
  config::Config c;
  EXPECT_TRUE(validate_config(c).empty());
  c.zero_optimization.stage = 3;
  c.zero_optimization.offload_optimizer.ratio = 2.0;
  EXPECT_EQ(expect_error([&] { validate_config(c); }).where(),
            "zero_optimization.offload_optimizer.ratio");
  c.zero_optimization.offload_optimizer.ratio = 0.5;
  EXPECT_TRUE(validate_config(c).empty());
  c.zero_optimization.stage = 2;
  EXPECT_EQ(expect_error([&] { validate_config(c); }).where(),
            "zero_optimization.offload_optimizer.ratio");

  config::Config adamw;
  adamw.optimizer = config::OptimizerConfig{};
  adamw.optimizer->adam_w_mode = false;  // AdamW always decouples
  EXPECT_EQ(expect_error([&] { validate_config(adamw); }).where(), "optimizer.params.adam_w_mode");

  config::Config warm;
  warm.scheduler = config::SchedulerConfig{};
  warm.scheduler->type = config::SchedulerType::kWarmupDecayLR;
  warm.scheduler->total_num_steps = config::AutoOr<std::uint64_t>(10);
  std::vector<config::ConfigWarning> warnings = validate_config(warm);  // ends during warmup (1000)
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_EQ(warnings[0].path, "scheduler.params.total_num_steps");
}

// ---- the printed config ------------------------------------------------------------------

// Every leaf key path of a JSON object, e.g. "zero_optimization.offload_param.device".
void collect_paths(const nlohmann::ordered_json& j, const std::string& prefix, std::vector<std::string>* out) {
  for (const auto& item : j.items()) {
    std::string path = prefix.empty() ? item.key() : prefix + "." + item.key();
    if (item.value().is_object()) {
      collect_paths(item.value(), path, out);
    } else {
      out->push_back(path);
    }
  }
}

TEST(ConfigPrint, PrintsEveryKey) {
  config::ResolveInputs inputs;
  inputs.host_memory_bytes = 8 * kGiB;
  inputs.cpu_count = 4;
  const config::Config r = resolve_config(
      parse(R"({"train_batch_size": 8, "optimizer": {"type": "AdamW"},
          "scheduler": {"type": "WarmupCosineLR", "params": {"total_num_steps": 100}}})").config,
      inputs);
  nlohmann::ordered_json printed = nlohmann::ordered_json::parse(config_to_json(r));
  std::vector<std::string> paths;
  collect_paths(printed, "", &paths);
  const char* expected[] = {
      "train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps",
      "gradient_clipping", "fp16.enabled", "fp16.loss_scale", "fp16.initial_scale_power",
      "fp16.loss_scale_window", "fp16.hysteresis", "fp16.consecutive_hysteresis",
      "fp16.min_loss_scale", "bf16.enabled", "optimizer.type", "optimizer.params.lr",
      "optimizer.params.betas", "optimizer.params.eps", "optimizer.params.weight_decay",
      "optimizer.params.adam_w_mode", "optimizer.params.bias_correction", "scheduler.type",
      "scheduler.params.total_num_steps", "scheduler.params.warmup_min_ratio",
      "scheduler.params.warmup_num_steps", "scheduler.params.cos_min_ratio",
      "scheduler.params.warmup_type", "scheduler.params.last_batch_iteration",
      "zero_optimization.stage", "zero_optimization.offload_param.device",
      "zero_optimization.offload_param.nvme_path", "zero_optimization.offload_param.buffer_count",
      "zero_optimization.offload_param.buffer_size", "zero_optimization.offload_param.max_in_cpu",
      "zero_optimization.offload_param.pin_memory", "zero_optimization.offload_optimizer.device",
      "zero_optimization.offload_optimizer.nvme_path",
      "zero_optimization.offload_optimizer.buffer_count",
      "zero_optimization.offload_optimizer.pin_memory",
      "zero_optimization.offload_optimizer.pipeline_read",
      "zero_optimization.offload_optimizer.pipeline_write",
      "zero_optimization.offload_optimizer.ratio", "zero_optimization.sub_group_size",
      "zero_optimization.stage3_prefetch_bucket_size", "zero_optimization.stage3_max_live_parameters",
      "zero_optimization.stage3_max_reuse_distance",
      "zero_optimization.stage3_param_persistence_threshold", "zero_optimization.reduce_bucket_size",
      "zero_optimization.allgather_bucket_size", "zero_optimization.overlap_comm",
      "zero_optimization.contiguous_gradients", "aio.block_size", "aio.queue_depth",
      "aio.intra_op_parallelism", "aio.single_submit", "aio.overlap_events",
      "data_types.grad_accum_dtype", "strata.device",
      "strata.device_memory", "strata.pinned_memory", "strata.cpu_threads", "strata.trace",
      "strata.checksum", "strata.io_backend", "strata.direct_io", "strata.io_uring_sqpoll",
      "strata.checkpoint_keep", "strata.checkpoint_on_error", "strata.speculative_updates", "strata.speculative_update_memory"};
  EXPECT_EQ(paths, std::vector<std::string>(std::begin(expected), std::end(expected)));
  EXPECT_EQ(printed["gradient_accumulation_steps"], 1);
  EXPECT_EQ(printed["strata"]["pinned_memory"], 4 * kGiB);
  EXPECT_EQ(printed["zero_optimization"]["offload_param"]["nvme_path"], nullptr);
}

TEST(ConfigPrint, LogConfigLogsTheResolvedConfig) {
  LogCapture capture;
  config::Config c;
  c.train_batch_size = config::AutoOr<std::uint64_t>(8);
  log_config(c);
  const std::string log = capture.text();
  EXPECT_NE(log.find("\"train_batch_size\": 8"), std::string::npos) << log;
  EXPECT_NE(log.find("\"stage3_prefetch_bucket_size\": 50000000"), std::string::npos) << log;
}

}  // namespace
}  // namespace strata::runtime::test
