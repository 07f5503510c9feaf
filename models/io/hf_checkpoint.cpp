#include "models/io/hf_checkpoint.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <set>
#include <utility>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/error.h"

namespace strata::models {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;

// An index lists one entry per tensor; even a 1000-layer model's is a few MB.
constexpr std::uint64_t kMaxIndexBytes = 100'000'000;
// A valid index nests two deep ({"weight_map": {name: file}}).
constexpr int kMaxJsonDepth = 16;

constexpr const char* kIndexHint =
    "the model folder is incomplete or inconsistent: download or export it again";

std::string join(const std::string& dir, std::string_view file) {
  if (dir.empty()) return std::string(file);
  return dir.back() == '/' ? dir + std::string(file) : fmt::format("{}/{}", dir, file);
}

std::string parent_of(const std::string& path) {
  const auto slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

// Names come from files; keep a hostile one from flooding the terminal.
std::string clip(std::string_view text, std::size_t max_chars = 120) {
  if (text.size() <= max_chars) return std::string(text);
  return fmt::format("{}... ({} bytes)", text.substr(0, max_chars), text.size());
}

std::string tensor_where(const std::string& path, std::string_view tensor) {
  return fmt::format("{}, tensor \"{}\"", path, clip(tensor));
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
    default: return "check the disk and the path";
  }
}

// The whole file as text; Error naming the path when it cannot be read.
std::string read_text(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int e = errno;
    throw Error(fmt::format("cannot open the file: {}", errno_text(e)), path,
                "check the file's permissions");
  }
  std::string text;
  struct stat st {};
  if (::fstat(fd, &st) != 0 || static_cast<std::uint64_t>(st.st_size) > kMaxIndexBytes) {
    const int e = errno;
    ::close(fd);
    throw Error(st.st_size > 0 ? fmt::format("the file has {} bytes, more than an index can have",
                                             st.st_size)
                               : fmt::format("cannot stat the file: {}", errno_text(e)),
                path, kIndexHint);
  }
  text.resize(static_cast<std::size_t>(st.st_size));
  std::size_t done = 0;
  while (done < text.size()) {
    const ssize_t r = ::read(fd, text.data() + done, text.size() - done);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) {
      const int e = r < 0 ? errno : EIO;
      ::close(fd);
      throw Error(fmt::format("reading the file failed: {}", errno_text(e)), path,
                  "check the disk");
    }
    done += static_cast<std::size_t>(r);
  }
  ::close(fd);
  return text;
}

// Parses JSON, rejecting a key given twice in any object (nlohmann would keep the last one
// silently: a tensor listed twice must not pass unnoticed) and absurd nesting.
Json parse_index(const std::string& text, const std::string& path) {
  std::vector<std::set<std::string, std::less<>>> open_objects;  // keys seen, innermost last
  auto callback = [&](int depth, Json::parse_event_t event, Json& parsed) {
    using E = Json::parse_event_t;
    if (depth > kMaxJsonDepth) {
      throw Error(fmt::format("the index nests deeper than {} levels", kMaxJsonDepth), path,
                  kIndexHint);
    }
    if (event == E::object_start) open_objects.emplace_back();
    if (event == E::object_end && !open_objects.empty()) open_objects.pop_back();
    if (event == E::key && !open_objects.empty()) {
      std::string key = parsed.get<std::string>();
      if (!open_objects.back().insert(key).second) {
        throw Error(fmt::format("the index has the key \"{}\" twice", clip(key)), path, kIndexHint);
      }
    }
    return true;
  };
  Json index;
  try {
    index = Json::parse(text, callback);
  } catch (const Json::exception& e) {
    throw Error(fmt::format("the index is not valid JSON: {}", e.what()), path, kIndexHint);
  }
  if (!index.is_object()) {
    throw Error(fmt::format("the index is a JSON {}, not an object", index.type_name()), path,
                kIndexHint);
  }
  return index;
}

// A shard named by the index must be a file in the index's folder: a name with a '/' or '..'
// could reach anywhere (a hostile index must not make us map /etc/shadow or ../../x).
void check_shard_name(const std::string& file, const std::string& tensor,
                      const std::string& index_path) {
  if (file.empty() || file.find('/') != std::string::npos ||
      file.find("..") != std::string::npos || file.find('\0') != std::string::npos) {
    throw Error(fmt::format("the index names the shard \"{}\", which is not a plain file name "
                            "(it is empty or has a '/' or '..'); shards must lie in the index's "
                            "folder",
                            clip(file)),
                tensor_where(index_path, tensor), kIndexHint);
  }
}

void fsync_dir(const std::string& dir, const std::string& path) {
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0) {
    const int e = errno;
    throw Error(fmt::format("cannot open the folder {} to fsync it: {}", dir, errno_text(e)),
                path, "the file was written; check the folder");
  }
  // Some file systems cannot fsync a folder (EINVAL); the files are in place either way.
  if (::fsync(dfd) != 0 && errno != EINVAL) {
    const int e = errno;
    ::close(dfd);
    throw Error(fmt::format("fsync of the folder {} failed: {}", dir, errno_text(e)), path,
                "the file was written but may not survive a crash; check the disk");
  }
  ::close(dfd);
}

// Writes `text` to "<path>.tmp-<pid>", fsyncs it, renames it over `path` and fsyncs the
// folder: `path` is never half-written. On failure, no temporary file is left.
void write_atomically(const std::string& path, const std::string& text) {
  const std::string tmp = fmt::format("{}.tmp-{}", path, ::getpid());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    const int e = errno;
    throw Error(fmt::format("cannot create the temporary file {}: {}", tmp, errno_text(e)), path,
                write_hint(e));
  }
  auto fail = [&](const char* step, int e, bool close_fd) {
    if (close_fd) ::close(fd);
    ::unlink(tmp.c_str());
    return Error(fmt::format("writing the file failed: {} {}: {}", step, tmp, errno_text(e)),
                 path, write_hint(e));
  };
  std::size_t done = 0;
  while (done < text.size()) {
    const ssize_t w = ::write(fd, text.data() + done, text.size() - done);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) throw fail("write to", w < 0 ? errno : EIO, true);
    done += static_cast<std::size_t>(w);  // a short write: go on from where it stopped
  }
  if (::fsync(fd) != 0) throw fail("fsync of", errno, true);
  if (::close(fd) != 0) throw fail("close of", errno, false);
  if (::rename(tmp.c_str(), path.c_str()) != 0) throw fail("rename into place of", errno, false);
  fsync_dir(parent_of(path), path);
}

std::string partial_name(std::size_t number) {
  return fmt::format("model-{:05d}.safetensors.partial", number);
}

std::string shard_name(std::size_t number, std::size_t count) {
  return fmt::format("model-{:05d}-of-{:05d}.safetensors", number, count);
}

}  // namespace

// ---- reading ----------------------------------------------------------------------------------

HfCheckpoint HfCheckpoint::open(const std::string& path) {
  std::error_code ec;
  const fs::file_status status = fs::status(path, ec);
  if (ec && ec != std::errc::no_such_file_or_directory) {
    throw Error(fmt::format("cannot inspect the path: {}", ec.message()), path,
                "check the path and its permissions");
  }
  if (!fs::exists(status)) {
    throw Error("no such file or folder", path,
                "give a model folder (with model.safetensors or model.safetensors.index.json) "
                "or a .safetensors file");
  }

  HfCheckpoint c;
  std::string single_path;
  if (fs::is_directory(status)) {
    const std::string index_path = join(path, kHfIndexFile);
    const std::string file_path = join(path, kHfSingleFile);
    if (fs::exists(index_path, ec)) {
      c.index_path_ = index_path;  // wins over model.safetensors, as in transformers
    } else if (fs::exists(file_path, ec)) {
      single_path = file_path;
    } else {
      throw Error(fmt::format("the folder holds neither {} nor {}", kHfIndexFile, kHfSingleFile),
                  path,
                  "give the folder of a Hugging Face model (save_pretrained writes one of "
                  "those), or the path of a .safetensors file");
    }
  } else if (path.ends_with(".json")) {
    c.index_path_ = path;
  } else {
    single_path = path;
  }

  if (!single_path.empty()) {
    c.shards_.push_back(SafetensorsFile::open(single_path));
    for (const TensorInfo& t : c.shards_[0].tensors()) c.shard_index_.emplace(t.name, 0);
    c.metadata_ = c.shards_[0].metadata();
  } else {
    const std::string& index_path = c.index_path_;
    const std::string dir = parent_of(index_path);
    const Json index = parse_index(read_text(index_path), index_path);

    if (const auto m = index.find("metadata"); m != index.end() && !m->is_null()) {
      if (!m->is_object()) {
        throw Error(fmt::format("\"metadata\" must be an object, got a JSON {}", m->type_name()),
                    index_path, kIndexHint);
      }
      for (const auto& item : m->items()) {
        c.metadata_.emplace(item.key(), item.value().is_string()
                                            ? item.value().get<std::string>()
                                            : item.value().dump());
      }
    }
    const auto wm = index.find("weight_map");
    if (wm == index.end() || !wm->is_object()) {
      throw Error("the index has no \"weight_map\" object (tensor name -> shard file)",
                  index_path, kIndexHint);
    }

    // Open each shard once, in the order the (sorted) weight_map first names it.
    std::map<std::string, std::size_t> shard_by_file;
    std::map<std::string, std::size_t> listed;  // tensor name -> shard, per the index
    for (const auto& item : wm->items()) {
      if (!item.value().is_string()) {
        throw Error(fmt::format("the shard of a tensor must be a file name (a string), got {}",
                                clip(item.value().dump())),
                    tensor_where(index_path, item.key()), kIndexHint);
      }
      const std::string file = item.value().get<std::string>();
      check_shard_name(file, item.key(), index_path);
      auto [it, added] = shard_by_file.emplace(file, c.shards_.size());
      if (added) {
        const std::string shard_path = join(dir, file);
        if (!fs::exists(shard_path, ec)) {
          throw Error(fmt::format("the shard {} listed in the index {} is missing", file,
                                  index_path),
                      shard_path,
                      "the download or copy is incomplete: fetch the missing shard (or the whole "
                      "folder) again");
        }
        c.shards_.push_back(SafetensorsFile::open(shard_path));
      }
      listed.emplace(item.key(), it->second);
    }

    // Index -> shards: every listed tensor is where the index says.
    for (const auto& [name, shard] : listed) {
      if (c.shards_[shard].find(name) == nullptr) {
        throw Error(fmt::format("the index {} puts tensor \"{}\" in {}, which does not hold it",
                                index_path, clip(name), c.shards_[shard].path()),
                    tensor_where(c.shards_[shard].path(), name), kIndexHint);
      }
    }
    // Shards -> index: no tensor in a second shard, none the index does not list.
    for (std::size_t s = 0; s < c.shards_.size(); ++s) {
      for (const TensorInfo& t : c.shards_[s].tensors()) {
        const auto it = listed.find(t.name);
        if (it == listed.end()) {
          throw Error(fmt::format("tensor \"{}\" is in {} but the index {} does not list it",
                                  clip(t.name), c.shards_[s].path(), index_path),
                      tensor_where(c.shards_[s].path(), t.name), kIndexHint);
        }
        if (it->second != s) {
          throw Error(fmt::format("tensor \"{}\" is in two shards: {} (where the index {} puts "
                                  "it) and {}",
                                  clip(t.name), c.shards_[it->second].path(), index_path,
                                  c.shards_[s].path()),
                      tensor_where(c.shards_[s].path(), t.name), kIndexHint);
        }
      }
    }
    for (auto& [name, shard] : listed) c.shard_index_.emplace(name, shard);
  }

  c.names_.reserve(c.shard_index_.size());
  for (const auto& entry : c.shard_index_) c.names_.push_back(entry.first);  // sorted
  return c;
}

const TensorInfo* HfCheckpoint::find(std::string_view name) const {
  const auto it = shard_index_.find(name);
  return it == shard_index_.end() ? nullptr : shards_[it->second].find(name);
}

const SafetensorsFile& HfCheckpoint::shard_of(const TensorInfo& tensor) const {
  const auto it = shard_index_.find(tensor.name);
  STRATA_ASSERT(it != shard_index_.end() && shards_[it->second].find(tensor.name) == &tensor,
                "TensorInfo does not come from this checkpoint's find()");
  return shards_[it->second];
}

std::span<const std::byte> HfCheckpoint::bytes(const TensorInfo& tensor) const {
  return shard_of(tensor).bytes(tensor);
}

std::string HfCheckpoint::file_of(std::string_view name) const {
  const auto it = shard_index_.find(name);
  return it == shard_index_.end() ? std::string() : shards_[it->second].path();
}

void HfCheckpoint::done_with(const TensorInfo& tensor) const {
  shard_of(tensor).release_pages(tensor);
}

// ---- writing ----------------------------------------------------------------------------------

HfCheckpointWriter::HfCheckpointWriter(std::string dir, std::uint64_t max_shard_bytes)
    : dir_(std::move(dir)), max_shard_bytes_(max_shard_bytes) {
  if (max_shard_bytes_ == 0) {
    throw Error("max_shard_bytes is 0", dir_, "give the largest shard size in bytes, e.g. 5 GB");
  }
  std::error_code ec;
  fs::create_directories(dir_, ec);
  if (ec || !fs::is_directory(dir_)) {
    throw Error(fmt::format("cannot create the model folder: {}",
                            ec ? ec.message() : std::string("a file of that name is in the way")),
                dir_, "check the path and that its parent folder is writable");
  }
  for (fs::directory_iterator it(dir_, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.starts_with("model") && name.find(".safetensors") != std::string::npos) {
      throw Error(fmt::format("the folder already holds {}: a new checkpoint would mix with it",
                              name),
                  join(dir_, name), "write into an empty folder, or remove the old model files");
    }
  }
  if (ec) {
    throw Error(fmt::format("cannot list the model folder: {}", ec.message()), dir_,
                "check the folder's permissions");
  }
}

HfCheckpointWriter::~HfCheckpointWriter() {
  if (finished_) return;
  for (const std::string& path : written_) ::unlink(path.c_str());  // best effort
}

void HfCheckpointWriter::check_usable() const {
  STRATA_ASSERT(!finished_, "HfCheckpointWriter used after finish()");
  if (failed_) {
    throw Error("an earlier write of this checkpoint failed", dir_,
                "fix the cause named by the first error and write the checkpoint again");
  }
}

void HfCheckpointWriter::add(std::string name, TensorDType dtype, std::vector<std::int64_t> shape,
                             std::vector<std::byte> data) {
  check_usable();
  if (shard_of_.contains(name)) {
    throw Error("tensor added twice", tensor_where(dir_, name), "give each tensor one name");
  }
  {
    // SafetensorsWriter checks the name, the shape and the size (throwing Error); checking
    // here keeps a bad tensor from flushing the current shard.
    SafetensorsWriter probe;
    probe.add(name, dtype, shape, std::span<const std::byte>(data));
  }
  const std::uint64_t n = data.size();
  shard_of_.emplace(name, 0);
  total_bytes_ += n;

  if (n > max_shard_bytes_) {  // a shard of its own, now; the current one stays open
    SafetensorsWriter alone;
    alone.add(name, dtype, std::move(shape), std::span<const std::byte>(data));
    write_shard(alone, {name});
    return;  // `data` is freed here
  }
  if (!pending_names_.empty() && current_bytes_ + n > max_shard_bytes_) write_current_shard();
  pending_.push_back(std::move(data));  // moving a vector keeps its buffer where it is
  current_.add(name, dtype, std::move(shape), std::span<const std::byte>(pending_.back()));
  pending_names_.push_back(std::move(name));
  current_bytes_ += n;
}

void HfCheckpointWriter::write_shard(SafetensorsWriter& writer,
                                     const std::vector<std::string>& names) {
  const std::size_t number = shards_written_ + 1;
  const std::string path = join(dir_, partial_name(number));
  writer.metadata("format", "pt");
  failed_ = true;      // until the shard is on disk
  writer.write(path);  // atomic; its Error names the path
  written_.push_back(path);
  shards_written_ = number;
  for (const std::string& name : names) shard_of_[name] = number;
  failed_ = false;
}

void HfCheckpointWriter::write_current_shard() {
  write_shard(current_, pending_names_);
  current_ = SafetensorsWriter();
  pending_ = {};  // frees the shard's buffers
  pending_names_.clear();
  current_bytes_ = 0;
}

void HfCheckpointWriter::finish(const std::map<std::string, std::string>& metadata) {
  check_usable();
  for (const auto& [key, value] : metadata) {
    if (key == "format" || key == "total_size") {
      throw Error(fmt::format("the metadata key \"{}\" is reserved: the writer sets it", key),
                  dir_, "use another key");
    }
  }

  if (shards_written_ == 0) {  // everything fits in one file: model.safetensors, no index
    current_.metadata("format", "pt");
    for (const auto& [key, value] : metadata) current_.metadata(key, value);
    const std::string path = join(dir_, kHfSingleFile);
    failed_ = true;
    current_.write(path);
    current_ = SafetensorsWriter();
    pending_ = {};
    finished_ = true;
    failed_ = false;
    return;
  }

  if (!pending_names_.empty()) write_current_shard();
  const std::size_t count = shards_written_;
  Json index;
  index["metadata"] = Json::object();
  for (const auto& [key, value] : metadata) index["metadata"][key] = value;
  index["metadata"]["total_size"] = total_bytes_;
  index["weight_map"] = Json::object();
  for (const auto& [name, number] : shard_of_) {
    index["weight_map"][name] = shard_name(number, count);  // std::map: sorted names
  }
  std::string text;
  try {
    text = index.dump(2) + "\n";  // as transformers: indent 2, sorted keys
  } catch (const Json::exception& e) {
    throw Error(fmt::format("the metadata cannot be written as JSON: {}", e.what()), dir_,
                "metadata keys and values must be UTF-8");
  }

  failed_ = true;
  for (std::size_t i = 1; i <= count; ++i) {
    const std::string to = join(dir_, shard_name(i, count));
    if (::rename(written_[i - 1].c_str(), to.c_str()) != 0) {
      const int e = errno;
      throw Error(fmt::format("cannot rename {} to its final name: {}", written_[i - 1],
                              errno_text(e)),
                  to, write_hint(e));
    }
    written_[i - 1] = to;
  }
  fsync_dir(dir_, dir_);
  write_atomically(join(dir_, kHfIndexFile), text);  // last: now the folder is complete
  finished_ = true;
  failed_ = false;
}

}  // namespace strata::models
