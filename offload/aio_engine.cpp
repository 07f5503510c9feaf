// The engine's facade: option checks, the backend choice, the file table, the registry of
// pool buffers, cutting requests into pieces, and the handle operations (wait, poll, wait_all).
// The transfers themselves run in a backend (aio_backend.h); every completion goes through
// on_piece_result (aio_request.h).
#include "offload/aio_engine.h"

#include <algorithm>
#include <cstdint>
#include <map>
#include <mutex>
#include <shared_mutex>
#include <vector>

#include <fmt/format.h>

#include "core/error.h"
#include "core/log.h"
#include "core/units.h"
#include "offload/aio_backend.h"
#include "offload/aio_request.h"
#include "offload/probe.h"

namespace strata::offload {

std::string_view to_string(IoOp op) { return op == IoOp::kRead ? "read" : "write"; }

namespace {

// A piece's length must fit the u32 length of an SQE and the int result of a CQE.

void validate(const AioOptions& o) {
  const char* hint = "fix the value in the config (see docs/config.md)";
  if (o.block_size == 0 || o.block_size % kDirectIoAlignment != 0 || o.block_size > kMaxBlockBytes) {
    throw Error(fmt::format("aio.block_size must be a positive multiple of {} bytes, at most {}; "
                            "got {}", kDirectIoAlignment, format_bytes(kMaxBlockBytes), o.block_size),
                "aio.block_size", hint);
  }
  if (o.queue_depth == 0 || o.queue_depth > 4096) {
    throw Error(fmt::format("aio.queue_depth must be between 1 and 4096; got {}", o.queue_depth),
                "aio.queue_depth", hint);
  }
  if (o.parallelism == 0 || o.parallelism > 64) {
    throw Error(fmt::format("aio.intra_op_parallelism must be between 1 and 64; got {}",
                            o.parallelism),
                "aio.intra_op_parallelism", hint);
  }
}

// The probe sets up rings and runs I/O: once per process is enough.
const IoUringProbe& cached_probe() {
  static const IoUringProbe probe = probe_io_uring();
  return probe;
}

std::unique_ptr<AioBackendImpl> choose_backend(const AioOptions& o, EngineShared& shared) {
  if (o.backend == AioBackend::kThreads) return make_thread_backend(o, shared);
  const IoUringProbe& probe = cached_probe();
  if (o.backend == AioBackend::kIoUring) {
    if (!probe.works) {
      throw Error("io_uring is unavailable: " + probe.reason, "strata.io_backend",
                  "use strata.io_backend 'auto' or 'threads' (pread/pwrite), or allow io_uring here "
                  "(kernel.io_uring_disabled=0, a seccomp profile that permits it)");
    }
    return make_uring_backend(o, shared);
  }
  if (!probe.works) {
    log::warn_once("aio.no_io_uring",
                   "io_uring is unavailable (" + probe.reason +
                       "); the I/O engine uses a pread/pwrite thread pool instead");
    return make_thread_backend(o, shared);
  }
  try {
    return make_uring_backend(o, shared);
  } catch (const Error& e) {
    log::warn_once("aio.uring_setup_failed",
                   std::string("cannot set up the io_uring engine (") + e.what() +
                       "); the I/O engine uses a pread/pwrite thread pool instead");
    return make_thread_backend(o, shared);
  }
}

}  // namespace

// A pool buffer known to the rings: its slot is reserved when the pool makes it, and it is
// registered with the rings at its first request (`posted`). Registering pins every page of the
// buffer in the kernel; done eagerly, it pinned every pinned-tier state (tens of GiB that never
// meet a file, where only NVMe staging does) while the run was starting.
struct RegisteredBuffer {
  std::size_t capacity;
  unsigned slot;
  bool posted = false;
};

struct AioEngine::Impl final : BufferObserver {
  Impl(AioOptions o, HostPool* p) : options(std::move(o)), pool(p) {
    shared.hook = options.completion_hook;
    backend = choose_backend(options, shared);
    if (pool != nullptr) pool->add_observer(this);  // learns the pool's live buffers
  }

  ~Impl() override {
    {
      std::unique_lock lock(shared.mutex);
      shared.idle.wait(lock, [&] { return shared.in_flight == 0; });
      for (const auto& r : shared.failed) {
        if (r->reported.load()) continue;
        try {
          std::rethrow_exception(r->error);
        } catch (const std::exception& e) {
          log::error("an I/O request failed and nobody waited for it: {}", e.what());
        } catch (...) {
          log::error("an I/O request failed and nobody waited for it (unknown exception)");
        }
      }
    }
    if (pool != nullptr) pool->remove_observer(this);
    backend.reset();  // joins the engine threads before `shared` goes
  }

  // --- BufferObserver: pool buffers <-> registered buffer slots -----------------------------
  void on_allocate(std::byte* data, std::size_t capacity) override {
    if (capacity > kMaxRegisteredBufferBytes) return;  // the kernel's limit per buffer
    std::lock_guard lock(buffers_mutex);
    unsigned slot;
    if (!free_slots.empty()) {
      slot = free_slots.back();
      free_slots.pop_back();
    } else if (next_slot < kRegisteredBufferSlots) {
      slot = next_slot++;
    } else {
      log::warn_once("aio.buffer_slots", fmt::format("more than {} pool buffers: the rest use "
                                                     "plain read / write", kRegisteredBufferSlots));
      return;
    }
    buffers.emplace(reinterpret_cast<std::uintptr_t>(data), RegisteredBuffer{capacity, slot});
  }

  void on_release(std::byte* data, std::size_t) noexcept override {
    unsigned slot;
    bool posted;
    {
      std::lock_guard lock(buffers_mutex);
      auto it = buffers.find(reinterpret_cast<std::uintptr_t>(data));
      if (it == buffers.end()) return;  // never given a slot
      slot = it->second.slot;
      posted = it->second.posted;
      buffers.erase(it);
    }
    if (posted) backend->unregister_buffer(slot);  // blocks until no ring references the memory
    std::lock_guard lock(buffers_mutex);
    free_slots.push_back(slot);
  }

  // The registered slot holding [p, p + bytes), or -1.
  int buffer_slot(const std::byte* p, std::size_t bytes) {
    const auto addr = reinterpret_cast<std::uintptr_t>(p);
    std::lock_guard lock(buffers_mutex);
    auto it = buffers.upper_bound(addr);
    if (it == buffers.begin()) return -1;
    --it;
    if (addr + bytes > it->first + it->second.capacity) return -1;
    if (!it->second.posted) {
      // Posted before the caller posts its pieces: a lane applies its commands before the
      // pieces queued after them, so no piece uses the slot before its ring has it.
      backend->register_buffer(it->second.slot, reinterpret_cast<std::byte*>(it->first), it->second.capacity);
      it->second.posted = true;
    }
    return static_cast<int>(it->second.slot);
  }

  FileEntry* file_entry(FileId id) {
    return id < files.size() ? files[id].get() : nullptr;
  }

  AioOptions options;
  HostPool* pool;
  EngineShared shared;
  std::unique_ptr<AioBackendImpl> backend;  // after `shared`: destroyed first
  std::atomic<unsigned> next_lane{0};

  std::shared_mutex files_mutex;  // submit() shares it; add/remove_file take it alone
  std::vector<std::unique_ptr<FileEntry>> files;  // index = FileId; null = free
  std::vector<FileId> free_file_ids;

  std::mutex buffers_mutex;
  std::map<std::uintptr_t, RegisteredBuffer> buffers;  // by start address
  std::vector<unsigned> free_slots;
  unsigned next_slot = 0;
};

AioEngine::AioEngine(AioOptions options, HostPool* pool) {
  validate(options);
  impl_ = std::make_unique<Impl>(std::move(options), pool);
  log::debug("aio engine: {}", impl_->backend->describe());
}

AioEngine::~AioEngine() = default;

std::string_view AioEngine::backend_name() const { return impl_->backend->name(); }
std::string AioEngine::describe() const { return impl_->backend->describe(); }
const AioOptions& AioEngine::options() const { return impl_->options; }

FileId AioEngine::add_file(const AioFile& file) {
  STRATA_ASSERT(file.fd() >= 0, "add_file() of a closed AioFile");
  FileId id;
  {
    std::unique_lock lock(impl_->files_mutex);
    if (!impl_->free_file_ids.empty()) {
      id = impl_->free_file_ids.back();
      impl_->free_file_ids.pop_back();
    } else {
      id = static_cast<FileId>(impl_->files.size());
      impl_->files.emplace_back();
    }
    auto entry = std::make_unique<FileEntry>();
    entry->fd = file.fd();
    entry->path = file.path();
    entry->direct = file.direct();
    impl_->files[id] = std::move(entry);
  }
  // Applied by every ring before the id is returned (the backend waits, without the files lock:
  // a ring's completion callback may submit, which takes it): every later piece of this file
  // finds it registered, and no ring registers the descriptor after the caller has closed it (a
  // ring with no pieces of this file would otherwise apply the registration whenever it next
  // woke, and fail with EBADF).
  if (id < kRegisteredFileSlots) impl_->backend->register_file(id, file.fd());
  return id;
}

void AioEngine::remove_file(FileId id) {
  std::unique_lock lock(impl_->files_mutex);
  FileEntry* f = impl_->file_entry(id);
  STRATA_ASSERT(f != nullptr, "remove_file() of an unknown FileId");
  STRATA_ASSERT(f->in_flight.load(std::memory_order_acquire) == 0,
                "remove_file() while requests on the file are in flight");
  if (id < kRegisteredFileSlots) impl_->backend->unregister_file(id);
  impl_->files[id].reset();
  impl_->free_file_ids.push_back(id);
}

AioHandle AioEngine::submit(IoOp op, std::span<const IoSegment> segments,
                            std::function<void()> on_complete) {
  if (segments.empty()) {
    throw Error("an I/O request needs at least one segment", "AioEngine::submit");
  }
  const std::size_t block = impl_->options.block_size;
  const unsigned lanes = impl_->options.parallelism;
  auto req = std::make_shared<AioRequest>();
  req->op = op;
  req->on_complete = std::move(on_complete);

  std::size_t count = 0;
  for (const IoSegment& s : segments) count += (s.bytes + block - 1) / block;
  req->pieces.reserve(count);  // Piece* handed to the backend must stay put
  req->files.reserve(segments.size());
  std::vector<std::vector<Piece*>> by_lane(lanes);
  {
    std::shared_lock lock(impl_->files_mutex);
    // Check every segment before touching any counter, so that a throw leaves nothing behind.
    for (const IoSegment& s : segments) {
      FileEntry* f = impl_->file_entry(s.file);
      if (f == nullptr) {
        throw Error(fmt::format("{} on an unknown file id {}", to_string(op), s.file),
                    "AioEngine::submit", "add the file with add_file() first");
      }
      const auto addr = reinterpret_cast<std::uintptr_t>(s.buffer);
      if (s.bytes > 0 && s.buffer == nullptr) {
        throw Error(fmt::format("{} of {} bytes with a null buffer", to_string(op), s.bytes),
                    f->path);
      }
      if (f->direct && (addr % kDirectIoAlignment != 0 || s.offset % kDirectIoAlignment != 0 ||
                        s.bytes % kDirectIoAlignment != 0)) {
        throw Error(fmt::format("misaligned O_DIRECT {}: buffer {:#x}, offset {}, length {}; "
                                "each must be a multiple of {}",
                                to_string(op), addr, s.offset, s.bytes, kDirectIoAlignment),
                    f->path,
                    "use HostBuffer memory and 4 KiB-aligned offsets and lengths, or open the "
                    "file without O_DIRECT");
      }
    }
    // Pieces of a segment are dealt to the lanes as contiguous slices; the first lane rotates
    // per request so that small requests spread over every ring.
    const unsigned base = impl_->next_lane.fetch_add(1, std::memory_order_relaxed);
    for (const IoSegment& s : segments) {
      FileEntry* f = impl_->file_entry(s.file);
      f->in_flight.fetch_add(1, std::memory_order_relaxed);
      req->files.push_back(f);
      req->bytes += s.bytes;
      const std::size_t n = (s.bytes + block - 1) / block;
      const int slot = s.bytes > 0 ? impl_->buffer_slot(s.buffer, s.bytes) : -1;
      for (std::size_t i = 0; i < n; ++i) {
        Piece& p = req->pieces.emplace_back();
        p.request = req.get();
        p.file = f;
        p.file_id = s.file;
        p.offset = s.offset + i * block;
        p.buffer = s.buffer + i * block;
        p.bytes = std::min(block, s.bytes - i * block);
        p.buffer_slot = slot;
        const auto lane = static_cast<unsigned>((base + i * lanes / n) % lanes);
        by_lane[lane].push_back(&p);
      }
    }
  }

  AioCounters& c = impl_->shared.counters;
  c.requests.fetch_add(1, std::memory_order_relaxed);
  c.pieces.fetch_add(req->pieces.size(), std::memory_order_relaxed);
  req->remaining.store(req->pieces.size(), std::memory_order_relaxed);
  if (req->pieces.empty()) {
    // Nothing to transfer (every segment is empty): done at once, on this thread.
    for (FileEntry* f : req->files) f->in_flight.fetch_sub(1, std::memory_order_release);
    if (req->on_complete) {
      try {
        req->on_complete();
      } catch (...) {
        req->fail(std::current_exception());
        // As finish_piece does: kept for wait_all() (and the destructor's log) in case the
        // handle is dropped.
        std::lock_guard lock(impl_->shared.mutex);
        impl_->shared.failed.push_back(req);
      }
    }
    req->done.store(true, std::memory_order_release);
    return AioHandle(std::move(req));
  }
  req->self = req;  // Note [Request lifetime]
  impl_->shared.request_started(op);
  for (unsigned lane = 0; lane < lanes; ++lane) {
    if (!by_lane[lane].empty()) impl_->backend->submit(lane, by_lane[lane]);
  }
  return AioHandle(std::move(req));
}

AioHandle AioEngine::read(FileId file, std::uint64_t offset, void* buffer, std::size_t bytes) {
  const IoSegment s{file, offset, static_cast<std::byte*>(buffer), bytes};
  return submit(IoOp::kRead, {&s, 1});
}

AioHandle AioEngine::write(FileId file, std::uint64_t offset, const void* buffer,
                           std::size_t bytes) {
  // The engine only reads from a write's buffer; IoSegment has one pointer type for both.
  const IoSegment s{file, offset, static_cast<std::byte*>(const_cast<void*>(buffer)), bytes};
  return submit(IoOp::kWrite, {&s, 1});
}

void AioEngine::wait(const AioHandle& handle) {
  if (!handle) return;
  AioRequest& req = *handle.request_;
  while (!req.done.load(std::memory_order_acquire)) req.done.wait(false, std::memory_order_acquire);
  if (!req.failed.load(std::memory_order_acquire)) return;
  std::exception_ptr error;
  {
    std::lock_guard lock(req.error_mutex);
    error = req.error;
  }
  req.reported.store(true, std::memory_order_release);
  std::rethrow_exception(error);
}

bool AioEngine::poll(const AioHandle& handle) const {
  return !handle || handle.request_->done.load(std::memory_order_acquire);
}

void AioEngine::wait_all() {
  std::shared_ptr<AioRequest> first;
  {
    std::unique_lock lock(impl_->shared.mutex);
    impl_->shared.idle.wait(lock, [&] { return impl_->shared.in_flight == 0; });
    auto& failed = impl_->shared.failed;
    for (auto& r : failed) {
      if (!r->reported.exchange(true)) {
        first = r;
        break;
      }
    }
    // Reported errors need not be kept; unreported ones after `first` wait for the next call.
    std::erase_if(failed, [](const auto& r) { return r->reported.load(); });
  }
  if (!first) return;
  std::exception_ptr error;
  {
    std::lock_guard lock(first->error_mutex);
    error = first->error;
  }
  std::rethrow_exception(error);
}

void AioEngine::set_emulated_write_bytes_per_s(std::uint64_t bytes_per_s) {
  impl_->shared.emulated_write_bytes_per_s.store(bytes_per_s, std::memory_order_relaxed);
}

void AioEngine::set_activity_hook(IoActivityHook hook) {
  std::lock_guard lock(impl_->shared.mutex);
  // A stretch under way is reported from now on, not from its start (Note [Disk activity]).
  for (EngineShared::Activity& a : impl_->shared.activity) a.since_ns = EngineShared::now_ns();
  impl_->shared.activity_hook = std::move(hook);
}

AioStats AioEngine::stats() const {
  const AioCounters& c = impl_->shared.counters;
  AioStats s;
  s.bytes_read = c.bytes_read.load(std::memory_order_relaxed);
  s.bytes_written = c.bytes_written.load(std::memory_order_relaxed);
  s.requests = c.requests.load(std::memory_order_relaxed);
  s.pieces = c.pieces.load(std::memory_order_relaxed);
  s.short_transfers = c.short_transfers.load(std::memory_order_relaxed);
  s.retries = c.retries.load(std::memory_order_relaxed);
  s.fixed_pieces = c.fixed_pieces.load(std::memory_order_relaxed);
  s.file_registration_failures = c.file_registration_failures.load(std::memory_order_relaxed);
  return s;
}

}  // namespace strata::offload
