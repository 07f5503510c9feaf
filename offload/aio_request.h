#pragma once
// Internal to the I/O engine: the shared state of one request, its pieces, and the ONE
// completion logic that both backends (io_uring and the thread pool) run on every result, so
// that they agree on short transfers, retries and errors.
//
// Note [Request lifetime]. A request is owned by shared_ptrs: the handles, and `self`, which
// the engine sets at submit and the engine thread that finishes the last piece moves out. So a
// request lives until every piece is done even when its handles are dropped; backends hold
// plain Piece* into request->pieces, valid for as long as the piece is not finished.
#include <sys/statvfs.h>

#include <atomic>
#include <chrono>
#include <cerrno>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "core/error.h"
#include "core/units.h"
#include "offload/aio_engine.h"
#include "offload/host_buffer.h"

namespace strata::offload {

// A request whose piece keeps answering -EAGAIN / -EINTR this many times in a row fails
// instead of spinning forever.
inline constexpr int kMaxBusyRetries = 1000;

// One file known to the engine (add_file). Stable address while registered.
struct FileEntry {
  int fd = -1;
  std::string path;
  bool direct = false;
  std::atomic<std::uint64_t> in_flight{0};  // segments of unfinished requests using it
};

struct AioRequest;

// At most block_size bytes of one segment, run by one engine thread.
struct Piece {
  AioRequest* request = nullptr;
  FileEntry* file = nullptr;
  FileId file_id = 0;      // the slot in the rings' registered file table
  std::uint64_t offset = 0;
  std::byte* buffer = nullptr;
  std::size_t bytes = 0;
  int buffer_slot = -1;    // registered buffer holding [buffer, buffer+bytes), or -1
  std::size_t done = 0;    // bytes transferred so far (short transfers continue from here)
  int attempt = 0;         // submissions so far - 1 (Completion::attempt)
  int busy_tries = 0;      // consecutive -EAGAIN / -EINTR
  unsigned lane_slot = 0;  // io_uring: its index in the lane's table of pieces in flight
};

struct AioCounters {
  std::atomic<std::uint64_t> bytes_read{0}, bytes_written{0}, requests{0}, pieces{0},
      short_transfers{0}, retries{0}, fixed_pieces{0}, file_registration_failures{0};
};

struct AioRequest {
  IoOp op = IoOp::kRead;
  std::uint64_t bytes = 0;                 // of every segment, for the activity hook
  std::vector<Piece> pieces;
  std::vector<FileEntry*> files;           // one per segment, for in_flight accounting
  std::function<void()> on_complete;
  std::atomic<std::size_t> remaining{0};   // pieces not finished yet
  std::atomic<bool> failed{false};         // set once; later pieces are skipped
  std::exception_ptr error;                // written once under error_mutex before `done`
  std::mutex error_mutex;
  std::atomic<bool> done{false};           // C++20 wait/notify
  std::atomic<bool> reported{false};       // a wait() or wait_all() has thrown the error
  std::shared_ptr<AioRequest> self;        // Note [Request lifetime]

  void fail(std::exception_ptr e) {
    std::lock_guard lock(error_mutex);
    if (!error) error = std::move(e);  // the first error wins
    failed.store(true, std::memory_order_release);
  }
};

// What the engine and its backends share: the hook, the counters and the set of unfinished
// requests (for wait_all and the destructor).
struct EngineShared {
  CompletionHook hook;
  AioCounters counters;
  std::atomic<std::uint64_t> emulated_write_bytes_per_s{0};  // tests only: 0 = off

  std::mutex mutex;
  std::condition_variable idle;   // notified when in_flight drops
  std::uint64_t in_flight = 0;    // requests submitted and not finished
  std::vector<std::shared_ptr<AioRequest>> failed;  // failed requests, oldest first

  // Note [Disk activity]: per kind (read, write), the requests in flight and the start of the
  // stretch not reported yet. A request's completion reports [since, now) and moves `since`
  // to now, so the reports tile the time the kind had requests in flight (IoActivityHook).
  // In flight = submitted to the engine and not finished: that includes pieces waiting behind
  // the queue depth (the disk is busy with the others then) and a request's on_complete (the
  // swap space's checksum), a few percent of a transfer; not the time a waiter takes to wake.
  // Guarded by `mutex`, like in_flight.
  struct Activity {
    std::uint64_t in_flight = 0;
    std::int64_t since_ns = 0;
  };
  Activity activity[2];            // [IoOp::kRead], [IoOp::kWrite]
  IoActivityHook activity_hook;    // empty = not reported

  static std::int64_t now_ns() noexcept {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(
               std::chrono::steady_clock::now().time_since_epoch()).count();
  }

  void request_started(IoOp op) {
    std::lock_guard lock(mutex);
    ++in_flight;
    Activity& a = activity[static_cast<int>(op)];
    if (a.in_flight++ == 0) a.since_ns = now_ns();
  }
  // Under `mutex`, when a request of `op` that moved `bytes` has finished.
  void request_finished_locked(IoOp op, std::uint64_t bytes) {
    --in_flight;
    Activity& a = activity[static_cast<int>(op)];
    --a.in_flight;
    if (!activity_hook) return;
    const std::int64_t end = now_ns();
    const std::int64_t start = std::exchange(a.since_ns, end);
    try {
      activity_hook(op, start, end, bytes);
    } catch (...) {
      // A report that fails (out of memory in the tracer) must not lose the request's outcome.
    }
  }
};

enum class PieceAction {
  kDone,      // the piece is finished (successfully, or the request failed): finish_piece
  kResubmit,  // submit the rest of the piece again (short transfer, -EAGAIN, -EINTR)
};

namespace detail {

inline std::string free_space_note(const std::string& path) {
  struct statvfs s{};
  if (::statvfs(path.c_str(), &s) != 0) return {};
  return fmt::format("; the file system has {} free",
                     format_bytes(static_cast<std::uint64_t>(s.f_bavail) * s.f_frsize));
}

// errnum picks the hint (0: none) unless one is given.
inline Error piece_error(const Piece& p, IoOp op, std::string what, int errnum,
                         std::string hint = {}) {
  if (hint.empty()) {
    switch (errnum) {
      case ENOSPC:
        hint = "free space on that file system, or give a folder on another disk (nvme_path for swap files, "
               "--checkpoint-dir for checkpoints)";
        break;
      case EIO: hint = "the device reported an I/O error: check dmesg and the drive's health"; break;
      case EINVAL:
        hint = "for O_DIRECT files the buffer, offset and length must suit the device's block size";
        break;
      default: break;
    }
  }
  return Error(fmt::format("{} of {} bytes at offset {} failed: {}", to_string(op),
                           p.bytes - p.done, p.offset + p.done, what),
               p.file->path, std::move(hint));
}

}  // namespace detail

// Acts on one completion of piece `p` whose kernel (or pread/pwrite) result is `result`
// (bytes or -errno). Calls the test hook first. On kResubmit, the piece's done/attempt are
// updated and the backend submits the rest again; on kDone the backend calls finish_piece.
inline PieceAction on_piece_result(Piece& p, int result, EngineShared& shared) {
  const IoOp op = p.request->op;
  const std::size_t want = p.bytes - p.done;
  if (op == IoOp::kWrite && result > 0) {
    // AioEngine::set_emulated_write_bytes_per_s (tests): a slower disk.
    if (const std::uint64_t rate = shared.emulated_write_bytes_per_s.load(std::memory_order_relaxed)) {
      std::this_thread::sleep_for(std::chrono::nanoseconds(
          static_cast<std::int64_t>(static_cast<double>(result) * 1e9 / static_cast<double>(rate))));
    }
  }
  if (shared.hook) {
    Completion c{op, p.file->path, p.offset + p.done, p.buffer + p.done, want, result, p.attempt};
    result = shared.hook(c);
  }

  if (result == -EAGAIN || result == -EINTR) {
    // The kernel (or a signal) asks to try again: nothing was transferred.
    if (++p.busy_tries >= kMaxBusyRetries) {
      p.request->fail(std::make_exception_ptr(detail::piece_error(
          p, op,
          fmt::format("{} on {} submissions in a row", errno_text(-result), p.busy_tries),
          -result)));
      return PieceAction::kDone;
    }
    ++p.attempt;
    shared.counters.retries.fetch_add(1, std::memory_order_relaxed);
    return PieceAction::kResubmit;
  }
  if (result < 0) {
    const int e = -result;
    std::string what = errno_text(e);
    if (e == ENOSPC && op == IoOp::kWrite) what += detail::free_space_note(p.file->path);
    p.request->fail(std::make_exception_ptr(detail::piece_error(p, op, what, e)));
    return PieceAction::kDone;
  }
  if (result == 0) {
    // A read of 0 bytes is the end of the file; a write of 0 bytes would loop forever.
    p.request->fail(std::make_exception_ptr(detail::piece_error(
        p, op,
        op == IoOp::kRead ? std::string("past the end of the file (the read returned 0 bytes)")
                          : std::string("the write transferred 0 bytes"),
        0)));
    return PieceAction::kDone;
  }
  if (static_cast<std::size_t>(result) > want) {
    p.request->fail(std::make_exception_ptr(detail::piece_error(
        p, op, fmt::format("the kernel reported {} bytes, more than asked", result), 0)));
    return PieceAction::kDone;
  }
  p.busy_tries = 0;
  p.done += static_cast<std::size_t>(result);
  if (p.done < p.bytes && op == IoOp::kRead && p.file->direct &&
      (p.offset + p.done) % kDirectIoAlignment != 0) {
    // An O_DIRECT read stops short at an unaligned offset only at the end of the file: asking
    // for the rest would start unaligned and draw EINVAL, blaming the caller's alignment.
    p.request->fail(std::make_exception_ptr(detail::piece_error(
        p, op,
        fmt::format("past the end of the file (it ends at byte {})", p.offset + p.done), 0)));
    return PieceAction::kDone;
  }
  if (p.done < p.bytes) {
    // Short transfer: continue from where it stopped.
    shared.counters.short_transfers.fetch_add(1, std::memory_order_relaxed);
    ++p.attempt;
    return PieceAction::kResubmit;
  }
  auto& bytes = op == IoOp::kRead ? shared.counters.bytes_read : shared.counters.bytes_written;
  bytes.fetch_add(p.bytes, std::memory_order_relaxed);
  return PieceAction::kDone;
}

// Called by the backend once per piece, after its last completion (or instead of submitting
// it when its request already failed). The thread finishing the last piece runs on_complete
// and wakes the waiters.
inline void finish_piece(Piece& p, EngineShared& shared) noexcept {
  AioRequest& req = *p.request;
  if (req.remaining.fetch_sub(1, std::memory_order_acq_rel) != 1) return;

  std::shared_ptr<AioRequest> keep = std::move(req.self);  // Note [Request lifetime]
  if (!req.failed.load(std::memory_order_acquire) && req.on_complete) {
    try {
      req.on_complete();
    } catch (...) {
      req.fail(std::current_exception());
    }
  }
  for (FileEntry* f : req.files) f->in_flight.fetch_sub(1, std::memory_order_release);
  {
    std::lock_guard lock(shared.mutex);
    if (req.failed.load(std::memory_order_acquire)) {
      // Errors already thrown by wait() need not be kept for wait_all(): prune now and then.
      if (shared.failed.size() >= 256) {
        std::erase_if(shared.failed, [](const auto& r) { return r->reported.load(); });
      }
      shared.failed.push_back(keep);
    }
    // The activity report first: its stretch ends before any waiter of the request can wake,
    // so what a waiter does next starts after it in a trace.
    shared.request_finished_locked(req.op, req.bytes);
    req.done.store(true, std::memory_order_release);
    req.done.notify_all();
    shared.idle.notify_all();  // under the lock: the engine may be destroyed right after
  }
}

// True when the piece should not be started: an earlier piece of its request failed.
inline bool skip_piece(const Piece& p) {
  return p.request->failed.load(std::memory_order_acquire);
}

}  // namespace strata::offload
