// The io_uring backend: one engine thread per ring ("lane"), each the ring's only issuer.
//
// A lane's thread sets its ring up itself (IORING_SETUP_SINGLE_ISSUER binds the ring to the
// thread that creates it), then loops:
//   1. take the pieces and commands other threads queued (one mutex, swapped out at once);
//   2. run the commands: registered file / buffer table updates must come from this thread;
//   3. prepare SQEs for up to queue_depth pieces in flight;
//   4. io_uring_submit_and_wait(1): one syscall submits the batch and sleeps until something
//      completes. New work wakes it through an eventfd read kept armed in the ring;
//   5. reap every ready CQE (io_uring_for_each_cqe, one io_uring_cq_advance), then act on each
//      result through on_piece_result: resubmit the rest, or finish the piece.
// The completion path (on_piece_result, finish_piece and a request's on_complete) runs after
// the CQ head is advanced, so a slow on_complete never holds CQ entries.
//
// Note [A failed ring]. io_uring_submit_and_wait failing with anything but EINTR, EAGAIN,
// EBUSY or ETIME (EBADFD, ENXIO, EOWNERDEAD, EFAULT, ...) says the ring itself is unusable, and
// retrying would spin forever. The lane then (fail_lane) collects the CQEs of the pieces the
// kernel had already taken, since those still transfer into their buffers, fails every piece
// it holds with an error naming the file, the offset and the errno, closes the ring, and from
// then on (serve_broken) fails each piece dealt to it at once and acknowledges registration
// commands without a ring, sleeping on a condition variable in between. The other lanes go on.
#include <liburing.h>
#include <sys/eventfd.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "core/error.h"
#include "core/log.h"
#include "offload/aio_backend.h"

namespace strata::offload {
namespace {

// user_data of the eventfd read; pieces are aligned pointers and never equal it.
constexpr std::uint64_t kWakeTag = 1;

// Counts commands down across lanes; notifies under the lock so that the waiter may destroy
// it as soon as it wakes.
class Countdown {
 public:
  explicit Countdown(unsigned count) : count_(count) {}
  void count_down() {
    std::lock_guard lock(mutex_);
    if (--count_ == 0) cv_.notify_all();
  }
  void wait() {
    std::unique_lock lock(mutex_);
    cv_.wait(lock, [&] { return count_ == 0; });
  }

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  unsigned count_;
};

struct Command {
  enum Kind { kFile, kBuffer } kind;
  unsigned slot = 0;
  int fd = -1;                  // kFile: the descriptor, or -1 to clear the slot
  std::byte* data = nullptr;    // kBuffer: the memory, or null to clear the slot
  std::size_t bytes = 0;
  Countdown* done = nullptr;    // counted down once applied (may be null)
};

struct SetupAttempt {
  unsigned flags;
  const char* name;
};

class Lane {
 public:
  Lane(const AioOptions& options, EngineShared& shared, unsigned index)
      : options_(options), shared_(shared), index_(index) {
    wake_fd_ = ::eventfd(0, EFD_CLOEXEC);
    if (wake_fd_ < 0) {
      throw Error(fmt::format("cannot create the eventfd of io_uring lane {}: {}", index,
                              errno_text(errno)),
                  "aio engine", "raise ulimit -n, or use the thread backend");
    }
    thread_ = std::thread([this] { run(); });
    std::unique_lock lock(mutex_);
    setup_cv_.wait(lock, [&] { return setup_done_; });
    if (!setup_error_.empty()) {
      lock.unlock();
      thread_.join();
      ::close(wake_fd_);
      throw Error(setup_error_, "aio engine",
                  "use strata.io_backend 'threads', or check ulimit -l, seccomp and "
                  "kernel.io_uring_disabled");
    }
  }

  ~Lane() {
    {
      std::lock_guard lock(mutex_);
      stop_ = true;
    }
    broken_cv_.notify_one();
    wake();
    thread_.join();
    ::close(wake_fd_);
  }

  Lane(const Lane&) = delete;
  Lane& operator=(const Lane&) = delete;

  const std::string& flags_name() const { return flags_name_; }

  void push(std::span<Piece* const> pieces) {
    bool was_idle;
    bool broken;
    {
      std::lock_guard lock(mutex_);
      was_idle = pending_.empty() && commands_.empty();
      broken = broken_;
      pending_.insert(pending_.end(), pieces.begin(), pieces.end());
    }
    // Only the push that finds the queue empty wakes the thread: it drains everything at once.
    notify(was_idle, broken);
  }

  void post(const Command& c) {
    bool was_idle;
    bool broken;
    {
      std::lock_guard lock(mutex_);
      was_idle = pending_.empty() && commands_.empty();
      broken = broken_;
      commands_.push_back(c);
    }
    notify(was_idle, broken);
  }

 private:
  void wake() {
    const std::uint64_t one = 1;
    // Cannot fail short of a counter overflow (2^64 - 2 wakes); the ring would then wake anyway.
    [[maybe_unused]] ssize_t n = ::write(wake_fd_, &one, sizeof one);
  }

  // A working lane sleeps in its ring (the eventfd read), a broken one on broken_cv_.
  void notify(bool was_idle, bool broken) {
    if (broken) {
      broken_cv_.notify_one();
    } else if (was_idle) {
      wake();
    }
  }

  void run() {
    std::string error = setup();
    {
      std::lock_guard lock(mutex_);
      setup_error_ = error;
      setup_done_ = true;
    }
    setup_cv_.notify_all();
    if (!error.empty()) return;
    in_flight_.assign(options_.queue_depth, nullptr);
    free_slots_.resize(options_.queue_depth);
    for (unsigned i = 0; i < options_.queue_depth; ++i) {
      free_slots_[i] = options_.queue_depth - 1 - i;
    }
    loop();
    if (ring_open_) io_uring_queue_exit(&ring_);
  }

  // Tries the setup flags best first and drops them one by one where the kernel answers
  // EINVAL (an unknown flag or combination) or EPERM (SQPOLL needs privileges before 5.11).
  // Returns an error message, empty on success. Runs on the lane's thread (SINGLE_ISSUER).
  std::string setup() {
    std::vector<SetupAttempt> attempts;
    if (options_.sqpoll) attempts.push_back({IORING_SETUP_SQPOLL, "SQPOLL"});
    attempts.push_back({IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN,
                        "SINGLE_ISSUER|DEFER_TASKRUN"});
    attempts.push_back({IORING_SETUP_COOP_TASKRUN, "COOP_TASKRUN"});
    attempts.push_back({0, "no setup flags"});
    // queue_depth pieces plus the eventfd read; the kernel rounds up to a power of two.
    const unsigned entries = options_.queue_depth + 1;
    int rc = -EINVAL;
    for (const SetupAttempt& a : attempts) {
      io_uring_params params{};
      params.flags = a.flags;
      if (a.flags & IORING_SETUP_SQPOLL) params.sq_thread_idle = 100;  // ms before it sleeps
      rc = io_uring_queue_init_params(entries, &ring_, &params);
      if (rc == 0) {
        ring_open_ = true;
        flags_name_ = a.name;
        break;
      }
      const bool refused = rc == -EINVAL || (rc == -EPERM && (a.flags & IORING_SETUP_SQPOLL));
      if (!refused || a.flags == 0) {
        return fmt::format("io_uring_queue_init_params ({} entries, {}) failed: {}", entries,
                           a.name, errno_text(-rc));
      }
      log::debug("io_uring lane {}: setup with {} refused ({}), trying fewer flags", index_,
                 a.name, errno_text(-rc));
    }

    // Sparse tables: slots are filled one by one as files and pool buffers appear. Without
    // them (kernel < 5.19) every transfer uses plain descriptors and read / write.
    rc = io_uring_register_files_sparse(&ring_, kRegisteredFileSlots);
    files_table_ = rc == 0;
    if (!files_table_) {
      log::warn_once("aio.uring.files_sparse",
                     fmt::format("io_uring: cannot register a sparse file table ({}); files are "
                                 "used by descriptor", errno_text(-rc)));
    }
    rc = io_uring_register_buffers_sparse(&ring_, kRegisteredBufferSlots);
    buffers_table_ = rc == 0;
    if (!buffers_table_) {
      log::warn_once("aio.uring.buffers_sparse",
                     fmt::format("io_uring: cannot register a sparse buffer table ({}); pool "
                                 "buffers use plain read / write", errno_text(-rc)));
    }
    file_ok_.assign(kRegisteredFileSlots, false);
    buffer_ok_.assign(kRegisteredBufferSlots, false);
    return {};
  }

  void apply(const Command& c) {
    if (c.kind == Command::kFile) {
      if (files_table_) {
        int fd = c.fd;
        int rc = io_uring_register_files_update(&ring_, c.slot, &fd, 1);
        file_ok_[c.slot] = c.fd >= 0 && rc == 1;
        if (c.fd >= 0 && rc != 1) {
          shared_.counters.file_registration_failures.fetch_add(1, std::memory_order_relaxed);
          log::warn_once("aio.uring.file_update",
                         fmt::format("io_uring: cannot register a file ({}); using descriptors",
                                     rc < 0 ? errno_text(-rc) : std::to_string(rc)));
        }
      }
    } else if (buffers_table_) {
      // An empty iovec clears the slot; the kernel drops its reference to the old pages.
      iovec iov{c.data, c.data != nullptr ? c.bytes : 0};
      int rc = io_uring_register_buffers_update_tag(&ring_, c.slot, &iov, nullptr, 1);
      buffer_ok_[c.slot] = c.data != nullptr && rc == 1;
      if (c.data != nullptr && rc != 1) {
        log::warn_once("aio.uring.buffer_update",
                       fmt::format("io_uring: cannot register a pool buffer ({}); it is used "
                                   "with plain read / write (check ulimit -l)",
                                   rc < 0 ? errno_text(-rc) : std::to_string(rc)));
      }
    }
    if (c.done != nullptr) c.done->count_down();
  }

  // A free SQ entry. The SQ has queue_depth + 1 entries and at most that many requests are in
  // flight, so without SQPOLL one is always free here. With SQPOLL the kernel's SQ thread
  // publishes the SQ head only at the end of a batch, after the batch's requests may already
  // have completed and been reaped: then flush what is prepared and wait for the SQ thread.
  io_uring_sqe* get_sqe() {
    for (;;) {
      if (io_uring_sqe* sqe = io_uring_get_sqe(&ring_)) return sqe;
      STRATA_ASSERT((ring_.flags & IORING_SETUP_SQPOLL) != 0, "io_uring SQ full");
      io_uring_submit(&ring_);       // hands the prepared entries over, wakes the SQ thread
      io_uring_sqring_wait(&ring_);  // until the SQ thread has consumed some (EINTR: retry)
    }
  }

  void arm_wake() {
    io_uring_sqe* sqe = get_sqe();
    io_uring_prep_read(sqe, wake_fd_, &wake_value_, sizeof wake_value_, 0);
    io_uring_sqe_set_data64(sqe, kWakeTag);
    wake_armed_ = true;
  }

  void prepare(Piece& p) {
    io_uring_sqe* sqe = get_sqe();
    std::byte* addr = p.buffer + p.done;
    const auto len = static_cast<unsigned>(p.bytes - p.done);
    const std::uint64_t offset = p.offset + p.done;
    const bool fixed_file = files_table_ && p.file_id < kRegisteredFileSlots && file_ok_[p.file_id];
    const int fd = fixed_file ? static_cast<int>(p.file_id) : p.file->fd;
    const bool fixed_buffer = p.buffer_slot >= 0 && buffer_ok_[p.buffer_slot];
    if (p.request->op == IoOp::kRead) {
      if (fixed_buffer) {
        io_uring_prep_read_fixed(sqe, fd, addr, len, offset, p.buffer_slot);
      } else {
        io_uring_prep_read(sqe, fd, addr, len, offset);
      }
    } else {
      if (fixed_buffer) {
        io_uring_prep_write_fixed(sqe, fd, addr, len, offset, p.buffer_slot);
      } else {
        io_uring_prep_write(sqe, fd, addr, len, offset);
      }
    }
    if (fixed_file) sqe->flags |= IOSQE_FIXED_FILE;
    io_uring_sqe_set_data(sqe, &p);
    track(p);
    if (fixed_buffer && p.attempt == 0) {
      shared_.counters.fixed_pieces.fetch_add(1, std::memory_order_relaxed);
    }
  }

  // The pieces in the ring (prepared, not reaped), so that a failed ring can fail them all.
  void track(Piece& p) {
    p.lane_slot = free_slots_.back();
    free_slots_.pop_back();
    in_flight_[p.lane_slot] = &p;
  }
  void untrack(Piece& p) {
    in_flight_[p.lane_slot] = nullptr;
    free_slots_.push_back(p.lane_slot);
  }

  void loop() {
    std::deque<Piece*> ready;                     // taken from pending_, not yet submitted
    std::vector<Command> commands;
    std::vector<std::pair<Piece*, int>> reaped;
    unsigned in_flight = 0;
    for (;;) {
      bool stop;
      {
        std::lock_guard lock(mutex_);
        commands.swap(commands_);
        ready.insert(ready.end(), pending_.begin(), pending_.end());
        pending_.clear();
        stop = stop_;
      }
      for (const Command& c : commands) apply(c);
      commands.clear();

      if (!wake_armed_) arm_wake();
      // overlap_events=false: a new batch only once the previous one has fully completed.
      const bool may_submit = options_.overlap_events || in_flight == 0;
      int submit_error = 0;
      while (may_submit && submit_error == 0 && in_flight < options_.queue_depth &&
             !ready.empty()) {
        Piece* p = ready.front();
        ready.pop_front();
        if (skip_piece(*p)) {  // an earlier piece of its request failed
          finish_piece(*p, shared_);
          continue;
        }
        prepare(*p);
        ++in_flight;
        if (options_.single_submit) submit_error = submit_checked(0, in_flight);
      }
      if (submit_error == 0 && stop && in_flight == 0 && ready.empty()) return;

      if (submit_error == 0) submit_error = submit_checked(1, in_flight);
      if (submit_error != 0) {  // Note [A failed ring]
        fail_lane(submit_error, ready, in_flight);
        serve_broken();
        return;
      }

      // Reap every CQE that is ready, advance the CQ once, then act on the results.
      reap(reaped);
      for (auto [p, res] : reaped) {
        untrack(*p);
        --in_flight;
        if (on_piece_result(*p, res, shared_) == PieceAction::kResubmit) {
          ready.push_front(p);  // the rest of a short transfer, or a retry: first in line
        } else {
          finish_piece(*p, shared_);
        }
      }
    }
  }

  // Takes every CQE that is ready into `reaped` (pieces and their results; the eventfd read's
  // completion disarms the wake-up, re-armed at the top of the loop) and advances the CQ once.
  // Returns the number of CQEs consumed.
  unsigned reap(std::vector<std::pair<Piece*, int>>& reaped) {
    reaped.clear();
    unsigned head;
    unsigned count = 0;
    io_uring_cqe* cqe;
    io_uring_for_each_cqe(&ring_, head, cqe) {
      ++count;
      if (cqe->user_data == kWakeTag) {
        wake_armed_ = false;
        continue;
      }
      reaped.emplace_back(reinterpret_cast<Piece*>(cqe->user_data), cqe->res);
    }
    io_uring_cq_advance(&ring_, count);
    return count;
  }

  // Submits the prepared SQEs and waits for `wait_nr` completions. Returns 0, or the errno
  // of a failure that makes the ring unusable (Note [A failed ring]). A signal (EINTR) or a
  // momentary shortage (EAGAIN, EBUSY, ETIME) is not an error: the loop comes back here.
  int submit_checked(unsigned wait_nr, unsigned in_flight) {
    int rc = io_uring_submit_and_wait(&ring_, wait_nr);
    if (options_.submit_hook) [[unlikely]] rc = options_.submit_hook({index_, in_flight, rc});
    if (rc >= 0 || rc == -EINTR || rc == -EAGAIN || rc == -EBUSY || rc == -ETIME) return 0;
    return -rc;
  }

  // Runs once, on the lane's thread, after submit_checked reported err (Note [A failed ring]).
  void fail_lane(int err, std::deque<Piece*>& ready, unsigned& in_flight) {
    {
      std::lock_guard lock(mutex_);
      broken_ = true;  // from now on push() and post() wake broken_cv_, not the ring
    }
    broken_what_ = fmt::format("io_uring_submit_and_wait failed on I/O engine thread {}: {}; "
                               "its ring was closed",
                               index_, errno_text(err));
    log::error("{}: the requests it holds fail", broken_what_);

    // The kernel took every SQE but the last io_uring_sq_ready() ones (those were never
    // submitted and never complete). The taken ones, the eventfd read among them, post CQEs.
    const unsigned queued = in_flight + (wake_armed_ ? 1U : 0U);
    unsigned expected = queued - std::min(queued, io_uring_sq_ready(&ring_));
    log::debug("io_uring lane {}: {} piece(s) in the ring, collecting {} completion(s)", index_,
               in_flight, expected);
    if (wake_armed_) wake();  // completes the eventfd read, if the kernel took it
    std::vector<std::pair<Piece*, int>> reaped;
    int busy = 0;
    while (expected > 0) {
      io_uring_cqe* first = nullptr;
      const int rc = io_uring_wait_cqe(&ring_, &first);  // submits nothing
      if ((rc == -EINTR || rc == -EAGAIN) && ++busy < kMaxBusyRetries) continue;
      if (rc < 0) {
        log::error("io_uring lane {}: cannot collect the completions of {} piece(s) in flight "
                   "({}); they fail without them",
                   index_, expected, errno_text(-rc));
        break;
      }
      const unsigned count = reap(reaped);
      expected -= std::min(expected, count);
      for (auto [p, res] : reaped) {
        untrack(*p);
        --in_flight;
        // A piece that completed is judged as usual; one that would need another SQE fails.
        if (on_piece_result(*p, res, shared_) == PieceAction::kResubmit) {
          fail_piece(*p);
        } else {
          finish_piece(*p, shared_);
        }
      }
    }
    for (Piece* p : in_flight_) {  // untaken, or their completions could not be collected
      if (p == nullptr) continue;
      untrack(*p);
      --in_flight;
      fail_piece(*p);
    }
    for (Piece* p : ready) fail_piece(*p);
    ready.clear();
    io_uring_queue_exit(&ring_);
    ring_open_ = false;
  }

  // Fails the piece's request with the ring's error (unless an earlier error is already
  // there) and finishes the piece.
  void fail_piece(Piece& p) {
    if (!skip_piece(p)) {
      p.request->fail(std::make_exception_ptr(detail::piece_error(
          p, p.request->op, broken_what_, 0,
          "see the log for the ring's failure; strata.io_backend \"threads\" runs without "
          "io_uring")));
    }
    finish_piece(p, shared_);
  }

  // The lane's life after fail_lane, until the engine stops (Note [A failed ring]).
  void serve_broken() {
    std::vector<Command> commands;
    std::deque<Piece*> pieces;
    for (;;) {
      bool stop;
      {
        std::unique_lock lock(mutex_);
        broken_cv_.wait(lock, [&] { return stop_ || !pending_.empty() || !commands_.empty(); });
        commands.swap(commands_);
        pieces.swap(pending_);
        stop = stop_;
      }
      for (const Command& c : commands) {
        if (c.done != nullptr) c.done->count_down();  // no ring holds anything any more
      }
      commands.clear();
      for (Piece* p : pieces) fail_piece(*p);
      pieces.clear();
      if (stop) return;
    }
  }

  const AioOptions& options_;
  EngineShared& shared_;
  const unsigned index_;

  std::mutex mutex_;
  std::condition_variable setup_cv_;
  bool setup_done_ = false;
  std::string setup_error_;
  std::deque<Piece*> pending_;
  std::vector<Command> commands_;
  bool stop_ = false;
  bool broken_ = false;                  // Note [A failed ring]
  std::condition_variable broken_cv_;    // where a broken lane sleeps

  // Owned by the lane's thread after setup (flags_name_ is read after setup_done_).
  io_uring ring_{};
  bool ring_open_ = false;
  std::string flags_name_;
  bool files_table_ = false;
  bool buffers_table_ = false;
  std::vector<bool> file_ok_;
  std::vector<bool> buffer_ok_;
  bool wake_armed_ = false;
  std::uint64_t wake_value_ = 0;
  std::vector<Piece*> in_flight_;        // by Piece::lane_slot; null where free
  std::vector<unsigned> free_slots_;
  std::string broken_what_;              // the failed call and its errno, once broken

  int wake_fd_ = -1;
  std::thread thread_;
};

class UringBackend final : public AioBackendImpl {
 public:
  UringBackend(const AioOptions& options, EngineShared& shared) : options_(options) {
    lanes_.reserve(options.parallelism);
    for (unsigned i = 0; i < options.parallelism; ++i) {
      lanes_.push_back(std::make_unique<Lane>(options_, shared, i));
    }
  }

  std::string_view name() const override { return "io_uring"; }
  std::string describe() const override {
    return fmt::format("io_uring ({}), {} ring{} x QD {}", lanes_.front()->flags_name(),
                       lanes_.size(), lanes_.size() == 1 ? "" : "s", options_.queue_depth);
  }

  void submit(unsigned lane, std::span<Piece* const> pieces) override {
    lanes_[lane]->push(pieces);
  }

  // Blocks until every lane has applied it, while the caller still holds the file open
  // (aio_engine.cpp's add_file). Files are added at setup, not per I/O: the wait is cheap.
  void register_file(FileId slot, int fd) override {
    Countdown done(static_cast<unsigned>(lanes_.size()));
    for (auto& l : lanes_) l->post({Command::kFile, slot, fd, nullptr, 0, &done});
    done.wait();
  }
  void unregister_file(FileId slot) override {
    for (auto& l : lanes_) l->post({Command::kFile, slot, -1, nullptr, 0, nullptr});
  }
  void register_buffer(unsigned slot, std::byte* data, std::size_t bytes) override {
    for (auto& l : lanes_) l->post({Command::kBuffer, slot, -1, data, bytes, nullptr});
  }
  // Blocks until every lane has cleared the slot: the pool unmaps the memory right after.
  void unregister_buffer(unsigned slot) noexcept override {
    Countdown done(static_cast<unsigned>(lanes_.size()));
    for (auto& l : lanes_) l->post({Command::kBuffer, slot, -1, nullptr, 0, &done});
    done.wait();
  }

 private:
  const AioOptions options_;
  std::vector<std::unique_ptr<Lane>> lanes_;
};

}  // namespace

std::unique_ptr<AioBackendImpl> make_uring_backend(const AioOptions& options,
                                                   EngineShared& shared) {
  return std::make_unique<UringBackend>(options, shared);
}

}  // namespace strata::offload
