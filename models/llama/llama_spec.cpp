#include "models/llama/llama_spec.h"

#include <fmt/format.h>

#include "models/llama/llama_layout.h"
#include "models/llama/llama_model.h"
#include "models/param_init.h"

namespace strata::models {

LlamaSpec::LlamaSpec(const LlamaConfig& config) : config_(config) {
  config_.validate();
  naming_.embedding = "model.embed_tokens.weight";
  naming_.tied_head = config_.tie_word_embeddings ? "lm_head.weight" : "";
  // Older checkpoints carry the rotary frequencies as a buffer.
  naming_.ignored_suffixes = {".rotary_emb.inv_freq"};
}

std::string LlamaSpec::describe() const {
  return fmt::format("{}: {} layers, {} channels, {} heads ({} key/value) of {}, MLP {}, vocabulary {}{}, "
                     "{:.3f} B parameters",
                     config_.architecture, config_.num_hidden_layers, config_.hidden_size,
                     config_.num_attention_heads, config_.num_key_value_heads, config_.head_dim,
                     config_.intermediate_size, config_.vocab_size, config_.tie_word_embeddings ? " (tied)" : "",
                     static_cast<double>(config_.num_params()) / 1e9);
}

ModelLayout LlamaSpec::layout() const { return llama_layout(config_); }

std::uint64_t LlamaSpec::activation_bytes(const ModelOptions& options, int B, int T) const {
  return LlamaModel::activation_bytes(config_, options, B, T);
}

std::uint64_t LlamaSpec::inference_bytes(const ModelOptions& options, int batch, int prompt_T, int max_T,
                                  KvPlacement kv) const {
  return LlamaModel::inference_bytes(config_, options, batch, prompt_T, max_T, kv);
}

std::unique_ptr<Model> LlamaSpec::make_model(const ModelOptions& options, runtime::device::Device& device,
                                             runtime::device::Stream& compute,
                                             runtime::params::ParamProvider& params) const {
  return std::make_unique<LlamaModel>(config_, options, device, compute, params);
}

void LlamaSpec::init_module(const ModuleLayout& module, std::uint64_t seed, float* out) const {
  zero_gaps(module, out);
  for (const TensorSlot& t : module.tensors) {
    float* p = out + t.offset;
    if (ends_with(t.name, ".bias")) {
      fill_value(p, t.numel, 0.0f);
    } else if (ends_with(t.name, "norm.weight")) {
      fill_value(p, t.numel, 1.0f);
    } else {
      fill_normal(p, t.numel, seed, t.name, 0.02);
    }
  }
}

const Family& llama_family() {
  static const Family kFamily{
      "llama",
      {"LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM"},
      {"llama", "mistral", "qwen2"},
      [](std::string_view text, std::string_view where) -> ModelSpecPtr {
        return std::make_shared<LlamaSpec>(LlamaConfig::from_json(text, where));
      },
      [] { return LlamaConfig::preset_names(); },
      [](std::string_view name) -> ModelSpecPtr { return std::make_shared<LlamaSpec>(LlamaConfig::preset(name)); },
  };
  return kFamily;
}

KvShape LlamaSpec::kv_shape() const { return LlamaModel::kv_shape(config_); }

}  // namespace strata::models
