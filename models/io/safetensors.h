#pragma once
// safetensors files (https://github.com/huggingface/safetensors): read by mmap, written
// atomically.
//
// The format: a little-endian u64 N, then N bytes of UTF-8 JSON header
//   {"__metadata__": {str: str} (optional),
//    "<name>": {"dtype": "F32", "shape": [...], "data_offsets": [begin, end]}, ...}
// (writers pad it with spaces so that the data area starts 8-byte aligned), then the data
// area; offsets are relative to its start, and the tensors cover it exactly (no holes).
//
// SafetensorsFile::open() checks everything before it returns, so no accessor can read
// outside the file whatever its bytes: header size, JSON (no duplicate keys), each entry's
// fields and their types, the dtype, shape * element size == end - begin (no overflow),
// offsets inside the data area, no overlaps, no holes, __metadata__ a map of strings.
// A malformed file is a strata::Error whose where() names the path (and the tensor).
//
// Little-endian hosts only (checked at compile time): tensor bytes are used in place.
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/dtype.h"

namespace strata::models {

// The dtypes strata reads and writes; safetensors' others (F64, U8, BOOL, F8_*, ...) are
// rejected by open() with an Error listing these.
enum class TensorDType { f32, f16, bf16, i32, i64 };

std::string_view tensor_dtype_name(TensorDType dtype);  // "F32", "F16", "BF16", "I32", "I64"
std::size_t tensor_dtype_size(TensorDType dtype);       // bytes per element
// The dtype named `name` exactly as in a header ("F32", ...); nullopt for any other text.
std::optional<TensorDType> parse_tensor_dtype(std::string_view name);
// The strata::DType of a floating-point tensor dtype; nullopt for I32 and I64.
std::optional<DType> to_dtype(TensorDType dtype);
TensorDType to_tensor_dtype(DType dtype);

struct TensorInfo {
  std::string name;
  TensorDType dtype = TensorDType::f32;
  std::vector<std::int64_t> shape;  // [] for a 0-d tensor; a zero dimension for an empty one
  std::uint64_t numel = 0;          // product of shape (1 for a 0-d tensor)
  std::uint64_t begin = 0;          // byte offsets into the data area, [begin, end)
  std::uint64_t end = 0;
};

// A validated, memory-mapped (read-only, MAP_PRIVATE) safetensors file. Move-only; unmaps on
// destruction. The spans from bytes() live as long as the object. As with any mmap, another
// process truncating the file while it is mapped makes reads fault (SIGBUS).
class SafetensorsFile {
 public:
  // Throws strata::Error (what, where = path and tensor, hint) for a missing or unreadable
  // file and for anything malformed.
  static SafetensorsFile open(const std::string& path);

  ~SafetensorsFile();
  SafetensorsFile(SafetensorsFile&& other) noexcept;
  SafetensorsFile& operator=(SafetensorsFile&& other) noexcept;
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::string& path() const { return path_; }
  const std::vector<TensorInfo>& tensors() const { return tensors_; }  // in data-offset order
  const TensorInfo* find(std::string_view name) const;                // nullptr when absent
  // The tensor's bytes, little-endian, row-major. `tensor` must come from this file.
  std::span<const std::byte> bytes(const TensorInfo& tensor) const;
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

  // Tells the kernel this process no longer needs the tensor's mapped pages (madvise
  // MADV_DONTNEED on the whole pages inside its byte range; the pages at either end may hold a
  // neighbour's bytes and are kept). The mapping is read-only and MAP_PRIVATE, so no page was
  // ever copied: dropping them only unmaps page-cache pages, which stay cached (clean,
  // reclaimable) until the kernel needs the memory. bytes() stays valid: a later read faults
  // the pages back in from the cache or the file. Reading a model tensor by tensor and calling
  // this after each keeps the resident set near one tensor. Throws Error if madvise fails.
  void release_pages(const TensorInfo& tensor) const;

 private:
  SafetensorsFile() = default;
  void unmap() noexcept;

  std::string path_;
  void* map_ = nullptr;  // owned: the whole file
  std::size_t map_bytes_ = 0;
  const std::byte* data_ = nullptr;  // the data area, inside map_
  std::uint64_t data_bytes_ = 0;
  std::vector<TensorInfo> tensors_;
  std::map<std::string, std::size_t, std::less<>> index_;  // name -> position in tensors_
  std::map<std::string, std::string> metadata_;
};

// Collects tensors, then writes them as one safetensors file. Tensor data is BORROWED: the
// pointer given to add() must stay valid and unchanged until write() returns.
class SafetensorsWriter {
 public:
  // `data` holds numel(shape) * tensor_dtype_size(dtype) bytes (may be null when that is 0).
  // Throws Error for an empty, "__metadata__" or non-UTF-8 name, a name added twice, a
  // negative dimension or a size that overflows.
  void add(std::string name, TensorDType dtype, std::vector<std::int64_t> shape,
           const void* data);
  // The same, also checking that `data` has exactly the size dtype * shape needs.
  void add(std::string name, TensorDType dtype, std::vector<std::int64_t> shape,
           std::span<const std::byte> data);
  // A __metadata__ entry; setting a key again replaces its value. Both must be UTF-8.
  void metadata(std::string key, std::string value);

  // Writes "<path>.tmp-<pid>" next to `path` (header padded with spaces to 8-byte alignment,
  // __metadata__ first, tensors in the order added), fsyncs it, renames it over `path` and
  // fsyncs the folder: `path` is never half-written. On failure (no such folder, no
  // permission, ENOSPC, EIO) throws an Error naming the path and leaves no temporary file.
  // May be called again (to another path, or after a failure).
  void write(const std::string& path) const;

 private:
  struct Entry {
    std::string name;
    TensorDType dtype;
    std::vector<std::int64_t> shape;
    const void* data;  // borrowed
    std::uint64_t bytes;
  };
  std::vector<Entry> entries_;
  std::map<std::string, std::string> metadata_;
};

}  // namespace strata::models
