// Opening a checkpoint, loading a rank's shard into the engine, reading the masters for export.
#include "runtime/checkpoint/checkpoint_loader.h"

#include <filesystem>
#include <utility>
#include <vector>

#include <fcntl.h>
#include <unistd.h>

#include "core/error.h"
#include "runtime/checkpoint/checkpoint_dir.h"
#include "runtime/checkpoint/shard_file.h"

namespace strata::runtime::checkpoint {
namespace {


Error foreign(const std::string& path, const std::string& why) {
  return Error("checkpoint file " + path + " does not fit this run: " + why, path,
               "the file is damaged or comes from another checkpoint; resume from an earlier checkpoint");
}

void check_layout(const ShardLayout& l, const std::string& path, int shard, int shards,
                  const std::vector<std::string>& names, const std::vector<std::uint64_t>& shard_numels) {
  if (l.shard != shard || l.shards != shards) {
    throw foreign(path, "it holds shard " + std::to_string(l.shard) + " of " + std::to_string(l.shards) +
                            ", expected shard " + std::to_string(shard) + " of " + std::to_string(shards));
  }
  if (l.entries.size() != names.size() * tiers::kOptimStates) {
    throw foreign(path, std::to_string(l.entries.size() / tiers::kOptimStates) + " modules, expected " +
                            std::to_string(names.size()));
  }
  for (std::size_t m = 0; m < names.size(); ++m) {
    for (int k = 0; k < tiers::kOptimStates; ++k) {
      const ShardEntry& e = l.entries[m * tiers::kOptimStates + static_cast<std::size_t>(k)];
      if (e.module != static_cast<int>(m) || e.state != static_cast<tiers::OptimState>(k) || e.name != names[m] ||
          (!shard_numels.empty() && e.numel != shard_numels[m])) {
        throw foreign(path, "its entry " + std::to_string(m * tiers::kOptimStates + static_cast<std::size_t>(k)) +
                                " is " + e.name + "/" + optim_state_name(e.state) + " of " + std::to_string(e.numel) +
                                " elements, expected " + names[m] + "/" +
                                optim_state_name(static_cast<tiers::OptimState>(k)));
      }
    }
  }
}

}  // namespace

CheckpointFiles open_checkpoint(const std::string& path) {
  CheckpointFiles c;
  c.path = resolve_checkpoint(path);
  const std::string manifest_path = c.path + "/" + kManifestFile;
  c.manifest = Manifest::parse(read_text_file(manifest_path), manifest_path);
  for (const ManifestFile& f : c.manifest.files) {
    const std::string p = c.path + "/" + f.name;
    std::error_code ec;
    const std::uintmax_t size = std::filesystem::file_size(p, ec);
    if (ec) {
      throw Error("checkpoint file " + p + " is missing (" + ec.message() + ")", p,
                  "the checkpoint is incomplete: resume from an earlier checkpoint");
    }
    if (size != f.bytes) {
      throw Error("checkpoint file " + p + " has " + std::to_string(size) + " bytes; its manifest says " +
                      std::to_string(f.bytes),
                  p, "the file was cut short or changed: resume from an earlier checkpoint");
    }
  }
  const std::string meta_path = c.path + "/" + kMetaFile;
  verify_file(meta_path, c.manifest.file(kMetaFile, manifest_path));
  c.meta_json = read_text_file(meta_path);
  return c;
}

void load_states(const CheckpointFiles& c, zero::ZeroEngine& engine, offload::AioEngine& io) {
  if (c.manifest.shards != engine.shards()) {
    throw Error("the checkpoint " + c.path + " has " + std::to_string(c.manifest.shards) +
                    " shard files; this run has " + std::to_string(engine.shards()),
                c.path, "resume with the world size it was saved with");
  }
  const std::string name = shard_file_name(engine.shard_index(), engine.shards());
  const std::string path = c.path + "/" + name;
  const std::size_t chunk = engine.state_chunk_numel();
  ShardFileReader reader(path, c.manifest.file(name, c.path + "/" + kManifestFile), io, chunk * 4);
  std::vector<std::string> names;
  std::vector<std::uint64_t> shard_numels;
  for (int m = 0; m < engine.module_count(); ++m) {
    names.push_back(engine.module_name(m));
    shard_numels.push_back(engine.shard_numel(m));
  }
  check_layout(reader.layout(), path, engine.shard_index(), engine.shards(), names, shard_numels);
  for (int m = 0; m < engine.module_count(); ++m) {
    const std::size_t numel = engine.shard_numel(m);
    for (int k = 0; k < tiers::kOptimStates; ++k) {
      for (std::size_t off = 0; off < numel; off += chunk) {
        const std::size_t n = std::min(chunk, numel - off);
        const float* values = reader.read(n * 4, off + n == numel);
        engine.write_state(m, static_cast<tiers::OptimState>(k), off, n, values);
      }
    }
  }
  reader.finish();
}

struct CheckpointStates::Shard {
  std::string path;
  int fd = -1;  // owned
  ShardLayout layout;
  Shard() = default;
  Shard(Shard&& o) noexcept : path(std::move(o.path)), fd(std::exchange(o.fd, -1)), layout(std::move(o.layout)) {}
  Shard& operator=(Shard&&) = delete;
  ~Shard() {
    if (fd >= 0) ::close(fd);
  }
};

CheckpointStates::CheckpointStates(const CheckpointFiles& c, tiers::OptimState state) : state_(state) {
  const std::string manifest_path = c.path + "/" + kManifestFile;
  const int shards = c.manifest.shards;
  for (int s = 0; s < shards; ++s) {
    Shard f;
    f.path = c.path + "/" + shard_file_name(s, shards);
    verify_file(f.path, c.manifest.file(shard_file_name(s, shards), manifest_path));
    f.fd = ::open(f.path.c_str(), O_RDONLY | O_CLOEXEC);
    if (f.fd < 0) throw system_error(errno, "open", f.path);
    f.layout = ShardLayout::read(f.fd, f.path);
    shards_.push_back(std::move(f));
  }
  for (std::size_t i = 0; i < shards_[0].layout.entries.size(); i += tiers::kOptimStates) {
    names_.push_back(shards_[0].layout.entries[i].name);
  }
  for (int s = 0; s < shards; ++s) {
    const Shard& f = shards_[static_cast<std::size_t>(s)];
    check_layout(f.layout, f.path, s, shards, names_, {});
  }
}

CheckpointStates::~CheckpointStates() = default;

std::size_t CheckpointStates::module_numel(int module) const {
  std::size_t numel = 0;
  for (const Shard& f : shards_) numel += f.layout.entry(module, state_).real_numel;
  return numel;
}

const float* CheckpointStates::read(int module) {
  values_.assign(module_numel(module), 0.0f);
  std::size_t at = 0;
  for (const Shard& f : shards_) {
    const ShardEntry& e = f.layout.entry(module, state_);
    const std::size_t bytes = e.real_numel * 4;
    if (bytes == 0) continue;
    auto* dst = reinterpret_cast<char*>(values_.data() + at);
    for (std::size_t done = 0; done < bytes;) {  // one pread moves at most ~2 GiB
      const ssize_t n = ::pread(f.fd, dst + done, bytes - done, static_cast<off_t>(e.offset + done));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) throw Error("cannot read " + e.name + " from " + f.path, f.path, "the file is damaged");
      done += static_cast<std::size_t>(n);
    }
    at += e.real_numel;
  }
  return values_.data();
}

}  // namespace strata::runtime::checkpoint
