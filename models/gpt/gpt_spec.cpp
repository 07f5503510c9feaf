#include "models/gpt/gpt_spec.h"

#include <fmt/format.h>

#include "models/gpt/gpt_init.h"

namespace strata::models {
namespace {

HfNaming gpt_naming() {
  HfNaming n;
  n.optional_prefix = "transformer.";
  n.embedding = "wte.weight";
  n.tied_head = "lm_head.weight";
  // Old GPT-2 checkpoints carry the causal mask as buffers.
  n.ignored_suffixes = {".attn.bias", ".attn.masked_bias"};
  return n;
}

// Validates first: the facts of an unusable shape would mean nothing.
StackSpec::Facts gpt_facts(const GptConfig& c) {
  c.validate();
  return {"gpt2", c.vocab_size, c.n_embd, c.n_positions, "n_positions", c.num_params()};
}

}  // namespace

GptSpec::GptSpec(const GptConfig& config) : StackSpec(gpt_facts(config), gpt_naming()), config_(config) {}

std::string GptSpec::describe() const {
  return fmt::format("GPT-2: {} layers, {} channels, {} heads, vocabulary {}, {} positions, {:.3f} B parameters",
                     config_.n_layer, config_.n_embd, config_.n_head, config_.vocab_size, config_.n_positions,
                     static_cast<double>(config_.num_params()) / 1e9);
}

void GptSpec::init_module(const ModuleLayout& module, std::uint64_t seed, float* out) const {
  models::init_module(config_, module, seed, out);
}

const Family& gpt_family() {
  static const Family kFamily = stack_family<GptSpec>("gpt2", {"GPT2LMHeadModel", "GPT2Model"}, {"gpt2"});
  return kFamily;
}

}  // namespace strata::models
