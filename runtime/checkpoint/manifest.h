#pragma once
// manifest.json: the list of a checkpoint's files with their sizes and xxh3-64 checksums, and
// a checksum of the manifest itself. It is the last file written into a checkpoint; resume
// reads it first and checks every file against it.
//
//   {"format": "strata.checkpoint", "version": 1, "step": 120, "shards": 2,
//    "files": [{"name": "meta.json", "bytes": 2311, "xxh3": "9c1f0e4a5b6d7e8f"},
//              {"name": "shard-00000-of-00002.bin", "bytes": 40960, "xxh3": "..."}, ...],
//    "checksum": "<xxh3 of the object above without this key, as dump() writes it>"}
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace strata::runtime::checkpoint {

struct ManifestFile {
  std::string name;         // relative to the checkpoint folder
  std::uint64_t bytes = 0;
  std::uint64_t xxh3 = 0;
};

struct Manifest {
  std::uint64_t step = 0;
  int shards = 1;
  std::vector<ManifestFile> files;

  std::string to_json() const;
  // Parses and checks the manifest's own checksum; throws strata::Error naming `path` when the
  // text is not a manifest or was changed.
  static Manifest parse(const std::string& text, const std::string& path);
  const ManifestFile& file(const std::string& name, const std::string& path) const;  // throws when absent
};

// Streaming xxh3-64 of bytes in order (a thin RAII wrapper of XXH3_state_t).
class Xxh3Stream {
 public:
  Xxh3Stream();
  ~Xxh3Stream();
  Xxh3Stream(const Xxh3Stream&) = delete;
  Xxh3Stream& operator=(const Xxh3Stream&) = delete;
  void update(const void* data, std::size_t bytes);
  std::uint64_t digest() const;

 private:
  void* state_;
};

std::uint64_t xxh3_of(const std::string& bytes);
std::string xxh3_hex(std::uint64_t value);  // 16 lower-case hex digits

// Checks that `path` has the size and checksum its manifest entry says (reads it whole);
// throws strata::Error naming the file otherwise.
void verify_file(const std::string& path, const ManifestFile& expected);

}  // namespace strata::runtime::checkpoint
