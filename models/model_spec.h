#pragma once
// What strata needs to know about a model, whatever its family: its shape as HF's config.json
// says it, and how to lay out, size, build, initialise and name it. One implementation per
// family (models/gpt/gpt_spec.h, models/llama/llama_spec.h); models/registry.h finds the right
// one for a config.json, an architecture name or a preset.
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "models/model.h"
#include "models/model_layout.h"
#include "runtime/device/device.h"
#include "runtime/params/param_provider.h"

namespace strata::models {

// How a family's tensors are named in Hugging Face safetensors files (models/hf_weights.h).
struct HfNaming {
  // A prefix every name may carry in a file ("transformer." for GPT2LMHeadModel's, "" when the
  // layout's names are already complete).
  std::string optional_prefix;
  // The embedding tensor, and the LM head's name when the head is tied to it: a file may carry
  // the head too (it must then equal the embedding, bit for bit).
  std::string embedding;
  std::string tied_head;  // "" when the head is not tied (it is a tensor of the head module)
  // Buffers some checkpoints carry that are not parameters (GPT-2's causal mask, LLaMA's
  // rotary inv_freq): skipped on load.
  std::vector<std::string> ignored_suffixes;
};

// A mixture of experts' routing (models/moe/moe_mlp.h), for the tools that size a model without
// knowing its family (`strata estimate`). A dense model: experts 0, active_params = num_params().
struct ExpertRouting {
  int experts = 0;                 // E, experts per sparse layer
  int per_token = 0;               // k, experts each token is routed to
  int sparse_layers = 0;           // layers with experts
  std::int64_t active_params = 0;  // the parameters one token's forward reads (k of E experts)
  bool moe() const { return experts > 0; }
};

class ModelSpec {
 public:
  virtual ~ModelSpec() = default;

  virtual std::string_view family() const = 0;   // the registry's name: "gpt2", "llama"
  virtual std::string architecture() const = 0;  // HF's: "GPT2LMHeadModel", "Qwen2ForCausalLM"
  virtual std::string to_json() const = 0;       // config.json, as transformers writes it
  virtual std::string describe() const = 0;      // one line for logs: the shape and size
  virtual int vocab_size() const = 0;
  virtual int hidden_size() const = 0;           // C, the residual stream's width
  virtual int max_positions() const = 0;         // the longest sequence
  virtual std::string_view max_positions_key() const = 0;  // its config.json key
  virtual std::int64_t num_params() const = 0;   // a tied head counted once
  virtual ModelLayout layout() const = 0;
  virtual const HfNaming& hf_naming() const = 0;
  // The end-of-sequence tokens config.json names ("eos_token_id"); empty when it names none.
  virtual std::vector<int> stop_token_ids() const = 0;
  // The expert routing (above); the default is a dense model's.
  virtual ExpertRouting expert_routing() const { return {0, 0, 0, num_params()}; }

  // Device bytes a model's reserve(B, T) allocates. With options.vocab_multiple 0 (the device
  // decides) it counts the larger choice, 128.
  virtual std::uint64_t activation_bytes(const ModelOptions& options, int B, int T) const = 0;
  // Device bytes generation allocates (models/model.h: prefill, forward_decode) for `batch`
  // prompts of up to prompt_T tokens and max_T positions in all: the KV cache (all of it on the
  // device; its 2 device slots in pinned host: models/kv_cache.h) and the larger of the prefill's
  // and a decoding step's scratch (vocab_multiple 0 counts 128, as above).
  virtual std::uint64_t inference_bytes(const ModelOptions& options, int batch, int prompt_T, int max_T,
                                        KvPlacement kv = KvPlacement::device) const = 0;
  // What the model's KV cache holds per position (KvCache::bytes, host_bytes).
  virtual KvShape kv_shape() const = 0;
  // `device`, `compute` and `params` are borrowed and must outlive the model. `params` must
  // have the layout's modules (module_numel(m) == layout().modules[m].numel) in options.dtype.
  virtual std::unique_ptr<Model> make_model(const ModelOptions& options, runtime::device::Device& device,
                                            runtime::device::Stream& compute,
                                            runtime::params::ParamProvider& params) const = 0;
  // Fills out[0, module.numel) (fp32, host memory) with the family's initial values of `module`
  // from `seed`; alignment gaps are zero. Element i of a tensor depends on (seed, tensor name,
  // i) only: any module on any rank in any order, the same bits.
  virtual void init_module(const ModuleLayout& module, std::uint64_t seed, float* out) const = 0;

  // Two specs are the same model when their config.json texts are.
  bool same_model(const ModelSpec& other) const { return to_json() == other.to_json(); }

 protected:
  ModelSpec() = default;
  ModelSpec(const ModelSpec&) = default;
  ModelSpec& operator=(const ModelSpec&) = default;
};

using ModelSpecPtr = std::shared_ptr<const ModelSpec>;

// A family as the registry lists it (models/registry.cpp).
struct Family {
  std::string name;                          // "gpt2", "llama"
  std::vector<std::string> architectures;    // config.json "architectures" it reads
  std::vector<std::string> model_types;      // config.json "model_type" it reads
  // Parses config.json text (validated); throws strata::Error naming `where` and the key.
  ModelSpecPtr (*from_json)(std::string_view json_text, std::string_view where);
  std::vector<std::string> (*preset_names)();
  ModelSpecPtr (*preset)(std::string_view name);  // a name from preset_names()
};

}  // namespace strata::models
