#pragma once
// What every block-stack family (models/block_stack.h) does the same way around its parts:
//  - StackSpec: the ModelSpec (models/model_spec.h) whose layout, sizes and models come from
//    the family's StackParts; a family's spec adds its names, config.json and initialization.
//  - FamilyModel<Spec>: the family's model under its own name (GptModel, LlamaModel), for code
//    that builds one without the registry; the same BlockStack that Spec::make_model returns.
//  - stack_family<Spec>(): the family's line of the registry (models/registry.cpp).
// A Spec names its config as Spec::Config and has a static make_parts(config, dtype).
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/dtype.h"
#include "models/block_stack.h"
#include "models/model_spec.h"

namespace strata::models {

class StackSpec : public ModelSpec {
 public:
  // What the registry and the tools read of a model, fixed when its spec is made.
  struct Facts {
    std::string_view family;             // the registry's name
    int vocab_size = 0;
    int hidden_size = 0;                 // C
    int max_positions = 0;               // the longest sequence
    std::string_view max_positions_key;  // its config.json key
    std::int64_t num_params = 0;         // a tied head counted once
  };

  std::string_view family() const override { return facts_.family; }
  int vocab_size() const override { return facts_.vocab_size; }
  int hidden_size() const override { return facts_.hidden_size; }
  int max_positions() const override { return facts_.max_positions; }
  std::string_view max_positions_key() const override { return facts_.max_positions_key; }
  std::int64_t num_params() const override { return facts_.num_params; }
  const HfNaming& hf_naming() const override { return naming_; }

  ModelLayout layout() const override { return parts(DType::f32)->layout(); }
  KvShape kv_shape() const override { return parts(DType::f32)->kv_shape(); }
  std::uint64_t activation_bytes(const ModelOptions& options, int B, int T) const override {
    return BlockStack::activation_bytes(*parts(options.dtype), options, B, T);
  }
  std::uint64_t inference_bytes(const ModelOptions& options, int batch, int prompt_T, int max_T,
                                KvPlacement kv = KvPlacement::device) const override {
    return BlockStack::inference_bytes(*parts(options.dtype), options, batch, prompt_T, max_T, kv);
  }
  std::unique_ptr<Model> make_model(const ModelOptions& options, runtime::device::Device& device,
                                    runtime::device::Stream& compute,
                                    runtime::params::ParamProvider& params) const override {
    return std::make_unique<BlockStack>(parts(options.dtype), options, device, compute, params);
  }

 protected:
  StackSpec(const Facts& facts, HfNaming naming) : facts_(facts), naming_(std::move(naming)) {}
  // The family's parts with storage in `dtype`; unattached (no device): for sizes and layout.
  virtual std::unique_ptr<StackParts> parts(DType dtype) const = 0;

 private:
  Facts facts_;
  HfNaming naming_;
};

template <class Spec>
class FamilyModel final : public BlockStack {
 public:
  using Config = typename Spec::Config;

  // `device`, `compute` and `params` are borrowed and must outlive the model (BlockStack).
  FamilyModel(const Config& config, ModelOptions options, runtime::device::Device& device,
              runtime::device::Stream& compute, runtime::params::ParamProvider& params)
      : BlockStack(Spec::make_parts(config, options.dtype), options, device, compute, params), config_(config) {}

  const Config& config() const { return config_; }

  // The spec's sizes (ModelSpec::activation_bytes, inference_bytes, kv_shape) of `config`.
  static std::uint64_t activation_bytes(const Config& config, const ModelOptions& options, int B, int T) {
    return Spec(config).activation_bytes(options, B, T);
  }
  static std::uint64_t inference_bytes(const Config& config, const ModelOptions& options, int batch, int prompt_T,
                                       int max_T, KvPlacement kv = KvPlacement::device) {
    return Spec(config).inference_bytes(options, batch, prompt_T, max_T, kv);
  }
  static KvShape kv_shape(const Config& config) { return Spec(config).kv_shape(); }

 private:
  Config config_;
};

// The registry's Family of a spec whose Config has from_json, preset_names and preset.
template <class Spec>
Family stack_family(std::string name, std::vector<std::string> architectures, std::vector<std::string> model_types) {
  using Config = typename Spec::Config;
  return Family{
      std::move(name),
      std::move(architectures),
      std::move(model_types),
      [](std::string_view text, std::string_view where) -> ModelSpecPtr {
        return std::make_shared<Spec>(Config::from_json(text, where));
      },
      [] { return Config::preset_names(); },
      [](std::string_view preset) -> ModelSpecPtr { return std::make_shared<Spec>(Config::preset(preset)); },
  };
}

}  // namespace strata::models
