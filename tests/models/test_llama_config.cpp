// models/llama/llama_config: presets against the published parameter counts, config.json round
// trips, real Hugging Face config.json texts (written from memory of the hub's files), the keys
// that are refused, validation, and the rotary frequencies.
#include <gtest/gtest.h>

#include <limits>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "kernels/host/rope.h"
#include "models/llama/llama_config.h"

namespace strata::models {
namespace {

using kernels::host::RopeLlama3Scaling;

// meta-llama/Llama-3.2-1B
constexpr const char* kLlama32_1B = R"({
  "architectures": ["LlamaForCausalLM"],
  "attention_bias": false,
  "attention_dropout": 0.0,
  "bos_token_id": 128000,
  "eos_token_id": 128001,
  "head_dim": 64,
  "hidden_act": "silu",
  "hidden_size": 2048,
  "initializer_range": 0.02,
  "intermediate_size": 8192,
  "max_position_embeddings": 131072,
  "mlp_bias": false,
  "model_type": "llama",
  "num_attention_heads": 32,
  "num_hidden_layers": 16,
  "num_key_value_heads": 8,
  "pretraining_tp": 1,
  "rms_norm_eps": 1e-05,
  "rope_scaling": {
    "factor": 32.0,
    "high_freq_factor": 4.0,
    "low_freq_factor": 1.0,
    "original_max_position_embeddings": 8192,
    "rope_type": "llama3"
  },
  "rope_theta": 500000.0,
  "tie_word_embeddings": true,
  "torch_dtype": "bfloat16",
  "transformers_version": "4.45.0.dev0",
  "use_cache": true,
  "vocab_size": 128256
})";

// meta-llama/Meta-Llama-3-8B
constexpr const char* kLlama3_8B = R"({
  "architectures": ["LlamaForCausalLM"],
  "attention_bias": false,
  "attention_dropout": 0.0,
  "bos_token_id": 128000,
  "eos_token_id": 128001,
  "hidden_act": "silu",
  "hidden_size": 4096,
  "initializer_range": 0.02,
  "intermediate_size": 14336,
  "max_position_embeddings": 8192,
  "model_type": "llama",
  "num_attention_heads": 32,
  "num_hidden_layers": 32,
  "num_key_value_heads": 8,
  "pretraining_tp": 1,
  "rms_norm_eps": 1e-05,
  "rope_scaling": null,
  "rope_theta": 500000.0,
  "tie_word_embeddings": false,
  "torch_dtype": "bfloat16",
  "transformers_version": "4.40.0.dev0",
  "use_cache": true,
  "vocab_size": 128256
})";

// Qwen/Qwen2.5-0.5B
constexpr const char* kQwen25_05B = R"({
  "architectures": ["Qwen2ForCausalLM"],
  "attention_dropout": 0.0,
  "bos_token_id": 151643,
  "eos_token_id": 151643,
  "hidden_act": "silu",
  "hidden_size": 896,
  "initializer_range": 0.02,
  "intermediate_size": 4864,
  "max_position_embeddings": 32768,
  "max_window_layers": 24,
  "model_type": "qwen2",
  "num_attention_heads": 14,
  "num_hidden_layers": 24,
  "num_key_value_heads": 2,
  "rms_norm_eps": 1e-06,
  "rope_theta": 1000000.0,
  "sliding_window": 32768,
  "tie_word_embeddings": true,
  "torch_dtype": "bfloat16",
  "transformers_version": "4.40.1",
  "use_cache": true,
  "use_mrope": false,
  "use_sliding_window": false,
  "vocab_size": 151936
})";

// mistralai/Mistral-7B-v0.1
constexpr const char* kMistral7B_v01 = R"({
  "architectures": ["MistralForCausalLM"],
  "bos_token_id": 1,
  "eos_token_id": 2,
  "hidden_act": "silu",
  "hidden_size": 4096,
  "initializer_range": 0.02,
  "intermediate_size": 14336,
  "max_position_embeddings": 32768,
  "model_type": "mistral",
  "num_attention_heads": 32,
  "num_hidden_layers": 32,
  "num_key_value_heads": 8,
  "rms_norm_eps": 1e-05,
  "rope_theta": 10000.0,
  "sliding_window": 4096,
  "tie_word_embeddings": false,
  "torch_dtype": "bfloat16",
  "transformers_version": "4.34.0.dev0",
  "use_cache": true,
  "vocab_size": 32000
})";

// mistralai/Mistral-7B-v0.3
constexpr const char* kMistral7B_v03 = R"({
  "architectures": ["MistralForCausalLM"],
  "attention_dropout": 0.0,
  "bos_token_id": 1,
  "eos_token_id": 2,
  "hidden_act": "silu",
  "hidden_size": 4096,
  "initializer_range": 0.02,
  "intermediate_size": 14336,
  "max_position_embeddings": 32768,
  "model_type": "mistral",
  "num_attention_heads": 32,
  "num_hidden_layers": 32,
  "num_key_value_heads": 8,
  "rms_norm_eps": 1e-05,
  "rope_theta": 1000000.0,
  "sliding_window": null,
  "tie_word_embeddings": false,
  "torch_dtype": "bfloat16",
  "transformers_version": "4.42.0.dev0",
  "use_cache": true,
  "vocab_size": 32768
})";

// A config.json text with some keys replaced (null value: the key removed).
std::string edited(const char* text, const nlohmann::json& patch) {
  auto j = nlohmann::json::parse(text);
  for (const auto& [key, value] : patch.items()) {
    if (value.is_null()) {
      j.erase(key);
    } else {
      j[key] = value;
    }
  }
  return j.dump();
}

// from_json(text) must throw an Error whose message contains every one of `needles`.
void expect_refused(const std::string& text, const std::vector<std::string>& needles) {
  try {
    LlamaConfig::from_json(text, "test.json");
    ADD_FAILURE() << "accepted: " << text;
  } catch (const Error& e) {
    const std::string msg = e.what();
    for (const std::string& n : needles) {
      EXPECT_NE(msg.find(n), std::string::npos) << "\"" << n << "\" not in: " << msg;
    }
    EXPECT_EQ(e.where(), "test.json");
  }
}

TEST(LlamaConfig, PresetParameterCounts) {
  EXPECT_EQ(LlamaConfig::preset("llama-3.2-1b").num_params(), 1'235'814'400);
  EXPECT_EQ(LlamaConfig::preset("llama-3.2-3b").num_params(), 3'212'749'824);
  EXPECT_EQ(LlamaConfig::preset("llama-3-8b").num_params(), 8'030'261'248);
  EXPECT_EQ(LlamaConfig::preset("llama-3-70b").num_params(), 70'553'706'496);
  EXPECT_EQ(LlamaConfig::preset("qwen2.5-0.5b").num_params(), 494'032'768);
  EXPECT_EQ(LlamaConfig::preset("mistral-7b").num_params(), 7'248'023'552);
  EXPECT_EQ(LlamaConfig::preset("llama-2-7b").num_params(), 6'738'415'616);
  // llama-tiny: 2 V C + L (2 C^2 + 2 C NKV hs + 3 C F + 2 C) + C = 803,968.
  EXPECT_EQ(LlamaConfig::preset("llama-tiny").num_params(), 803'968);
}

TEST(LlamaConfig, PresetsAreValidAndNamed) {
  const auto names = LlamaConfig::preset_names();
  EXPECT_EQ(names, (std::vector<std::string>{"llama-3.2-1b", "llama-3.2-3b", "llama-3-8b",
                                             "llama-3-70b", "qwen2.5-0.5b", "mistral-7b", "llama-2-7b", "llama-tiny",
                                             "qwen3-8b", "mixtral-8x7b", "qwen3-30b-a3b", "qwen3-tiny",
                                             "mixtral-tiny", "qwen3-moe-tiny"}));
  for (const std::string& n : names) EXPECT_NO_THROW(LlamaConfig::preset(n).validate()) << n;
  try {
    LlamaConfig::preset("llama-70b");
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("llama-tiny"), std::string::npos) << e.what();
  }
  const LlamaConfig tiny = LlamaConfig::preset("llama-tiny");
  EXPECT_TRUE(tiny.eos_token_ids.empty());
  EXPECT_FALSE(tiny.bos_token_id.has_value());
}

TEST(LlamaConfig, RoundTripEveryPreset) {
  for (const std::string& n : LlamaConfig::preset_names()) {
    const LlamaConfig c = LlamaConfig::preset(n);
    const std::string text = c.to_json();
    EXPECT_EQ(LlamaConfig::from_json(text), c) << n << ":\n" << text;
  }
}

TEST(LlamaConfig, RoundTripVariants) {
  LlamaConfig c = LlamaConfig::preset("llama-tiny");
  c.eos_token_ids = {128001, 128008, 128009};  // Llama 3.1 instruct's list
  c.bos_token_id = 0;
  c.attention_bias = true;
  c.rope_scaling = RopeLlama3Scaling{8.0, 1.0, 4.0, 8192.0};
  c.rms_norm_eps = 1e-6f;
  c.head_dim = 64;  // != hidden_size / NH
  EXPECT_EQ(LlamaConfig::from_json(c.to_json()), c);

  LlamaConfig m = LlamaConfig::preset("mistral-7b");
  m.sliding_window = 4096;
  EXPECT_EQ(LlamaConfig::from_json(m.to_json()), m);

  LlamaConfig q = LlamaConfig::preset("qwen2.5-0.5b");
  q.head_dim = 128;  // written only because it differs from C / NH
  q.rope_scaling = RopeLlama3Scaling{};
  EXPECT_EQ(LlamaConfig::from_json(q.to_json()), q);
}

TEST(LlamaConfig, ToJsonAsTransformersWritesIt) {
  const auto l = nlohmann::json::parse(LlamaConfig::preset("llama-3.2-1b").to_json());
  EXPECT_EQ(l["architectures"], nlohmann::json::array({"LlamaForCausalLM"}));
  EXPECT_EQ(l["model_type"], "llama");
  EXPECT_EQ(l["torch_dtype"], "float32");
  EXPECT_EQ(l["hidden_act"], "silu");
  EXPECT_EQ(l["attention_bias"], false);
  EXPECT_EQ(l["mlp_bias"], false);
  EXPECT_EQ(l["head_dim"], 64);
  EXPECT_EQ(l["rope_scaling"]["rope_type"], "llama3");
  EXPECT_EQ(l["rope_scaling"]["factor"], 32.0);
  EXPECT_TRUE(l["rope_scaling"]["original_max_position_embeddings"].is_number_integer());
  EXPECT_EQ(l["rms_norm_eps"].dump(), "1e-05");
  EXPECT_EQ(l["eos_token_id"], 128001);
  EXPECT_EQ(l["bos_token_id"], 128000);
  EXPECT_EQ(l["tie_word_embeddings"], true);
  EXPECT_FALSE(l.contains("sliding_window"));
  // The real config.json's model keys, every one of them (transformers_version aside).
  const auto real = nlohmann::json::parse(kLlama32_1B);
  for (const auto& [key, value] : real.items()) {
    if (key == "transformers_version") continue;
    ASSERT_TRUE(l.contains(key)) << key;
    if (key != "torch_dtype") {
      EXPECT_EQ(l[key], value) << key;
    }
  }

  const auto e = nlohmann::json::parse(LlamaConfig::preset("llama-3-8b").to_json());
  EXPECT_TRUE(e["rope_scaling"].is_null());

  const auto q = nlohmann::json::parse(LlamaConfig::preset("qwen2.5-0.5b").to_json());
  EXPECT_EQ(q["model_type"], "qwen2");
  EXPECT_FALSE(q.contains("attention_bias"));  // Qwen2Config has none: the biases are fixed
  EXPECT_FALSE(q.contains("head_dim"));        // C / NH
  EXPECT_EQ(q["use_sliding_window"], false);
  EXPECT_EQ(q["rms_norm_eps"].dump(), "1e-06");

  const auto m = nlohmann::json::parse(LlamaConfig::preset("mistral-7b").to_json());
  EXPECT_EQ(m["model_type"], "mistral");
  EXPECT_TRUE(m.contains("sliding_window"));
  EXPECT_TRUE(m["sliding_window"].is_null());
  EXPECT_FALSE(m.contains("attention_bias"));

  const auto t = nlohmann::json::parse(LlamaConfig::preset("llama-tiny").to_json());
  EXPECT_TRUE(t["eos_token_id"].is_null());
  EXPECT_TRUE(t["bos_token_id"].is_null());
}

TEST(LlamaConfig, HfLlama32_1B) {
  const LlamaConfig c = LlamaConfig::from_json(kLlama32_1B);
  EXPECT_EQ(c, LlamaConfig::preset("llama-3.2-1b"));
  EXPECT_EQ(c.architecture, "LlamaForCausalLM");
  EXPECT_EQ(c.head_dim, 64);
  ASSERT_TRUE(c.rope_scaling.has_value());
  EXPECT_EQ(*c.rope_scaling, (RopeLlama3Scaling{32.0, 1.0, 4.0, 8192.0}));
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_EQ(c.num_params(), 1'235'814'400);
}

TEST(LlamaConfig, HfLlama3_8B) {
  const LlamaConfig c = LlamaConfig::from_json(kLlama3_8B);
  EXPECT_EQ(c, LlamaConfig::preset("llama-3-8b"));
  EXPECT_EQ(c.head_dim, 128);  // absent: hidden_size / NH
  EXPECT_FALSE(c.rope_scaling.has_value());
  EXPECT_EQ(c.num_key_value_heads, 8);
  EXPECT_EQ(c.eos_token_ids, std::vector<int>{128001});
  EXPECT_EQ(c.bos_token_id, 128000);
  EXPECT_EQ(c.rms_norm_eps, 1e-5f);
  EXPECT_EQ(c.num_params(), 8'030'261'248);
}

TEST(LlamaConfig, HfQwen25_05B) {
  const LlamaConfig c = LlamaConfig::from_json(kQwen25_05B);
  EXPECT_EQ(c, LlamaConfig::preset("qwen2.5-0.5b"));
  EXPECT_TRUE(c.attention_bias);  // always, with no key
  EXPECT_EQ(c.sliding_window, 0);  // sliding_window 32768 is ignored without use_sliding_window
  EXPECT_EQ(c.head_dim, 64);
  EXPECT_EQ(c.rms_norm_eps, 1e-6f);
  EXPECT_EQ(c.rope_theta, 1e6);
  EXPECT_EQ(c.num_params(), 494'032'768);
}

TEST(LlamaConfig, HfMistral7B) {
  const LlamaConfig v1 = LlamaConfig::from_json(kMistral7B_v01);
  EXPECT_EQ(v1.architecture, "MistralForCausalLM");
  EXPECT_EQ(v1.sliding_window, 4096);
  EXPECT_EQ(v1.vocab_size, 32000);
  EXPECT_EQ(v1.rope_theta, 10000.0);
  EXPECT_FALSE(v1.attention_bias);
  EXPECT_EQ(v1.head_dim, 128);
  EXPECT_EQ(v1.num_key_value_heads, 8);
  EXPECT_EQ(v1.eos_token_ids, std::vector<int>{2});
  EXPECT_EQ(v1.bos_token_id, 1);
  EXPECT_EQ(v1.num_params(), 7'241'732'096);  // the published 7.24B

  const LlamaConfig v3 = LlamaConfig::from_json(kMistral7B_v03);
  EXPECT_EQ(v3, LlamaConfig::preset("mistral-7b"));
  EXPECT_EQ(v3.sliding_window, 0);  // null
  EXPECT_EQ(v3.vocab_size, 32768);
}

TEST(LlamaConfig, DefaultsOfAbsentKeysPerArchitecture) {
  const nlohmann::json sizes = {{"vocab_size", 1000}, {"hidden_size", 512},
                                {"intermediate_size", 512}, {"num_hidden_layers", 2},
                                {"num_attention_heads", 32}};
  auto with = [&](const char* model_type) {
    nlohmann::json j = sizes;
    j["model_type"] = model_type;
    return LlamaConfig::from_json(j.dump());
  };
  const LlamaConfig l = with("llama");
  EXPECT_EQ(l.architecture, "LlamaForCausalLM");
  EXPECT_EQ(l.num_key_value_heads, 32);
  EXPECT_EQ(l.head_dim, 16);
  EXPECT_EQ(l.max_position_embeddings, 2048);
  EXPECT_EQ(l.rope_theta, 10000.0);
  EXPECT_EQ(l.rms_norm_eps, 1e-6f);
  EXPECT_FALSE(l.tie_word_embeddings);
  EXPECT_FALSE(l.attention_bias);
  EXPECT_EQ(l.eos_token_ids, std::vector<int>{2});
  EXPECT_EQ(l.bos_token_id, 1);

  const LlamaConfig m = with("mistral");
  EXPECT_EQ(m.architecture, "MistralForCausalLM");
  EXPECT_EQ(m.num_key_value_heads, 8);  // MistralConfig's default
  EXPECT_EQ(m.max_position_embeddings, 131072);
  EXPECT_EQ(m.sliding_window, 4096);
  EXPECT_EQ(m.eos_token_ids, std::vector<int>{2});

  const LlamaConfig q = with("qwen2");
  EXPECT_EQ(q.architecture, "Qwen2ForCausalLM");
  EXPECT_EQ(q.num_key_value_heads, 32);  // Qwen2Config's default
  EXPECT_EQ(q.max_position_embeddings, 32768);
  EXPECT_TRUE(q.attention_bias);
  EXPECT_TRUE(q.eos_token_ids.empty());
  EXPECT_FALSE(q.bos_token_id.has_value());

  // Explicit nulls: num_key_value_heads -> NH, head_dim -> C / NH, token ids none.
  nlohmann::json j = sizes;
  j["model_type"] = "mistral";
  j["num_key_value_heads"] = nullptr;
  j["head_dim"] = nullptr;
  j["eos_token_id"] = nullptr;
  j["bos_token_id"] = nullptr;
  const LlamaConfig n = LlamaConfig::from_json(j.dump());
  EXPECT_EQ(n.num_key_value_heads, 32);
  EXPECT_EQ(n.head_dim, 16);
  EXPECT_TRUE(n.eos_token_ids.empty());
  EXPECT_FALSE(n.bos_token_id.has_value());

  // eos as a list; legacy rope_scaling "type"; rope_type "default" is no scaling.
  const LlamaConfig e = LlamaConfig::from_json(
      edited(kLlama3_8B, {{"eos_token_id", {128001, 128008, 128009}},
                          {"rope_scaling", {{"type", "llama3"}, {"factor", 8.0},
                                            {"low_freq_factor", 1.0}, {"high_freq_factor", 4.0},
                                            {"original_max_position_embeddings", 8192}}}}));
  EXPECT_EQ(e.eos_token_ids, (std::vector<int>{128001, 128008, 128009}));
  ASSERT_TRUE(e.rope_scaling.has_value());
  EXPECT_EQ(e.rope_scaling->factor, 8.0);
  const LlamaConfig d =
      LlamaConfig::from_json(edited(kLlama3_8B, {{"rope_scaling", {{"rope_type", "default"}}}}));
  EXPECT_FALSE(d.rope_scaling.has_value());
}

TEST(LlamaConfig, RefusesKeysThatChangeTheMath) {
  expect_refused(edited(kLlama3_8B, {{"hidden_act", "gelu"}}), {"hidden_act", "gelu", "silu"});
  expect_refused(edited(kLlama3_8B, {{"mlp_bias", true}}), {"mlp_bias", "true"});
  for (const char* type : {"linear", "dynamic", "yarn", "longrope"}) {
    expect_refused(edited(kLlama3_8B, {{"rope_scaling", {{"rope_type", type}, {"factor", 2.0}}}}),
                   {"rope_scaling", type, "llama3"});
    expect_refused(edited(kLlama3_8B, {{"rope_scaling", {{"type", type}, {"factor", 2.0}}}}),
                   {"rope_scaling", type});
  }
  expect_refused(edited(kLlama3_8B, {{"rope_scaling", {{"rope_type", "llama3"}, {"factor", 8.0}}}}),
                 {"rope_scaling", "low_freq_factor"});
  expect_refused(edited(kQwen25_05B, {{"use_sliding_window", true}}),
                 {"use_sliding_window", "true"});
  expect_refused(edited(kLlama3_8B, {{"pretraining_tp", 2}}), {"pretraining_tp", "2"});
  expect_refused(edited(kLlama3_8B, {{"attention_dropout", 0.1}}), {"attention_dropout", "0.1"});
}

TEST(LlamaConfig, RefusesBadShapes) {
  expect_refused(edited(kLlama3_8B, {{"num_key_value_heads", 5}}),
                 {"num_attention_heads (32)", "num_key_value_heads (5)"});
  expect_refused(edited(kLlama3_8B, {{"head_dim", 63}}), {"head_dim", "63"});
  // hidden_size / NH odd when head_dim is absent.
  expect_refused(edited(kLlama3_8B, {{"hidden_size", 32 * 65}}), {"head_dim", "65"});
  expect_refused(edited(kLlama3_8B, {{"vocab_size", 0}}), {"vocab_size", "0"});
  expect_refused(edited(kLlama3_8B, {{"num_hidden_layers", -1}}), {"num_hidden_layers", "-1"});
  expect_refused(edited(kLlama3_8B, {{"intermediate_size", 1 << 30}}), {"intermediate_size"});
  expect_refused(edited(kLlama3_8B, {{"rope_theta", 0.0}}), {"rope_theta", "0"});
  expect_refused(edited(kLlama3_8B, {{"rms_norm_eps", -1e-5}}), {"rms_norm_eps"});
  expect_refused(edited(kLlama3_8B, {{"num_attention_heads", 0}}), {"num_attention_heads", "0"});
  expect_refused(edited(kMistral7B_v01, {{"sliding_window", 0}}), {"sliding_window", "0"});
  expect_refused(
      edited(kLlama32_1B, {{"rope_scaling", {{"rope_type", "llama3"}, {"factor", 32.0},
                                             {"low_freq_factor", 4.0}, {"high_freq_factor", 1.0},
                                             {"original_max_position_embeddings", 8192}}}}),
      {"rope_scaling", "high_freq_factor"});
}

TEST(LlamaConfig, RefusesMissingKeysAndWrongTypes) {
  for (const char* key : {"vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
                          "num_attention_heads"}) {
    expect_refused(edited(kLlama3_8B, {{key, nullptr}}), {"lacks", key});
  }
  expect_refused(edited(kLlama3_8B, {{"hidden_size", "4096"}}),
                 {"hidden_size", "integer", "\"4096\""});
  expect_refused(edited(kLlama3_8B, {{"hidden_size", 4096.5}}), {"hidden_size", "integer"});
  expect_refused(edited(kLlama3_8B, {{"tie_word_embeddings", "false"}}), {"tie_word_embeddings"});
  expect_refused(edited(kLlama3_8B, {{"rope_theta", "500000"}}), {"rope_theta", "number"});
  expect_refused(edited(kLlama3_8B, {{"eos_token_id", "</s>"}}), {"eos_token_id"});
  expect_refused(edited(kLlama3_8B, {{"eos_token_id", {1, "x"}}}), {"eos_token_id"});
  expect_refused(edited(kLlama3_8B, {{"rope_scaling", "llama3"}}), {"rope_scaling", "object"});
  expect_refused(edited(kLlama3_8B, {{"hidden_act", 3}}), {"hidden_act", "string"});
  expect_refused(edited(kLlama3_8B, {{"num_key_value_heads", 1LL << 40}}),
                 {"num_key_value_heads", "out of range"});
  expect_refused("{not json", {"not valid JSON"});
  // A number beyond a double (nlohmann's out_of_range, not a parse_error; tests/fuzz found it).
  expect_refused("{\"rope_theta\": 1e309}", {"not valid JSON", "1e309"});
  expect_refused("[1, 2]", {"JSON object"});
}

TEST(LlamaConfig, RefusesUnknownArchitectures) {
  const std::vector<std::string> three = {"LlamaForCausalLM", "MistralForCausalLM",
                                          "Qwen2ForCausalLM"};
  auto needles = [&](std::string first) {
    std::vector<std::string> n = three;
    n.push_back(std::move(first));
    return n;
  };
  expect_refused(edited(kLlama3_8B, {{"architectures", {"GemmaForCausalLM"}},
                                     {"model_type", "gemma"}}),
                 needles("GemmaForCausalLM"));
  expect_refused(edited(kLlama3_8B, {{"architectures", nullptr}, {"model_type", "phi3"}}),
                 needles("phi3"));
  expect_refused(edited(kLlama3_8B, {{"architectures", nullptr}, {"model_type", nullptr}}),
                 needles("model_type"));
  expect_refused(edited(kLlama3_8B, {{"model_type", "qwen2"}}), {"model_type", "qwen2", "llama"});
  LlamaConfig c = LlamaConfig::preset("llama-tiny");
  c.architecture = "GPT2LMHeadModel";
  EXPECT_THROW(c.validate(), Error);
}

TEST(LlamaConfig, ValidateNamesTheField) {
  auto expect_invalid = [](const LlamaConfig& c, const char* needle) {
    try {
      c.validate();
      ADD_FAILURE() << "valid: " << needle;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  const LlamaConfig t = LlamaConfig::preset("llama-tiny");
  LlamaConfig c = t;
  c.max_position_embeddings = 0;
  expect_invalid(c, "max_position_embeddings");
  c = t;
  c.rms_norm_eps = std::numeric_limits<float>::infinity();
  expect_invalid(c, "rms_norm_eps");
  c = t;
  c.num_attention_heads = 1 << 28;
  c.num_key_value_heads = 1 << 28;
  expect_invalid(c, "num_key_value_heads");
  c = t;
  c.sliding_window = 128;  // only Mistral has one
  expect_invalid(c, "sliding_window");
  c = LlamaConfig::preset("qwen2.5-0.5b");
  c.attention_bias = false;
  expect_invalid(c, "attention_bias");
}

TEST(LlamaConfig, RopeInvFreqMatchesTheKernel) {
  for (const std::string& n : LlamaConfig::preset_names()) {
    const LlamaConfig c = LlamaConfig::preset(n);
    const RopeLlama3Scaling* s = c.rope_scaling ? &*c.rope_scaling : nullptr;
    EXPECT_EQ(c.rope_inv_freq(), kernels::host::rope_inv_freq(c.head_dim, c.rope_theta, s)) << n;
    EXPECT_EQ(c.rope_inv_freq().size(), static_cast<std::size_t>(c.head_dim / 2));
  }
  // With scaling the long wavelengths are divided by the factor, the short ones kept.
  const LlamaConfig scaled = LlamaConfig::preset("llama-3.2-1b");
  LlamaConfig plain = scaled;
  plain.rope_scaling.reset();
  const auto a = scaled.rope_inv_freq(), b = plain.rope_inv_freq();
  EXPECT_EQ(a.front(), b.front());
  EXPECT_FLOAT_EQ(a.back(), b.back() / 32.0f);
  EXPECT_EQ(b, kernels::host::rope_inv_freq(64, 500000.0));
}

}  // namespace
}  // namespace strata::models
