#include "models/io/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <limits>
#include <set>
#include <utility>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/error.h"

namespace strata::models {

static_assert(std::endian::native == std::endian::little,
              "safetensors is little-endian and strata uses its bytes in place");

namespace {

using Json = nlohmann::json;

// The spec caps the header at 100 MB; a larger N is a corrupt or foreign file.
constexpr std::uint64_t kMaxHeaderBytes = 100'000'000;
// A valid header nests three deep ({ name: { shape: [ ). The cap keeps a hostile header from
// building a deep tree (and its destruction from using deep stacks).
constexpr int kMaxJsonDepth = 16;

constexpr const char* kMalformedHint =
    "the file is truncated, corrupted or not a safetensors file: download or export it again";

struct DTypeRow {
  TensorDType dtype;
  const char* name;
  std::size_t size;
};
constexpr DTypeRow kDTypes[] = {{TensorDType::f32, "F32", 4},
                                {TensorDType::f16, "F16", 2},
                                {TensorDType::bf16, "BF16", 2},
                                {TensorDType::i32, "I32", 4},
                                {TensorDType::i64, "I64", 8}};

const DTypeRow& row(TensorDType dtype) {
  for (const DTypeRow& r : kDTypes) {
    if (r.dtype == dtype) return r;
  }
  STRATA_ASSERT(false, "TensorDType out of range");
  return kDTypes[0];
}

// Names and values go into messages; keep a hostile one from flooding the terminal.
std::string clip(std::string_view text, std::size_t max_chars = 120) {
  if (text.size() <= max_chars) return std::string(text);
  return fmt::format("{}... ({} bytes)", text.substr(0, max_chars), text.size());
}

std::string preview(const Json& value) {
  return clip(value.dump(-1, ' ', false, Json::error_handler_t::replace), 60);
}

std::string where_of(const std::string& path, std::string_view tensor) {
  return tensor.empty() ? path : fmt::format("{}, tensor \"{}\"", path, clip(tensor));
}

// A malformed file: `what` is the problem, `tensor` the entry it concerns (if any).
Error bad(const std::string& path, std::string what, std::string_view tensor = {}) {
  return Error(std::move(what), where_of(path, tensor), kMalformedHint);
}

// Parses the header, rejecting duplicate keys in any object (nlohmann would keep the last one
// silently) and absurd nesting. Throws Error for anything that is not a JSON object. `names`
// receives the top-level keys in the order the header lists them (the parsed object forgets
// it), which orders tensors that share an offset (empty ones).
Json parse_header(std::string_view text, const std::string& path,
                  std::vector<std::string>& names) {
  std::vector<std::set<std::string, std::less<>>> open_objects;  // keys seen, innermost last
  auto callback = [&](int depth, Json::parse_event_t event, Json& parsed) {
    using E = Json::parse_event_t;
    if (depth > kMaxJsonDepth) {
      throw bad(path, fmt::format("the header nests deeper than {} levels", kMaxJsonDepth));
    }
    if (event == E::object_start) open_objects.emplace_back();
    if (event == E::object_end && !open_objects.empty()) open_objects.pop_back();
    if (event == E::key && !open_objects.empty()) {
      std::string key = parsed.get<std::string>();
      const bool top_level = open_objects.size() == 1;
      if (!open_objects.back().insert(key).second) {
        throw bad(path, fmt::format("the header has the key \"{}\" twice ({})", clip(key),
                                    top_level ? "duplicate name" : "duplicate field"));
      }
      if (top_level) names.push_back(std::move(key));
    }
    return true;
  };
  // nlohmann takes a NUL byte for the end of the input and would accept "{...}\0garbage"; a raw
  // NUL is invalid anywhere in JSON (Python's reader rejects it too).
  if (const auto nul = text.find('\0'); nul != std::string_view::npos) {
    throw bad(path, fmt::format("the header is not valid JSON: a NUL byte at offset {} (headers "
                                "are padded with spaces, not NULs)",
                                nul));
  }
  Json header;
  try {
    header = Json::parse(text.begin(), text.end(), callback);
  } catch (const Json::exception& e) {
    throw bad(path, fmt::format("the header is not valid JSON: {}", e.what()));
  }
  if (!header.is_object()) {
    throw bad(path, fmt::format("the header is a JSON {}, not an object", header.type_name()));
  }
  STRATA_ASSERT(names.size() == header.size(), "every top-level key seen once");
  return header;
}

std::uint64_t read_count(const Json& v, const std::string& path, std::string_view name,
                         std::string_view what) {
  if (!v.is_number_unsigned()) {
    throw bad(path, fmt::format("{} must be a non-negative integer, got {}", what, preview(v)),
              name);
  }
  return v.get<std::uint64_t>();
}

// One tensor entry: fields, their types, the dtype, the shape and its size, the offsets
// against the data area. Overlaps and holes are checked afterwards, across entries.
TensorInfo parse_entry(const std::string& name, const Json& entry, std::uint64_t data_bytes,
                       const std::string& path) {
  if (!entry.is_object()) {
    throw bad(path, fmt::format("the entry is a JSON {}, not an object with dtype, shape and "
                                "data_offsets",
                                entry.type_name()),
              name);
  }
  for (const auto& item : entry.items()) {
    if (item.key() != "dtype" && item.key() != "shape" && item.key() != "data_offsets") {
      throw bad(path, fmt::format("the entry has an unknown field \"{}\"", clip(item.key())),
                name);
    }
  }
  auto field = [&](const char* key) -> const Json& {
    const auto it = entry.find(key);
    if (it == entry.end()) {
      throw bad(path, fmt::format("the entry has no \"{}\" (it needs dtype, shape and "
                                  "data_offsets)",
                                  key),
                name);
    }
    return *it;
  };

  TensorInfo t;
  t.name = name;

  const Json& dtype = field("dtype");
  if (!dtype.is_string()) {
    throw bad(path, fmt::format("dtype must be a string, got {}", preview(dtype)), name);
  }
  const std::optional<TensorDType> known = parse_tensor_dtype(dtype.get<std::string>());
  if (!known) {
    throw Error(fmt::format("unsupported dtype {}: strata reads F32, F16, BF16, I32 and I64",
                            preview(dtype)),
                where_of(path, name),
                "convert the tensor to one of those dtypes (e.g. in PyTorch) and save again");
  }
  t.dtype = *known;
  const std::uint64_t element_bytes = tensor_dtype_size(t.dtype);

  const Json& shape = field("shape");
  if (!shape.is_array()) {
    throw bad(path, fmt::format("shape must be an array, got {}", preview(shape)), name);
  }
  std::uint64_t numel = 1;
  bool overflow = false;
  for (const Json& dim : shape) {
    const std::uint64_t n = read_count(dim, path, name, "every dimension of shape");
    if (n > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) overflow = true;
    if (n != 0 && numel > std::numeric_limits<std::uint64_t>::max() / n) overflow = true;
    t.shape.push_back(static_cast<std::int64_t>(n));
    numel *= n;
  }
  // A zero dimension makes numel 0 even after an overflowing prefix: still reject the shape.
  if (overflow || numel > std::numeric_limits<std::uint64_t>::max() / element_bytes) {
    throw bad(path, fmt::format("shape {} is too large (its byte size overflows 64 bits)",
                                preview(shape)),
              name);
  }
  t.numel = numel;

  const Json& offsets = field("data_offsets");
  if (!offsets.is_array() || offsets.size() != 2) {
    throw bad(path, fmt::format("data_offsets must be [begin, end], got {}", preview(offsets)),
              name);
  }
  t.begin = read_count(offsets[0], path, name, "data_offsets[0] (begin)");
  t.end = read_count(offsets[1], path, name, "data_offsets[1] (end)");
  if (t.end < t.begin) {
    throw bad(path, fmt::format("data_offsets [{}, {}]: end is before begin", t.begin, t.end),
              name);
  }
  if (t.end > data_bytes) {
    throw bad(path, fmt::format("data_offsets [{}, {}] reach past the end of the data area "
                                "({} bytes): the file is truncated or the header is wrong",
                                t.begin, t.end, data_bytes),
              name);
  }
  if (t.end - t.begin != numel * element_bytes) {
    throw bad(path, fmt::format("wrong byte size: {} element(s) of {} need {} bytes, data_offsets "
                                "[{}, {}] give {}",
                                numel, row(t.dtype).name, numel * element_bytes, t.begin, t.end,
                                t.end - t.begin),
              name);
  }
  return t;
}

// What to do about a failed write, by errno.
std::string write_hint(int errnum) {
  switch (errnum) {
    case ENOSPC:
    case EDQUOT:
    case EFBIG:
      return "free space on that file system (or raise the quota or file size limit), or "
             "write somewhere else";
    case EACCES:
    case EPERM:
    case EROFS: return "check that the folder is writable, or write somewhere else";
    case ENOENT:
    case ENOTDIR: return "create the folder first, or fix the path";
    case EISDIR: return "the path is a folder: give a file name";
    default: return "check the disk and the path";
  }
}

// Throws an Error unless `text` encodes to JSON, i.e. is valid UTF-8.
void check_utf8(const std::string& text, std::string_view what) {
  try {
    (void)Json(text).dump();
  } catch (const Json::exception&) {
    throw Error(fmt::format("{} is not valid UTF-8", what), clip(text),
                "safetensors headers are UTF-8 JSON: use a UTF-8 name");
  }
}

}  // namespace

// ---- dtypes -----------------------------------------------------------------------------------

std::string_view tensor_dtype_name(TensorDType dtype) { return row(dtype).name; }

std::size_t tensor_dtype_size(TensorDType dtype) { return row(dtype).size; }

std::optional<TensorDType> parse_tensor_dtype(std::string_view name) {
  for (const DTypeRow& r : kDTypes) {
    if (name == r.name) return r.dtype;
  }
  return std::nullopt;
}

std::optional<DType> to_dtype(TensorDType dtype) {
  switch (dtype) {
    case TensorDType::f32: return DType::f32;
    case TensorDType::f16: return DType::f16;
    case TensorDType::bf16: return DType::bf16;
    case TensorDType::i32:
    case TensorDType::i64: return std::nullopt;
  }
  return std::nullopt;
}

TensorDType to_tensor_dtype(DType dtype) {
  switch (dtype) {
    case DType::f32: return TensorDType::f32;
    case DType::f16: return TensorDType::f16;
    case DType::bf16: return TensorDType::bf16;
  }
  STRATA_ASSERT(false, "DType out of range");
  return TensorDType::f32;
}

// ---- reading ----------------------------------------------------------------------------------

SafetensorsFile SafetensorsFile::open(const std::string& path) {
  SafetensorsFile f;  // unmaps on every throw below
  f.path_ = path;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int e = errno;
    throw Error(fmt::format("cannot open the safetensors file: {}", std::strerror(e)), path,
                e == ENOENT ? "check the path (the file does not exist)"
                            : "check the file's permissions");
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int e = errno;
    ::close(fd);
    throw Error(fmt::format("cannot stat the safetensors file: {}", std::strerror(e)), path);
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    throw Error("not a regular file", path, "give the path of a .safetensors file");
  }
  const auto file_bytes = static_cast<std::uint64_t>(st.st_size);
  if (file_bytes < 8) {
    ::close(fd);
    throw bad(path, fmt::format("the file has {} bytes, too short for the 8-byte header size",
                                file_bytes));
  }
  void* map = ::mmap(nullptr, file_bytes, PROT_READ, MAP_PRIVATE, fd, 0);
  const int map_errno = errno;
  ::close(fd);  // the mapping keeps the file
  if (map == MAP_FAILED) {
    throw Error(fmt::format("cannot map the safetensors file: {}", std::strerror(map_errno)),
                path, "check the file system supports mmap and the address space limit");
  }
  f.map_ = map;
  f.map_bytes_ = file_bytes;
  const auto* base = static_cast<const std::byte*>(map);

  std::uint64_t header_bytes = 0;
  std::memcpy(&header_bytes, base, 8);  // little-endian, as the host
  if (header_bytes == 0 || header_bytes > kMaxHeaderBytes) {
    throw bad(path, fmt::format("the header size is {} bytes, outside (0, 100 MB]: this is not "
                                "the start of a safetensors file",
                                header_bytes));
  }
  if (header_bytes > file_bytes - 8) {
    throw bad(path, fmt::format("the header size is {} bytes, larger than the {} bytes that "
                                "follow the size field: the file is truncated",
                                header_bytes, file_bytes - 8));
  }
  const std::string_view text(reinterpret_cast<const char*>(base + 8), header_bytes);
  f.data_ = base + 8 + header_bytes;
  f.data_bytes_ = file_bytes - 8 - header_bytes;

  std::vector<std::string> names;  // in header order
  const Json header = parse_header(text, path, names);
  try {
    for (const std::string& name : names) {
      const Json& entry = *header.find(name);
      if (name == "__metadata__") {
        if (!entry.is_object()) {
          throw bad(path, fmt::format("__metadata__ must be an object of strings, got {}",
                                      preview(entry)));
        }
        for (const auto& m : entry.items()) {
          if (!m.value().is_string()) {
            throw bad(path, fmt::format("__metadata__ value of \"{}\" must be a string, got {}",
                                        clip(m.key()), preview(m.value())));
          }
          f.metadata_.emplace(m.key(), m.value().get<std::string>());
        }
        continue;
      }
      f.tensors_.push_back(parse_entry(name, entry, f.data_bytes_, path));
    }
  } catch (const Json::exception& e) {  // not expected after the checks; never let one escape
    throw bad(path, fmt::format("the header is malformed: {}", e.what()));
  }

  // In offset order each tensor starts where the previous one ended: no overlap, no hole, and
  // the last one ends at the end of the file. Empty tensors ([k, k]) may share an offset; they
  // keep the header's order (the stable sort), which for our writer is the order added.
  std::stable_sort(f.tensors_.begin(), f.tensors_.end(),
                   [](const TensorInfo& a, const TensorInfo& b) {
                     return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
                   });
  std::uint64_t covered = 0;
  const TensorInfo* previous = nullptr;
  for (const TensorInfo& t : f.tensors_) {
    if (t.begin < covered) {
      throw bad(path, fmt::format("bytes [{}, {}) overlap tensor \"{}\" at [{}, {})", t.begin,
                                  t.end, clip(previous->name), previous->begin, previous->end),
                t.name);
    }
    if (t.begin > covered) {
      throw bad(path, fmt::format("bytes [{}, {}) of the data area belong to no tensor (a hole; "
                                  "the spec requires the data area to be fully indexed)",
                                  covered, t.begin));
    }
    covered = t.end;
    previous = &t;
  }
  if (covered != f.data_bytes_) {
    throw bad(path, fmt::format("bytes [{}, {}) of the data area belong to no tensor (trailing "
                                "bytes; the spec requires the data area to be fully indexed)",
                                covered, f.data_bytes_));
  }
  for (std::size_t i = 0; i < f.tensors_.size(); ++i) f.index_.emplace(f.tensors_[i].name, i);
  return f;
}

SafetensorsFile::~SafetensorsFile() { unmap(); }

void SafetensorsFile::unmap() noexcept {
  if (map_ != nullptr) ::munmap(map_, map_bytes_);
  map_ = nullptr;
  map_bytes_ = 0;
  data_ = nullptr;
  data_bytes_ = 0;
}

SafetensorsFile::SafetensorsFile(SafetensorsFile&& other) noexcept { *this = std::move(other); }

SafetensorsFile& SafetensorsFile::operator=(SafetensorsFile&& other) noexcept {
  if (this != &other) {
    unmap();
    path_ = std::move(other.path_);
    map_ = std::exchange(other.map_, nullptr);
    map_bytes_ = std::exchange(other.map_bytes_, 0);
    data_ = std::exchange(other.data_, nullptr);
    data_bytes_ = std::exchange(other.data_bytes_, 0);
    tensors_ = std::move(other.tensors_);
    index_ = std::move(other.index_);
    metadata_ = std::move(other.metadata_);
  }
  return *this;
}

const TensorInfo* SafetensorsFile::find(std::string_view name) const {
  const auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

std::span<const std::byte> SafetensorsFile::bytes(const TensorInfo& tensor) const {
  STRATA_ASSERT(tensor.begin <= tensor.end && tensor.end <= data_bytes_,
                "TensorInfo does not belong to this file");
  return {data_ + tensor.begin, static_cast<std::size_t>(tensor.end - tensor.begin)};
}

void SafetensorsFile::release_pages(const TensorInfo& tensor) const {
  const std::span<const std::byte> b = bytes(tensor);
  const auto page = static_cast<std::uintptr_t>(::sysconf(_SC_PAGESIZE));
  const auto first = reinterpret_cast<std::uintptr_t>(b.data());
  const std::uintptr_t lo = (first + page - 1) / page * page;  // round the start up
  const std::uintptr_t hi = (first + b.size()) / page * page;  // and the end down
  if (lo >= hi) return;  // no whole page inside the tensor
  if (::madvise(reinterpret_cast<void*>(lo), hi - lo, MADV_DONTNEED) != 0) {
    throw system_error(errno, "madvise(MADV_DONTNEED)", where_of(path_, tensor.name),
                       "the tensor's pages stay resident; this is harmless but unexpected");
  }
}

// ---- writing ----------------------------------------------------------------------------------

void SafetensorsWriter::add(std::string name, TensorDType dtype, std::vector<std::int64_t> shape,
                            const void* data) {
  const std::string where = fmt::format("safetensors writer, tensor \"{}\"", clip(name));
  if (name.empty() || name == "__metadata__") {
    throw Error("this name cannot name a tensor", where, "give the tensor another name");
  }
  check_utf8(name, "the tensor name");
  for (const Entry& e : entries_) {
    if (e.name == name) throw Error("tensor added twice", where, "give each tensor one name");
  }
  std::uint64_t numel = 1;
  bool overflow = false;
  for (const std::int64_t d : shape) {
    if (d < 0) {
      throw Error(fmt::format("negative dimension {} in the shape", d), where,
                  "shapes are non-negative");
    }
    const auto n = static_cast<std::uint64_t>(d);
    if (n != 0 && numel > std::numeric_limits<std::uint64_t>::max() / n) overflow = true;
    numel *= n;
  }
  const std::uint64_t element_bytes = tensor_dtype_size(dtype);
  if (overflow || numel > std::numeric_limits<std::uint64_t>::max() / element_bytes) {
    throw Error("the shape's byte size overflows 64 bits", where, "check the shape");
  }
  const std::uint64_t bytes = numel * element_bytes;
  STRATA_ASSERT(bytes == 0 || data != nullptr, "tensor data is null");
  entries_.push_back({std::move(name), dtype, std::move(shape), data, bytes});
}

void SafetensorsWriter::add(std::string name, TensorDType dtype, std::vector<std::int64_t> shape,
                            std::span<const std::byte> data) {
  const std::string shown = clip(name);
  add(std::move(name), dtype, std::move(shape), static_cast<const void*>(data.data()));
  const std::uint64_t need = entries_.back().bytes;
  if (data.size() != need) {
    entries_.pop_back();
    throw Error(fmt::format("the data has {} bytes, dtype and shape need {}", data.size(), need),
                fmt::format("safetensors writer, tensor \"{}\"", shown),
                "pass the tensor's whole buffer, or fix its dtype or shape");
  }
}

void SafetensorsWriter::metadata(std::string key, std::string value) {
  check_utf8(key, "the metadata key");
  check_utf8(value, "the metadata value");
  metadata_[std::move(key)] = std::move(value);
}

void SafetensorsWriter::write(const std::string& path) const {
  // The header: __metadata__ first, then the tensors in the order added, back to back.
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata_.empty()) header["__metadata__"] = metadata_;
  std::uint64_t offset = 0;
  for (const Entry& e : entries_) {
    if (e.bytes > std::numeric_limits<std::uint64_t>::max() - offset) {
      throw Error("the tensors' total size overflows 64 bits", path, "write fewer tensors");
    }
    header[e.name] = {{"dtype", std::string(tensor_dtype_name(e.dtype))},
                      {"shape", e.shape},
                      {"data_offsets", {offset, offset + e.bytes}}};
    offset += e.bytes;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // the data area starts 8-byte aligned
  const std::uint64_t header_bytes = text.size();
  if (header_bytes > kMaxHeaderBytes) {
    throw Error(fmt::format("the header would have {} bytes, more than the 100 MB readers accept",
                            header_bytes),
                path, "split the tensors over several files");
  }

  const std::string tmp = fmt::format("{}.tmp-{}", path, ::getpid());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    const int e = errno;
    throw Error(fmt::format("cannot create the temporary file {}: {}", tmp, std::strerror(e)),
                path, write_hint(e));
  }
  // Every failure from here on removes the temporary file: `path` keeps its old contents.
  auto fail = [&](const char* step, int e, bool close_fd) {
    if (close_fd) ::close(fd);
    ::unlink(tmp.c_str());
    return Error(fmt::format("writing the safetensors file failed: {} {}: {}", step, tmp,
                             std::strerror(e)),
                 path, write_hint(e));
  };
  auto put = [&](const void* data, std::uint64_t n) {
    const auto* p = static_cast<const char*>(data);
    while (n > 0) {
      const ssize_t w = ::write(fd, p, std::min<std::uint64_t>(n, std::uint64_t{1} << 30));
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) throw fail("write to", w < 0 ? errno : EIO, true);
      p += w;  // a short write: go on from where it stopped
      n -= static_cast<std::uint64_t>(w);
    }
  };
  put(&header_bytes, 8);
  put(text.data(), text.size());
  for (const Entry& e : entries_) put(e.data, e.bytes);
  if (::fsync(fd) != 0) throw fail("fsync of", errno, true);
  if (::close(fd) != 0) throw fail("close of", errno, false);
  if (::rename(tmp.c_str(), path.c_str()) != 0) throw fail("rename into place of", errno, false);

  // The rename is durable once the folder is synced. Some file systems cannot fsync a folder
  // (EINVAL); the file is in place and complete either way.
  const auto slash = path.find_last_of('/');
  const std::string dir =
      slash == std::string::npos ? "." : (slash == 0 ? "/" : path.substr(0, slash));
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0) {
    const int e = errno;
    throw Error(fmt::format("cannot open the folder {} to fsync it: {}", dir, std::strerror(e)),
                path, "the file was written; check the folder");
  }
  if (::fsync(dfd) != 0 && errno != EINVAL) {
    const int e = errno;
    ::close(dfd);
    throw Error(fmt::format("fsync of the folder {} failed: {}", dir, std::strerror(e)), path,
                "the file was written but may not survive a crash; check the disk");
  }
  ::close(dfd);
}

}  // namespace strata::models
