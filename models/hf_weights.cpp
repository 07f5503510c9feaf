#include "models/hf_weights.h"

#include <cstring>
#include <filesystem>
#include <set>
#include <string_view>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/file_io.h"
#include "models/io/hf_checkpoint.h"

namespace strata::models {
namespace {

// HF's shape of a tensor: transposed ones are (in, out), ours (out, in).
std::vector<std::int64_t> hf_shape(const TensorSlot& t) {
  if (!t.hf_transposed) return t.shape;
  return {t.shape[1], t.shape[0]};
}

std::string shape_text(const std::vector<std::int64_t>& shape) {
  std::string s = "(";
  for (std::size_t i = 0; i < shape.size(); ++i) s += fmt::format("{}{}", i ? ", " : "", shape[i]);
  return s + (shape.size() == 1 ? ",)" : ")");
}

bool ends_with(std::string_view name, std::string_view suffix) {
  return name.size() >= suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// `n` elements of `dtype` at `data`, widened to fp32.
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

HfWeightsReader::HfWeightsReader(const std::string& path, const ModelSpec& spec)
    : path_(path), layout_(spec.layout()) {
  const HfNaming& naming = spec.hf_naming();
  file_ = std::make_unique<HfCheckpoint>(HfCheckpoint::open(path));
  // The prefix: whichever form names the embedding.
  if (file_->find(naming.embedding) != nullptr) {
    prefix_.clear();
  } else if (!naming.optional_prefix.empty() && file_->find(naming.optional_prefix + naming.embedding) != nullptr) {
    prefix_ = naming.optional_prefix;
  } else {
    throw Error(fmt::format("no {} : not the weights of a {}", naming.embedding, spec.architecture()), path,
                fmt::format("give the safetensors of a {} checkpoint", spec.architecture()));
  }
  std::set<std::string> expected;
  for (const ModuleLayout& m : layout_.modules) {
    for (const TensorSlot& t : m.tensors) {
      expected.insert(t.name);
      const TensorInfo* info = file_->find(prefix_ + t.name);
      if (info == nullptr) {
        throw Error(fmt::format("tensor {}{} is missing", prefix_, t.name), path,
                    "the file does not hold this model: check the config (num layers, tied embeddings)");
      }
      if (info->dtype != TensorDType::f32 && info->dtype != TensorDType::bf16 && info->dtype != TensorDType::f16) {
        throw Error(fmt::format("tensor {} is {}; weights must be F32, BF16 or F16", info->name,
                                tensor_dtype_name(info->dtype)),
                    path);
      }
      if (info->shape != hf_shape(t)) {
        throw Error(fmt::format("tensor {} has shape {}, the model config needs {}", info->name,
                                shape_text(info->shape), shape_text(hf_shape(t))),
                    path, "use the config.json that came with these weights");
      }
    }
  }
  for (const std::string& file_name : file_->names()) {
    const TensorInfo& info = *file_->find(file_name);
    std::string name = info.name;
    if (!prefix_.empty() && name.rfind(prefix_, 0) == 0) name = name.substr(prefix_.size());
    if (expected.count(name) != 0) continue;
    bool ignored = false;
    for (const std::string& suffix : naming.ignored_suffixes) ignored = ignored || ends_with(name, suffix);
    if (ignored) continue;
    if (!naming.tied_head.empty() && info.name == naming.tied_head) {
      const TensorInfo* emb = file_->find(prefix_ + naming.embedding);
      const auto a = file_->bytes(info);
      const auto b = file_->bytes(*emb);
      const bool same = info.dtype == emb->dtype && info.shape == emb->shape && a.size() == b.size() &&
                        std::memcmp(a.data(), b.data(), a.size()) == 0;
      file_->done_with(info);
      if (!same) {
        throw Error(fmt::format("{} differs from {}, but the config ties them", info.name, naming.embedding), path,
                    "set \"tie_word_embeddings\": false in config.json if the model has its own LM head");
      }
      continue;
    }
    throw Error(fmt::format("unexpected tensor {} (not part of a {} of this config)", info.name, spec.architecture()),
                path, "check the config (num layers, tied embeddings, biases) or the checkpoint's architecture");
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
      file_->done_with(*info);
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
    file_->done_with(*info);
  }
}

bool has_hf_weights(const std::string& path) {
  std::error_code ec;
  const std::filesystem::path dir(path);
  return std::filesystem::is_directory(dir, ec) &&
         (std::filesystem::exists(dir / kHfSingleFile, ec) || std::filesystem::exists(dir / kHfIndexFile, ec));
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

namespace {

// One tensor in HF's orientation, rounded to out_dtype.
std::vector<std::byte> hf_bytes(const TensorSlot& t, const float* module_data, DType out_dtype) {
  const std::vector<float> hf = to_hf_layout(t, module_data);
  std::vector<std::byte> bytes(hf.size() * dtype_size(out_dtype));
  convert(hf.data(), DType::f32, bytes.data(), out_dtype, hf.size());
  return bytes;
}

void write_single_file(const std::string& path, const ModelLayout& layout,
                       const std::function<const float*(int module)>& module, DType out_dtype) {
  SafetensorsWriter writer;
  writer.metadata("format", "pt");
  // The writer borrows the data until write(): keep every converted tensor alive.
  std::vector<std::vector<std::byte>> keep;
  for (std::size_t m = 0; m < layout.modules.size(); ++m) {
    const float* data = module(static_cast<int>(m));
    for (const TensorSlot& t : layout.modules[m].tensors) {
      keep.push_back(hf_bytes(t, data, out_dtype));
      writer.add(t.name, to_tensor_dtype(out_dtype), hf_shape(t), keep.back().data());
    }
  }
  writer.write(path);
}

// config.json with "torch_dtype" naming the dtype the weights were written in.
std::string config_json(const ModelSpec& spec, DType out_dtype) {
  nlohmann::ordered_json j = nlohmann::ordered_json::parse(spec.to_json());
  j["torch_dtype"] = out_dtype == DType::f32 ? "float32" : out_dtype == DType::bf16 ? "bfloat16" : "float16";
  return j.dump(2) + "\n";
}

}  // namespace

void write_hf_model(const std::string& path, const ModelSpec& spec,
                    const std::function<const float*(int module)>& module, DType out_dtype,
                    std::uint64_t max_shard_bytes) {
  const ModelLayout layout = spec.layout();
  if (ends_with(path, ".safetensors")) {
    write_single_file(path, layout, module, out_dtype);
    return;
  }
  HfCheckpointWriter writer(path, max_shard_bytes);
  for (std::size_t m = 0; m < layout.modules.size(); ++m) {
    const float* data = module(static_cast<int>(m));
    for (const TensorSlot& t : layout.modules[m].tensors) {
      writer.add(t.name, to_tensor_dtype(out_dtype), hf_shape(t), hf_bytes(t, data, out_dtype));
    }
  }
  writer.finish();
  write_file_atomic((std::filesystem::path(path) / "config.json").string(),
                                        config_json(spec, out_dtype));
}

}  // namespace strata::models
