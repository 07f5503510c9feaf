// runtime/config: parsing, DeepSpeed defaults and examples, round trips, errors naming the
// key path, warnings for unknown keys, "auto".
#include <algorithm>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "config_test_util.h"

namespace strata::runtime::test {
namespace {

TEST(ConfigParse, EmptyObjectGivesDeepSpeedDefaults) {
  config::ParsedConfig parsed = parse("{}");
  EXPECT_TRUE(parsed.warnings.empty());
  const config::Config& c = parsed.config;
  EXPECT_EQ(c, config::Config{});
  EXPECT_FALSE(c.train_batch_size.has_value());
  EXPECT_EQ(c.gradient_clipping, config::AutoOr<double>(0.0));
  EXPECT_EQ(c.fp16.initial_scale_power, 16);
  EXPECT_EQ(c.fp16.loss_scale_window, 1000u);
  EXPECT_EQ(c.fp16.hysteresis, 2u);
  EXPECT_EQ(c.fp16.min_loss_scale, 1.0);
  EXPECT_EQ(c.zero_optimization.stage, 0);
  EXPECT_EQ(c.zero_optimization.reduce_bucket_size.value(), 500'000'000u);
  EXPECT_EQ(c.zero_optimization.allgather_bucket_size, 500'000'000u);
  EXPECT_EQ(c.zero_optimization.stage3_prefetch_bucket_size.value(), 50'000'000u);
  EXPECT_EQ(c.zero_optimization.stage3_param_persistence_threshold.value(), 100'000u);
  EXPECT_EQ(c.zero_optimization.stage3_max_live_parameters, 1'000'000'000u);
  EXPECT_EQ(c.zero_optimization.stage3_max_reuse_distance, 1'000'000'000u);
  EXPECT_EQ(c.zero_optimization.sub_group_size, 1'000'000'000u);
  EXPECT_FALSE(c.zero_optimization.overlap_comm);
  EXPECT_TRUE(c.zero_optimization.contiguous_gradients);
  EXPECT_EQ(c.zero_optimization.offload_param.buffer_count, 5u);
  EXPECT_EQ(c.zero_optimization.offload_param.buffer_size, 100'000'000u);
  EXPECT_EQ(c.zero_optimization.offload_param.max_in_cpu, 1'000'000'000u);
  EXPECT_EQ(c.zero_optimization.offload_optimizer.buffer_count, 4u);
  EXPECT_EQ(c.zero_optimization.offload_optimizer.ratio, 1.0);
  EXPECT_EQ(c.aio.block_size, 1'048'576u);
  EXPECT_EQ(c.aio.queue_depth, 8u);
  EXPECT_EQ(c.aio.intra_op_parallelism, 1u);
  EXPECT_FALSE(c.aio.single_submit);
  EXPECT_TRUE(c.aio.overlap_events);
  EXPECT_EQ(c.strata.device, config::DeviceKind::kAuto);
  EXPECT_EQ(c.strata.device_memory_bytes, 0u);
  EXPECT_FALSE(c.strata.checksum);
  EXPECT_EQ(c.strata.io_backend, config::IoBackend::kAuto);
  EXPECT_EQ(c.strata.direct_io, config::DirectIoMode::kAuto);
  EXPECT_EQ(c.strata.checkpoint_on_error, config::CheckpointOnError::kContinue);
  EXPECT_FALSE(c.strata.io_uring_sqpoll);
  EXPECT_EQ(c.strata.checkpoint_keep, 2u);
}

TEST(ConfigParse, OverlapCommDefaultsOnAtStage3Only) {
  EXPECT_TRUE(parse(R"({"zero_optimization": {"stage": 3}})").config.zero_optimization.overlap_comm);
  EXPECT_FALSE(parse(R"({"zero_optimization": {"stage": 2}})").config.zero_optimization.overlap_comm);
  EXPECT_FALSE(parse(R"({"zero_optimization": {"stage": 3, "overlap_comm": false}})")
                   .config.zero_optimization.overlap_comm);
}

TEST(ConfigParse, DeepSpeedZero3NvmeExample) {
  config::ParsedConfig parsed = config::load_config_file(data_file("ds_zero3_nvme.json"));
  const config::Config& c = parsed.config;
  EXPECT_EQ(c.train_micro_batch_size_per_gpu->value(), 4u);
  EXPECT_EQ(c.gradient_accumulation_steps->value(), 2u);
  EXPECT_TRUE(c.bf16.enabled.value());
  ASSERT_TRUE(c.optimizer.has_value());
  EXPECT_EQ(c.optimizer->type, config::OptimizerType::kAdamW);
  EXPECT_EQ(c.optimizer->lr.value(), 3e-4);
  EXPECT_EQ(c.optimizer->betas.value()[1], 0.95);
  ASSERT_TRUE(c.scheduler.has_value());
  EXPECT_EQ(c.scheduler->type, config::SchedulerType::kWarmupDecayLR);
  EXPECT_EQ(c.scheduler->total_num_steps->value(), 100'000u);
  const config::ZeroConfig& z = c.zero_optimization;
  EXPECT_EQ(z.stage, 3);
  EXPECT_TRUE(z.overlap_comm);
  EXPECT_EQ(z.stage3_prefetch_bucket_size.value(), 10'000'000u);  // written 1e7
  EXPECT_EQ(z.reduce_bucket_size.value(), 10'000'000u);
  EXPECT_EQ(z.offload_param.device, config::OffloadDevice::kNvme);
  EXPECT_EQ(z.offload_param.nvme_path, std::vector<std::string>{"/local_nvme"});
  EXPECT_EQ(z.offload_param.buffer_size, 100'000'000u);  // written 1e8
  EXPECT_TRUE(z.offload_param.pin_memory);
  EXPECT_EQ(z.offload_optimizer.device, config::OffloadDevice::kNvme);
  EXPECT_EQ(z.offload_optimizer.buffer_count, 4u);
  EXPECT_EQ(c.aio.block_size, 262'144u);
  EXPECT_EQ(c.aio.queue_depth, 32u);
  EXPECT_EQ(c.aio.intra_op_parallelism, 1u);  // from DeepSpeed's old name thread_count

  // steps_per_print, wall_clock_breakdown and fast_init are DeepSpeed keys strata ignores;
  // thread_count is an old name. No key is unknown.
  std::vector<std::string> ignored;
  for (const config::ConfigWarning& w : parsed.warnings) {
    EXPECT_NE(w.kind, config::ConfigWarning::Kind::kUnknownKey) << w.message;
    if (w.kind == config::ConfigWarning::Kind::kIgnoredKey) ignored.push_back(w.path);
  }
  EXPECT_EQ(ignored, (std::vector<std::string>{"zero_optimization.offload_optimizer.fast_init",
                                               "steps_per_print", "wall_clock_breakdown"}));
  EXPECT_TRUE(std::any_of(parsed.warnings.begin(), parsed.warnings.end(),
                          [](const config::ConfigWarning& w) { return w.path == "aio.thread_count"; }));
}

TEST(ConfigParse, DeepSpeedZeroOffloadCpuExample) {
  const config::Config c = config::load_config_file(data_file("ds_zero_offload_cpu.json")).config;
  EXPECT_EQ(c.train_batch_size->value(), 64u);
  EXPECT_TRUE(c.fp16.enabled.value());
  EXPECT_EQ(c.fp16.loss_scale, 0.0);
  EXPECT_EQ(c.optimizer->type, config::OptimizerType::kAdam);
  EXPECT_TRUE(c.optimizer->adam_w_mode);  // DeepSpeed: "Adam" is AdamW unless told otherwise
  EXPECT_EQ(c.scheduler->type, config::SchedulerType::kWarmupLR);
  EXPECT_FALSE(c.scheduler->total_num_steps.has_value());
  EXPECT_EQ(c.zero_optimization.stage, 2);
  EXPECT_EQ(c.zero_optimization.offload_optimizer.device, config::OffloadDevice::kCpu);
  EXPECT_TRUE(c.zero_optimization.offload_optimizer.pin_memory);
  EXPECT_EQ(c.zero_optimization.offload_param.device, config::OffloadDevice::kNone);
  EXPECT_EQ(c.zero_optimization.allgather_bucket_size, 200'000'000u);
  EXPECT_EQ(c.strata.device, config::DeviceKind::kHost);
  EXPECT_EQ(c.strata.device_memory_bytes, 1 * kGiB);
  EXPECT_EQ(c.strata.pinned_memory_bytes, 4 * kGiB);
  EXPECT_EQ(c.strata.cpu_threads, 8u);
}

TEST(ConfigParse, RoundTripsThroughPrint) {
  std::vector<std::string> texts = {
      "{}",
      R"({"train_batch_size": 12, "gradient_clipping": 0.5, "fp16": {"enabled": true,
          "loss_scale": 128, "consecutive_hysteresis": true},
          "optimizer": {"type": "adam", "params": {"lr": 1e-4, "adam_w_mode": false,
          "bias_correction": false}},
          "scheduler": {"type": "WarmupCosineLR", "params": {"total_num_steps": 500,
          "warmup_num_steps": 50, "warmup_min_ratio": 0.1, "cos_min_ratio": 0.01,
          "warmup_type": "linear"}},
          "zero_optimization": {"stage": 1, "offload_optimizer": {"device": "nvme",
          "nvme_path": ["/nvme0", "/nvme1"], "ratio": 1, "pipeline_read": true}},
          "aio": {"single_submit": true},
          "strata": {"device": "cuda", "device_memory": 123456789, "trace": "/tmp/t.json",
          "checksum": true, "io_backend": "threads", "direct_io": "require",
          "io_uring_sqpoll": true, "checkpoint_keep": 5, "checkpoint_on_error": "stop"}})",
  };
  for (const char* file : {"ds_zero3_nvme.json", "ds_zero_offload_cpu.json", "hf_zero3_auto.json"})
    texts.push_back(config::config_to_json(config::load_config_file(data_file(file)).config));
  for (const std::string& text : texts) {
    const config::Config first = parse(text).config;
    const std::string printed = config_to_json(first);
    config::ParsedConfig second = parse(printed);
    EXPECT_EQ(second.config, first) << printed;
    EXPECT_EQ(config_to_json(second.config), printed);
    EXPECT_TRUE(second.warnings.empty()) << second.warnings.front().message;
  }
}

TEST(ConfigParse, IntegersMayBeWrittenAsFloats) {
  const config::Config c = parse(R"({"train_batch_size": 3.2e1, "zero_optimization": {
      "reduce_bucket_size": 5e8, "stage3_max_live_parameters": 1e9}})").config;
  EXPECT_EQ(c.train_batch_size->value(), 32u);
  EXPECT_EQ(c.zero_optimization.reduce_bucket_size.value(), 500'000'000u);
  EXPECT_EQ(c.zero_optimization.stage3_max_live_parameters, 1'000'000'000u);
}

TEST(ConfigParse, EnumsAreCaseInsensitive) {
  EXPECT_EQ(parse(R"({"optimizer": {"type": "adamw"}})").config.optimizer->type, config::OptimizerType::kAdamW);
  EXPECT_EQ(parse(R"({"optimizer": {"type": "ADAM"}})").config.optimizer->type, config::OptimizerType::kAdam);
  EXPECT_EQ(parse(R"({"strata": {"device": "Host"}})").config.strata.device, config::DeviceKind::kHost);
}

TEST(ConfigParse, DeepSpeedAliases) {
  const config::Config c = parse(R"({"zero_optimization": {"prefetch_bucket_size": 7,
      "max_live_parameters": 8}, "bfloat16": {"enabled": true}})").config;
  EXPECT_EQ(c.zero_optimization.stage3_prefetch_bucket_size.value(), 7u);
  EXPECT_EQ(c.zero_optimization.stage3_max_live_parameters, 8u);
  EXPECT_TRUE(c.bf16.enabled.value());
  Error e = parse_error(R"({"zero_optimization": {"prefetch_bucket_size": 7,
      "stage3_prefetch_bucket_size": 8}})");
  EXPECT_EQ(e.where(), "zero_optimization.prefetch_bucket_size");
}

TEST(ConfigParse, WarmupLRDefaultsToTheOptimizerLr) {
  const config::Config c = parse(R"({"optimizer": {"type": "AdamW", "params": {"lr": 2e-4}},
      "scheduler": {"type": "WarmupLR"}})").config;
  EXPECT_EQ(c.scheduler->warmup_max_lr.value(), 2e-4);
  EXPECT_EQ(c.scheduler->warmup_num_steps.value(), 1000u);
  EXPECT_EQ(c.scheduler->warmup_type, config::WarmupType::kLog);
}

TEST(ConfigParse, AdamWIgnoresAdamWModeFalseWithAWarning) {
  config::ParsedConfig parsed = parse(R"({"optimizer": {"type": "AdamW", "params": {"adam_w_mode": false}}})");
  EXPECT_TRUE(parsed.config.optimizer->adam_w_mode);
  ASSERT_EQ(parsed.warnings.size(), 1u);
  EXPECT_EQ(parsed.warnings[0].path, "optimizer.params.adam_w_mode");
}

struct BadCase {
  const char* json;
  const char* path;      // expected Error::where()
  const char* expected;  // a piece of the message saying what form is expected
};

void expect_bad(const BadCase& c) {
  Error e = parse_error(c.json);
  EXPECT_EQ(e.where(), c.path) << c.json << "\n -> " << e.what();
  EXPECT_NE(std::string(e.what()).find(c.expected), std::string::npos)
      << c.json << "\n -> " << e.what();
  EXPECT_NE(std::string(e.what()).find("test.json"), std::string::npos) << e.what();
}

TEST(ConfigErrors, WrongTypeNamesThePathAndTheExpectedForm) {
  const BadCase cases[] = {
      {R"({"train_batch_size": "32"})", "train_batch_size", "a non-negative integer"},
      {R"({"zero_optimization": {"stage": "3"}})", "zero_optimization.stage", "an integer"},
      {R"({"fp16": {"enabled": 1}})", "fp16.enabled", "true or false"},
      {R"({"fp16": []})", "fp16", "an object"},
      {R"({"zero_optimization": {"offload_param": [1]}})", "zero_optimization.offload_param",
       "an object"},
      {R"({"optimizer": {"type": "Adam", "params": {"betas": [0.9]}}})", "optimizer.params.betas",
       "two numbers"},
      {R"({"optimizer": {"type": "Adam", "params": {"betas": [0.9, "x"]}}})",
       "optimizer.params.betas[1]", "a number"},
      {R"({"optimizer": {"type": "Adam", "params": {"lr": "fast"}}})", "optimizer.params.lr",
       "a number"},
      {R"({"strata": {"device_memory": "lots"}})", "strata.device_memory", "\"512MiB\""},
      {R"({"strata": {"trace": 5}})", "strata.trace", "a string"},
      {R"({"zero_optimization": {"reduce_bucket_size": 1.5}})",
       "zero_optimization.reduce_bucket_size", "a non-negative integer"},
      {R"({"aio": {"queue_depth": 5e9}})", "aio.queue_depth", "[0, 4294967295]"},
      {R"({"zero_optimization": true})", "zero_optimization", "deprecated"},
  };
  for (const BadCase& c : cases) expect_bad(c);
}

TEST(ConfigErrors, OutOfRangeNamesThePath) {
  const BadCase cases[] = {
      {R"({"zero_optimization": {"stage": 3, "offload_optimizer": {"ratio": 1.5}}})",
       "zero_optimization.offload_optimizer.ratio", "[0, 1]"},
      {R"({"zero_optimization": {"stage": 3, "offload_optimizer": {"ratio": -0.1}}})",
       "zero_optimization.offload_optimizer.ratio", "[0, 1]"},
      {R"({"zero_optimization": {"stage": 4}})", "zero_optimization.stage", "0, 1, 2 or 3"},
      {R"({"zero_optimization": {"reduce_bucket_size": -1}})",
       "zero_optimization.reduce_bucket_size", "non-negative"},
      {R"({"zero_optimization": {"offload_param": {"buffer_size": -5}}})",
       "zero_optimization.offload_param.buffer_size", "non-negative"},
      {R"({"strata": {"pinned_memory": -1}})", "strata.pinned_memory", "byte count"},
      {R"({"optimizer": {"type": "Adam", "params": {"betas": [0.9, 1.0]}}})",
       "optimizer.params.betas[1]", "[0, 1)"},
      {R"({"optimizer": {"type": "Adam", "params": {"eps": 0}}})", "optimizer.params.eps", "> 0"},
      {R"({"optimizer": {"type": "Adam", "params": {"lr": -1e-3}}})", "optimizer.params.lr", ">= 0"},
      {R"({"gradient_clipping": -1})", "gradient_clipping", ">= 0"},
      {R"({"train_micro_batch_size_per_gpu": 0})", "train_micro_batch_size_per_gpu", "positive"},
      {R"({"fp16": {"min_loss_scale": 0}})", "fp16.min_loss_scale", "> 0"},
      {R"({"aio": {"queue_depth": 0}})", "aio.queue_depth", "positive"},
      {R"({"aio": {"queue_depth": 5000}})", "aio.queue_depth", "1 to 4096"},
      {R"({"aio": {"intra_op_parallelism": 65}})", "aio.intra_op_parallelism", "1 to 64"},
      {R"({"aio": {"block_size": 1000}})", "aio.block_size", "multiple of 4096"},
      {R"({"zero_optimization": {"offload_param": {"nvme_path": []}}})",
       "zero_optimization.offload_param.nvme_path", "list of folders"},
      {R"({"zero_optimization": {"offload_param": {"nvme_path": ["/a", ""]}}})",
       "zero_optimization.offload_param.nvme_path[1]", "a folder"},
      {R"({"strata": {"io_backend": "libaio"}})", "strata.io_backend", "io_uring"},
      {R"({"strata": {"direct_io": "yes"}})", "strata.direct_io", "require"},
      {R"({"strata": {"checkpoint_on_error": "retry"}})", "strata.checkpoint_on_error", "continue"},
      {R"({"scheduler": {"type": "WarmupCosineLR", "params": {"total_num_steps": 10,
          "cos_min_ratio": 2}}})", "scheduler.params.cos_min_ratio", "[0, 1]"},
  };
  for (const BadCase& c : cases) expect_bad(c);
}

TEST(ConfigErrors, RulesBetweenKeys) {
  const BadCase cases[] = {
      {R"({"fp16": {"enabled": true}, "bf16": {"enabled": true}})", "bf16.enabled", "both"},
      {R"({"zero_optimization": {"stage": 3, "offload_optimizer": {"device": "nvme"}}})",
       "zero_optimization.offload_optimizer.nvme_path", "nvme_path"},
      {R"({"zero_optimization": {"stage": 3, "offload_param": {"device": "nvme"}}})",
       "zero_optimization.offload_param.nvme_path", "nvme_path"},
      {R"({"zero_optimization": {"stage": 2, "offload_param": {"device": "cpu"}}})",
       "zero_optimization.offload_param.device", "stage 3"},
      {R"({"zero_optimization": {"stage": 0, "offload_optimizer": {"device": "cpu"}}})",
       "zero_optimization.offload_optimizer.device", "stage 1, 2 or 3"},
      {R"({"zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu",
          "ratio": 0.5}}})", "zero_optimization.offload_optimizer.ratio", "stage 3"},
      {R"({"scheduler": {"type": "WarmupDecayLR"}})", "scheduler.params.total_num_steps",
       "total_num_steps"},
      {R"({"optimizer": {"params": {"lr": 1}}})", "optimizer.type", "no type"},
      {R"({"zero_optimization": {"cpu_offload": true}})", "zero_optimization.cpu_offload",
       "deprecated"},
      {R"({"optimizer": {"type": "Adam", "params": {"amsgrad": true}}})",
       "optimizer.params.amsgrad", "AMSGrad"},
  };
  for (const BadCase& c : cases) expect_bad(c);
}

TEST(ConfigErrors, UnknownEnumValuesListTheChoices) {
  const BadCase cases[] = {
      {R"({"zero_optimization": {"stage": 3, "offload_param": {"device": "gpu"}}})",
       "zero_optimization.offload_param.device", R"(one of "none", "cpu", "nvme")"},
      {R"({"optimizer": {"type": "Lamb"}})", "optimizer.type", R"("Adam", "AdamW")"},
      {R"({"scheduler": {"type": "OneCycle"}})", "scheduler.type", "WarmupCosineLR"},
      {R"({"scheduler": {"type": "WarmupLR", "params": {"warmup_type": "cosine"}}})",
       "scheduler.params.warmup_type", R"("log", "linear")"},
      {R"({"strata": {"device": "tpu"}})", "strata.device", R"("auto", "host", "cuda")"},
  };
  for (const BadCase& c : cases) expect_bad(c);
}

TEST(ConfigErrors, MalformedJsonGivesLineAndColumn) {
  Error e = parse_error("{\n  \"train_batch_size\": 8,\n  \"fp16\": {\"enabled\": tru}\n}\n");
  // Column 26 is where the parser gave up: the '}' after "tru"; the message quotes the token.
  EXPECT_EQ(e.where(), "test.json:3:26") << e.what();
  EXPECT_NE(std::string(e.what()).find("line 3, column 26"), std::string::npos) << e.what();
  EXPECT_NE(std::string(e.what()).find("tru}"), std::string::npos) << e.what();

  Error trailing = parse_error("{\"a\": 1,\n}");
  EXPECT_EQ(trailing.where(), "test.json:2:1") << trailing.what();

  Error from_file = expect_error([] { config::load_config_file(data_file("malformed.json")); });
  EXPECT_EQ(from_file.where(), data_file("malformed.json") + ":3:26") << from_file.what();

  EXPECT_NE(std::string(parse_error("").what()).find("malformed JSON"), std::string::npos);
  // A number beyond a double is nlohmann's out_of_range, not a parse_error (found by tests/fuzz).
  Error overflow = parse_error("{\"gradient_clipping\": 1e309}");
  EXPECT_EQ(overflow.where(), "test.json") << overflow.what();
  EXPECT_NE(std::string(overflow.what()).find("1e309"), std::string::npos) << overflow.what();
  EXPECT_NE(std::string(parse_error("[1, 2]").what()).find("not a JSON object"), std::string::npos);
}

TEST(ConfigErrors, MissingOrUnreadableFileNamesThePathAndErrno) {
  const std::string missing = data_file("no_such_config.json");
  Error e = expect_error([&] { config::load_config_file(missing); });
  EXPECT_EQ(e.where(), missing);
  EXPECT_NE(std::string(e.what()).find("No such file or directory"), std::string::npos) << e.what();

  Error dir = expect_error([] { config::load_config_file(STRATA_CONFIG_TEST_DATA); });
  EXPECT_EQ(dir.where(), STRATA_CONFIG_TEST_DATA);
  EXPECT_NE(std::string(dir.what()).find("Is a directory"), std::string::npos) << dir.what();
}

TEST(ConfigWarnings, EveryUnknownKeyIsReportedWithASuggestion) {
  LogCapture capture;
  config::ParsedConfig parsed = parse(R"({
      "trian_batch_size": 8,
      "zero_optimization": {"stage": 3, "stage3_prefetch_bucket": 1, "overlap_com": true,
                            "offload_param": {"devcie": "cpu"}},
      "strata": {"Device": "host", "colour": "blue"},
      "steps_per_print": 10})");
  std::vector<std::pair<std::string, std::string>> unknown;  // path, suggestion
  for (const config::ConfigWarning& w : parsed.warnings) {
    if (w.kind == config::ConfigWarning::Kind::kUnknownKey) unknown.emplace_back(w.path, w.suggestion);
  }
  const std::vector<std::pair<std::string, std::string>> expected = {
      {"zero_optimization.offload_param.devcie", "zero_optimization.offload_param.device"},
      {"zero_optimization.stage3_prefetch_bucket", "zero_optimization.stage3_prefetch_bucket_size"},
      {"zero_optimization.overlap_com", "zero_optimization.overlap_comm"},
      {"strata.Device", "strata.device"},
      {"strata.colour", ""},
      {"trian_batch_size", "train_batch_size"},
  };
  EXPECT_EQ(unknown, expected);
  EXPECT_EQ(parsed.config.zero_optimization.stage, 3);  // known keys still read

  // Each one reached the log, as a warning naming the full path.
  const std::string log = capture.text();
  for (const auto& [path, suggestion] : expected) {
    EXPECT_NE(log.find("warning config test.json: unknown config key '" + path + "'"),
              std::string::npos) << log;
    if (!suggestion.empty()) {
      EXPECT_NE(log.find("did you mean '" + suggestion + "'"), std::string::npos) << log;
    }
  }
  EXPECT_NE(log.find("'steps_per_print' is a DeepSpeed setting that strata does not use"),
            std::string::npos) << log;
}

TEST(ConfigAuto, HuggingFaceStyleAutoValuesStayExplicit) {
  config::ParsedConfig parsed = config::load_config_file(data_file("hf_zero3_auto.json"));
  const config::Config& c = parsed.config;
  EXPECT_TRUE(c.train_batch_size->is_auto());
  EXPECT_TRUE(c.train_micro_batch_size_per_gpu->is_auto());
  EXPECT_TRUE(c.gradient_accumulation_steps->is_auto());
  EXPECT_TRUE(c.gradient_clipping.is_auto());
  EXPECT_TRUE(c.fp16.enabled.is_auto());
  EXPECT_TRUE(c.bf16.enabled.is_auto());
  EXPECT_TRUE(c.optimizer->lr.is_auto());
  EXPECT_TRUE(c.optimizer->betas.is_auto());
  EXPECT_TRUE(c.scheduler->total_num_steps->is_auto());
  EXPECT_TRUE(c.zero_optimization.reduce_bucket_size.is_auto());
  EXPECT_TRUE(c.zero_optimization.stage3_prefetch_bucket_size.is_auto());
  EXPECT_TRUE(c.zero_optimization.stage3_param_persistence_threshold.is_auto());
  EXPECT_EQ(c.zero_optimization.stage3_max_live_parameters, 1'000'000'000u);

  const std::vector<std::string> keys = unresolved_auto_keys(c);
  EXPECT_EQ(keys.size(), 17u);
  EXPECT_NE(std::find(keys.begin(), keys.end(), "optimizer.params.lr"), keys.end());
  EXPECT_NE(std::find(keys.begin(), keys.end(), "zero_optimization.reduce_bucket_size"), keys.end());

  const std::string printed = config_to_json(c);
  EXPECT_NE(printed.find(R"("lr": "auto")"), std::string::npos) << printed;
  EXPECT_NE(printed.find(R"("stage3_prefetch_bucket_size": "auto")"), std::string::npos);

  // "auto" is accepted only where DeepSpeed (via Hugging Face) accepts it.
  expect_bad({R"({"zero_optimization": {"stage": "auto"}})", "zero_optimization.stage", "an integer"});
  expect_bad({R"({"zero_optimization": {"sub_group_size": "auto"}})",
              "zero_optimization.sub_group_size", "a non-negative integer"});
}

}  // namespace
}  // namespace strata::runtime::test
