#include "models/model_layout.h"

namespace strata::models {
namespace {

std::size_t align_up(std::size_t n) {
  return (n + kTensorAlignment - 1) / kTensorAlignment * kTensorAlignment;
}

}  // namespace

void ModuleLayout::add(std::string tensor_name, std::vector<std::int64_t> shape, bool hf_transposed,
                       bool packed) {
  TensorSlot t;
  t.name = std::move(tensor_name);
  t.numel = 1;
  for (std::int64_t d : shape) t.numel *= static_cast<std::size_t>(d);
  t.shape = std::move(shape);
  t.offset = packed ? numel : align_up(numel);
  t.hf_transposed = hf_transposed;
  numel = t.offset + t.numel;
  tensors.push_back(std::move(t));
}

void ModuleLayout::close() { numel = align_up(numel); }

void ModelLayout::index_blocks() {
  blocks_.clear();
  bool experts = false;
  for (std::size_t m = 0; m < modules.size(); ++m) {
    if (modules[m].kind == ModuleKind::block) blocks_.push_back(static_cast<int>(m));
    experts = experts || modules[m].kind == ModuleKind::expert;
  }
  if (!experts) blocks_.clear();  // 1 + l
}

std::size_t ModelLayout::total_numel() const {
  std::size_t n = 0;
  for (const ModuleLayout& m : modules) n += m.numel;
  return n;
}

std::vector<std::size_t> ModelLayout::module_numels() const {
  std::vector<std::size_t> n;
  for (const ModuleLayout& m : modules) n.push_back(m.numel);
  return n;
}

std::vector<std::string> ModelLayout::module_names() const {
  std::vector<std::string> n;
  for (const ModuleLayout& m : modules) n.push_back(m.name);
  return n;
}

std::vector<char> ModelLayout::routed_modules() const {
  std::vector<char> r;
  for (const ModuleLayout& m : modules) r.push_back(m.kind == ModuleKind::expert ? 1 : 0);
  return r;
}

bool ModelLayout::find(const std::string& name, int* module, int* tensor) const {
  for (std::size_t m = 0; m < modules.size(); ++m) {
    for (std::size_t t = 0; t < modules[m].tensors.size(); ++t) {
      if (modules[m].tensors[t].name == name) {
        *module = static_cast<int>(m);
        *tensor = static_cast<int>(t);
        return true;
      }
    }
  }
  return false;
}

}  // namespace strata::models
