#pragma once
// Where every GPT-2 parameter lives: modules (the unit the engine tiers and shards) made of
// flat buffers, and each tensor's offset in its module's buffer.
//
// Modules, in forward order:
//   0          embedding: wte (V, C), wpe (P, C)          (wte is also the tied LM head)
//   1 .. L     block i-1: ln_1 w/b (C), attn.c_attn w (3C, C) b (3C), attn.c_proj w (C, C)
//              b (C), ln_2 w/b (C), mlp.c_fc w (4C, C) b (4C), mlp.c_proj w (C, 4C) b (C)
//   L + 1      final norm: ln_f w/b (C)
// Matrices are stored (out, in) as torch.nn.Linear; Hugging Face's GPT-2 stores its Conv1D
// weights (in, out), so those are transposed on the way in and out (gpt_weights.h). Each
// tensor starts at a multiple of kTensorAlignment elements; the gaps are zero and stay zero
// (their gradients are zero).
#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "models/gpt/gpt_config.h"

namespace strata::models {

inline constexpr std::size_t kTensorAlignment = 32;  // elements: 128 B in fp32, 64 B in bf16

enum class ModuleKind { embedding, block, final_norm };

struct TensorSlot {
  std::string name;                  // HF name without "transformer.": "h.3.attn.c_attn.weight"
  std::vector<std::int64_t> shape;   // ours, (out, in) for matrices
  std::size_t offset = 0;            // elements from the start of the module's buffer
  std::size_t numel = 0;
  bool hf_transposed = false;        // HF stores it (in, out) (Conv1D)
};

struct ModuleLayout {
  std::string name;                  // "embedding", "h.3", "ln_f"
  ModuleKind kind = ModuleKind::block;
  int layer = -1;                    // the block index for blocks, else -1
  std::vector<TensorSlot> tensors;
  std::size_t numel = 0;             // the flat buffer's elements, alignment gaps included
};

// Indices of a block's tensors in ModuleLayout::tensors.
enum BlockTensor : int {
  kLn1W, kLn1B, kQkvW, kQkvB, kAttProjW, kAttProjB, kLn2W, kLn2B, kFcW, kFcB, kFcProjW,
  kFcProjB, kBlockTensors
};
enum EmbeddingTensor : int { kWte, kWpe };
enum FinalNormTensor : int { kLnfW, kLnfB };

struct GptLayout {
  std::vector<ModuleLayout> modules;

  static GptLayout build(const GptConfig& config);

  int embedding_module() const { return 0; }
  int block_module(int layer) const { return 1 + layer; }
  int final_norm_module() const { return static_cast<int>(modules.size()) - 1; }

  std::size_t total_numel() const;  // over all modules, gaps included
  std::vector<std::size_t> module_numels() const;
  std::vector<std::string> module_names() const;
  // The module and slot holding `name` (HF name without prefix); false when none does.
  bool find(const std::string& name, int* module, int* tensor) const;
};

}  // namespace strata::models
