#pragma once
// Where every parameter of a model lives, for any family: modules (the unit the engine tiers,
// shards and streams) made of flat buffers, and each tensor's offset in its module's buffer.
//
// Every family has the same module order: 0 the embedding, 1 .. L the blocks, L + 1 the head
// (the final norm, and the LM head's own matrix when it is not tied to the embedding). Matrices
// are stored (out, in) as torch.nn.Linear. A tensor starts at a multiple of kTensorAlignment
// elements unless it continues the one before it (a fused matrix such as q/k/v, whose parts
// are consecutive rows of one (out, in) matrix); the gaps are zero and stay zero (their
// gradients are zero).
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace strata::models {

inline constexpr std::size_t kTensorAlignment = 32;  // elements: 128 B in fp32, 64 B in bf16

enum class ModuleKind { embedding, block, head };

struct TensorSlot {
  std::string name;                  // HF's name, without the family's optional prefix
  std::vector<std::int64_t> shape;   // ours, (out, in) for matrices
  std::size_t offset = 0;            // elements from the start of the module's buffer
  std::size_t numel = 0;
  bool hf_transposed = false;        // HF stores it (in, out) (GPT-2's Conv1D)
};

struct ModuleLayout {
  std::string name;                  // "embedding", "h.3" / "layers.3", "ln_f" / "head"
  ModuleKind kind = ModuleKind::block;
  int layer = -1;                    // the block index for blocks, else -1
  std::vector<TensorSlot> tensors;
  std::size_t numel = 0;             // the flat buffer's elements, alignment gaps included

  // Appends a tensor at the next aligned offset (or, with `packed`, right after the last one).
  void add(std::string tensor_name, std::vector<std::int64_t> shape, bool hf_transposed = false,
           bool packed = false);
  // Rounds numel up to the alignment; called once the module is complete.
  void close();
};

struct ModelLayout {
  std::vector<ModuleLayout> modules;

  int embedding_module() const { return 0; }
  int block_module(int layer) const { return 1 + layer; }
  int head_module() const { return static_cast<int>(modules.size()) - 1; }

  std::size_t total_numel() const;  // over all modules, gaps included
  std::vector<std::size_t> module_numels() const;
  std::vector<std::string> module_names() const;
  // The module and slot holding `name` (HF name without prefix); false when none does.
  bool find(const std::string& name, int* module, int* tensor) const;
};

}  // namespace strata::models
