#include "models/llama/llama_config.h"

#include <cmath>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "models/llama/llama_config_impl.h"

// LlamaConfig::from_json and to_json: config.json as transformers reads and writes it.
//
// Defaults of absent keys: those of transformers' LlamaConfig, MistralConfig, Qwen2Config,
// Qwen3Config, MixtralConfig and Qwen3MoeConfig, so that a config.json means here what it means
// there:
//
//                            Llama     Mistral    Qwen2     Qwen3     Mixtral    Qwen3-MoE
//   num_key_value_heads      NH        8          32        32        8          4      (null: NH)
//   head_dim                 C / NH    C / NH     C / NH    128       C / NH     C / NH (null: C / NH)
//   max_position_embeddings  2048      131072     32768     32768     131072     32768
//   rope_theta               10000     10000      10000     10000     1e6        10000
//   rms_norm_eps             1e-6      1e-6       1e-6      1e-6      1e-5       1e-6
//   tie_word_embeddings      false     false      false     false     false      false
//   attention_bias           the key   false      true      the key   false      the key
//                                      (Mistral, Qwen2, Mixtral: fixed, the key is ignored)
//   sliding_window           ignored   4096       none: use_sliding_window is refused (Qwen2,
//                                      (null:     Qwen3, Qwen3-MoE)     none (null: none)
//                                      none)
//   bos_token_id             1         1          none      none      1          none
//   eos_token_id             2         2          none      none      2          none
//   experts (E)              -         -          -         -         num_local_experts 8,
//                                                                                num_experts 128
//   num_experts_per_tok      -         -          -         -         2          8
//   expert width             -         -          -         -         intermediate_size,
//                                                                                moe_intermediate_size 768
//   norm_topk_prob           -         -          -         -         always     false
//   decoder_sparse_step, mlp_only_layers                                          1, []
//   router_aux_loss_coef, output_router_logits                         0.001, false (both MoE)
//
// C / NH is Python's floor division, as transformers'. One deliberate difference: transformers
// fills vocab_size, hidden_size, intermediate_size, num_hidden_layers and num_attention_heads
// with a 7B model's values when they are absent; here they are required, since a config.json
// without them is no real checkpoint's and a silent 7B shape helps nobody.

namespace strata::models {
namespace {

using nlohmann::json;
using kernels::host::RopeLlama3Scaling;
using namespace llama_detail;

constexpr const char* kFixHint = "fix config.json (Hugging Face names and types)";

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
std::optional<RopeLlama3Scaling> parse_rope_scaling(const std::string& key, const json& v,
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

// ---- config.json's keys ---------------------------------------------------------------------
//
// Every key from_json reads into a field, as runtime/config/config_fields.h lists DeepSpeed's:
// its name, the member, the reader of a given value, and what an absent or null key means for
// each architecture (the table at the top). from_json walks the list in order, so a fallback
// may use the keys before it (head_dim: hidden_size / num_attention_heads). Keys that would
// change the math are a second list (kRefusedKeys).

bool is_mistral(const LlamaConfig& c) { return c.architecture == kMistral; }
bool is_qwen2(const LlamaConfig& c) { return c.architecture == kQwen2; }
bool is_llama(const LlamaConfig& c) { return c.architecture == kLlama; }
bool is_qwen3(const LlamaConfig& c) { return c.architecture == kQwen3; }
bool is_mixtral(const LlamaConfig& c) { return c.architecture == kMixtral; }
bool is_qwen3_moe(const LlamaConfig& c) { return c.architecture == kQwen3Moe; }
bool is_moe(const LlamaConfig& c) { return is_mixtral(c) || is_qwen3_moe(c); }
// The architectures whose attention reads attention_bias.
bool reads_attention_bias(const LlamaConfig& c) { return is_llama(c) || is_qwen3(c) || is_qwen3_moe(c); }
// No bos / eos of the class: Qwen's.
bool qwen(const LlamaConfig& c) { return is_qwen2(c) || is_qwen3(c) || is_qwen3_moe(c); }

float as_float(const std::string& key, const json& v, std::string_view where) {
  return static_cast<float>(as_number(key, v, where));
}

std::optional<int> as_token_id(const std::string& key, const json& v, std::string_view where) {
  return as_int(key, v, where);
}

// "eos_token_id": one id or a list of them.
std::vector<int> as_token_ids(const std::string& key, const json& v, std::string_view where) {
  std::vector<int> ids;
  if (v.is_array()) {
    for (const json& x : v) ids.push_back(as_int(key, x, where));
    return ids;
  }
  if (!v.is_number_integer()) wrong_type(key, v, "an integer, a list or null", where);
  ids.push_back(as_int(key, v, where));
  return ids;
}

// "mlp_only_layers": a list of layer indices.
std::vector<int> as_int_list(const std::string& key, const json& v, std::string_view where) {
  if (!v.is_array()) wrong_type(key, v, "a list of integers", where);
  std::vector<int> out;
  for (const json& x : v) out.push_back(as_int(key, x, where));
  return out;
}

// A value for a key config.json does not give: from the architecture and the keys read before.
template <typename T>
using Fallback = T (*)(const LlamaConfig& c);

// One key, read into LlamaConfig::*member (of type T).
template <typename T>
struct Key {
  std::string_view name;  // "a.b": key b of the object at key a
  T LlamaConfig::*member;
  T (*read)(const std::string& key, const json& v, std::string_view where);  // a given value
  Fallback<T> absent = nullptr;  // the value when absent; nullptr: the key is required
  Fallback<T> null = nullptr;    // the value when null; nullptr: as absent
  // nullptr: every architecture reads the key; else only those for which it is true, and the
  // others take `absent` whatever the file says (the transformers class fixes the value).
  bool (*applies)(const LlamaConfig& c) = nullptr;
  std::string_view rule = {};  // ints: "positive" (or "positive or null") is checked when given
};

// In reading order.
const auto kKeys = std::tuple{
    Key<int>{.name = "vocab_size", .member = &LlamaConfig::vocab_size, .read = as_int},
    Key<int>{.name = "hidden_size", .member = &LlamaConfig::hidden_size, .read = as_int},
    Key<int>{.name = "intermediate_size", .member = &LlamaConfig::intermediate_size, .read = as_int},
    Key<int>{.name = "num_hidden_layers", .member = &LlamaConfig::num_hidden_layers, .read = as_int},
    // Positive before head_dim's fallback divides by it.
    Key<int>{.name = "num_attention_heads",
             .member = &LlamaConfig::num_attention_heads,
             .read = as_int,
             .rule = "positive"},
    Key<int>{.name = "num_key_value_heads",
             .member = &LlamaConfig::num_key_value_heads,
             .read = as_int,
             .absent = [](const LlamaConfig& c) {
               return is_mistral(c) || is_mixtral(c) ? 8 : is_qwen2(c) || is_qwen3(c) ? 32 : is_qwen3_moe(c) ? 4 : c.num_attention_heads;
             },
             .null = [](const LlamaConfig& c) { return c.num_attention_heads; }},
    // Python's floor division, as transformers'.
    Key<int>{.name = "head_dim",
             .member = &LlamaConfig::head_dim,
             .read = as_int,
             .absent = [](const LlamaConfig& c) { return is_qwen3(c) ? 128 : c.hidden_size / c.num_attention_heads; },
             .null = [](const LlamaConfig& c) { return c.hidden_size / c.num_attention_heads; }},
    Key<int>{.name = "max_position_embeddings",
             .member = &LlamaConfig::max_position_embeddings,
             .read = as_int,
             .absent = [](const LlamaConfig& c) { return is_mistral(c) || is_mixtral(c) ? 131072 : qwen(c) ? 32768 : 2048; }},
    Key<double>{.name = "rope_theta",
                .member = &LlamaConfig::rope_theta,
                .read = as_number,
                .absent = [](const LlamaConfig& c) { return is_mixtral(c) ? 1e6 : 10000.0; }},
    Key<std::optional<RopeLlama3Scaling>>{
        .name = "rope_scaling",
        .member = &LlamaConfig::rope_scaling,
        .read = parse_rope_scaling,
        .absent = [](const LlamaConfig&) { return std::optional<RopeLlama3Scaling>(); }},
    // transformers 5's name for rope_scaling, with rope_theta inside: either wins over the above.
    Key<std::optional<RopeLlama3Scaling>>{
        .name = "rope_parameters",
        .member = &LlamaConfig::rope_scaling,
        .read = parse_rope_scaling,
        .absent = [](const LlamaConfig& c) { return c.rope_scaling; }},
    Key<double>{.name = "rope_parameters.rope_theta",
                .member = &LlamaConfig::rope_theta,
                .read = as_number,
                .absent = [](const LlamaConfig& c) { return c.rope_theta; }},
    Key<float>{.name = "rms_norm_eps",
               .member = &LlamaConfig::rms_norm_eps,
               .read = as_float,
               .absent = [](const LlamaConfig& c) { return is_mixtral(c) ? 1e-5f : 1e-6f; }},
    Key<bool>{.name = "tie_word_embeddings",
              .member = &LlamaConfig::tie_word_embeddings,
              .read = as_bool,
              .absent = [](const LlamaConfig&) { return false; }},
    // Hard-wired in MistralAttention, MixtralAttention (none) and Qwen2Attention (q/k/v).
    Key<bool>{.name = "attention_bias",
              .member = &LlamaConfig::attention_bias,
              .read = as_bool,
              .absent = [](const LlamaConfig& c) { return is_qwen2(c); },
              .applies = reads_attention_bias},
    // Mistral's (4096 when absent, none when null) and Mixtral's (none); the Qwens' need
    // use_sliding_window, refused.
    Key<int>{.name = "sliding_window",
             .member = &LlamaConfig::sliding_window,
             .read = as_int,
             .absent = [](const LlamaConfig& c) { return is_mistral(c) ? 4096 : 0; },
             .null = [](const LlamaConfig&) { return 0; },
             .applies = [](const LlamaConfig& c) { return is_mistral(c) || is_mixtral(c); },
             .rule = "positive or null"},
    // Token ids: absent takes the class default, null means none.
    Key<std::vector<int>>{.name = "eos_token_id",
                          .member = &LlamaConfig::eos_token_ids,
                          .read = as_token_ids,
                          .absent = [](const LlamaConfig& c) { return qwen(c) ? std::vector<int>{} : std::vector<int>{2}; },
                          .null = [](const LlamaConfig&) { return std::vector<int>{}; }},
    Key<std::optional<int>>{.name = "bos_token_id",
                            .member = &LlamaConfig::bos_token_id,
                            .read = as_token_id,
                            .absent = [](const LlamaConfig& c) { return qwen(c) ? std::optional<int>() : 1; },
                            .null = [](const LlamaConfig&) { return std::optional<int>(); }},
    // Mixture of experts: Mixtral's and Qwen3-MoE's names; 0 experts elsewhere.
    Key<int>{.name = "num_local_experts",
             .member = &LlamaConfig::num_experts,
             .read = as_int,
             .absent = [](const LlamaConfig& c) { return is_mixtral(c) ? 8 : 0; },
             .applies = is_mixtral,
             .rule = "positive"},
    Key<int>{.name = "num_experts",
             .member = &LlamaConfig::num_experts,
             .read = as_int,
             .absent = [](const LlamaConfig& c) { return is_qwen3_moe(c) ? 128 : c.num_experts; },
             .applies = is_qwen3_moe,
             .rule = "positive"},
    Key<int>{.name = "num_experts_per_tok",
             .member = &LlamaConfig::num_experts_per_tok,
             .read = as_int,
             .absent = [](const LlamaConfig& c) { return is_mixtral(c) ? 2 : is_qwen3_moe(c) ? 8 : 0; },
             .applies = is_moe,
             .rule = "positive"},
    Key<int>{.name = "moe_intermediate_size",
             .member = &LlamaConfig::moe_intermediate_size,
             .read = as_int,
             .absent = [](const LlamaConfig& c) { return is_mixtral(c) ? c.intermediate_size : is_qwen3_moe(c) ? 768 : 0; },
             .applies = is_qwen3_moe,
             .rule = "positive"},
    Key<bool>{.name = "norm_topk_prob",
              .member = &LlamaConfig::norm_topk_prob,
              .read = as_bool,
              .absent = [](const LlamaConfig& c) { return is_mixtral(c); },
              .applies = is_qwen3_moe},
    Key<int>{.name = "decoder_sparse_step",
             .member = &LlamaConfig::decoder_sparse_step,
             .read = as_int,
             .absent = [](const LlamaConfig&) { return 1; },
             .applies = is_qwen3_moe,
             .rule = "positive"},
    Key<std::vector<int>>{.name = "mlp_only_layers",
                          .member = &LlamaConfig::mlp_only_layers,
                          .read = as_int_list,
                          .absent = [](const LlamaConfig&) { return std::vector<int>{}; },
                          .applies = is_qwen3_moe},
    Key<float>{.name = "router_aux_loss_coef",
               .member = &LlamaConfig::router_aux_loss_coef,
               .read = as_float,
               .absent = [](const LlamaConfig&) { return 0.001f; },
               .applies = is_moe},
    Key<bool>{.name = "output_router_logits",
              .member = &LlamaConfig::output_router_logits,
              .read = as_bool,
              .absent = [](const LlamaConfig&) { return false; },
              .applies = is_moe},
};

// A key whose given value would change the math: refused rather than computed differently,
// whatever the architecture (transformers ignores mlp_bias and pretraining_tp outside Llama,
// but no published Mistral or Qwen2 config carries them, and refusing cannot compute the wrong
// thing). `refuses` reads the value (a wrong type is an Error); null counts as absent unless
// `check_null`.
struct RefusedKey {
  const char* name;
  bool (*refuses)(const std::string& key, const json& v, std::string_view where);
  const char* hint;
  bool check_null = false;
};

const RefusedKey kRefusedKeys[] = {
    {"hidden_act",
     [](const std::string& key, const json& v, std::string_view where) {
       if (!v.is_string()) wrong_type(key, v, "a string", where);
       return v.get<std::string>() != "silu";
     },
     "strata's LLaMA family computes down_proj(silu(gate_proj(x)) * up_proj(x)): hidden_act must be \"silu\"",
     true},
    {"mlp_bias", as_bool, "strata's LLaMA family has no biases in the MLP"},
    {"pretraining_tp",
     [](const std::string& key, const json& v, std::string_view where) { return as_int(key, v, where) > 1; },
     "strata computes the MLP unsliced: set pretraining_tp to 1"},
    {"use_sliding_window", as_bool,
     "strata's Qwen2 and Qwen3 attend to the whole sequence in every layer: set use_sliding_window false"},
    {"layer_types",
     [](const std::string& key, const json& v, std::string_view where) {
       if (!v.is_array()) wrong_type(key, v, "a list of strings", where);
       for (const json& t : v) {
         if (!t.is_string()) wrong_type(key, v, "a list of strings", where);
         if (t.get<std::string>() != "full_attention") return true;
       }
       return false;
     },
     "strata attends to the whole sequence in every layer: every layer_types entry must be \"full_attention\""},
    // Routers other than top-k of a softmax (DeepSeek's sigmoid scores, grouped top-k) and shared
    // experts are other architectures' keys: a config that carries them means another model.
    {"scoring_func",
     [](const std::string& key, const json& v, std::string_view where) {
       if (!v.is_string()) wrong_type(key, v, "a string", where);
       return v.get<std::string>() != "softmax";
     },
     "strata's routers take the top k of a softmax over the router's logits (scoring_func \"softmax\")"},
    {"topk_method",
     [](const std::string& key, const json& v, std::string_view where) {
       if (!v.is_string()) wrong_type(key, v, "a string", where);
       return v.get<std::string>() != "greedy";
     },
     "strata's routers pick each token's top k over all experts (topk_method \"greedy\")"},
    {"n_shared_experts",
     [](const std::string& key, const json& v, std::string_view where) { return as_int(key, v, where) > 0; },
     "strata's Mixtral and Qwen3-MoE have no shared experts"},
    {"shared_expert_intermediate_size",
     [](const std::string& key, const json& v, std::string_view where) { return as_int(key, v, where) > 0; },
     "strata's Mixtral and Qwen3-MoE have no shared experts"},
    // Mixtral's training-time noise on the router's input.
    {"router_jitter_noise",
     [](const std::string& key, const json& v, std::string_view where) { return as_number(key, v, where) != 0.0; },
     "strata's router has no jitter: set router_jitter_noise to 0.0"},
    // Dropout in attention changes training (every published config has 0.0).
    {"attention_dropout",
     [](const std::string& key, const json& v, std::string_view where) { return as_number(key, v, where) != 0.0; },
     "strata has no dropout: set attention_dropout to 0.0"},
};

// The value at `name` ("a.b": key b of object a); nullptr when any part is absent.
const json* find_key(const json& j, std::string_view name) {
  const json* v = &j;
  for (std::size_t start = 0;;) {
    const std::size_t dot = name.find('.', start);
    const std::string part(name.substr(start, dot == std::string_view::npos ? std::string_view::npos : dot - start));
    if (!v->is_object() || !v->contains(part)) return nullptr;
    v = &v->at(part);
    if (dot == std::string_view::npos) return v;
    start = dot + 1;
  }
}

// Reads one key into c: its value, or its architecture's fallback.
template <typename T>
void read_key(const Key<T>& k, const json& j, LlamaConfig& c, std::string_view where) {
  const json* v = k.applies == nullptr || k.applies(c) ? find_key(j, k.name) : nullptr;
  if (v != nullptr && v->is_null() && k.null != nullptr) {
    c.*k.member = k.null(c);
  } else if (v == nullptr || v->is_null()) {
    STRATA_ASSERT(k.absent != nullptr, "a required key's absence is checked before any is read");
    c.*k.member = k.absent(c);
  } else {
    const std::string key(k.name);
    c.*k.member = k.read(key, *v, where);
    if constexpr (std::is_same_v<T, int>) {
      if (!k.rule.empty() && c.*k.member <= 0) {
        throw Error(fmt::format("\"{}\" must be {}, got {}", key, k.rule, c.*k.member), std::string(where),
                    kFixHint);
      }
    }
  }
}

// Calls fn(key) for every key of kKeys, in order.
template <typename Fn>
void for_each_key(Fn&& fn) {
  std::apply([&](const auto&... k) { (fn(k), ...); }, kKeys);
}

// "architectures"[0], else "model_type": one of the three, which must agree when both are given.
std::string read_architecture(const json& j, std::string_view where) {
  const std::string w(where);
  std::string model_type;
  if (!absent(j, "model_type")) {
    if (!j.at("model_type").is_string()) wrong_type("model_type", j.at("model_type"), "a string", w);
    model_type = j.at("model_type").get<std::string>();
  }
  if (!absent(j, "architectures")) {
    const json& a = j.at("architectures");
    if (!a.is_array() || a.empty() || !a[0].is_string()) {
      wrong_type("architectures", a, "a list of class names", w);
    }
    std::string architecture = a[0].get<std::string>();
    if (model_type_of(architecture) == nullptr) {
      throw Error(fmt::format("\"architectures\" = {} is not supported", a.dump()), w,
                  fmt::format("use one of: {}", kSupported));
    }
    if (!model_type.empty() && model_type != model_type_of(architecture)) {
      throw Error(fmt::format("\"architectures\" = {} disagrees with \"model_type\" = \"{}\"", a.dump(), model_type),
                  w, fmt::format("{} has model_type \"{}\"", architecture, model_type_of(architecture)));
    }
    return architecture;
  }
  for (const char* architecture : kArchitectures) {
    if (model_type == model_type_of(architecture)) return architecture;
  }
  throw Error(model_type.empty() ? std::string("the model config has neither \"architectures\" nor \"model_type\"")
                                 : fmt::format("\"model_type\" = \"{}\" is not supported", model_type),
              w, fmt::format("use one of: {} (model_type llama, mistral, qwen2, qwen3, mixtral, qwen3_moe)",
                             kSupported));
}

}  // namespace

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

  LlamaConfig c;
  c.architecture = read_architecture(j, where);
  for (const RefusedKey& k : kRefusedKeys) {
    if (!j.contains(k.name) || (j.at(k.name).is_null() && !k.check_null)) continue;
    if (k.refuses(k.name, j.at(k.name), where)) {
      throw Error(fmt::format("\"{}\" = {} is not supported", k.name, j.at(k.name).dump()), w, k.hint);
    }
  }
  // The required sizes, all present before any is read.
  for_each_key([&](const auto& k) {
    const json* v = find_key(j, k.name);
    if (k.absent != nullptr || (v != nullptr && !v->is_null())) return;
    throw Error(fmt::format("the model config lacks \"{}\"", k.name), w,
                "a LLaMA-family config.json has vocab_size, hidden_size, intermediate_size, "
                "num_hidden_layers and num_attention_heads");
  });
  for_each_key([&](const auto& k) { read_key(k, j, c, where); });

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
             qwen2 = architecture == kQwen2, qwen3 = architecture == kQwen3, mixtral = architecture == kMixtral,
             qwen3_moe = architecture == kQwen3Moe;
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
  if (mixtral || qwen3_moe) {
    j[mixtral ? "num_local_experts" : "num_experts"] = num_experts;
    j["num_experts_per_tok"] = num_experts_per_tok;
    j["router_aux_loss_coef"] = shortest_double(router_aux_loss_coef);
    j["output_router_logits"] = output_router_logits;
  }
  if (mixtral) j["router_jitter_noise"] = 0.0;
  if (qwen3_moe) {
    j["moe_intermediate_size"] = moe_intermediate_size;
    j["norm_topk_prob"] = norm_topk_prob;
    j["decoder_sparse_step"] = decoder_sparse_step;
    j["mlp_only_layers"] = mlp_only_layers;
  }
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
  } else if (!mistral && !mixtral) {
    j["rope_scaling"] = nullptr;  // MistralConfig and MixtralConfig write no rope_scaling
  }
  j["rms_norm_eps"] = shortest_double(rms_norm_eps);
  j["hidden_act"] = "silu";
  j["tie_word_embeddings"] = tie_word_embeddings;
  j["attention_dropout"] = 0.0;
  j["initializer_range"] = 0.02;
  j["use_cache"] = true;
  j["torch_dtype"] = "float32";
  if (qwen3 || qwen3_moe) j["attention_bias"] = attention_bias;
  if (llama) {
    // Qwen2Config and MistralConfig have no attention_bias / mlp_bias / pretraining_tp: their
    // biases are fixed by the class (Qwen2 q/k/v: yes; Mistral: none).
    j["attention_bias"] = attention_bias;
    j["mlp_bias"] = false;
    j["pretraining_tp"] = 1;
  }
  if (mistral || mixtral) {
    j["sliding_window"] = sliding_window > 0 ? json(sliding_window) : json(nullptr);
  }
  if (qwen2 || qwen3 || qwen3_moe) {
    j["use_sliding_window"] = false;
    j["sliding_window"] = nullptr;
    if (!qwen3_moe) j["max_window_layers"] = num_hidden_layers;
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

}  // namespace strata::models
