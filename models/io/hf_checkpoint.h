#pragma once
// The Hugging Face model-folder weight layout, read and written. Family-agnostic: it knows
// tensor names and files, not models (models/<family>/ map names to their layout).
//
// The layout (what transformers' save_pretrained writes and from_pretrained reads):
//  - one file: <dir>/model.safetensors, holding every tensor; or
//  - shards: <dir>/model-00001-of-0000N.safetensors ... model-0000N-of-0000N.safetensors
//    (5-digit numbers, from 1) and <dir>/model.safetensors.index.json:
//      {"metadata": {"total_size": <sum of the tensors' data bytes>, ...},
//       "weight_map": {"<tensor name>": "<shard file name>", ...}}
//    Shard names in the weight_map are plain file names in the same folder.
// Each safetensors file carries __metadata__ {"format": "pt"}: transformers refuses to load a
// file without it. When a folder holds both the index and model.safetensors, the index wins
// (as in transformers). Other files in the folder (config.json, tokenizer files) are ignored.
//
// Reading maps every file (SafetensorsFile: validated, read-only, MAP_PRIVATE). Mapped pages
// of a clean file mapping are page cache: reclaimable, and dropped from this process's resident
// set by done_with(), so reading a model tensor by tensor never keeps the whole model resident.
//
// Writing buffers tensors until the current shard would exceed max_shard_bytes (tensor data
// bytes, as transformers counts), writes it and frees its buffers: peak memory is about one
// shard. Errors are strata::Error naming the file (and the tensor).
#include <cstddef>
#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "models/io/safetensors.h"

namespace strata::models {

inline constexpr const char* kHfSingleFile = "model.safetensors";
inline constexpr const char* kHfIndexFile = "model.safetensors.index.json";

// A model's weights in the Hugging Face layout, opened and validated. Move-only; the spans
// from bytes() live as long as the object. Reads are const and safe from several threads.
class HfCheckpoint {
 public:
  // `path` is a model folder, a .safetensors file, or a model.safetensors.index.json file.
  // Opens (maps) every shard and checks, before returning: each file is a valid safetensors
  // file; each shard the index lists exists and is a plain file name (no '/', no '..'); each
  // tensor the index lists is in its shard; no tensor is in two shards or missing from the
  // index. Throws Error naming the files concerned (and the tensor); a folder with neither
  // layout is an Error naming both files looked for.
  static HfCheckpoint open(const std::string& path);

  HfCheckpoint(HfCheckpoint&&) noexcept = default;
  HfCheckpoint& operator=(HfCheckpoint&&) noexcept = default;
  HfCheckpoint(const HfCheckpoint&) = delete;
  HfCheckpoint& operator=(const HfCheckpoint&) = delete;

  const std::string& index_path() const { return index_path_; }  // "" without an index
  std::size_t shard_count() const { return shards_.size(); }
  // The index's "metadata" (non-string values such as total_size as their JSON text), or the
  // single file's __metadata__.
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

  const std::vector<std::string>& names() const { return names_; }  // every tensor, sorted
  const TensorInfo* find(std::string_view name) const;               // nullptr when absent
  // The tensor's bytes, little-endian, row-major. `tensor` must come from find().
  std::span<const std::byte> bytes(const TensorInfo& tensor) const;
  // The path of the file holding tensor `name` (for messages); "" when there is no such tensor.
  std::string file_of(std::string_view name) const;
  // Drops the tensor's mapped pages from this process's resident set (see
  // SafetensorsFile::release_pages). bytes() stays valid (it faults the pages back in). Const:
  // it changes residency, not contents.
  void done_with(const TensorInfo& tensor) const;

 private:
  HfCheckpoint() = default;
  const SafetensorsFile& shard_of(const TensorInfo& tensor) const;

  std::string index_path_;
  std::vector<SafetensorsFile> shards_;
  std::map<std::string, std::size_t, std::less<>> shard_index_;  // tensor name -> shards_[i]
  std::vector<std::string> names_;
  std::map<std::string, std::string> metadata_;
};

// Writes a model folder in the Hugging Face layout, tensor by tensor. Not copyable or movable.
//
// Tensors are buffered in the current shard until adding one would take it past
// max_shard_bytes; then the shard is written (as model-<i>.safetensors.partial, complete and
// atomic, but named so that no loader takes it) and its buffers freed. A tensor larger than
// max_shard_bytes on its own is written at once as a shard of its own (as huggingface_hub
// does); the current shard stays open. finish() names the shards when their number N is known
// and writes the index last, atomically: until finish() returns there is no index and no
// model.safetensors, so the folder never looks complete while it is not.
class HfCheckpointWriter {
 public:
  // Creates `dir` if absent. Throws Error if it cannot, if it is not a folder, if it already
  // holds a model*.safetensors* file (so that two checkpoints never mix), or if
  // max_shard_bytes is 0.
  HfCheckpointWriter(std::string dir, std::uint64_t max_shard_bytes);
  // Removes the shard files this writer wrote unless finish() succeeded (after an Error, or
  // when finish() was never called): the folder is left as it was found. Never throws.
  ~HfCheckpointWriter();
  HfCheckpointWriter(const HfCheckpointWriter&) = delete;
  HfCheckpointWriter& operator=(const HfCheckpointWriter&) = delete;

  // Takes ownership of `data` (numel(shape) * tensor_dtype_size(dtype) bytes). Throws Error
  // for a name given twice, a bad name or shape, a size mismatch, or a failed shard write
  // (naming the file); after a failed write the writer refuses further calls.
  void add(std::string name, TensorDType dtype, std::vector<std::int64_t> shape,
           std::vector<std::byte> data);

  // Writes what remains and completes the folder. If nothing was written before, the result is
  // the one file model.safetensors with __metadata__ = {"format": "pt"} + `metadata`.
  // Otherwise the shards become model-<i>-of-<N>.safetensors and the index gets
  // "metadata" = {"total_size": ...} + `metadata` and the weight_map (sorted names). The keys
  // "format" and "total_size" are reserved (Error). Called once.
  void finish(const std::map<std::string, std::string>& metadata = {});

  std::uint64_t total_bytes() const { return total_bytes_; }  // tensor data bytes added so far

 private:
  void write_current_shard();
  // Writes `writer` as the next shard's .partial file and records `names` as in it.
  void write_shard(SafetensorsWriter& writer, const std::vector<std::string>& names);
  void check_usable() const;

  std::string dir_;
  std::uint64_t max_shard_bytes_;
  SafetensorsWriter current_;                    // borrows from pending_
  std::vector<std::vector<std::byte>> pending_;  // owned data of the current shard
  std::vector<std::string> pending_names_;       // its tensors, in the order added
  std::uint64_t current_bytes_ = 0;
  // Every name added -> its shard's number (from 1; 0 while in the current shard).
  std::map<std::string, std::size_t> shard_of_;
  std::vector<std::string> written_;             // files on disk, for the destructor's cleanup
  std::size_t shards_written_ = 0;
  std::uint64_t total_bytes_ = 0;
  bool failed_ = false;
  bool finished_ = false;
};

}  // namespace strata::models
