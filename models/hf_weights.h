#pragma once
// A model's weights in Hugging Face safetensors files, for any family (models/model_spec.h):
// read module by module into strata's flat buffers, and written from them.
//
// Names are the layout's (HF's), optionally with the family's prefix ("transformer." for
// GPT-2); a tensor HF stores transposed (GPT-2's Conv1D) is transposed on the way. Values are
// widened exactly to fp32 on the way in, and rounded to nearest even on the way out.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "models/model_layout.h"
#include "models/model_spec.h"

namespace strata::models {

// transformers' default max_shard_size ("5GB").
inline constexpr std::uint64_t kDefaultShardBytes = 5'000'000'000ull;

class HfCheckpoint;  // models/io/hf_checkpoint.h

class HfWeightsReader {
 public:
  // Opens the weights at `path` (a Hugging Face model folder — model.safetensors or shards with
  // model.safetensors.index.json —, a .safetensors file or an index; models/io/hf_checkpoint.h,
  // by mmap) and checks them against `spec`
  // before anything is read: every parameter present exactly once, in HF's shape, as F32, BF16
  // or F16. Ignored: the family's non-parameter buffers, and the tied LM head, which must then
  // equal the embedding. Any other tensor is an Error naming it (another architecture, or a
  // config that does not match).
  HfWeightsReader(const std::string& path, const ModelSpec& spec);
  ~HfWeightsReader();
  HfWeightsReader(HfWeightsReader&&) noexcept;
  HfWeightsReader& operator=(HfWeightsReader&&) noexcept;

  const ModelLayout& layout() const { return layout_; }
  // Fills out[0, layout().modules[module].numel) with the module's values as fp32 (exact
  // widening; transposed tensors turned to (out, in); alignment gaps zero). Each tensor's mapped
  // pages are dropped once read: loading module by module keeps at most one module's values (and
  // one tensor's file pages) resident, never the model.
  void read_module(int module, float* out) const;

 private:
  std::string path_;
  ModelLayout layout_;
  std::unique_ptr<HfCheckpoint> file_;
  std::string prefix_;  // "" or the family's optional prefix, whichever the file uses
};

// Writes the weights in the Hugging Face layout (names without prefix, HF's orientation, no
// tied head: HF ties it on load) in out_dtype (f32, bf16 or f16, rounded to nearest even).
// module(m) returns module m's fp32 values (layout order); it is called once per module, in
// order, and its values are converted tensor by tensor, so memory holds one module and at most
// one shard. `path`:
//  - ending in ".safetensors": that one file, atomically (written next to it, fsynced,
//    renamed into place);
//  - otherwise a model folder that transformers' from_pretrained loads: config.json (the
//    spec's) and model.safetensors, or shards of at most max_shard_bytes with
//    model.safetensors.index.json (models/io/hf_checkpoint.h). The folder may exist but must
//    not hold model weights already; config.json is written last, so a folder with one is
//    complete.
void write_hf_model(const std::string& path, const ModelSpec& spec,
                    const std::function<const float*(int module)>& module, DType out_dtype,
                    std::uint64_t max_shard_bytes = kDefaultShardBytes);

// Whether `path` is a model folder holding weights (model.safetensors or
// model.safetensors.index.json): then it is what --model DIR starts from.
bool has_hf_weights(const std::string& path);

// A tensor of a module in HF's orientation, fp32.
std::vector<float> to_hf_layout(const TensorSlot& tensor, const float* module_data);

}  // namespace strata::models
