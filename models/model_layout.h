#pragma once
// Where every parameter of a model lives, for any family: modules (the unit the engine tiers,
// shards and streams) made of flat buffers, and each tensor's offset in its module's buffer.
//
// Every family has the same module order: 0 the embedding, then the blocks in layer order, the
// head last (the final norm, and the LM head's own matrix when it is not tied to the embedding).
// A mixture-of-experts layer is its block module (attention, norms, router) followed by one
// module per expert, so that experts are tiered, sharded and streamed one by one: modules 1 .. L
// are the blocks only in a model without experts. Matrices
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

enum class ModuleKind { embedding, block, expert, head };

struct TensorSlot {
  std::string name;                  // HF's name, without the family's optional prefix
  std::vector<std::int64_t> shape;   // ours, (out, in) for matrices
  std::size_t offset = 0;            // elements from the start of the module's buffer
  std::size_t numel = 0;
  bool hf_transposed = false;        // HF stores it (in, out) (GPT-2's Conv1D)
};

struct ModuleLayout {
  std::string name;                  // "embedding", "h.3" / "layers.3", "layers.3.experts.5", "head"
  ModuleKind kind = ModuleKind::block;
  int layer = -1;                    // the block index for blocks and experts, else -1
  std::vector<TensorSlot> tensors;
  std::size_t numel = 0;             // the flat buffer's elements, alignment gaps included
  int expert = -1;                   // the expert's index in its layer for experts, else -1

  // Appends a tensor at the next aligned offset (or, with `packed`, right after the last one).
  void add(std::string tensor_name, std::vector<std::int64_t> shape, bool hf_transposed = false,
           bool packed = false);
  // Rounds numel up to the alignment; called once the module is complete.
  void close();
};

struct ModelLayout {
  std::vector<ModuleLayout> modules;

  int embedding_module() const { return 0; }
  // Layer l's block module: 1 + l, unless index_blocks() found expert modules between blocks.
  int block_module(int layer) const {
    return blocks_.empty() ? 1 + layer : blocks_[static_cast<std::size_t>(layer)];
  }
  // Expert e of layer l (a layer with experts): the modules right after its block.
  int expert_module(int layer, int expert) const { return block_module(layer) + 1 + expert; }
  int head_module() const { return static_cast<int>(modules.size()) - 1; }
  // Records where each block is; a layout builder with expert modules calls it once the modules
  // are complete (without it block_module(l) is 1 + l).
  void index_blocks();

  std::size_t total_numel() const;  // over all modules, gaps included
  std::vector<std::size_t> module_numels() const;
  std::vector<std::string> module_names() const;
  // 1 for the modules a pass takes only when its router picks them (experts), else 0: the
  // engine's routed_modules (runtime/zero/engine_setup.h).
  std::vector<char> routed_modules() const;
  // The module and slot holding `name` (HF name without prefix); false when none does.
  bool find(const std::string& name, int* module, int* tensor) const;

 private:
  std::vector<int> blocks_;  // block_module(l), when index_blocks() ran on a layout with experts
};

}  // namespace strata::models
