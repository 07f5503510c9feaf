#include "models/gpt/gpt_spec.h"

#include <fmt/format.h>

#include "models/gpt/gpt_init.h"
#include "models/gpt/gpt_layout.h"
#include "models/gpt/gpt_model.h"

namespace strata::models {

GptSpec::GptSpec(const GptConfig& config) : config_(config) {
  config_.validate();
  naming_.optional_prefix = "transformer.";
  naming_.embedding = "wte.weight";
  naming_.tied_head = "lm_head.weight";
  // Old GPT-2 checkpoints carry the causal mask as buffers.
  naming_.ignored_suffixes = {".attn.bias", ".attn.masked_bias"};
}

std::string GptSpec::describe() const {
  return fmt::format("GPT-2: {} layers, {} channels, {} heads, vocabulary {}, {} positions, {:.3f} B parameters",
                     config_.n_layer, config_.n_embd, config_.n_head, config_.vocab_size, config_.n_positions,
                     static_cast<double>(config_.num_params()) / 1e9);
}

ModelLayout GptSpec::layout() const { return gpt_layout(config_); }

std::uint64_t GptSpec::activation_bytes(const ModelOptions& options, int B, int T) const {
  return GptModel::activation_bytes(config_, options, B, T);
}

std::uint64_t GptSpec::inference_bytes(const ModelOptions& options, int batch, int prompt_T, int max_T,
                                  KvPlacement kv) const {
  return GptModel::inference_bytes(config_, options, batch, prompt_T, max_T, kv);
}

std::unique_ptr<Model> GptSpec::make_model(const ModelOptions& options, runtime::device::Device& device,
                                           runtime::device::Stream& compute,
                                           runtime::params::ParamProvider& params) const {
  return std::make_unique<GptModel>(config_, options, device, compute, params);
}

void GptSpec::init_module(const ModuleLayout& module, std::uint64_t seed, float* out) const {
  models::init_module(config_, module, seed, out);
}

const Family& gpt_family() {
  static const Family kFamily{
      "gpt2",
      {"GPT2LMHeadModel", "GPT2Model"},
      {"gpt2"},
      [](std::string_view text, std::string_view where) -> ModelSpecPtr {
        return std::make_shared<GptSpec>(GptConfig::from_json(text, where));
      },
      [] { return GptConfig::preset_names(); },
      [](std::string_view name) -> ModelSpecPtr { return std::make_shared<GptSpec>(GptConfig::preset(name)); },
  };
  return kFamily;
}

KvShape GptSpec::kv_shape() const { return GptModel::kv_shape(config_); }

}  // namespace strata::models
