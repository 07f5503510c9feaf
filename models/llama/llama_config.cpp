#include "models/llama/llama_config.h"

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "core/error.h"
#include "models/llama/llama_config_impl.h"
#include "models/presets.h"

namespace strata::models {
namespace {

using kernels::host::RopeLlama3Scaling;
using namespace llama_detail;

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

LlamaConfig LlamaConfig::preset(std::string_view name) { return preset_of(presets(), name); }

std::vector<std::string> LlamaConfig::preset_names() { return preset_names_of(presets()); }

}  // namespace strata::models
