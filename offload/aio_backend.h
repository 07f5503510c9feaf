#pragma once
// Internal to the I/O engine: what the facade (aio_engine.cpp) asks of a backend. Two exist:
// io_uring (uring_backend.cpp, one ring per engine thread) and a pread/pwrite thread pool
// (thread_backend.cpp). Both run every result through on_piece_result (aio_request.h).
//
// Ordering contract: a registration posted before a submit() is in effect for the pieces of
// that submit (the facade posts a file's or buffer's registration before handing out its id
// or slot), so backends must apply commands before pieces queued after them.
#include <cstddef>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "offload/aio_engine.h"
#include "offload/aio_request.h"

namespace strata::offload {

// Sizes of the rings' sparse registered tables. A file id or buffer slot at or past these is
// used without registration (plain read / write).
inline constexpr unsigned kRegisteredFileSlots = 1024;
inline constexpr unsigned kRegisteredBufferSlots = 1024;
// The kernel refuses to register a single buffer larger than 1 GiB.
inline constexpr std::size_t kMaxRegisteredBufferBytes = std::size_t{1} << 30;

class AioBackendImpl {
 public:
  virtual ~AioBackendImpl() = default;  // finishes the queued pieces, then stops the threads

  virtual std::string_view name() const = 0;  // "io_uring" | "threads"
  virtual std::string describe() const = 0;

  // Queues pieces on engine thread `lane` (< parallelism). Thread-safe.
  virtual void submit(unsigned lane, std::span<Piece* const> pieces) = 0;

  // Registered tables; asynchronous except unregister_buffer, which returns only when no ring
  // references the memory any more. No-ops where there is nothing to register.
  virtual void register_file(FileId slot, int fd) = 0;
  virtual void unregister_file(FileId slot) = 0;
  virtual void register_buffer(unsigned slot, std::byte* data, std::size_t bytes) = 0;
  virtual void unregister_buffer(unsigned slot) noexcept = 0;
};

// Throws strata::Error when no ring can be set up (the message says why).
std::unique_ptr<AioBackendImpl> make_uring_backend(const AioOptions& options, EngineShared& shared);
std::unique_ptr<AioBackendImpl> make_thread_backend(const AioOptions& options, EngineShared& shared);

}  // namespace strata::offload
