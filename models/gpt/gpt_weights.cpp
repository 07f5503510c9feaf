#include "models/gpt/gpt_weights.h"

#include <algorithm>
#include <cstring>
#include <set>
#include <vector>

#include <fmt/format.h>

#include "core/error.h"
#include "models/io/safetensors.h"

namespace strata::models {
namespace {

constexpr const char* kPrefix = "transformer.";

// HF's shape of a tensor: Conv1D weights are (in, out), ours (out, in).
std::vector<std::int64_t> hf_shape(const TensorSlot& t) {
  if (!t.hf_transposed) return t.shape;
  return {t.shape[1], t.shape[0]};
}

std::string shape_text(const std::vector<std::int64_t>& shape) {
  std::string s = "(";
  for (std::size_t i = 0; i < shape.size(); ++i) s += fmt::format("{}{}", i ? ", " : "", shape[i]);
  return s + (shape.size() == 1 ? ",)" : ")");
}

bool ignorable(const std::string& name) {
  // Old GPT-2 checkpoints carry the causal mask as buffers.
  auto ends_with = [&](std::string_view suffix) {
    return name.size() >= suffix.size() &&
           name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0;
  };
  return ends_with(".attn.bias") || ends_with(".attn.masked_bias");
}

// Element i of a tensor of `dtype` at `data`, widened to fp32.
void widen(const std::byte* data, TensorDType dtype, std::size_t n, float* out) {
  switch (dtype) {
    case TensorDType::f32: std::memcpy(out, data, n * sizeof(float)); return;
    case TensorDType::bf16: convert(data, DType::bf16, out, DType::f32, n); return;
    case TensorDType::f16: convert(data, DType::f16, out, DType::f32, n); return;
    default: break;
  }
  STRATA_ASSERT(false, "dtype checked at open");
}

}  // namespace

HfWeightsReader::HfWeightsReader(const std::string& path, const GptConfig& config)
    : config_(config), layout_(GptLayout::build(config)) {
  file_ = std::make_unique<SafetensorsFile>(SafetensorsFile::open(path));
  // The prefix: whichever form names wte.
  if (file_->find("wte.weight") != nullptr) {
    prefix_.clear();
  } else if (file_->find(std::string(kPrefix) + "wte.weight") != nullptr) {
    prefix_ = kPrefix;
  } else {
    throw Error("no wte.weight (or transformer.wte.weight): not a GPT-2 checkpoint", path,
                "give the model.safetensors of a GPT-2 (GPT2LMHeadModel) checkpoint");
  }
  std::set<std::string> expected;
  for (const ModuleLayout& m : layout_.modules) {
    for (const TensorSlot& t : m.tensors) {
      expected.insert(t.name);
      const TensorInfo* info = file_->find(prefix_ + t.name);
      if (info == nullptr) {
        throw Error(fmt::format("tensor {}{} is missing", prefix_, t.name), path,
                    "the file does not hold a GPT-2 of this config (check n_layer)");
      }
      if (info->dtype != TensorDType::f32 && info->dtype != TensorDType::bf16 &&
          info->dtype != TensorDType::f16) {
        throw Error(fmt::format("tensor {} is {}; GPT-2 weights must be F32, BF16 or F16",
                                info->name, tensor_dtype_name(info->dtype)),
                    path);
      }
      if (info->shape != hf_shape(t)) {
        throw Error(fmt::format("tensor {} has shape {}, the model config needs {}", info->name,
                                shape_text(info->shape), shape_text(hf_shape(t))),
                    path, "use the config.json that came with these weights");
      }
    }
  }
  for (const TensorInfo& info : file_->tensors()) {
    std::string name = info.name;
    if (!prefix_.empty() && name.rfind(prefix_, 0) == 0) name = name.substr(prefix_.size());
    if (expected.count(name) != 0 || ignorable(name)) continue;
    if (info.name == "lm_head.weight") {
      const TensorInfo* wte = file_->find(prefix_ + "wte.weight");
      const auto a = file_->bytes(info);
      const auto b = file_->bytes(*wte);
      if (info.dtype != wte->dtype || info.shape != wte->shape || a.size() != b.size() ||
          std::memcmp(a.data(), b.data(), a.size()) != 0) {
        throw Error("lm_head.weight differs from wte.weight: an untied LM head is not supported",
                    path);
      }
      continue;
    }
    throw Error(fmt::format("unexpected tensor {} (not part of a GPT-2 of this config)", info.name),
                path, "check n_layer in the config, or the architecture of the checkpoint");
  }
}

HfWeightsReader::~HfWeightsReader() = default;
HfWeightsReader::HfWeightsReader(HfWeightsReader&&) noexcept = default;
HfWeightsReader& HfWeightsReader::operator=(HfWeightsReader&&) noexcept = default;

void HfWeightsReader::read_module(int module, float* out) const {
  STRATA_ASSERT(module >= 0 && module < static_cast<int>(layout_.modules.size()), "module index");
  const ModuleLayout& m = layout_.modules[static_cast<std::size_t>(module)];
  std::memset(out, 0, m.numel * sizeof(float));
  std::vector<float> tmp;
  for (const TensorSlot& t : m.tensors) {
    const TensorInfo* info = file_->find(prefix_ + t.name);
    const std::byte* data = file_->bytes(*info).data();
    if (!t.hf_transposed) {
      widen(data, info->dtype, t.numel, out + t.offset);
      continue;
    }
    // HF (in, out) -> ours (out, in).
    tmp.resize(t.numel);
    widen(data, info->dtype, t.numel, tmp.data());
    const auto rows = static_cast<std::size_t>(t.shape[0]);  // out
    const auto cols = static_cast<std::size_t>(t.shape[1]);  // in
    float* dst = out + t.offset;
    for (std::size_t i = 0; i < cols; ++i) {
      for (std::size_t o = 0; o < rows; ++o) dst[o * cols + i] = tmp[i * rows + o];
    }
  }
}

std::vector<float> to_hf_layout(const TensorSlot& t, const float* module_data) {
  const float* src = module_data + t.offset;
  if (!t.hf_transposed) return std::vector<float>(src, src + t.numel);
  std::vector<float> out(t.numel);
  const auto rows = static_cast<std::size_t>(t.shape[0]);  // out
  const auto cols = static_cast<std::size_t>(t.shape[1]);  // in
  for (std::size_t o = 0; o < rows; ++o) {
    for (std::size_t i = 0; i < cols; ++i) out[i * rows + o] = src[o * cols + i];
  }
  return out;
}

void write_hf_weights(const std::string& path, const GptConfig& config,
                      const std::function<const float*(int module)>& module, DType out_dtype) {
  const GptLayout layout = GptLayout::build(config);
  SafetensorsWriter writer;
  writer.metadata("format", "pt");
  const TensorDType st = out_dtype == DType::f32    ? TensorDType::f32
                         : out_dtype == DType::bf16 ? TensorDType::bf16
                                                    : TensorDType::f16;
  // The writer borrows the data until write(): keep every converted tensor alive.
  std::vector<std::vector<std::byte>> keep;
  for (std::size_t m = 0; m < layout.modules.size(); ++m) {
    const float* data = module(static_cast<int>(m));
    for (const TensorSlot& t : layout.modules[m].tensors) {
      const std::vector<float> hf = to_hf_layout(t, data);
      std::vector<std::byte> bytes(hf.size() * dtype_size(out_dtype));
      convert(hf.data(), DType::f32, bytes.data(), out_dtype, hf.size());
      keep.push_back(std::move(bytes));
      writer.add(t.name, st, hf_shape(t), keep.back().data());
    }
  }
  writer.write(path);
}

void copy_to_device(runtime::device::Stream& stream, void* dst, DType dtype, const float* src,
                    std::size_t n) {
  if (dtype == DType::f32) {
    stream.copy_async(dst, src, n * sizeof(float));
    stream.synchronize();
    return;
  }
  std::vector<std::uint16_t> half(n);
  convert(src, DType::f32, half.data(), dtype, n);
  stream.copy_async(dst, half.data(), n * sizeof(std::uint16_t));
  stream.synchronize();
}

void copy_from_device(runtime::device::Stream& stream, float* dst, const void* src, DType dtype,
                      std::size_t n) {
  if (dtype == DType::f32) {
    stream.copy_async(dst, src, n * sizeof(float));
    stream.synchronize();
    return;
  }
  std::vector<std::uint16_t> half(n);
  stream.copy_async(half.data(), src, n * sizeof(std::uint16_t));
  stream.synchronize();
  convert(half.data(), dtype, dst, DType::f32, n);
}

}  // namespace strata::models
