// Shard files: layout, ordered writes through the I/O engine, ordered verified reads.
#include "runtime/checkpoint/shard_file.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>

#include <fcntl.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "runtime/checkpoint/json_fields.h"

namespace strata::runtime::checkpoint {
namespace {

using nlohmann::json;

constexpr std::uint64_t kAlign = 4096;
constexpr const char* kMagic = "strata shard v1 header_bytes=";
constexpr std::size_t kFirstLine = 29 + 10 + 1;  // magic, 10 digits, newline

std::uint64_t round_up(std::uint64_t v) { return (v + kAlign - 1) / kAlign * kAlign; }

Error damaged(const std::string& path, const std::string& why) {
  return Error("checkpoint file " + path + " is damaged: " + why, path, "resume from an earlier checkpoint");
}

tiers::OptimState state_from_name(const std::string& s, const std::string& path) {
  for (int k = 0; k < tiers::kOptimStates; ++k) {
    if (s == optim_state_name(static_cast<tiers::OptimState>(k))) return static_cast<tiers::OptimState>(k);
  }
  throw damaged(path, "unknown state \"" + s + "\"");
}

json header_json(const ShardLayout& l) {
  json entries = json::array();
  for (const ShardEntry& e : l.entries) {
    entries.push_back({{"module", e.name}, {"index", e.module}, {"state", optim_state_name(e.state)},
                       {"numel", e.numel}, {"real_numel", e.real_numel}, {"offset", e.offset}});
  }
  return {{"shard", l.shard}, {"shards", l.shards}, {"dtype", "f32"}, {"entries", entries}};
}

}  // namespace

const char* optim_state_name(tiers::OptimState s) {
  switch (s) {
    case tiers::OptimState::master: return "master";
    case tiers::OptimState::exp_avg: return "exp_avg";
    case tiers::OptimState::exp_avg_sq: return "exp_avg_sq";
  }
  return "?";
}

std::string shard_file_name(int shard, int shards) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "shard-%05d-of-%05d.bin", shard, shards);
  return buf;
}

ShardLayout ShardLayout::make(int shard, int shards, const std::vector<ShardModule>& modules) {
  ShardLayout l;
  l.shard = shard;
  l.shards = shards;
  for (std::size_t m = 0; m < modules.size(); ++m) {
    const ShardModule& mod = modules[m];
    const std::uint64_t begin = static_cast<std::uint64_t>(shard) * mod.shard_numel;
    const std::uint64_t real = begin >= mod.numel ? 0 : std::min(mod.shard_numel, mod.numel - begin);
    for (int k = 0; k < tiers::kOptimStates; ++k) {
      l.entries.push_back({static_cast<int>(m), mod.name, static_cast<tiers::OptimState>(k), mod.shard_numel, real, 0});
    }
  }
  // The header's size depends on the offsets' digits: lay out with a guess, then grow.
  l.header_bytes = kAlign;
  for (;;) {
    std::uint64_t offset = l.header_bytes;
    for (ShardEntry& e : l.entries) {
      e.offset = offset;
      offset += round_up(e.numel * 4);
    }
    l.file_bytes = offset;
    const std::uint64_t need = round_up(kFirstLine + header_json(l).dump().size() + 1);
    if (need <= l.header_bytes) break;
    l.header_bytes = need;
  }
  return l;
}

std::string ShardLayout::header() const {
  char first[64];
  std::snprintf(first, sizeof first, "%s%010llu\n", kMagic, static_cast<unsigned long long>(header_bytes));
  std::string h = std::string(first) + header_json(*this).dump() + "\n";
  STRATA_ASSERT(h.size() <= header_bytes, "shard header larger than laid out");
  h.resize(header_bytes, ' ');
  return h;
}

ShardLayout ShardLayout::read(int fd, const std::string& path) {
  char first[kFirstLine + 1] = {};
  if (::pread(fd, first, kFirstLine, 0) != static_cast<ssize_t>(kFirstLine) ||
      std::strncmp(first, kMagic, std::strlen(kMagic)) != 0 || first[kFirstLine - 1] != '\n') {
    throw damaged(path, "it does not start with a strata shard header");
  }
  const std::uint64_t header_bytes = std::strtoull(first + std::strlen(kMagic), nullptr, 10);
  if (header_bytes < kAlign || header_bytes % kAlign != 0 || header_bytes > (64u << 20)) {
    throw damaged(path, "its header size " + std::to_string(header_bytes) + " is not valid");
  }
  std::string text(header_bytes - kFirstLine, '\0');
  if (::pread(fd, text.data(), text.size(), static_cast<off_t>(kFirstLine)) != static_cast<ssize_t>(text.size())) {
    throw damaged(path, "it is shorter than its header");
  }
  ShardLayout l;
  l.header_bytes = header_bytes;
  try {
    const json j = json::parse(text);
    const auto bad = [&](const std::string& why) { return damaged(path, why); };
    constexpr std::uint64_t kMaxInt = std::numeric_limits<int>::max();
    // No count of elements reaches 2^60 (an exabyte of fp32): nothing below overflows.
    constexpr std::uint64_t kMaxNumel = std::uint64_t{1} << 60;
    l.shards = static_cast<int>(need_uint(j, "shards", kMaxInt, bad));
    l.shard = static_cast<int>(need_uint(j, "shard", kMaxInt, bad));
    if (l.shards < 1 || l.shard >= l.shards) throw damaged(path, "its shard index is not below its shard count");
    if (j.at("dtype").get<std::string>() != "f32") throw damaged(path, "its dtype is not f32");
    std::uint64_t expect = header_bytes;
    for (const json& e : j.at("entries")) {
      ShardEntry entry;
      entry.name = e.at("module").get<std::string>();
      entry.module = static_cast<int>(need_uint(e, "index", kMaxInt, bad));
      entry.state = state_from_name(e.at("state").get<std::string>(), path);
      entry.numel = need_uint(e, "numel", kMaxNumel, bad);
      entry.real_numel = need_uint(e, "real_numel", kMaxNumel, bad);
      entry.offset = need_uint(e, "offset", kMaxNumel * 4, bad);
      if (entry.offset != expect || entry.real_numel > entry.numel) throw damaged(path, "its entries overlap");
      expect += round_up(entry.numel * 4);
      l.entries.push_back(std::move(entry));
    }
    l.file_bytes = expect;
  } catch (const json::exception& e) {
    throw damaged(path, std::string("its header is not valid JSON (") + e.what() + ")");
  }
  return l;
}

const ShardEntry& ShardLayout::entry(int module, tiers::OptimState state) const {
  const std::size_t i = static_cast<std::size_t>(module) * tiers::kOptimStates + static_cast<std::size_t>(state);
  STRATA_ASSERT(i < entries.size() && entries[i].module == module && entries[i].state == state,
                "shard layout entry out of order");
  return entries[i];
}

// ---- ShardFileWriter -----------------------------------------------------------------------

ShardFileWriter::ShardFileWriter(const std::string& path, ShardLayout layout, offload::AioEngine& io,
                                 std::size_t chunk_bytes, CrashPoints* crash)
    : path_(path), layout_(std::move(layout)), io_(io), chunk_bytes_(chunk_bytes), crash_(crash) {
  STRATA_ASSERT(chunk_bytes_ % kAlign == 0 && chunk_bytes_ > 0, "chunk must be a multiple of 4096");
  for (auto& b : buffers_) {
    b = offload::HostBuffer::allocate(std::max<std::size_t>(chunk_bytes_, layout_.header_bytes),
                                      "checkpoint write buffer");
  }
  file_ = offload::AioFile::open(path_, O_WRONLY | O_CREAT | O_TRUNC, offload::DirectIo::kAuto, 0644);
  file_id_ = io_.add_file(file_);
  const std::string header = layout_.header();
  std::memcpy(buffers_[0].data(), header.data(), header.size());
  hash_.update(header.data(), header.size());
  try {
    writes_[0] = io_.write(file_id_, 0, buffers_[0].data(), header.size());
  } catch (...) {
    io_.remove_file(file_id_);
    throw;
  }
  offset_ = header.size();
  slot_ = 1;
}

ShardFileWriter::~ShardFileWriter() {
  for (int i = 0; i < 2; ++i) {
    try {
      wait(i);
    } catch (const std::exception&) {
    }
  }
  io_.remove_file(file_id_);
}

void ShardFileWriter::wait(int slot) {
  offload::AioHandle h = writes_[slot];
  writes_[slot] = {};
  io_.wait(h);
}

float* ShardFileWriter::buffer() {
  wait(slot_);
  return reinterpret_cast<float*>(buffers_[slot_].data());
}

void ShardFileWriter::submit(std::size_t bytes, bool ends_entry) {
  STRATA_ASSERT(bytes <= chunk_bytes_, "piece larger than a chunk");
  std::size_t total = bytes;
  if (ends_entry) {
    total = static_cast<std::size_t>(round_up(bytes));
    std::memset(buffers_[slot_].data() + bytes, 0, total - bytes);
  }
  STRATA_ASSERT(total % kAlign == 0, "a piece that does not end an entry must be a multiple of 4096 bytes");
  hash_.update(buffers_[slot_].data(), total);
  writes_[slot_] = io_.write(file_id_, offset_, buffers_[slot_].data(), total);
  offset_ += total;
  slot_ ^= 1;
  if (crash_ && ++pieces_ % 2 == 1) crash_->hit("a piece of " + path_);
}

ManifestFile ShardFileWriter::finish() {
  wait(0);
  wait(1);
  STRATA_ASSERT(offset_ == layout_.file_bytes, "a shard file written short of its layout");
  file_.sync();
  if (crash_) crash_->hit("fdatasync " + path_);
  return {path_.substr(path_.find_last_of('/') + 1), offset_, hash_.digest()};
}

// ---- ShardFileReader -----------------------------------------------------------------------

ShardFileReader::ShardFileReader(const std::string& path, const ManifestFile& expected, offload::AioEngine& io,
                                 std::size_t chunk_bytes)
    : path_(path), expected_(expected), io_(io) {
  file_ = offload::AioFile::open(path_, O_RDONLY, offload::DirectIo::kAuto);
  const std::uint64_t size = file_.size_bytes();
  if (size != expected_.bytes) {
    throw Error("checkpoint file " + path_ + " has " + std::to_string(size) + " bytes; its manifest says " +
                    std::to_string(expected_.bytes),
                path_, "the file was cut short or changed: resume from an earlier checkpoint");
  }
  {
    // The header through a buffered descriptor: O_DIRECT refuses its unaligned reads.
    const int fd = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) throw system_error(errno, "open", path_);
    try {
      layout_ = ShardLayout::read(fd, path_);
    } catch (...) {
      ::close(fd);
      throw;
    }
    ::close(fd);
  }
  if (layout_.file_bytes != size) {
    throw damaged(path_, "its header describes " + std::to_string(layout_.file_bytes) + " bytes");
  }
  buffer_ = offload::HostBuffer::allocate(std::max<std::size_t>(chunk_bytes, layout_.header_bytes),
                                          "checkpoint read buffer");
  file_id_ = io_.add_file(file_);
  try {
    io_.wait(io_.read(file_id_, 0, buffer_.data(), layout_.header_bytes));
  } catch (...) {
    io_.remove_file(file_id_);
    throw;
  }
  hash_.update(buffer_.data(), layout_.header_bytes);
  offset_ = layout_.header_bytes;
}

ShardFileReader::~ShardFileReader() { io_.remove_file(file_id_); }

const float* ShardFileReader::read(std::size_t bytes, bool ends_entry) {
  const std::size_t total = ends_entry ? static_cast<std::size_t>(round_up(bytes)) : bytes;
  STRATA_ASSERT(total <= buffer_.size() && total % kAlign == 0, "bad checkpoint read size");
  io_.wait(io_.read(file_id_, offset_, buffer_.data(), total));
  hash_.update(buffer_.data(), total);
  offset_ += total;
  return reinterpret_cast<const float*>(buffer_.data());
}

void ShardFileReader::finish() {
  if (offset_ != layout_.file_bytes || hash_.digest() != expected_.xxh3) {
    throw Error("checkpoint file " + path_ + " does not match its checksum (the data was changed or damaged)", path_,
                "resume from an earlier checkpoint");
  }
}

}  // namespace strata::runtime::checkpoint
