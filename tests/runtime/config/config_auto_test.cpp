// runtime/config: a DeepSpeed config as Hugging Face's Trainer passes it, full of "auto", resolved
// as a training run resolves it (resolve_config_explained with inputs.training): each "auto" from
// its flag, else HF TrainingArguments' default; where each came from (the provenance table); flag
// precedence over the file's numbers; and data_types.grad_accum_dtype.
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "config_test_util.h"

namespace strata::runtime::test {
namespace {

using config::ResolvedKey;

config::ResolveInputs training_inputs() {
  config::ResolveInputs in;
  in.world_size = 1;
  in.host_memory_bytes = 8 * kGiB;
  in.cpu_count = 4;
  in.training = true;
  return in;
}

config::Resolution resolve_hf(const config::ResolveInputs& in) {
  return resolve_config_explained(config::load_config_file(data_file("hf_zero3_auto.json")).config, in);
}

// The source of `key` in the table, or "" when the key is not listed.
std::string source_of(const config::Resolution& r, const std::string& key) {
  for (const ResolvedKey& k : r.autos) {
    if (k.key == key) return k.source;
  }
  return "";
}

bool has_note(const config::Resolution& r, const std::string& text) {
  for (const std::string& n : r.notes) {
    if (n.find(text) != std::string::npos) return true;
  }
  return false;
}

TEST(ConfigAuto, EveryAutoTakesHfTrainerDefaultsWithoutFlags) {
  config::ResolveInputs in = training_inputs();
  in.hidden_size = 768;
  in.flags.steps = 100;  // strata train passes its --steps
  const config::Resolution r = resolve_hf(in);
  const config::Config& c = r.config;
  EXPECT_EQ(c.train_micro_batch_size_per_gpu->value(), 8u);  // per_device_train_batch_size
  EXPECT_EQ(c.gradient_accumulation_steps->value(), 1u);
  EXPECT_EQ(c.train_batch_size->value(), 8u);
  EXPECT_EQ(c.gradient_clipping.value(), 1.0);  // max_grad_norm
  EXPECT_FALSE(c.fp16.enabled.value());
  EXPECT_FALSE(c.bf16.enabled.value());
  EXPECT_EQ(c.optimizer->lr.value(), 5e-5);  // learning_rate
  EXPECT_EQ(c.optimizer->betas.value(), (std::array<double, 2>{0.9, 0.999}));
  EXPECT_EQ(c.optimizer->eps.value(), 1e-8);
  EXPECT_EQ(c.optimizer->weight_decay.value(), 0.0);
  EXPECT_EQ(c.scheduler->warmup_min_lr.value(), 0.0);
  EXPECT_EQ(c.scheduler->warmup_max_lr.value(), 5e-5);  // = the lr
  EXPECT_EQ(c.scheduler->warmup_num_steps.value(), 1u);  // HF's 0, which DeepSpeed runs as 1 or 2
  EXPECT_EQ(c.scheduler->total_num_steps->value(), 100u);
  EXPECT_EQ(c.zero_optimization.reduce_bucket_size.value(), 768u * 768u);
  EXPECT_EQ(c.zero_optimization.stage3_prefetch_bucket_size.value(), 530'841u);  // 0.9 * h^2
  EXPECT_EQ(c.zero_optimization.stage3_param_persistence_threshold.value(), 7'680u);
  EXPECT_TRUE(unresolved_auto_keys(c).empty());

  // One row per "auto" of the file, in the printed config's order, with where it came from.
  const std::vector<ResolvedKey> expected = {
      {"train_batch_size", "8", "micro 8 x accumulation 1 x world 1"},
      {"train_micro_batch_size_per_gpu", "8", "default (HF Trainer)"},
      {"gradient_accumulation_steps", "1", "default (HF Trainer)"},
      {"gradient_clipping", "1", "default (HF Trainer)"},
      {"fp16.enabled", "false", "default (HF Trainer)"},
      {"bf16.enabled", "false", "default (HF Trainer)"},
      {"optimizer.params.lr", "5e-05", "default (HF Trainer)"},
      {"optimizer.params.betas", "[0.9, 0.999]", "default (HF Trainer)"},
      {"optimizer.params.eps", "1e-08", "default (HF Trainer)"},
      {"optimizer.params.weight_decay", "0", "default (HF Trainer)"},
      {"scheduler.params.total_num_steps", "100", "--steps"},
      {"scheduler.params.warmup_min_lr", "0", "default (HF Trainer)"},
      {"scheduler.params.warmup_max_lr", "5e-05", "= optimizer.params.lr"},
      {"scheduler.params.warmup_num_steps", "1", "default (HF Trainer: no warmup, run as 1)"},
      {"zero_optimization.stage3_prefetch_bucket_size", "530841", "model hidden size 768"},
      {"zero_optimization.stage3_param_persistence_threshold", "7680", "model hidden size 768"},
      {"zero_optimization.reduce_bucket_size", "589824", "model hidden size 768"},
  };
  EXPECT_EQ(r.autos, expected);
  EXPECT_TRUE(r.notes.empty());
}

TEST(ConfigAuto, FlagsResolveTheirAutos) {
  config::ResolveInputs in = training_inputs();
  in.hidden_size = 64;
  in.world_size = 2;
  in.flags.lr = 3e-4;
  in.flags.micro_batch = 4;
  in.flags.grad_accum = 2;
  in.flags.clip = 0.5;
  in.flags.warmup_steps = 10;
  in.flags.steps = 50;
  const config::Resolution r = resolve_hf(in);
  const config::Config& c = r.config;
  EXPECT_EQ(c.optimizer->lr.value(), 3e-4);
  EXPECT_EQ(c.scheduler->warmup_max_lr.value(), 3e-4);
  EXPECT_EQ(c.train_micro_batch_size_per_gpu->value(), 4u);
  EXPECT_EQ(c.gradient_accumulation_steps->value(), 2u);
  EXPECT_EQ(c.train_batch_size->value(), 16u);  // 4 x 2 x 2 ranks
  EXPECT_EQ(c.gradient_clipping.value(), 0.5);
  EXPECT_EQ(c.scheduler->warmup_num_steps.value(), 10u);
  EXPECT_EQ(c.scheduler->total_num_steps->value(), 50u);
  EXPECT_EQ(source_of(r, "optimizer.params.lr"), "flag --lr");
  EXPECT_EQ(source_of(r, "scheduler.params.warmup_max_lr"), "flag --lr");
  EXPECT_EQ(source_of(r, "train_micro_batch_size_per_gpu"), "flag --micro-batch");
  EXPECT_EQ(source_of(r, "gradient_accumulation_steps"), "flag --grad-accum");
  EXPECT_EQ(source_of(r, "train_batch_size"), "micro 4 x accumulation 2 x world 2");
  EXPECT_EQ(source_of(r, "gradient_clipping"), "flag --clip");
  EXPECT_EQ(source_of(r, "scheduler.params.warmup_num_steps"), "flag --warmup-steps");
  EXPECT_EQ(source_of(r, "optimizer.params.eps"), "default (HF Trainer)");  // no flag for it
  EXPECT_TRUE(r.notes.empty());  // nothing concrete was replaced
}

TEST(ConfigAuto, AFlagReplacesANumberOfTheFileAndSaysSo) {
  const config::Config file = parse(R"({"train_micro_batch_size_per_gpu": 2, "gradient_clipping": 1.0,
      "optimizer": {"type": "AdamW", "params": {"lr": 1e-4}},
      "scheduler": {"type": "WarmupDecayLR", "params": {"warmup_max_lr": 1e-4, "total_num_steps": 1000,
                                                        "warmup_num_steps": 20}}})")
                                    .config;
  config::ResolveInputs in = training_inputs();
  in.flags.lr = 3e-4;
  in.flags.clip = 1.0;  // the same value: no note
  in.flags.micro_batch = 4;
  in.flags.steps = 10;  // a number in the file is the schedule's own length: kept
  const config::Resolution r = resolve_config_explained(file, in);
  EXPECT_EQ(r.config.optimizer->lr.value(), 3e-4);
  EXPECT_EQ(r.config.scheduler->warmup_max_lr.value(), 3e-4);
  EXPECT_EQ(r.config.train_micro_batch_size_per_gpu->value(), 4u);
  EXPECT_EQ(r.config.scheduler->total_num_steps->value(), 1000u);
  EXPECT_TRUE(has_note(r, "--lr 0.0003 replaces optimizer.params.lr = 0.0001 of the config"));
  EXPECT_TRUE(has_note(r, "--lr 0.0003 replaces scheduler.params.warmup_max_lr = 0.0001 of the config"));
  EXPECT_TRUE(has_note(r, "--micro-batch 4 replaces train_micro_batch_size_per_gpu = 2 of the config"));
  EXPECT_FALSE(has_note(r, "--clip"));
  EXPECT_EQ(r.notes.size(), 3u);
  EXPECT_TRUE(r.autos.empty());  // nothing in the file was "auto"
}

TEST(ConfigAuto, BatchFlagsKeepDeepSpeedsRule) {
  config::ResolveInputs in = training_inputs();
  // A flag changes the micro-batch of a config that fixes train_batch_size: the accumulation is
  // derived from it, so the global batch stays.
  in.flags.micro_batch = 8;
  config::Config r = resolve_config(parse(R"({"train_batch_size": 32, "train_micro_batch_size_per_gpu": 4})").config, in);
  EXPECT_EQ(r.gradient_accumulation_steps->value(), 4u);
  EXPECT_EQ(r.train_batch_size->value(), 32u);
  // All three given: the flag's micro-batch breaks the product, an error that names the way out.
  const config::Config all = parse(R"({"train_batch_size": 32, "train_micro_batch_size_per_gpu": 4,
      "gradient_accumulation_steps": 8})").config;
  Error e = expect_error([&] { resolve_config(all, in); });
  EXPECT_EQ(e.where(), "train_batch_size");
  EXPECT_NE(std::string(e.what()).find("train_micro_batch_size_per_gpu (8)"), std::string::npos) << e.what();
  EXPECT_NE(e.hint().find("--grad-accum"), std::string::npos) << e.hint();
  in.flags.grad_accum = 4;
  EXPECT_EQ(resolve_config(all, in).train_batch_size->value(), 32u);
  // A file without any batch key gets the flags' (no HF default: DeepSpeed needs one).
  in.flags = {};
  in.flags.micro_batch = 3;
  EXPECT_EQ(resolve_config(parse("{}").config, in).train_batch_size->value(), 3u);
  in.flags = {};
  Error none = expect_error([&] { resolve_config(parse("{}").config, in); });
  EXPECT_NE(std::string(none.what()).find("neither train_batch_size"), std::string::npos);
  EXPECT_NE(none.hint().find("--micro-batch"), std::string::npos);
}

TEST(ConfigAuto, BothBatchSizesAutoTakeHfsMicroBatchOnlyWhenTraining) {
  const config::Config c =
      parse(R"({"train_batch_size": "auto", "train_micro_batch_size_per_gpu": "auto",
                "gradient_accumulation_steps": 4})")
          .config;
  config::ResolveInputs in = training_inputs();
  in.world_size = 2;
  const config::Resolution r = resolve_config_explained(c, in);
  EXPECT_EQ(r.config.train_micro_batch_size_per_gpu->value(), 8u);
  EXPECT_EQ(r.config.gradient_accumulation_steps->value(), 4u);  // the file's
  EXPECT_EQ(r.config.train_batch_size->value(), 64u);
  EXPECT_EQ(source_of(r, "train_batch_size"), "micro 8 x accumulation 4 x world 2");
  // Not a training resolution (the estimate, inference): DeepSpeed's error, as before.
  in.training = false;
  Error e = expect_error([&] { resolve_config(c, in); });
  EXPECT_NE(std::string(e.what()).find("neither train_batch_size"), std::string::npos);
}

TEST(ConfigAuto, OutsideTrainingTheOtherAutosStayAuto) {
  config::ResolveInputs in = training_inputs();
  in.training = false;
  in.flags.micro_batch = 2;
  const config::Resolution r = resolve_hf(in);
  EXPECT_TRUE(r.config.optimizer->lr.is_auto());
  EXPECT_TRUE(r.config.gradient_clipping.is_auto());
  EXPECT_EQ(r.config.train_batch_size->value(), 2u);
  // Without --steps and a hidden size, a training resolution leaves what needs them.
  in = training_inputs();
  const config::Resolution t = resolve_hf(in);
  EXPECT_EQ(unresolved_auto_keys(t.config),
            (std::vector<std::string>{"scheduler.params.total_num_steps", "zero_optimization.stage3_prefetch_bucket_size",
                                      "zero_optimization.stage3_param_persistence_threshold",
                                      "zero_optimization.reduce_bucket_size"}));
}

TEST(ConfigAuto, MissingSectionsAndWarmupFlags) {
  config::ResolveInputs in = training_inputs();
  // Training without an optimizer section: AdamW at DeepSpeed's lr (not an "auto": no HF default).
  config::Resolution r = resolve_config_explained(parse(R"({"train_batch_size": 1})").config, in);
  ASSERT_TRUE(r.config.optimizer.has_value());
  EXPECT_EQ(r.config.optimizer->lr.value(), 1e-3);
  EXPECT_TRUE(has_note(r, "no optimizer section"));
  // --lr makes one too outside training, at its value.
  in.training = false;
  in.flags.lr = 2e-4;
  r = resolve_config_explained(parse(R"({"train_batch_size": 1})").config, in);
  EXPECT_EQ(r.config.optimizer->lr.value(), 2e-4);
  in = training_inputs();
  // --warmup-steps needs a scheduler to set.
  in.flags.warmup_steps = 5;
  Error e = expect_error([&] { resolve_config(parse(R"({"train_batch_size": 1})").config, in); });
  EXPECT_EQ(e.where(), "--warmup-steps");
  // --warmup-steps 0 (HF's "no warmup") runs as 1, and says so.
  in.flags.warmup_steps = 0;
  r = resolve_config_explained(
      parse(R"({"train_batch_size": 1, "scheduler": {"type": "WarmupLR", "params": {"warmup_num_steps": 100}}})").config,
      in);
  EXPECT_EQ(r.config.scheduler->warmup_num_steps.value(), 1u);
  EXPECT_TRUE(has_note(r, "--warmup-steps 0 runs as 1"));
}

TEST(ConfigAuto, TheTableListsKeyValueAndSource) {
  EXPECT_EQ(config::resolution_table({}), "");
  const std::string table = config::resolution_table(
      {{"optimizer.params.lr", "5e-05", "default (HF Trainer)"}, {"gradient_clipping", "0.5", "flag --clip"}});
  EXPECT_EQ(table,
            "\"auto\" values resolved:\n"
            "  key                  value  source\n"
            "  optimizer.params.lr  5e-05  default (HF Trainer)\n"
            "  gradient_clipping    0.5    flag --clip\n");
}

TEST(ConfigAuto, OverridesApplyToJsonText) {
  const std::string text = config::apply_config_overrides(R"({"zero_optimization": {"stage": 1}})", "t.json",
                                                          std::vector<std::string>{"zero_optimization.stage=auto",
                                                                                   "optimizer.type=AdamW"});
  EXPECT_EQ(text, R"({"zero_optimization":{"stage":"auto"},"optimizer":{"type":"AdamW"}})");
  expect_error([] { config::apply_config_overrides("{}", "t.json", std::vector<std::string>{"no-equals"}); });
}

// ---- data_types.grad_accum_dtype -------------------------------------------------------------

TEST(ConfigDataTypes, EachDtypeIsReadAndFp16NeedsFp16Training) {
  EXPECT_EQ(parse("{}").config.data_types.grad_accum_dtype, config::GradAccumDtype::kFp32);
  const config::ParsedConfig fp32 = parse(R"({"data_types": {"grad_accum_dtype": "FP32"}})");
  EXPECT_EQ(fp32.config.data_types.grad_accum_dtype, config::GradAccumDtype::kFp32);
  EXPECT_TRUE(fp32.warnings.empty());  // read, not an ignored DeepSpeed key any more
  EXPECT_NE(config_to_json(fp32.config).find("\"grad_accum_dtype\": \"fp32\""), std::string::npos);
  const config::ParsedConfig bf16 = parse(R"({"bf16": {"enabled": true}, "data_types": {"grad_accum_dtype": "bf16"}})");
  EXPECT_EQ(bf16.config.data_types.grad_accum_dtype, config::GradAccumDtype::kBf16);
  EXPECT_NE(config_to_json(bf16.config).find("\"grad_accum_dtype\": \"bf16\""), std::string::npos);
  const config::ParsedConfig fp16 = parse(R"({"fp16": {"enabled": true}, "data_types": {"grad_accum_dtype": "fp16"}})");
  EXPECT_EQ(fp16.config.data_types.grad_accum_dtype, config::GradAccumDtype::kFp16);
  // "auto" fp16 (the Trainer's) is checked once resolved, not refused while still "auto".
  EXPECT_NO_THROW(parse(R"({"fp16": {"enabled": "auto"}, "data_types": {"grad_accum_dtype": "fp16"}})"));
  for (const char* training : {R"("bf16": {"enabled": true})", R"("fp16": {"enabled": false})"}) {
    Error e = parse_error(std::string("{") + training + R"(, "data_types": {"grad_accum_dtype": "fp16"}})");
    EXPECT_EQ(e.where(), "data_types.grad_accum_dtype");
    EXPECT_NE(std::string(e.what()).find("needs fp16 training"), std::string::npos) << e.what();
    EXPECT_NE(e.hint().find("\"bf16\""), std::string::npos) << e.hint();
  }
  Error bad = parse_error(R"({"data_types": {"grad_accum_dtype": "fp8"}})");
  EXPECT_NE(std::string(bad.what()).find("one of \"fp32\", \"bf16\", \"fp16\""), std::string::npos) << bad.what();
  Error typo = parse_error("{}", {"data_types.grad_acum_dtype=fp32"});
  EXPECT_NE(std::string(typo.what()).find("unknown config key"), std::string::npos);
}

}  // namespace
}  // namespace strata::runtime::test
