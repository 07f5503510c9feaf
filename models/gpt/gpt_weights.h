#pragma once
// GPT-2 weights in and out: Hugging Face safetensors files (the GPT2LMHeadModel names, with or
// without the "transformer." prefix; Conv1D weights stored (in, out)), and host fp32 <->
// device copies in the compute dtype.
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "models/gpt/gpt_config.h"
#include "models/gpt/gpt_layout.h"
#include "runtime/device/device.h"

namespace strata::models {

class SafetensorsFile;  // models/io/safetensors.h

// Reads the modules of an HF GPT-2 safetensors file.
class HfWeightsReader {
 public:
  // Opens `path` (by mmap) and checks it against `config` before anything is read: every
  // parameter present exactly once, in HF's shape, as F32, BF16 or F16. Ignored: the attention
  // mask buffers of old checkpoints (h.N.attn.bias, h.N.attn.masked_bias) and lm_head.weight,
  // which must then equal wte.weight (the head is tied). Any other tensor is an error naming
  // it (a different architecture or a mismatched config).
  HfWeightsReader(const std::string& path, const GptConfig& config);
  ~HfWeightsReader();
  HfWeightsReader(HfWeightsReader&&) noexcept;
  HfWeightsReader& operator=(HfWeightsReader&&) noexcept;

  const GptLayout& layout() const { return layout_; }
  // Fills out[0, layout().modules[module].numel) with the module's values as fp32 (exact
  // widening; Conv1D weights transposed to (out, in); alignment gaps zero).
  void read_module(int module, float* out) const;

 private:
  GptConfig config_;
  GptLayout layout_;
  std::unique_ptr<SafetensorsFile> file_;
  std::string prefix_;  // "" or "transformer."
};

// Writes an HF GPT-2 safetensors file (names without prefix, Conv1D weights (in, out), no
// lm_head.weight: HF ties it on load) in out_dtype (f32, bf16 or f16, round to nearest even).
// module(m) returns module m's fp32 values (layout order); it is called once per module, in
// order. Atomic: written next to `path`, fsynced, renamed into place.
void write_hf_weights(const std::string& path, const GptConfig& config,
                      const std::function<const float*(int module)>& module, DType out_dtype);

// A tensor of a module in HF's layout (Conv1D weights transposed to (in, out)), fp32.
std::vector<float> to_hf_layout(const TensorSlot& tensor, const float* module_data);

// Blocking copies between host fp32 and device memory in `dtype` (converted on the host).
void copy_to_device(runtime::device::Stream& stream, void* dst, DType dtype, const float* src,
                    std::size_t n);
void copy_from_device(runtime::device::Stream& stream, float* dst, const void* src, DType dtype,
                      std::size_t n);

}  // namespace strata::models
