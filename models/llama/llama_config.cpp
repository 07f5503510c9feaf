#include "models/llama/llama_config.h"

#include <cmath>
#include <limits>
#include <string>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "models/presets.h"

// Defaults of absent keys: those of transformers' LlamaConfig, MistralConfig and Qwen2Config
// (transformers 4.4x), so that a config.json means here what it means there:
//
//                            Llama          Mistral        Qwen2
//   num_key_value_heads      NH             8              32         (null: NH in all three)
//   head_dim                 C / NH         C / NH         C / NH     (null: C / NH)
//   max_position_embeddings  2048           131072         32768
//   rope_theta               10000          10000          10000
//   rms_norm_eps             1e-6           1e-6           1e-6
//   tie_word_embeddings      false          false          false
//   attention_bias           the key        always false   always true (the key is ignored)
//   sliding_window           ignored        4096 (null: none)  only with use_sliding_window,
//                                                          which is refused: none
//   bos_token_id             1              1              none (PretrainedConfig's None)
//   eos_token_id             2              2              none
//
// C / NH is Python's floor division, as transformers'. One deliberate difference: transformers
// fills vocab_size, hidden_size, intermediate_size, num_hidden_layers and num_attention_heads
// with a 7B model's values when they are absent; here they are required, since a config.json
// without them is no real checkpoint's and a silent 7B shape helps nobody.

namespace strata::models {
namespace {

using nlohmann::json;
using kernels::host::RopeLlama3Scaling;

constexpr const char* kLlama = "LlamaForCausalLM";
constexpr const char* kMistral = "MistralForCausalLM";
constexpr const char* kQwen2 = "Qwen2ForCausalLM";
constexpr const char* kSupported = "LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM";
constexpr const char* kFixHint = "fix config.json (Hugging Face names and types)";

const char* model_type_of(const std::string& architecture) {
  if (architecture == kLlama) return "llama";
  if (architecture == kMistral) return "mistral";
  if (architecture == kQwen2) return "qwen2";
  return nullptr;
}

using Preset = NamedConfig<LlamaConfig>;

const std::vector<Preset>& presets() {
  static const std::vector<Preset> kPresets = [] {
    std::vector<Preset> p;
    // Llama 3.2 1B / 3B (base): tied, llama3 rope scaling to 128K.
    LlamaConfig l32;
    l32.architecture = kLlama;
    l32.vocab_size = 128256;
    l32.max_position_embeddings = 131072;
    l32.rope_theta = 500000.0;
    l32.rope_scaling = RopeLlama3Scaling{32.0, 1.0, 4.0, 8192.0};
    l32.rms_norm_eps = 1e-5f;
    l32.tie_word_embeddings = true;
    l32.eos_token_ids = {128001};
    l32.bos_token_id = 128000;
    LlamaConfig c = l32;
    c.hidden_size = 2048, c.intermediate_size = 8192, c.num_hidden_layers = 16;
    c.num_attention_heads = 32, c.num_key_value_heads = 8, c.head_dim = 64;
    p.push_back({"llama-3.2-1b", c});  // 1,235,814,400 parameters
    c = l32;
    c.hidden_size = 3072, c.intermediate_size = 8192, c.num_hidden_layers = 28;
    c.num_attention_heads = 24, c.num_key_value_heads = 8, c.head_dim = 128;
    p.push_back({"llama-3.2-3b", c});  // 3,212,749,824
    // Meta-Llama-3-8B (base): untied, no rope scaling, 8K context.
    c = LlamaConfig{};
    c.architecture = kLlama;
    c.vocab_size = 128256, c.hidden_size = 4096, c.intermediate_size = 14336;
    c.num_hidden_layers = 32, c.num_attention_heads = 32, c.num_key_value_heads = 8;
    c.head_dim = 128, c.max_position_embeddings = 8192, c.rope_theta = 500000.0;
    c.rms_norm_eps = 1e-5f, c.tie_word_embeddings = false;
    c.eos_token_ids = {128001}, c.bos_token_id = 128000;
    p.push_back({"llama-3-8b", c});  // 8,030,261,248
    // Meta-Llama-3-70B (base): the 8B's vocabulary and context at 80 layers of width 8192.
    c.hidden_size = 8192, c.intermediate_size = 28672, c.num_hidden_layers = 80;
    c.num_attention_heads = 64, c.num_key_value_heads = 8;
    p.push_back({"llama-3-70b", c});  // 70,553,706,496
    // Qwen2.5-0.5B (base): tied, q/k/v biases, bos = eos = <|endoftext|>.
    c = LlamaConfig{};
    c.architecture = kQwen2;
    c.vocab_size = 151936, c.hidden_size = 896, c.intermediate_size = 4864;
    c.num_hidden_layers = 24, c.num_attention_heads = 14, c.num_key_value_heads = 2;
    c.head_dim = 64, c.max_position_embeddings = 32768, c.rope_theta = 1000000.0;
    c.rms_norm_eps = 1e-6f, c.tie_word_embeddings = true, c.attention_bias = true;
    c.eos_token_ids = {151643}, c.bos_token_id = 151643;
    p.push_back({"qwen2.5-0.5b", c});  // 494,032,768
    // Mistral-7B-v0.3: vocab 32768, no sliding window (v0.1 had 4096), untied.
    c = LlamaConfig{};
    c.architecture = kMistral;
    c.vocab_size = 32768, c.hidden_size = 4096, c.intermediate_size = 14336;
    c.num_hidden_layers = 32, c.num_attention_heads = 32, c.num_key_value_heads = 8;
    c.head_dim = 128, c.max_position_embeddings = 32768, c.rope_theta = 1000000.0;
    c.rms_norm_eps = 1e-5f, c.tie_word_embeddings = false, c.sliding_window = 0;
    c.eos_token_ids = {2}, c.bos_token_id = 1;
    p.push_back({"mistral-7b", c});  // 7,248,023,552
    // Llama-2-7b: multi-head attention (NKV = NH), 4K context; the LLaMA-7B shape of the
    // ZeRO-Inference baselines (../shared/gpu-baseline.md).
    c = LlamaConfig{};
    c.architecture = kLlama;
    c.vocab_size = 32000, c.hidden_size = 4096, c.intermediate_size = 11008;
    c.num_hidden_layers = 32, c.num_attention_heads = 32, c.num_key_value_heads = 32;
    c.head_dim = 128, c.max_position_embeddings = 4096, c.rope_theta = 10000.0;
    c.rms_norm_eps = 1e-5f, c.tie_word_embeddings = false;
    c.eos_token_ids = {2}, c.bos_token_id = 1;
    p.push_back({"llama-2-7b", c});  // 6,738,415,616
    // For tests: GQA 4:2, byte vocabulary, no special tokens (803,968 parameters).
    c = LlamaConfig{};
    c.architecture = kLlama;
    c.vocab_size = 256, c.hidden_size = 128, c.intermediate_size = 352;
    c.num_hidden_layers = 4, c.num_attention_heads = 4, c.num_key_value_heads = 2;
    c.head_dim = 32, c.max_position_embeddings = 256, c.rope_theta = 10000.0;
    c.rms_norm_eps = 1e-5f, c.tie_word_embeddings = false;
    c.eos_token_ids = {}, c.bos_token_id = std::nullopt;
    p.push_back({"llama-tiny", c});
    return p;
  }();
  return kPresets;
}

// Readers of config.json values: a value of the wrong type is an Error naming the key and
// showing the value.
[[noreturn]] void wrong_type(const std::string& key, const json& v, const char* expected,
                             std::string_view where) {
  throw Error(fmt::format("\"{}\" must be {}, got {}", key, expected, v.dump()),
              std::string(where), kFixHint);
}

int as_int(const std::string& key, const json& v, std::string_view where) {
  if (!v.is_number_integer()) wrong_type(key, v, "an integer", where);
  if (v.is_number_unsigned()) {
    if (v.get<std::uint64_t>() > static_cast<std::uint64_t>(std::numeric_limits<int>::max())) {
      throw Error(fmt::format("\"{}\" = {} is out of range", key, v.dump()), std::string(where),
                  kFixHint);
    }
    return static_cast<int>(v.get<std::uint64_t>());
  }
  const auto x = v.get<std::int64_t>();
  if (x < std::numeric_limits<int>::min() || x > std::numeric_limits<int>::max()) {
    throw Error(fmt::format("\"{}\" = {} is out of range", key, x), std::string(where), kFixHint);
  }
  return static_cast<int>(x);
}

double as_number(const std::string& key, const json& v, std::string_view where) {
  if (!v.is_number()) wrong_type(key, v, "a number", where);
  return v.get<double>();
}

bool as_bool(const std::string& key, const json& v, std::string_view where) {
  if (!v.is_boolean()) wrong_type(key, v, "true or false", where);
  return v.get<bool>();
}

// A key that is absent or null.
bool absent(const json& j, const char* key) { return !j.contains(key) || j.at(key).is_null(); }

// config.json's "rope_scaling" (or transformers 5's "rope_parameters", the same object with
// rope_theta inside): null, or rope_type (legacy "type") "default" is no scaling; "llama3" with
// its four numbers; any other type is refused, since it changes the frequencies or the
// attention scale (linear, dynamic, yarn, longrope, ...).
std::optional<RopeLlama3Scaling> parse_rope_scaling(const char* key, const json& v,
                                                    std::string_view where) {
  if (v.is_null()) return std::nullopt;
  if (!v.is_object()) wrong_type(key, v, "an object or null", where);
  const json* type = nullptr;
  if (v.contains("rope_type")) {
    type = &v.at("rope_type");
  } else if (v.contains("type")) {
    type = &v.at("type");
  }
  if (type == nullptr) {
    throw Error(fmt::format("\"{}\" = {} has no \"rope_type\"", key, v.dump()), std::string(where),
                "give \"rope_type\": \"llama3\" with its factors, or \"rope_scaling\": null");
  }
  if (!type->is_string()) wrong_type(fmt::format("{}.rope_type", key), *type, "a string", where);
  const auto name = type->get<std::string>();
  if (name == "default") return std::nullopt;
  if (name != "llama3") {
    throw Error(fmt::format("\"{}\" of type \"{}\" is not supported: {}", key, name, v.dump()),
                std::string(where),
                "strata's LLaMA family implements plain RoPE and \"llama3\" scaling only "
                "(not linear, dynamic, yarn, longrope, ...)");
  }
  RopeLlama3Scaling s;
  auto field = [&](const char* name_in) {
    const std::string full = fmt::format("{}.{}", key, name_in);
    if (!v.contains(name_in)) {
      throw Error(fmt::format("\"{}\" (llama3) lacks \"{}\"", key, name_in), std::string(where),
                  "llama3 rope scaling needs factor, low_freq_factor, high_freq_factor and "
                  "original_max_position_embeddings");
    }
    return as_number(full, v.at(name_in), where);
  };
  s.factor = field("factor");
  s.low_freq_factor = field("low_freq_factor");
  s.high_freq_factor = field("high_freq_factor");
  s.original_max_position_embeddings = field("original_max_position_embeddings");
  return s;
}

// A float as its shortest decimal (1e-05, not 9.999999747378752e-06), as Python writes it.
double shortest_double(float x) { return std::stod(fmt::format("{}", x)); }

// A double that holds an integer, written as one (original_max_position_embeddings: 8192).
json integral_or_number(double x) {
  if (std::isfinite(x) && x == std::floor(x) && std::fabs(x) < 9.0e15) {
    return static_cast<std::int64_t>(x);
  }
  return x;
}

}  // namespace

void LlamaConfig::validate() const {
  const char* hint = "fix the model config (HF config.json names)";
  if (model_type_of(architecture) == nullptr) {
    throw Error(fmt::format("model config: architecture \"{}\" is not supported", architecture),
                "", fmt::format("use one of: {}", kSupported));
  }
  auto positive = [&](const char* key, int v) {
    if (v <= 0) {
      throw Error(fmt::format("model config: {} must be positive, got {}", key, v), "", hint);
    }
  };
  positive("vocab_size", vocab_size);
  positive("hidden_size", hidden_size);
  positive("intermediate_size", intermediate_size);
  positive("num_hidden_layers", num_hidden_layers);
  positive("num_attention_heads", num_attention_heads);
  positive("num_key_value_heads", num_key_value_heads);
  positive("head_dim", head_dim);
  positive("max_position_embeddings", max_position_embeddings);
  if (num_attention_heads % num_key_value_heads != 0) {
    throw Error(fmt::format("model config: num_attention_heads ({}) must be a multiple of "
                            "num_key_value_heads ({})",
                            num_attention_heads, num_key_value_heads),
                "", "grouped-query attention shares each K/V head among NH / NKV query heads");
  }
  if (head_dim % 2 != 0) {
    throw Error(fmt::format("model config: head_dim must be even, got {}", head_dim), "",
                "rotary embeddings pair channel i with i + head_dim / 2");
  }
  if (!std::isfinite(rope_theta) || !(rope_theta > 0.0)) {
    throw Error(fmt::format("model config: rope_theta must be finite and > 0, got {}", rope_theta),
                "", hint);
  }
  if (!std::isfinite(rms_norm_eps) || !(rms_norm_eps > 0.0f)) {
    throw Error(fmt::format("model config: rms_norm_eps must be finite and > 0, got {}",
                            rms_norm_eps),
                "", hint);
  }
  if (rope_scaling) {
    const RopeLlama3Scaling& s = *rope_scaling;
    const bool finite = std::isfinite(s.factor) && std::isfinite(s.low_freq_factor) &&
                        std::isfinite(s.high_freq_factor) &&
                        std::isfinite(s.original_max_position_embeddings);
    if (!finite || !(s.factor > 0.0) || !(s.low_freq_factor > 0.0) ||
        !(s.high_freq_factor > s.low_freq_factor) || !(s.original_max_position_embeddings > 0.0)) {
      throw Error(fmt::format("model config: rope_scaling (llama3) factor {}, low_freq_factor {}, "
                              "high_freq_factor {}, original_max_position_embeddings {}: factor, "
                              "low_freq_factor and the context must be finite and positive, "
                              "high_freq_factor > low_freq_factor",
                              s.factor, s.low_freq_factor, s.high_freq_factor,
                              s.original_max_position_embeddings),
                  "", hint);
    }
  }
  // The kernels take widths as int: the MLP's fused (gate | up) row and the packed qkv row.
  constexpr std::int64_t kIntMax = std::numeric_limits<int>::max();
  if (2 * static_cast<std::int64_t>(intermediate_size) > kIntMax) {
    throw Error(fmt::format("model config: intermediate_size = {} is too large (2 * F must fit "
                            "in int)",
                            intermediate_size));
  }
  const std::int64_t qkv = (static_cast<std::int64_t>(num_attention_heads) +
                            2 * static_cast<std::int64_t>(num_key_value_heads)) *
                           head_dim;
  if (qkv > kIntMax || static_cast<std::int64_t>(hidden_size) > kIntMax / 2) {
    throw Error(fmt::format("model config: (num_attention_heads + 2 num_key_value_heads) * "
                            "head_dim = {} (or hidden_size = {}) is too large for int",
                            qkv, hidden_size));
  }
  // What to_json can say for the architecture (transformers' classes fix the rest).
  if (sliding_window < 0 || (sliding_window != 0 && architecture != kMistral)) {
    throw Error(fmt::format("model config: sliding_window = {} for {}", sliding_window,
                            architecture),
                "", "sliding_window is >= 0, and only MistralForCausalLM has one (0 = none)");
  }
  if (architecture == kQwen2 && !attention_bias) {
    throw Error("model config: Qwen2ForCausalLM always has q/k/v biases (attention_bias false)", "",
                "set attention_bias true, or use LlamaForCausalLM");
  }
  if (architecture == kMistral && attention_bias) {
    throw Error("model config: MistralForCausalLM has no biases (attention_bias true)", "",
                "set attention_bias false, or use LlamaForCausalLM");
  }
  for (int id : eos_token_ids) {
    if (id < 0) throw Error(fmt::format("model config: eos_token_id {} is negative", id), "", hint);
  }
  if (bos_token_id && *bos_token_id < 0) {
    throw Error(fmt::format("model config: bos_token_id {} is negative", *bos_token_id), "", hint);
  }
}

std::int64_t LlamaConfig::num_params() const {
  const std::int64_t V = vocab_size, C = hidden_size, F = intermediate_size, L = num_hidden_layers,
                     NH = num_attention_heads, NKV = num_key_value_heads, hs = head_dim;
  const std::int64_t per_layer = C * NH * hs + 2 * C * NKV * hs + NH * hs * C + 3 * C * F +
                                 2 * C + (attention_bias ? (NH + 2 * NKV) * hs : 0);
  return V * C + (tie_word_embeddings ? 0 : V * C) + L * per_layer + C;
}

std::vector<float> LlamaConfig::rope_inv_freq() const {
  return kernels::host::rope_inv_freq(head_dim, rope_theta,
                                      rope_scaling ? &*rope_scaling : nullptr);
}

LlamaConfig LlamaConfig::from_json(std::string_view json_text, std::string_view where) {
  const std::string w(where);
  json j;
  try {
    j = json::parse(json_text);
  } catch (const json::exception& e) {  // parse_error, or out_of_range for a number like 1e999
    throw Error(fmt::format("the model config is not valid JSON: {}", e.what()), w,
                "give a Hugging Face config.json");
  }
  if (!j.is_object()) throw Error("the model config must be a JSON object", w);

  // The architecture: "architectures"[0], else "model_type".
  LlamaConfig c;
  std::string model_type;
  if (!absent(j, "model_type")) {
    if (!j["model_type"].is_string()) wrong_type("model_type", j["model_type"], "a string", w);
    model_type = j["model_type"].get<std::string>();
  }
  if (!absent(j, "architectures")) {
    const json& a = j["architectures"];
    if (!a.is_array() || a.empty() || !a[0].is_string()) {
      wrong_type("architectures", a, "a list of class names", w);
    }
    c.architecture = a[0].get<std::string>();
    if (model_type_of(c.architecture) == nullptr) {
      throw Error(fmt::format("\"architectures\" = {} is not supported", a.dump()), w,
                  fmt::format("use one of: {}", kSupported));
    }
    if (!model_type.empty() && model_type != model_type_of(c.architecture)) {
      throw Error(fmt::format("\"architectures\" = {} disagrees with \"model_type\" = \"{}\"",
                              a.dump(), model_type),
                  w, fmt::format("{} has model_type \"{}\"", c.architecture,
                                 model_type_of(c.architecture)));
    }
  } else if (model_type == "llama") {
    c.architecture = kLlama;
  } else if (model_type == "mistral") {
    c.architecture = kMistral;
  } else if (model_type == "qwen2") {
    c.architecture = kQwen2;
  } else {
    throw Error(model_type.empty()
                    ? std::string("the model config has neither \"architectures\" nor "
                                  "\"model_type\"")
                    : fmt::format("\"model_type\" = \"{}\" is not supported", model_type),
                w,
                fmt::format("use one of: {} (model_type llama, mistral, qwen2)", kSupported));
  }
  const bool llama = c.architecture == kLlama, mistral = c.architecture == kMistral,
             qwen2 = c.architecture == kQwen2;

  // Keys that would change the math: refused rather than computed differently. They are refused
  // whatever the architecture (transformers ignores mlp_bias and pretraining_tp outside Llama,
  // but no published Mistral or Qwen2 config carries them, and refusing cannot compute the
  // wrong thing).
  if (j.contains("hidden_act")) {
    const json& v = j["hidden_act"];
    if (!v.is_string()) wrong_type("hidden_act", v, "a string", w);
    if (v.get<std::string>() != "silu") {
      throw Error(fmt::format("\"hidden_act\" = {} is not supported", v.dump()), w,
                  "strata's LLaMA family computes down_proj(silu(gate_proj(x)) * up_proj(x)): "
                  "hidden_act must be \"silu\"");
    }
  }
  if (!absent(j, "mlp_bias") && as_bool("mlp_bias", j["mlp_bias"], w)) {
    throw Error("\"mlp_bias\" = true is not supported", w,
                "strata's LLaMA family has no biases in the MLP");
  }
  if (!absent(j, "pretraining_tp") && as_int("pretraining_tp", j["pretraining_tp"], w) > 1) {
    throw Error(fmt::format("\"pretraining_tp\" = {} is not supported", j["pretraining_tp"].dump()),
                w, "strata computes the MLP unsliced: set pretraining_tp to 1");
  }
  if (!absent(j, "use_sliding_window") &&
      as_bool("use_sliding_window", j["use_sliding_window"], w)) {
    throw Error("\"use_sliding_window\" = true is not supported", w,
                "strata's Qwen2 attends to the whole sequence in every layer: set "
                "use_sliding_window false");
  }
  // Dropout in attention changes training (every published config has 0.0).
  if (!absent(j, "attention_dropout") &&
      as_number("attention_dropout", j["attention_dropout"], w) != 0.0) {
    throw Error(fmt::format("\"attention_dropout\" = {} is not supported",
                            j["attention_dropout"].dump()),
                w, "strata has no dropout: set attention_dropout to 0.0");
  }

  // Required sizes.
  for (const char* key : {"vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
                          "num_attention_heads"}) {
    if (absent(j, key)) {
      throw Error(fmt::format("the model config lacks \"{}\"", key), w,
                  "a LLaMA-family config.json has vocab_size, hidden_size, intermediate_size, "
                  "num_hidden_layers and num_attention_heads");
    }
  }
  c.vocab_size = as_int("vocab_size", j["vocab_size"], w);
  c.hidden_size = as_int("hidden_size", j["hidden_size"], w);
  c.intermediate_size = as_int("intermediate_size", j["intermediate_size"], w);
  c.num_hidden_layers = as_int("num_hidden_layers", j["num_hidden_layers"], w);
  c.num_attention_heads = as_int("num_attention_heads", j["num_attention_heads"], w);
  if (c.num_attention_heads <= 0) {
    throw Error(fmt::format("\"num_attention_heads\" must be positive, got {}",
                            c.num_attention_heads),
                w, kFixHint);
  }

  // Optional keys, with the architecture's defaults (the table at the top).
  if (!j.contains("num_key_value_heads")) {
    c.num_key_value_heads = mistral ? 8 : qwen2 ? 32 : c.num_attention_heads;
  } else if (j["num_key_value_heads"].is_null()) {
    c.num_key_value_heads = c.num_attention_heads;
  } else {
    c.num_key_value_heads = as_int("num_key_value_heads", j["num_key_value_heads"], w);
  }
  c.head_dim = absent(j, "head_dim") ? c.hidden_size / c.num_attention_heads
                                     : as_int("head_dim", j["head_dim"], w);
  c.max_position_embeddings =
      absent(j, "max_position_embeddings")
          ? (mistral ? 131072 : qwen2 ? 32768 : 2048)
          : as_int("max_position_embeddings", j["max_position_embeddings"], w);
  c.rope_theta = absent(j, "rope_theta") ? 10000.0 : as_number("rope_theta", j["rope_theta"], w);
  c.rope_scaling = std::nullopt;
  if (j.contains("rope_scaling")) {
    c.rope_scaling = parse_rope_scaling("rope_scaling", j["rope_scaling"], w);
  }
  if (!absent(j, "rope_parameters")) {
    const json& rp = j["rope_parameters"];
    c.rope_scaling = parse_rope_scaling("rope_parameters", rp, w);
    if (!absent(rp, "rope_theta")) {
      c.rope_theta = as_number("rope_parameters.rope_theta", rp["rope_theta"], w);
    }
  }
  c.rms_norm_eps = absent(j, "rms_norm_eps")
                       ? 1e-6f
                       : static_cast<float>(as_number("rms_norm_eps", j["rms_norm_eps"], w));
  c.tie_word_embeddings = absent(j, "tie_word_embeddings")
                              ? false
                              : as_bool("tie_word_embeddings", j["tie_word_embeddings"], w);
  if (llama) {
    c.attention_bias =
        absent(j, "attention_bias") ? false : as_bool("attention_bias", j["attention_bias"], w);
  } else {
    c.attention_bias = qwen2;  // hard-wired in MistralAttention / Qwen2Attention
  }
  c.sliding_window = 0;
  if (mistral) {
    if (!j.contains("sliding_window")) {
      c.sliding_window = 4096;  // MistralConfig's default
    } else if (!j["sliding_window"].is_null()) {
      c.sliding_window = as_int("sliding_window", j["sliding_window"], w);
      if (c.sliding_window <= 0) {
        throw Error(fmt::format("\"sliding_window\" must be positive or null, got {}",
                                c.sliding_window),
                    w, kFixHint);
      }
    }
  }
  // Token ids: absent takes the class default, null means none.
  c.eos_token_ids.clear();
  if (!j.contains("eos_token_id")) {
    if (!qwen2) c.eos_token_ids = {2};
  } else if (const json& v = j["eos_token_id"]; v.is_array()) {
    for (const json& x : v) c.eos_token_ids.push_back(as_int("eos_token_id", x, w));
  } else if (!v.is_null()) {
    if (!v.is_number_integer()) wrong_type("eos_token_id", v, "an integer, a list or null", w);
    c.eos_token_ids.push_back(as_int("eos_token_id", v, w));
  }
  c.bos_token_id = std::nullopt;
  if (!j.contains("bos_token_id")) {
    if (!qwen2) c.bos_token_id = 1;
  } else if (!j["bos_token_id"].is_null()) {
    c.bos_token_id = as_int("bos_token_id", j["bos_token_id"], w);
  }

  try {
    c.validate();
  } catch (const Error& e) {
    throw Error(e.what_happened(), w, e.hint());
  }
  return c;
}

std::string LlamaConfig::to_json() const {
  validate();
  const bool llama = architecture == kLlama, mistral = architecture == kMistral,
             qwen2 = architecture == kQwen2;
  // nlohmann::json sorts keys, as transformers' json.dumps(sort_keys=True).
  json j;
  j["architectures"] = json::array({architecture});
  j["model_type"] = model_type_of(architecture);
  j["vocab_size"] = vocab_size;
  j["hidden_size"] = hidden_size;
  j["intermediate_size"] = intermediate_size;
  j["num_hidden_layers"] = num_hidden_layers;
  j["num_attention_heads"] = num_attention_heads;
  j["num_key_value_heads"] = num_key_value_heads;
  // Qwen2Config has no head_dim (transformers derives C / NH); written only where it differs.
  if (!qwen2 || head_dim != hidden_size / num_attention_heads) j["head_dim"] = head_dim;
  j["max_position_embeddings"] = max_position_embeddings;
  j["rope_theta"] = rope_theta;
  if (rope_scaling) {
    j["rope_scaling"] = {
        {"rope_type", "llama3"},
        {"factor", rope_scaling->factor},
        {"low_freq_factor", rope_scaling->low_freq_factor},
        {"high_freq_factor", rope_scaling->high_freq_factor},
        {"original_max_position_embeddings",
         integral_or_number(rope_scaling->original_max_position_embeddings)},
    };
  } else if (!mistral) {
    j["rope_scaling"] = nullptr;  // MistralConfig writes no rope_scaling
  }
  j["rms_norm_eps"] = shortest_double(rms_norm_eps);
  j["hidden_act"] = "silu";
  j["tie_word_embeddings"] = tie_word_embeddings;
  j["attention_dropout"] = 0.0;
  j["initializer_range"] = 0.02;
  j["use_cache"] = true;
  j["torch_dtype"] = "float32";
  if (llama) {
    // Qwen2Config and MistralConfig have no attention_bias / mlp_bias / pretraining_tp: their
    // biases are fixed by the class (Qwen2 q/k/v: yes; Mistral: none).
    j["attention_bias"] = attention_bias;
    j["mlp_bias"] = false;
    j["pretraining_tp"] = 1;
  }
  if (mistral) {
    j["sliding_window"] = sliding_window > 0 ? json(sliding_window) : json(nullptr);
  }
  if (qwen2) {
    j["use_sliding_window"] = false;
    j["sliding_window"] = nullptr;
    j["max_window_layers"] = num_hidden_layers;
  }
  if (eos_token_ids.empty()) {
    j["eos_token_id"] = nullptr;
  } else if (eos_token_ids.size() == 1) {
    j["eos_token_id"] = eos_token_ids[0];
  } else {
    j["eos_token_id"] = eos_token_ids;
  }
  j["bos_token_id"] = bos_token_id ? json(*bos_token_id) : json(nullptr);
  return j.dump(2) + "\n";
}

LlamaConfig LlamaConfig::preset(std::string_view name) { return preset_of(presets(), name); }

std::vector<std::string> LlamaConfig::preset_names() { return preset_names_of(presets()); }

}  // namespace strata::models
