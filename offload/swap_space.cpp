#include "offload/swap_space.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>
#include <mutex>
#include <tuple>
#include <unordered_map>
#include <utility>

#include <fmt/format.h>

#include "core/error.h"
#include "core/log.h"
#include "core/units.h"
#include "offload/extent_allocator.h"
#include "offload/probe.h"
#include "offload/swap_dir.h"

namespace strata::offload {
namespace {

constexpr std::uint64_t kBounceBytes = kDirectIoAlignment;  // one O_DIRECT block
constexpr std::size_t kBounceBlocksPerSlab = 64;
constexpr const char* kDataName = "swap.bin";

std::uint64_t ceil_div(std::uint64_t a, std::uint64_t b) { return (a + b - 1) / b; }
std::uint64_t round_up(std::uint64_t a, std::uint64_t b) { return ceil_div(a, b) * b; }

// --- bounce blocks ------------------------------------------------------------------------
// The unaligned tail of an extent travels through a 4 KiB block of our own, so that O_DIRECT
// never reads or writes past the caller's bytes. Blocks are carved from HostBuffers (slabs);
// a lease returns its block when the request that holds it (in its on_complete) is destroyed,
// which is after the I/O completed, whether or not it succeeded. Leases keep the pool alive,
// so a handle outliving the swap space is harmless.

class BouncePool {
 public:
  std::byte* take() {
    std::lock_guard<std::mutex> lock(mutex_);
    if (free_.empty()) {
      HostBuffer slab = HostBuffer::allocate(kBounceBlocksPerSlab * kBounceBytes,
                                             "swap space bounce blocks");
      for (std::size_t i = 0; i < kBounceBlocksPerSlab; ++i) {
        free_.push_back(slab.data() + i * kBounceBytes);
      }
      slabs_.push_back(std::move(slab));
      free_.reserve(slabs_.size() * kBounceBlocksPerSlab);  // give() never allocates
    }
    std::byte* block = free_.back();
    free_.pop_back();
    return block;
  }
  void give(std::byte* block) noexcept {
    std::lock_guard<std::mutex> lock(mutex_);
    free_.push_back(block);
  }

 private:
  std::mutex mutex_;
  std::vector<HostBuffer> slabs_;
  std::vector<std::byte*> free_;
};

struct BounceLease {
  std::shared_ptr<BouncePool> pool;
  std::byte* block = nullptr;
  BounceLease(std::shared_ptr<BouncePool> p, std::byte* b) : pool(std::move(p)), block(b) {}
  ~BounceLease() { pool->give(block); }
  BounceLease(const BounceLease&) = delete;
  BounceLease& operator=(const BounceLease&) = delete;
};

// --- extents and paths --------------------------------------------------------------------

struct Part {
  std::uint32_t path;         // index into the paths
  std::uint64_t start;        // first byte of the extent it holds
  std::uint64_t bytes;        // bytes of the extent it holds
  std::uint64_t alloc_bytes;  // bytes taken in the file (bytes rounded up to block_size)
  std::uint64_t file_offset;
  std::string file;           // the swap.bin path, for errors
};

struct Extent {
  ExtentKey key;
  std::uint64_t bytes = 0;
  std::uint64_t stride = 0;  // bytes per part (all but the last hold exactly this many)
  std::vector<Part> parts;

  // Taken by on_complete on engine threads; never held while calling into the engine.
  std::mutex sums_mutex;
  std::vector<std::uint64_t> sums;    // xxh3-64 per block_size block (checksum on)
  std::vector<std::uint8_t> written;  // 1 once a block was written (checksum on)

  const Part& part_of(std::uint64_t byte) const { return parts[byte / stride]; }
  std::string where() const { return "extent " + key.name(); }
};

struct PathState {
  std::string path;        // as given in the options
  swap_dir::RunDir dir;    // declared before `file`: the file closes first, then the folder goes
  AioFile file;
  FileId file_id = 0;
  bool registered = false;
  ExtentAllocator alloc;
  PathState(std::string p, std::uint64_t unit) : path(std::move(p)), alloc(unit) {}
};

struct KeyLess {
  bool operator()(const ExtentKey& a, const ExtentKey& b) const {
    return std::tie(a.module, a.kind, a.rank) < std::tie(b.module, b.kind, b.rank);
  }
};

// Free space for this user (statvfs). nullopt where the file system does not count its space
// (ramfs and other pseudo file systems report 0 blocks): growth is then simply tried.
std::optional<std::uint64_t> free_bytes_of(const std::string& dir) {
  struct statvfs sv{};
  if (::statvfs(dir.c_str(), &sv) != 0 || sv.f_blocks == 0) return std::nullopt;
  return static_cast<std::uint64_t>(sv.f_bavail) * static_cast<std::uint64_t>(sv.f_frsize);
}

Error no_space_error(const PathState& p, std::uint64_t need, std::uint64_t free) {
  return Error(fmt::format("not enough disk space for the swap file: it needs {} more ({} bytes; "
                           "{} would grow from {} to {}), {} free ({} bytes)",
                           format_bytes(need), need, kDataName, format_bytes(p.alloc.capacity()),
                           format_bytes(p.alloc.capacity() + need), format_bytes(free), free),
               p.path,
               "free space on that file system, add another swap path (nvme_path) on a disk with "
               "room, or offload fewer states; reserve (SwapOptions::reserve_bytes) finds this "
               "at start");
}

}  // namespace

std::string_view to_string(StateKind kind) {
  switch (kind) {
    case StateKind::kParam: return "param";
    case StateKind::kGrad: return "grad";
    case StateKind::kMaster: return "master";
    case StateKind::kExpAvg: return "exp_avg";
    case StateKind::kExpAvgSq: return "exp_avg_sq";
    case StateKind::kOther: return "other";
  }
  return "unknown";
}

std::string ExtentKey::name() const {
  return fmt::format("{}/{}/rank{}", module, to_string(kind), rank);
}

struct SwapSpace::Impl {
  SwapOptions options;
  AioEngine& engine;
  std::shared_ptr<BouncePool> bounce = std::make_shared<BouncePool>();

  mutable std::mutex mutex;  // guards everything below
  std::vector<std::unique_ptr<PathState>> paths;
  std::unordered_map<ExtentId, std::shared_ptr<Extent>> extents;
  // Requests started on each extent that may still run. Kept here, not in the Extent, since a
  // request's on_complete holds its Extent: handles in the Extent would make a cycle.
  std::unordered_map<ExtentId, std::vector<AioHandle>> inflight;
  std::map<ExtentKey, ExtentId, KeyLess> by_key;
  ExtentId next_id = 1;
  std::size_t next_first = 0;  // the path the next extent's first part goes to
  std::uint64_t used_bytes = 0;
  std::uint64_t peak_bytes = 0;
  std::uint64_t stale_reclaimed_bytes = 0;

  Impl(SwapOptions o, AioEngine& e) : options(std::move(o)), engine(e) {}
  ~Impl();
  void open_paths();
  void grow_file(PathState& p, std::uint64_t new_capacity);
  void shrink_file(PathState& p, std::uint64_t capacity) noexcept;
  std::shared_ptr<Extent> get(ExtentId id) const;
  void check_range(const Extent& e, const void* buffer, std::size_t bytes, std::uint64_t offset,
                   IoOp op) const;
  AioHandle start(ExtentId id, IoOp op, std::byte* buffer, std::size_t bytes,
                  std::uint64_t offset);
};

void SwapSpace::Impl::open_paths() {
  if (options.paths.empty()) {
    throw Error("no swap path given", "SwapOptions::paths",
                "give at least one folder on a fast local disk (nvme_path)");
  }
  const std::size_t block = options.block_size;
  if (block == 0 || block % kDirectIoAlignment != 0) {
    throw Error(fmt::format("swap block_size {} is not a positive multiple of {}", block,
                            kDirectIoAlignment),
                "SwapOptions::block_size (aio.block_size)", "use a power of two such as 1 MiB");
  }
  paths.reserve(options.paths.size());
  for (const std::string& path : options.paths) {
    auto p = std::make_unique<PathState>(path, block);
    p->dir = swap_dir::RunDir::create(path);  // checks: exists, is a folder, is writable
    stale_reclaimed_bytes += swap_dir::reclaim_stale(path).bytes;

    DirectIo mode = DirectIo::kOff;
    if (options.direct != DirectIo::kOff) {
      const ODirectProbe probe = probe_o_direct(p->dir.path());
      const std::string fs_type = probe.fs_type.empty() ? "unknown" : probe.fs_type;
      if (probe.works) {
        mode = DirectIo::kRequire;
      } else if (options.direct == DirectIo::kRequire) {
        throw Error(fmt::format("O_DIRECT is required for the swap space but does not work on "
                                "this file system ({}): {}", fs_type, probe.reason),
                    path,
                    "put the swap path on a file system with O_DIRECT (ext4, xfs on a local "
                    "disk), or allow buffered I/O (DirectIo::kAuto)");
      } else {
        log::warn_once("swap-no-odirect:" + path,
                       fmt::format("swap: O_DIRECT does not work in {} ({}: {}); using buffered "
                                   "I/O there, which goes through the page cache",
                                   path, fs_type, probe.reason));
      }
    }
    p->file = AioFile::open(p->dir.file(kDataName), O_RDWR | O_CREAT | O_EXCL, mode, 0600);
    SYS_CHECK(::fchmod(p->file.fd(), 0600), p->file.path());  // exact, whatever the umask
    p->file_id = engine.add_file(p->file);
    p->registered = true;
    paths.push_back(std::move(p));
  }
}

SwapSpace::Impl::~Impl() {
  std::vector<std::pair<std::string, AioHandle>> pending;
  {
    std::lock_guard<std::mutex> lock(mutex);
    for (auto& [id, handles] : inflight) {
      for (AioHandle& h : handles) pending.emplace_back(extents.at(id)->key.name(), std::move(h));
    }
    inflight.clear();
  }
  for (auto& [name, h] : pending) {
    if (engine.poll(h)) continue;  // done: its waiter (or wait_all) reports how it ended
    try {
      engine.wait(h);
    } catch (const std::exception& ex) {
      log::warn("swap: I/O on {} failed while the swap space was closing: {}", name, ex.what());
    }
  }
  for (auto& p : paths) {
    if (p->registered) engine.remove_file(p->file_id);
  }
  paths.clear();  // closes the files, removes the run folders, drops the locks
}

// Grows the file of `p` to new_capacity bytes with fallocate, or throws the ENOSPC error and
// leaves the file as it was.
void SwapSpace::Impl::grow_file(PathState& p, std::uint64_t new_capacity) {
  const std::uint64_t old_capacity = p.alloc.capacity();
  STRATA_ASSERT(new_capacity > old_capacity);
  const std::uint64_t need = new_capacity - old_capacity;
  const std::optional<std::uint64_t> free_now = free_bytes_of(p.path);
  if (free_now && need > *free_now) throw no_space_error(p, need, *free_now);
  const int fd = p.file.fd();
  if (::fallocate(fd, 0, static_cast<off_t>(old_capacity), static_cast<off_t>(need)) == 0) return;
  const int e = errno;
  if (e == EOPNOTSUPP) {
    log::warn_once("swap-no-fallocate:" + p.path,
                   fmt::format("swap: the file system of {} has no fallocate; {} grows sparse, "
                               "so running out of space shows up as a write error",
                               p.path, kDataName));
    SYS_CHECK(::ftruncate(fd, static_cast<off_t>(new_capacity)), p.file.path());
    return;
  }
  // A failed fallocate may have allocated part of the range: give it back.
  (void)::ftruncate(fd, static_cast<off_t>(old_capacity));
  if (e == ENOSPC || e == EDQUOT) throw no_space_error(p, need, free_bytes_of(p.path).value_or(0));
  throw system_error(e, "fallocate", p.file.path(), "check the swap path's file system");
}

void SwapSpace::Impl::shrink_file(PathState& p, std::uint64_t capacity) noexcept {
  p.alloc.shrink_to(capacity);
  if (::ftruncate(p.file.fd(), static_cast<off_t>(capacity)) != 0) {
    log::warn("swap: cannot shrink {} back to {} after a failed growth: {}", p.file.path(),
              format_bytes(capacity), errno_text(errno));
  }
}

std::shared_ptr<Extent> SwapSpace::Impl::get(ExtentId id) const {
  auto it = extents.find(id);
  STRATA_ASSERT(it != extents.end(), "unknown or released ExtentId");
  return it->second;
}

void SwapSpace::Impl::check_range(const Extent& e, const void* buffer, std::size_t bytes,
                                  std::uint64_t offset, IoOp op) const {
  if (offset > e.bytes || bytes > e.bytes - offset) {
    throw Error(fmt::format("{} of bytes [{}, {}) is past the end of the extent ({} bytes)",
                            to_string(op), offset, offset + bytes, e.bytes),
                e.where(), "keep reads and writes within the size given to allocate()");
  }
  const std::uint64_t block = options.block_size;
  if (offset % block != 0 || (bytes % block != 0 && offset + bytes != e.bytes)) {
    throw Error(fmt::format("{} of bytes [{}, {}) is not aligned to the swap block size {}: the "
                            "offset must be a multiple, and so must the length unless the range "
                            "ends at the extent's end ({} bytes)",
                            to_string(op), offset, offset + bytes, block, e.bytes),
                e.where(), "split transfers at block_size boundaries");
  }
  if (reinterpret_cast<std::uintptr_t>(buffer) % kDirectIoAlignment != 0) {
    throw Error(fmt::format("{} buffer {} is not aligned to {} bytes", to_string(op), buffer,
                            kDirectIoAlignment),
                e.where(), "use a HostBuffer (or memory aligned to 4 KiB) for swap transfers");
  }
}

AioHandle SwapSpace::Impl::start(ExtentId id, IoOp op, std::byte* buffer, std::size_t bytes,
                                 std::uint64_t offset) {
  std::shared_ptr<Extent> e;
  {
    std::lock_guard<std::mutex> lock(mutex);
    e = get(id);
  }
  check_range(*e, buffer, bytes, offset, op);
  if (bytes == 0) return {};

  // Segments: the part of the range in each part of the extent; the unaligned tail of the
  // extent (if the range reaches it) through a bounce block.
  std::vector<IoSegment> segments;
  std::shared_ptr<BounceLease> lease;
  std::byte* tail_user = nullptr;
  std::size_t tail_bytes = 0;
  const std::uint64_t end = offset + bytes;
  for (const Part& part : e->parts) {
    const std::uint64_t a = std::max(offset, part.start);
    const std::uint64_t b = std::min(end, part.start + part.bytes);
    if (a >= b) continue;
    const FileId file = paths[part.path]->file_id;
    const std::uint64_t file_offset = part.file_offset + (a - part.start);
    std::byte* user = buffer + (a - offset);
    std::uint64_t n = b - a;
    const std::uint64_t tail = n % kBounceBytes;
    if (b == e->bytes && tail != 0) {
      n -= tail;
      lease = std::make_shared<BounceLease>(bounce, bounce->take());
      tail_user = user + n;
      tail_bytes = static_cast<std::size_t>(tail);
      if (op == IoOp::kWrite) {
        std::memcpy(lease->block, tail_user, tail_bytes);
        std::memset(lease->block + tail_bytes, 0, kBounceBytes - tail_bytes);
      }
      segments.push_back({file, file_offset + n, lease->block, kBounceBytes});
    }
    if (n > 0) segments.push_back({file, file_offset, user, static_cast<std::size_t>(n)});
  }

  const std::uint64_t block = options.block_size;
  const std::uint64_t first_block = offset / block;
  const std::uint64_t blocks = ceil_div(bytes, block);
  std::function<void()> on_complete;
  if (op == IoOp::kWrite) {
    if (options.checksum) {
      // Hashed now, from the caller's bytes; recorded once the write has landed.
      std::vector<std::uint64_t> sums(blocks);
      for (std::uint64_t j = 0; j < blocks; ++j) {
        const std::uint64_t n = std::min<std::uint64_t>(block, bytes - j * block);
        sums[j] = XXH3_64bits(buffer + j * block, n);
      }
      on_complete = [e, lease, first_block, sums = std::move(sums)]() {
        std::lock_guard<std::mutex> lock(e->sums_mutex);
        for (std::size_t j = 0; j < sums.size(); ++j) {
          e->sums[first_block + j] = sums[j];
          e->written[first_block + j] = 1;
        }
      };
    } else if (lease) {
      on_complete = [lease]() {};  // keeps the bounce block until the request is gone
    }
  } else {
    const bool checksum = options.checksum;
    if (checksum || lease) {
      on_complete = [e, lease, tail_user, tail_bytes, buffer, bytes, first_block, blocks, block,
                     checksum]() {
        if (lease) std::memcpy(tail_user, lease->block, tail_bytes);
        if (!checksum) return;
        for (std::uint64_t j = 0; j < blocks; ++j) {
          const std::uint64_t index = first_block + j;
          const std::uint64_t n = std::min<std::uint64_t>(block, bytes - j * block);
          const std::uint64_t start = index * block;
          bool written = false;
          std::uint64_t expect = 0;
          {
            std::lock_guard<std::mutex> lock(e->sums_mutex);
            written = e->written[index] != 0;
            expect = e->sums[index];
          }
          const bool ok = written && XXH3_64bits(buffer + j * block, n) == expect;
          if (ok) continue;
          const Part& part = e->part_of(start);
          const std::uint64_t file_offset = part.file_offset + (start - part.start);
          const std::string where =
              fmt::format("{}, block {} (bytes [{}, {}) of the extent), {} at offset {}",
                          e->where(), index, start, start + n, part.file, file_offset);
          if (!written) {
            throw Error("read of a swap block that was never written", where,
                        "write an extent's blocks before reading them back");
          }
          throw Error("swap checksum mismatch: the bytes read differ from the bytes written",
                      where,
                      "the disk or file system returned corrupt data, or something else wrote "
                      "into the swap file; check the drive (dmesg, smartctl) and rerun");
        }
      };
    }
  }

  AioHandle handle = engine.submit(op, segments, std::move(on_complete));
  std::lock_guard<std::mutex> lock(mutex);
  if (extents.count(id) != 0) {  // else released meanwhile: a caller's race, asserted there
    std::vector<AioHandle>& handles = inflight[id];
    std::erase_if(handles, [&](const AioHandle& h) { return engine.poll(h); });
    handles.push_back(handle);
  }
  return handle;
}

// --- public API ---------------------------------------------------------------------------

SwapSpace::SwapSpace(SwapOptions options, AioEngine& engine)
    : impl_(std::make_unique<Impl>(std::move(options), engine)) {
  impl_->open_paths();
  if (impl_->options.reserve_bytes > 0) reserve(impl_->options.reserve_bytes);
  for (const auto& p : impl_->paths) {
    log::info("swap: {} in {} ({}), {} preallocated", kDataName, p->dir.path(),
              p->file.direct() ? "O_DIRECT" : "buffered", format_bytes(p->alloc.capacity()));
  }
}

SwapSpace::~SwapSpace() = default;

void SwapSpace::reserve(std::uint64_t bytes) {
  if (bytes == 0) return;
  Impl& m = *impl_;
  std::lock_guard<std::mutex> lock(m.mutex);
  const std::uint64_t share = round_up(ceil_div(bytes, m.paths.size()), m.options.block_size);
  std::vector<std::pair<PathState*, std::uint64_t>> grown;  // path, capacity before
  try {
    for (auto& p : m.paths) {
      const std::uint64_t tail = p->alloc.tail_free_bytes();
      if (tail >= share) continue;
      const std::uint64_t before = p->alloc.capacity();
      m.grow_file(*p, before - tail + share);
      p->alloc.grow_to(before - tail + share);
      grown.emplace_back(p.get(), before);
    }
  } catch (...) {
    for (auto& [p, before] : grown) m.shrink_file(*p, before);
    throw;
  }
}

ExtentId SwapSpace::allocate(const ExtentKey& key, std::uint64_t bytes) {
  if (bytes == 0) {
    throw Error("cannot allocate an extent of 0 bytes", "extent " + key.name(),
                "give the extent's size in bytes");
  }
  Impl& m = *impl_;
  std::lock_guard<std::mutex> lock(m.mutex);
  if (m.by_key.count(key) != 0) {
    throw Error("the extent already exists", "extent " + key.name(),
                "release() it first, or find() it and reuse it");
  }
  // k = min(paths, blocks) parts of `stride` bytes (a multiple of block_size), part i in path
  // (first + i) % paths. Rounding up may leave fewer non-empty parts than k.
  const std::uint64_t block = m.options.block_size;
  const std::uint64_t npaths = m.paths.size();
  const std::uint64_t k = std::min<std::uint64_t>(npaths, ceil_div(bytes, block));
  auto e = std::make_shared<Extent>();
  e->key = key;
  e->bytes = bytes;
  e->stride = round_up(ceil_div(bytes, k), block);
  const std::uint64_t nparts = ceil_div(bytes, e->stride);
  const std::size_t first = m.next_first;

  std::vector<std::pair<PathState*, std::uint64_t>> grown;  // path, capacity before
  try {
    for (std::uint64_t i = 0; i < nparts; ++i) {
      Part part;
      part.path = static_cast<std::uint32_t>((first + i) % npaths);
      part.start = i * e->stride;
      part.bytes = std::min(e->stride, bytes - part.start);
      part.alloc_bytes = round_up(part.bytes, block);
      PathState& p = *m.paths[part.path];
      part.file = p.file.path();
      part.file_offset = p.alloc.allocate(part.alloc_bytes, [&](std::uint64_t capacity) {
        const std::uint64_t before = p.alloc.capacity();
        m.grow_file(p, capacity);
        grown.emplace_back(&p, before);
      });
      e->parts.push_back(std::move(part));
    }
  } catch (...) {
    for (const Part& part : e->parts) {
      m.paths[part.path]->alloc.release(part.file_offset, part.alloc_bytes);
    }
    for (auto& [p, before] : grown) m.shrink_file(*p, before);
    throw;
  }

  if (m.options.checksum) {
    const std::uint64_t blocks = ceil_div(bytes, block);
    e->sums.assign(blocks, 0);
    e->written.assign(blocks, 0);
  }
  m.next_first = (first + 1) % npaths;
  for (const Part& part : e->parts) m.used_bytes += part.alloc_bytes;
  m.peak_bytes = std::max(m.peak_bytes, m.used_bytes);
  const ExtentId id = m.next_id++;
  m.by_key.emplace(key, id);
  m.extents.emplace(id, std::move(e));
  return id;
}

std::optional<ExtentId> SwapSpace::find(const ExtentKey& key) const {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  auto it = impl_->by_key.find(key);
  if (it == impl_->by_key.end()) return std::nullopt;
  return it->second;
}

void SwapSpace::release(ExtentId extent) {
  Impl& m = *impl_;
  std::lock_guard<std::mutex> lock(m.mutex);
  std::shared_ptr<Extent> e = m.get(extent);
  if (auto it = m.inflight.find(extent); it != m.inflight.end()) {
    for (const AioHandle& h : it->second) {
      STRATA_ASSERT(m.engine.poll(h), "release() of a swap extent with I/O in flight");
    }
    m.inflight.erase(it);
  }
  for (const Part& part : e->parts) {
    m.paths[part.path]->alloc.release(part.file_offset, part.alloc_bytes);
    m.used_bytes -= part.alloc_bytes;
  }
  m.by_key.erase(e->key);
  m.extents.erase(extent);
}

std::uint64_t SwapSpace::extent_bytes(ExtentId extent) const {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  return impl_->get(extent)->bytes;
}

const ExtentKey& SwapSpace::extent_key(ExtentId extent) const {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  return impl_->get(extent)->key;  // lives until release()
}

AioHandle SwapSpace::write(ExtentId extent, const void* buffer, std::size_t bytes,
                           std::uint64_t offset) {
  // The engine's segments are not const (they also carry reads); a write only reads them.
  return impl_->start(extent, IoOp::kWrite, static_cast<std::byte*>(const_cast<void*>(buffer)),
                      bytes, offset);
}

AioHandle SwapSpace::read(ExtentId extent, void* buffer, std::size_t bytes, std::uint64_t offset) {
  return impl_->start(extent, IoOp::kRead, static_cast<std::byte*>(buffer), bytes, offset);
}

AioEngine& SwapSpace::engine() const { return impl_->engine; }

const SwapOptions& SwapSpace::options() const { return impl_->options; }

SwapStats SwapSpace::stats() const {
  const Impl& m = *impl_;
  std::lock_guard<std::mutex> lock(m.mutex);
  SwapStats s;
  for (const auto& p : m.paths) {
    SwapPathStats ps;
    ps.path = p->path;
    ps.run_dir = p->dir.path();
    ps.direct = p->file.direct();
    ps.file_bytes = p->alloc.capacity();
    ps.used_bytes = p->alloc.used_bytes();
    ps.free_bytes = free_bytes_of(p->path).value_or(0);
    s.file_bytes += ps.file_bytes;
    s.paths.push_back(std::move(ps));
  }
  s.extents = m.extents.size();
  s.used_bytes = m.used_bytes;
  s.peak_bytes = m.peak_bytes;
  s.stale_reclaimed_bytes = m.stale_reclaimed_bytes;
  return s;
}

}  // namespace strata::offload
