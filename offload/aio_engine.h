#pragma once
// The asynchronous I/O engine of the NVMe tier: io_uring, correct under every completion.
//
//   AioEngine engine(options, &pool);          // threads and rings start here
//   FileId f = engine.add_file(file);          // registered with every ring when possible
//   AioHandle h = engine.read(f, offset, buffer, bytes);
//   ... compute ...
//   engine.wait(h);                            // throws strata::Error if any piece failed
//
// How a request runs. A request is one or more segments (file, offset, buffer, bytes). Each
// segment is cut into `block_size` pieces; with `parallelism` P > 1 the pieces of a segment
// are dealt to the P engine threads as P contiguous slices. Each engine thread owns one ring
// (single issuer) and keeps up to `queue_depth` pieces in flight, submitting in batches and
// reaping completions in batches. Every completion is checked:
//   - a short transfer continues from where it stopped (a new SQE for the rest);
//   - -EAGAIN and -EINTR resubmit the piece (bounded: a piece that keeps failing is an error);
//   - a read that returns 0 before its end is an error (past the end of the file);
//   - any other error fails the request; wait() raises it with the path, the offset and the
//     length of the failing piece and the errno text.
// A ring that io_uring_submit_and_wait itself fails on (not EINTR, EAGAIN, EBUSY, ETIME) is
// closed: the requests of that engine thread fail the same way, naming the errno of the
// call, and so does every later piece dealt to it (see uring_backend.cpp).
// Buffers from the HostPool given to the constructor are registered with every ring once, at
// their first request (registering pins the pages: pool buffers that never meet a file, such as
// pinned-tier states, are never registered), and used with read_fixed / write_fixed; other
// buffers work too (plain read / write).
//
// Fallbacks, each announced once in the log: where io_uring is unavailable (old kernel,
// seccomp, kernel.io_uring_disabled) or AioBackend::kThreads is asked for, a pool of threads
// runs pread / pwrite with the same splitting and the same checks, behind the same API.
//
// O_DIRECT files (AioFile::direct()) need the buffer address, the offset and the length of
// every segment aligned to kDirectIoAlignment; submit() checks and throws strata::Error.
//
// Thread safety: every method may be called from any thread, concurrently. Handles are cheap
// shared references; a request runs to completion even if its handle is dropped (its error is
// then reported by wait_all()).
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "offload/aio_file.h"
#include "offload/aio_limits.h"
#include "offload/host_buffer.h"

namespace strata::offload {

enum class IoOp { kRead, kWrite };
std::string_view to_string(IoOp op);  // "read" | "write"

enum class AioBackend {
  kAuto,     // io_uring when it works here, else the thread pool (announced once)
  kIoUring,  // io_uring or an error saying why it is unavailable
  kThreads,  // the pread/pwrite thread pool
};

// One completion as the engine saw it, given to the test hook before the engine acts on it.
struct Completion {
  IoOp op;
  const std::string& path;
  std::uint64_t offset;  // file offset of this submission (advances after a short transfer)
  std::byte* buffer;     // where this submission's bytes go (read) or come from (write)
  std::size_t bytes;     // bytes this submission asked for
  int result;            // what the kernel returned: bytes transferred, or -errno
  int attempt;           // 0 for the first submission of a piece, then 1, 2, ...
};

// Test hook in the completion path: returns the result the engine should act on (return
// c.result to change nothing). It may also scribble on c.buffer, so a test can prove that the
// engine re-reads what a short completion did not deliver. Called on engine threads.
using CompletionHook = std::function<int(const Completion& c)>;

// One io_uring_submit_and_wait as an io_uring engine thread saw it, for the test hook.
struct SubmitCall {
  unsigned lane;       // the engine thread (ring)
  unsigned in_flight;  // pieces in its ring: prepared and not reaped yet
  int result;          // what the call returned: SQEs submitted, or -errno
};

// Test hook in the io_uring submit path, called on the engine thread after each
// io_uring_submit_and_wait: returns the result the engine should act on (return c.result to
// change nothing), so a test can make the ring fail. The thread backend never calls it.
using SubmitHook = std::function<int(const SubmitCall& c)>;

struct AioOptions {
  std::size_t block_size = kDefaultBlockBytes;  // bytes per piece (aio.block_size)
  unsigned queue_depth = 8;          // pieces in flight per engine thread (aio.queue_depth)
  unsigned parallelism = 1;          // engine threads (aio.intra_op_parallelism)
  bool single_submit = false;        // one io_uring_submit per SQE instead of batches
  bool overlap_events = true;        // false: wait for a whole batch before submitting more
  bool sqpoll = false;               // ask for IORING_SETUP_SQPOLL (dropped if refused)
  AioBackend backend = AioBackend::kAuto;
  CompletionHook completion_hook;    // tests only; empty in production
  SubmitHook submit_hook;            // tests only; empty in production
};

using FileId = std::uint32_t;

// Told when the disk is busy with this engine's requests of one kind, for traces and busy-time
// accounting (runtime/trace): [start_ns, end_ns) is a stretch of time during which at least one
// request of kind `op` was in flight (submitted, not yet finished), ending at the completion of
// a request that moved `bytes`. Consecutive calls for one kind never overlap and together cover
// exactly the time that kind had requests in flight, so their durations sum to the disk's busy
// time as the engine sees it (not to the time a thread was blocked in wait()). Times are
// std::chrono::steady_clock nanoseconds (trace::Tracer::now_ns). Called on the engine thread
// that finished the request, under an engine lock: it must be short and must not call the engine.
using IoActivityHook =
    std::function<void(IoOp op, std::int64_t start_ns, std::int64_t end_ns, std::uint64_t bytes)>;

// One contiguous transfer of a request.
struct IoSegment {
  FileId file;            // from add_file
  std::uint64_t offset;   // file offset in bytes
  std::byte* buffer;      // borrowed: must stay valid until the request completes
  std::size_t bytes;
};

struct AioRequest;  // the engine's shared per-request state (aio_request.h)

// A reference to a submitted request. Copyable; empty when default-constructed.
class AioHandle {
 public:
  AioHandle() = default;
  explicit operator bool() const { return request_ != nullptr; }

 private:
  friend class AioEngine;
  explicit AioHandle(std::shared_ptr<AioRequest> request) : request_(std::move(request)) {}
  std::shared_ptr<AioRequest> request_;
};

struct AioStats {
  std::uint64_t bytes_read = 0;
  std::uint64_t bytes_written = 0;
  std::uint64_t requests = 0;
  std::uint64_t pieces = 0;           // pieces submitted, first attempts only
  std::uint64_t short_transfers = 0;  // completions that moved fewer bytes than asked
  std::uint64_t retries = 0;          // -EAGAIN / -EINTR resubmissions
  std::uint64_t fixed_pieces = 0;     // pieces that used a registered buffer
  // A ring that could not register a file (it then uses the descriptor): 0 unless the kernel
  // refuses, since add_file() waits until every ring has registered the file, while it is open.
  std::uint64_t file_registration_failures = 0;
};

class AioEngine {
 public:
  // pool: borrowed, may be null; its buffers are registered with the rings (it must outlive
  // the engine). Throws strata::Error for options out of range (block_size not a positive
  // multiple of 4096, queue_depth 0 or above 4096, parallelism 0 or above 64) and when
  // AioBackend::kIoUring is asked for where io_uring does not work.
  explicit AioEngine(AioOptions options, HostPool* pool = nullptr);
  // Waits for every request, logs errors nobody waited for, stops the threads.
  ~AioEngine();
  AioEngine(const AioEngine&) = delete;
  AioEngine& operator=(const AioEngine&) = delete;

  // "io_uring" or "threads", and the io_uring setup flags that were accepted.
  std::string_view backend_name() const;
  std::string describe() const;  // e.g. "io_uring (SINGLE_ISSUER|DEFER_TASKRUN), 2 rings x QD 32"
  const AioOptions& options() const;

  // The file must stay open until remove_file(); registered with every ring when the kernel
  // allows (IORING_REGISTER_FILES), used by descriptor otherwise. Removing a file that has
  // requests in flight is a programming error (asserted).
  FileId add_file(const AioFile& file);
  void remove_file(FileId file);

  // Starts a request. on_complete, when given, runs once on an engine thread after every piece
  // succeeded and before waiters wake; an exception it throws becomes the request's error
  // (the swap space verifies checksums this way). It must not wait on the engine nor allocate
  // or release pool buffers (a release waits for the engine threads). Throws strata::Error at
  // once for bad arguments (unknown file, misaligned O_DIRECT segment, zero segments).
  AioHandle submit(IoOp op, std::span<const IoSegment> segments,
                   std::function<void()> on_complete = {});
  AioHandle read(FileId file, std::uint64_t offset, void* buffer, std::size_t bytes);
  AioHandle write(FileId file, std::uint64_t offset, const void* buffer, std::size_t bytes);

  // Blocks until the request is done; throws its error (every wait on a failed request
  // throws). An empty handle returns at once.
  void wait(const AioHandle& handle);
  // True when the request is done (successfully or not); never blocks, never throws.
  bool poll(const AioHandle& handle) const;
  // Waits for every request submitted so far; throws the first error of a failed request
  // that no wait() has reported yet.
  void wait_all();

  AioStats stats() const;

  // Tests only: a slower disk for writes. With bytes_per_s > 0 the engine thread that reaps a
  // write's completion holds it for (bytes transferred) / bytes_per_s before acting on it, so
  // that each write lasts at least that long (on one engine thread, writes complete one after
  // another, as on a disk of that speed). 0 (the default): off, one relaxed load per
  // completion. May be called at any time, from any thread.
  void set_emulated_write_bytes_per_s(std::uint64_t bytes_per_s);

  // Installs (or, with an empty hook, removes) the activity hook; may be called at any time,
  // from any thread. A stretch already under way when the hook is installed is reported from
  // the installation on.
  void set_activity_hook(IoActivityHook hook);

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace strata::offload
