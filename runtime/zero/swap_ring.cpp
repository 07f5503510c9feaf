#include "runtime/zero/swap_ring.h"

#include <algorithm>
#include <exception>

#include "core/error.h"
#include "core/shutdown.h"

namespace strata::runtime::zero {
namespace {

constexpr tiers::StateKind kSwapped[3] = {tiers::StateKind::master, tiers::StateKind::exp_avg,
                                          tiers::StateKind::exp_avg_sq};

}  // namespace

SwapRing::SwapRing(tiers::TierStore& store, int sets, std::size_t window_numel, bool pipeline_read, bool pipeline_write)
    : store_(store), window_numel_(window_numel), pipeline_write_(pipeline_write) {
  const std::size_t bytes = window_numel * 4;
  for (int i = 0; i < sets; ++i) {
    Set set;
    set.master = store.pinned().allocate(bytes, "optimizer swap buffer (master)");
    set.exp_avg = store.pinned().allocate(bytes, "optimizer swap buffer (exp_avg)");
    set.exp_avg_sq = store.pinned().allocate(bytes, "optimizer swap buffer (exp_avg_sq)");
    sets_.push_back(std::move(set));
  }
  lookahead_ = pipeline_read && sets >= 2 ? static_cast<std::size_t>(sets) - 2 : 0;
}

SwapRing::~SwapRing() {
  // No swap set may be freed while the engine still reads into it or writes from it.
  drain_for_shutdown("swap ring", [this] { flush(); });
}

tiers::TierState& SwapRing::state(int module, int k) { return store_.state(module, kSwapped[k]); }

offload::AioEngine& SwapRing::io() { return store_.io(); }

void SwapRing::wait_writes(Set& set) {
  for (offload::AioHandle& w : set.writes) {
    if (w) io().wait(w);
    w = {};
  }
  set.writing_module = -1;
}

void SwapRing::wait_reads(Set& set) {
  for (offload::AioHandle& r : set.reads) {
    if (r) io().wait(r);
    r = {};
  }
}

// The window after `after` in update order: the rest of its module, then the queued modules
// whose optimizer states are on NVMe.
bool SwapRing::next_key(const Key& after, const Upcoming& upcoming, Key* next) const {
  const std::size_t shard = store_.state(after.module, tiers::StateKind::master).numel();
  if (after.offset + after.n < shard) {
    const std::size_t offset = after.offset + after.n;
    *next = {after.module, offset, std::min(window_numel_, shard - offset)};
    return true;
  }
  // Where `after`'s module is in the queue: the running module, or a module queued after it.
  std::size_t k = 0;
  if (after.module != running_) {
    while (upcoming(k) >= 0 && upcoming(k) != after.module) ++k;
    if (upcoming(k) < 0) return false;
    ++k;
  }
  for (int m = upcoming(k); m >= 0; m = upcoming(++k)) {
    const tiers::TierState& master = store_.state(m, tiers::StateKind::master);
    if (master.tier() != tiers::Tier::nvme) continue;
    *next = {m, 0, std::min(window_numel_, master.numel())};
    return true;
  }
  return false;
}

void SwapRing::issue_read(const Key& key) {
  // A write of this module still in flight may hold the bytes about to be read.
  for (Set& other : sets_) {
    if (other.writing_module == key.module) wait_writes(other);
  }
  const std::size_t index = next_set_;
  next_set_ = (next_set_ + 1) % sets_.size();
  Set& set = sets_[index];
  wait_writes(set);  // the set's last window is on disk before its buffers are reused
  std::byte* buffers[3] = {set.master.data(), set.exp_avg.data(), set.exp_avg_sq.data()};
  for (int k = 0; k < 3; ++k) set.reads[k] = state(key.module, k).read_async(key.offset, key.n, buffers[k]);
  queued_.push_back({key, static_cast<int>(index)});
}

SwapRing::Window SwapRing::acquire(int module, std::size_t offset, std::size_t n, const Upcoming& upcoming) {
  STRATA_ASSERT(!sets_.empty(), "the swap ring has no sets (nothing was planned on NVMe)");
  running_ = module;
  const bool expected = !queued_.empty() && queued_.front().key.module == module &&
                        queued_.front().key.offset == offset && queued_.front().key.n == n;
  if (!expected) {
    // The reads ahead guessed another order (a task between the updates): start again here.
    flush();
    issue_read({module, offset, n});
  }
  // Top up the reads ahead along the update order.
  while (queued_.size() < lookahead_ + 1) {
    Key next;
    if (!next_key(queued_.back().key, upcoming, &next)) break;
    issue_read(next);
  }
  const Queued front = queued_.front();
  queued_.pop_front();
  Set& set = sets_[static_cast<std::size_t>(front.set)];
  wait_reads(set);
  Window w;
  w.module = module;
  w.offset = offset;
  w.n = n;
  w.master = reinterpret_cast<float*>(set.master.data());
  w.exp_avg = reinterpret_cast<float*>(set.exp_avg.data());
  w.exp_avg_sq = reinterpret_cast<float*>(set.exp_avg_sq.data());
  w.set = front.set;
  return w;
}

void SwapRing::release(const Window& window) {
  Set& set = sets_[static_cast<std::size_t>(window.set)];
  const std::byte* buffers[3] = {set.master.data(), set.exp_avg.data(), set.exp_avg_sq.data()};
  for (int k = 0; k < 3; ++k) {
    set.writes[k] = state(window.module, k).write_async(window.offset, window.n, buffers[k]);
  }
  set.writing_module = window.module;
  if (!pipeline_write_) wait_writes(set);
}

void SwapRing::flush() {
  // Every read and write is waited for, even after one of them failed
  // (Note [Drain everything, then report] in core/shutdown.h): the sets' buffers must outlive all of them. The first
  // failure is thrown at the end.
  std::exception_ptr first;
  for (Set& set : sets_) {
    for (offload::AioHandle* handles : {set.reads, set.writes}) {
      for (int k = 0; k < 3; ++k) {
        try {
          if (handles[k]) io().wait(handles[k]);
        } catch (...) {
          if (!first) first = std::current_exception();
        }
        handles[k] = {};
      }
    }
    set.writing_module = -1;
  }
  queued_.clear();
  if (first) std::rethrow_exception(first);
}

}  // namespace strata::runtime::zero
