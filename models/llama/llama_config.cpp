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
    // Qwen3-8B (base): q/k norms, untied, bos <|endoftext|>, eos <|im_end|>.
    c = LlamaConfig{};
    c.architecture = kQwen3;
    c.vocab_size = 151936, c.hidden_size = 4096, c.intermediate_size = 12288;
    c.num_hidden_layers = 36, c.num_attention_heads = 32, c.num_key_value_heads = 8;
    c.head_dim = 128, c.max_position_embeddings = 40960, c.rope_theta = 1000000.0;
    c.rms_norm_eps = 1e-6f, c.tie_word_embeddings = false;
    c.eos_token_ids = {151645}, c.bos_token_id = 151643;
    p.push_back({"qwen3-8b", c});  // 8,190,735,360
    // Mixtral-8x7B-v0.1: 8 experts, 2 per token, every layer sparse.
    c = LlamaConfig{};
    c.architecture = kMixtral;
    c.vocab_size = 32000, c.hidden_size = 4096, c.intermediate_size = 14336;
    c.num_hidden_layers = 32, c.num_attention_heads = 32, c.num_key_value_heads = 8;
    c.head_dim = 128, c.max_position_embeddings = 32768, c.rope_theta = 1000000.0;
    c.rms_norm_eps = 1e-5f, c.tie_word_embeddings = false;
    c.eos_token_ids = {2}, c.bos_token_id = 1;
    c.num_experts = 8, c.num_experts_per_tok = 2, c.moe_intermediate_size = 14336, c.norm_topk_prob = true;
    c.router_aux_loss_coef = 0.02f;
    p.push_back({"mixtral-8x7b", c});  // 46,702,792,704 (12,879,925,248 active)
    // Qwen3-30B-A3B (base): 128 experts of width 768, 8 per token, renormalised.
    c = LlamaConfig{};
    c.architecture = kQwen3Moe;
    c.vocab_size = 151936, c.hidden_size = 2048, c.intermediate_size = 6144;
    c.num_hidden_layers = 48, c.num_attention_heads = 32, c.num_key_value_heads = 4;
    c.head_dim = 128, c.max_position_embeddings = 40960, c.rope_theta = 1000000.0;
    c.rms_norm_eps = 1e-6f, c.tie_word_embeddings = false;
    c.eos_token_ids = {151645}, c.bos_token_id = 151643;
    c.num_experts = 128, c.num_experts_per_tok = 8, c.moe_intermediate_size = 768, c.norm_topk_prob = true;
    p.push_back({"qwen3-30b-a3b", c});  // 30,532,122,624 (3,353,032,704 active)
    // For tests: byte vocabularies, no special tokens. A tied Qwen3 with head_dim != C / NH...
    c = LlamaConfig{};
    c.architecture = kQwen3;
    c.vocab_size = 256, c.hidden_size = 96, c.intermediate_size = 224;
    c.num_hidden_layers = 3, c.num_attention_heads = 4, c.num_key_value_heads = 2;
    c.head_dim = 32, c.max_position_embeddings = 256, c.rope_theta = 1000000.0;
    c.rms_norm_eps = 1e-6f, c.tie_word_embeddings = true;
    c.eos_token_ids = {}, c.bos_token_id = std::nullopt;
    p.push_back({"qwen3-tiny", c});
    // ...a Mixtral of 8 experts, 2 per token...
    c = LlamaConfig{};
    c.architecture = kMixtral;
    c.vocab_size = 256, c.hidden_size = 128, c.intermediate_size = 192;
    c.num_hidden_layers = 3, c.num_attention_heads = 4, c.num_key_value_heads = 2;
    c.head_dim = 32, c.max_position_embeddings = 256, c.rope_theta = 1000000.0;
    c.rms_norm_eps = 1e-5f, c.tie_word_embeddings = false;
    c.eos_token_ids = {}, c.bos_token_id = std::nullopt;
    c.num_experts = 8, c.num_experts_per_tok = 2, c.moe_intermediate_size = 192, c.norm_topk_prob = true;
    p.push_back({"mixtral-tiny", c});
    // ...and a Qwen3-MoE of 16 experts, 4 per token, its first layer dense.
    c = LlamaConfig{};
    c.architecture = kQwen3Moe;
    c.vocab_size = 256, c.hidden_size = 128, c.intermediate_size = 256;
    c.num_hidden_layers = 4, c.num_attention_heads = 4, c.num_key_value_heads = 2;
    c.head_dim = 32, c.max_position_embeddings = 256, c.rope_theta = 1000000.0;
    c.rms_norm_eps = 1e-6f, c.tie_word_embeddings = false;
    c.eos_token_ids = {}, c.bos_token_id = std::nullopt;
    c.num_experts = 16, c.num_experts_per_tok = 4, c.moe_intermediate_size = 64, c.norm_topk_prob = true;
    c.mlp_only_layers = {0};
    p.push_back({"qwen3-moe-tiny", c});
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
  if (sliding_window < 0 || (sliding_window != 0 && architecture != kMistral && architecture != kMixtral)) {
    throw Error(fmt::format("model config: sliding_window = {} for {}", sliding_window,
                            architecture),
                "", "sliding_window is >= 0, and only Mistral and Mixtral have one (0 = none)");
  }
  if (architecture == kQwen2 && !attention_bias) {
    throw Error("model config: Qwen2ForCausalLM always has q/k/v biases (attention_bias false)", "",
                "set attention_bias true, or use LlamaForCausalLM");
  }
  if ((architecture == kQwen3 || architecture == kQwen3Moe) && attention_bias) {
    throw Error(fmt::format("model config: {} with attention_bias true is not supported", architecture), "",
                "Qwen3's attention_bias also gives o_proj a bias, which strata's Qwen3 lacks: set it false");
  }
  if ((architecture == kMistral || architecture == kMixtral) && attention_bias) {
    throw Error("model config: MistralForCausalLM has no biases (attention_bias true)", "",
                "set attention_bias false, or use LlamaForCausalLM");
  }
  validate_experts();
  for (int id : eos_token_ids) {
    if (id < 0) throw Error(fmt::format("model config: eos_token_id {} is negative", id), "", hint);
  }
  if (bos_token_id && *bos_token_id < 0) {
    throw Error(fmt::format("model config: bos_token_id {} is negative", *bos_token_id), "", hint);
  }
}

void LlamaConfig::validate_experts() const {
  const bool moe_architecture = architecture == kMixtral || architecture == kQwen3Moe;
  const char* experts_key = architecture == kMixtral ? "num_local_experts" : "num_experts";
  if (!moe_architecture) {
    if (num_experts != 0 || num_experts_per_tok != 0) {
      throw Error(fmt::format("model config: {} has no experts (num_experts {}, num_experts_per_tok {})",
                              architecture, num_experts, num_experts_per_tok),
                  "", "use MixtralForCausalLM or Qwen3MoeForCausalLM for a mixture of experts");
    }
    return;
  }
  const char* hint = "fix the model config (HF config.json names)";
  if (num_experts <= 0) {
    throw Error(fmt::format("model config: {} must be positive, got {}", experts_key, num_experts), "", hint);
  }
  if (num_experts_per_tok <= 0 || num_experts_per_tok > num_experts) {
    throw Error(fmt::format("model config: num_experts_per_tok ({}) must be between 1 and {} ({})",
                            num_experts_per_tok, experts_key, num_experts),
                "", "the router picks num_experts_per_tok of the layer's experts for each token");
  }
  if (moe_intermediate_size <= 0 || 2 * static_cast<std::int64_t>(moe_intermediate_size) >
                                        std::numeric_limits<int>::max()) {
    throw Error(fmt::format("model config: the experts' width ({}) must be positive and 2x it fit in int",
                            moe_intermediate_size),
                "", hint);
  }
  if (architecture == kMixtral && (!norm_topk_prob || moe_intermediate_size != intermediate_size ||
                                   decoder_sparse_step != 1 || !mlp_only_layers.empty())) {
    throw Error("model config: MixtralForCausalLM renormalises the top-k weights and has experts of "
                "intermediate_size in every layer",
                "", "use Qwen3MoeForCausalLM for other routing or dense layers");
  }
  if (decoder_sparse_step <= 0) {
    throw Error(fmt::format("model config: decoder_sparse_step must be positive, got {}", decoder_sparse_step), "",
                hint);
  }
  for (int l : mlp_only_layers) {
    if (l < 0 || l >= num_hidden_layers) {
      throw Error(fmt::format("model config: mlp_only_layers names layer {}, outside 0..{}", l,
                              num_hidden_layers - 1),
                  "", hint);
    }
  }
  if (!std::isfinite(router_aux_loss_coef) || router_aux_loss_coef < 0.0f) {
    throw Error(fmt::format("model config: router_aux_loss_coef must be finite and >= 0, got {}",
                            router_aux_loss_coef),
                "", hint);
  }
}

bool LlamaConfig::qk_norm() const { return architecture == kQwen3 || architecture == kQwen3Moe; }

bool LlamaConfig::sparse_layer(int l) const {
  if (num_experts <= 0) return false;
  for (int d : mlp_only_layers) {
    if (d == l) return false;
  }
  return (l + 1) % decoder_sparse_step == 0;
}

namespace {

// Parameters of the model with `experts` of each sparse layer's experts counted.
std::int64_t params_with(const LlamaConfig& c, std::int64_t experts) {
  const std::int64_t V = c.vocab_size, C = c.hidden_size, F = c.intermediate_size, NH = c.num_attention_heads,
                     NKV = c.num_key_value_heads, hs = c.head_dim, E = c.num_experts,
                     Fe = c.moe_intermediate_size;
  const std::int64_t attention = C * NH * hs + 2 * C * NKV * hs + NH * hs * C + 2 * C +
                                 (c.attention_bias ? (NH + 2 * NKV) * hs : 0) + (c.qk_norm() ? 2 * hs : 0);
  std::int64_t n = V * C + (c.tie_word_embeddings ? 0 : V * C) + C;
  for (int l = 0; l < c.num_hidden_layers; ++l) {
    n += attention + (c.sparse_layer(l) ? E * C + experts * 3 * C * Fe : 3 * C * F);
  }
  return n;
}

}  // namespace

std::int64_t LlamaConfig::num_params() const { return params_with(*this, num_experts); }

std::int64_t LlamaConfig::active_params() const { return params_with(*this, num_experts_per_tok); }

std::vector<float> LlamaConfig::rope_inv_freq() const {
  return kernels::host::rope_inv_freq(head_dim, rope_theta,
                                      rope_scaling ? &*rope_scaling : nullptr);
}

LlamaConfig LlamaConfig::preset(std::string_view name) { return preset_of(presets(), name); }

std::vector<std::string> LlamaConfig::preset_names() { return preset_names_of(presets()); }

}  // namespace strata::models
