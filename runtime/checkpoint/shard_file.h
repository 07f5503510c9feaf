#pragma once
// A shard file: one rank's (one shard's) optimizer states, written and read in file order
// through the I/O engine (O_DIRECT where the file system allows it).
//
// Layout of shard-RRRRR-of-WWWWW.bin:
//   "strata shard v1 header_bytes=NNNNNNNNNN\n" then a JSON header, padded with spaces to a
//   multiple of 4096 bytes (header_bytes counts everything before the first entry):
//     {"shard": r, "shards": W, "dtype": "f32",
//      "entries": [{"module": "h.0", "index": 3, "state": "master", "numel": 1024,
//                   "real_numel": 1000, "shard_numel": 1024, "offset": 4096}, ...]}
//   then the entries, each at a 4096-aligned offset: per module in model order, its fp32
//   master, exp_avg and exp_avg_sq shard (shard_numel values), zero-padded to 4096 bytes.
// `real_numel` is the part of the shard that is the module's (the rest is ZeRO padding); a
// module's values are the concatenation of shard 0..W-1, cut at its numel.
//
// The compute-dtype parameters are not stored: the engine makes them from the master by the
// same cast an update uses, so they are a function of it (tested: resume is bit-exact).
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "offload/aio_engine.h"
#include "offload/aio_file.h"
#include "offload/host_buffer.h"
#include "runtime/checkpoint/crash_points.h"
#include "runtime/checkpoint/manifest.h"
#include "runtime/tiers/tier.h"  // OptimState

namespace strata::runtime::checkpoint {

const char* optim_state_name(tiers::OptimState s);  // "master" | "exp_avg" | "exp_avg_sq"

struct ShardModule {
  std::string name;
  std::uint64_t numel = 0;        // the module's elements
  std::uint64_t shard_numel = 0;  // elements per shard (padded)
};

struct ShardEntry {
  int module = 0;
  std::string name;
  tiers::OptimState state = tiers::OptimState::master;
  std::uint64_t numel = 0;       // shard_numel
  std::uint64_t real_numel = 0;  // of which the module's own
  std::uint64_t offset = 0;      // bytes from the file's start (4096-aligned)
};

struct ShardLayout {
  int shard = 0;
  int shards = 1;
  std::uint64_t header_bytes = 0;
  std::uint64_t file_bytes = 0;
  std::vector<ShardEntry> entries;  // in file order

  static ShardLayout make(int shard, int shards, const std::vector<ShardModule>& modules);
  std::string header() const;  // header_bytes bytes
  // Reads and checks the header of an open file; throws strata::Error naming `path`.
  static ShardLayout read(int fd, const std::string& path);
  const ShardEntry& entry(int module, tiers::OptimState state) const;
};

std::string shard_file_name(int shard, int shards);  // "shard-00000-of-00002.bin"

// Writes a shard file in order: the header, then each entry's values through buffer() /
// submit(). Two buffers: one fills while the other is written.
class ShardFileWriter {
 public:
  // chunk_bytes: the size of one piece (a multiple of 4096).
  ShardFileWriter(const std::string& path, ShardLayout layout, offload::AioEngine& io, std::size_t chunk_bytes,
                  CrashPoints* crash);
  ~ShardFileWriter();  // waits for writes in flight (errors dropped: call finish())
  ShardFileWriter(const ShardFileWriter&) = delete;
  ShardFileWriter& operator=(const ShardFileWriter&) = delete;

  std::size_t chunk_bytes() const { return chunk_bytes_; }
  // A buffer of chunk_bytes() to fill with the next piece (waits until its last write is done).
  float* buffer();
  // Writes the first `bytes` of buffer() as the next piece of the current entry; `ends_entry`
  // pads it with zeros to the entry's 4096-aligned end.
  void submit(std::size_t bytes, bool ends_entry);
  // Waits for every write, fdatasyncs; returns the file's manifest entry.
  ManifestFile finish();

 private:
  void wait(int slot);
  std::string path_;
  ShardLayout layout_;
  offload::AioEngine& io_;
  std::size_t chunk_bytes_;
  CrashPoints* crash_;
  offload::AioFile file_;
  offload::FileId file_id_ = 0;
  offload::HostBuffer buffers_[2];
  offload::AioHandle writes_[2];
  int slot_ = 0;
  std::uint64_t offset_ = 0;
  std::uint64_t pieces_ = 0;
  Xxh3Stream hash_;
};

// Reads a shard file in order, checking its size and, at finish(), its checksum.
class ShardFileReader {
 public:
  ShardFileReader(const std::string& path, const ManifestFile& expected, offload::AioEngine& io,
                  std::size_t chunk_bytes);
  ~ShardFileReader();
  ShardFileReader(const ShardFileReader&) = delete;
  ShardFileReader& operator=(const ShardFileReader&) = delete;

  const ShardLayout& layout() const { return layout_; }
  // The next `bytes` (<= chunk_bytes) of the current entry; `ends_entry` skips its padding.
  const float* read(std::size_t bytes, bool ends_entry);
  // Throws strata::Error naming the file when its checksum differs from the manifest's.
  void finish();

 private:
  std::string path_;
  ManifestFile expected_;
  offload::AioEngine& io_;
  offload::AioFile file_;
  offload::FileId file_id_ = 0;
  ShardLayout layout_;
  offload::HostBuffer buffer_;
  std::uint64_t offset_ = 0;
  Xxh3Stream hash_;
};

}  // namespace strata::runtime::checkpoint
