#include "models/gpt/gpt_config.h"

#include <cmath>
#include <fstream>
#include <limits>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "models/presets.h"

namespace strata::models {
namespace {

using Preset = NamedConfig<GptConfig>;

const std::vector<Preset>& presets() {
  static const std::vector<Preset> kPresets = {
      {"gpt2", {50257, 1024, 768, 12, 12, 1e-5f}},
      {"gpt2-medium", {50257, 1024, 1024, 24, 16, 1e-5f}},
      {"gpt2-large", {50257, 1024, 1280, 36, 20, 1e-5f}},
      {"gpt2-xl", {50257, 1024, 1600, 48, 25, 1e-5f}},
      {"tiny", {256, 256, 128, 4, 4, 1e-5f}},
      {"bytes-30m", {256, 512, 512, 10, 8, 1e-5f}},
  };
  return kPresets;
}

int read_int(const nlohmann::json& j, const char* key, std::string_view where) {
  const auto& v = j.at(key);
  if (!v.is_number_integer()) {
    throw Error(fmt::format("\"{}\" must be an integer, got {}", key, v.dump()), std::string(where),
                "fix the model config");
  }
  const auto x = v.get<std::int64_t>();
  if (x < std::numeric_limits<int>::min() || x > std::numeric_limits<int>::max()) {
    throw Error(fmt::format("\"{}\" = {} is out of range", key, x), std::string(where));
  }
  return static_cast<int>(x);
}

}  // namespace

void GptConfig::validate() const {
  auto positive = [](const char* key, int v) {
    if (v <= 0) {
      throw Error(fmt::format("model config: {} must be positive, got {}", key, v), "",
                  "fix the model config (HF config.json names)");
    }
  };
  positive("vocab_size", vocab_size);
  positive("n_positions", n_positions);
  positive("n_embd", n_embd);
  positive("n_layer", n_layer);
  positive("n_head", n_head);
  if (n_embd % n_head != 0) {
    throw Error(fmt::format("model config: n_embd ({}) must be a multiple of n_head ({})", n_embd,
                            n_head),
                "", "pick n_head among the divisors of n_embd");
  }
  if (!std::isfinite(layer_norm_epsilon) || layer_norm_epsilon <= 0.0f) {
    throw Error(fmt::format("model config: layer_norm_epsilon must be finite and > 0, got {}",
                            layer_norm_epsilon));
  }
  // Every flat buffer and every (B*T, 4C) activation is indexed with 64-bit offsets, but the
  // kernels take C, V as int: 4*C and 3*C must fit.
  if (n_embd > std::numeric_limits<int>::max() / 4) {
    throw Error(fmt::format("model config: n_embd = {} is too large", n_embd));
  }
}

std::int64_t GptConfig::num_params() const {
  const std::int64_t V = vocab_size, P = n_positions, C = n_embd, L = n_layer;
  return V * C + P * C + L * (12 * C * C + 13 * C) + 2 * C;
}

GptConfig GptConfig::from_json(std::string_view json_text, std::string_view where) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(json_text);
  } catch (const nlohmann::json::exception& e) {  // parse_error, or out_of_range for 1e999
    throw Error(fmt::format("the model config is not valid JSON: {}", e.what()), std::string(where),
                "give a Hugging Face GPT-2 config.json");
  }
  if (!j.is_object()) {
    throw Error("the model config must be a JSON object", std::string(where));
  }
  GptConfig c;
  const char* required[] = {"vocab_size", "n_positions", "n_embd", "n_layer", "n_head"};
  for (const char* key : required) {
    if (!j.contains(key)) {
      throw Error(fmt::format("the model config lacks \"{}\"", key), std::string(where),
                  "a GPT-2 config.json has vocab_size, n_positions, n_embd, n_layer, n_head");
    }
  }
  c.vocab_size = read_int(j, "vocab_size", where);
  c.n_positions = read_int(j, "n_positions", where);
  c.n_embd = read_int(j, "n_embd", where);
  c.n_layer = read_int(j, "n_layer", where);
  c.n_head = read_int(j, "n_head", where);
  if (j.contains("layer_norm_epsilon")) {
    if (!j["layer_norm_epsilon"].is_number()) {
      throw Error("\"layer_norm_epsilon\" must be a number", std::string(where));
    }
    c.layer_norm_epsilon = j["layer_norm_epsilon"].get<float>();
  }
  // Keys that would change the math: refuse rather than compute something else.
  if (j.contains("activation_function") && j["activation_function"] != "gelu_new") {
    throw Error(fmt::format("activation_function {} is not supported (strata's GPT-2 uses "
                            "gelu_new, the tanh approximation)",
                            j["activation_function"].dump()),
                std::string(where));
  }
  for (const char* key : {"tie_word_embeddings", "scale_attn_weights"}) {
    if (j.contains(key) && j[key] == false) {
      throw Error(fmt::format("\"{}\": false is not supported", key), std::string(where),
                  "strata's GPT-2 ties the LM head to wte and scales attention by 1/sqrt(hs)");
    }
  }
  for (const char* key : {"scale_attn_by_inverse_layer_idx", "reorder_and_upcast_attn"}) {
    if (j.contains(key) && j[key] == true) {
      throw Error(fmt::format("\"{}\": true is not supported", key), std::string(where));
    }
  }
  try {
    c.validate();
  } catch (const Error& e) {
    throw Error(e.what(), std::string(where));
  }
  return c;
}

GptConfig GptConfig::from_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) {
    throw Error("cannot open the model config", path, "check the path given to --model");
  }
  std::stringstream text;
  text << in.rdbuf();
  return from_json(text.str(), path);
}

std::string GptConfig::to_json() const {
  nlohmann::ordered_json j;
  j["architectures"] = {"GPT2LMHeadModel"};
  j["model_type"] = "gpt2";
  j["vocab_size"] = vocab_size;
  j["n_positions"] = n_positions;
  j["n_embd"] = n_embd;
  j["n_layer"] = n_layer;
  j["n_head"] = n_head;
  j["layer_norm_epsilon"] = layer_norm_epsilon;
  j["activation_function"] = "gelu_new";
  return j.dump(2);
}

GptConfig GptConfig::preset(std::string_view name) { return preset_of(presets(), name); }

std::vector<std::string> GptConfig::preset_names() { return preset_names_of(presets()); }

}  // namespace strata::models
