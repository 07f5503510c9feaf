// The fallback backend: a pool of threads running pread / pwrite, for machines where io_uring
// is unavailable (old kernel, seccomp, kernel.io_uring_disabled) or AioBackend::kThreads.
// Same pieces, same completion logic (on_piece_result), same API; no registered files or
// buffers, so the registration calls are no-ops.
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "offload/aio_backend.h"

namespace strata::offload {
namespace {

// Enough threads to keep parallelism x queue_depth transfers in flight, as a ring would,
// but not so many that a deep queue spawns hundreds of threads.
constexpr unsigned kMaxThreads = 64;

class ThreadBackend final : public AioBackendImpl {
 public:
  ThreadBackend(const AioOptions& options, EngineShared& shared)
      : shared_(shared),
        threads_count_(std::clamp(options.parallelism * options.queue_depth, 1u, kMaxThreads)) {
    threads_.reserve(threads_count_);
    for (unsigned i = 0; i < threads_count_; ++i) threads_.emplace_back([this] { run(); });
  }

  ~ThreadBackend() override {
    {
      std::lock_guard lock(mutex_);
      stop_ = true;
    }
    work_.notify_all();
    for (std::thread& t : threads_) t.join();
  }

  std::string_view name() const override { return "threads"; }
  std::string describe() const override {
    return fmt::format("threads (pread/pwrite), {} threads", threads_count_);
  }

  // One queue for every lane: any free thread takes the next piece, which keeps all of them
  // busy whatever the lanes' loads.
  void submit(unsigned /*lane*/, std::span<Piece* const> pieces) override {
    {
      std::lock_guard lock(mutex_);
      queue_.insert(queue_.end(), pieces.begin(), pieces.end());
    }
    if (pieces.size() == 1) {
      work_.notify_one();
    } else {
      work_.notify_all();
    }
  }

  void register_file(FileId, int) override {}
  void unregister_file(FileId) override {}
  void register_buffer(unsigned, std::byte*, std::size_t) override {}
  void unregister_buffer(unsigned) noexcept override {}

 private:
  void run() {
    for (;;) {
      Piece* p = nullptr;
      {
        std::unique_lock lock(mutex_);
        // Stop only once the queue is empty: the destructor drains.
        work_.wait(lock, [&] { return stop_ || !queue_.empty(); });
        if (queue_.empty()) return;
        p = queue_.front();
        queue_.pop_front();
      }
      transfer(*p);
      finish_piece(*p, shared_);
    }
  }

  // Runs one piece to its end: short transfers and -EAGAIN / -EINTR loop here.
  void transfer(Piece& p) {
    if (skip_piece(p)) return;
    const bool read = p.request->op == IoOp::kRead;
    for (;;) {
      const std::size_t want = p.bytes - p.done;
      const auto offset = static_cast<off_t>(p.offset + p.done);
      ssize_t n = read ? ::pread(p.file->fd, p.buffer + p.done, want, offset)
                       : ::pwrite(p.file->fd, p.buffer + p.done, want, offset);
      const int result = n < 0 ? -errno : static_cast<int>(n);
      if (on_piece_result(p, result, shared_) == PieceAction::kDone) return;
      if (p.busy_tries > 0) std::this_thread::yield();  // let whatever was busy make progress
    }
  }

  EngineShared& shared_;
  const unsigned threads_count_;
  std::mutex mutex_;
  std::condition_variable work_;
  std::deque<Piece*> queue_;
  bool stop_ = false;
  std::vector<std::thread> threads_;  // last: started after everything above exists
};

}  // namespace

std::unique_ptr<AioBackendImpl> make_thread_backend(const AioOptions& options,
                                                    EngineShared& shared) {
  return std::make_unique<ThreadBackend>(options, shared);
}

}  // namespace strata::offload
