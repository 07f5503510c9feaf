#pragma once
// The NVMe swap ring: optimizer states on NVMe (fp32 master, exp_avg, exp_avg_sq) stream
// through a ring of pinned swap sets, one window (a sub-group of sub_group_size elements,
// block-aligned) per set, while the CPU Adam updates another:
//
//   window j:    ... read ahead (pipeline_read) ... | Adam on set j | write behind (pipeline_write)
//
// The ring does not drain at module boundaries: while module m's last windows are updated, the
// first windows of the next modules whose updates are already queued are read ahead, and m's
// writes complete behind the next module's Adam. Reads run `sets - 2` windows ahead with
// pipeline_read (none without); a set's writes are waited for when the set is reused, at once
// without pipeline_write. A read of a module waits first for that module's writes still in
// flight, so a window is never read before its last write lands.
//
// Used by the update worker (or by another thread while the worker is idle: flush()).
#include <cstddef>
#include <deque>
#include <functional>
#include <vector>

#include "offload/aio_engine.h"
#include "offload/host_buffer.h"
#include "runtime/tiers/tier_store.h"

namespace strata::runtime::zero {

class SwapRing {
 public:
  struct Window {
    int module = -1;
    std::size_t offset = 0, n = 0;  // elements of the shard
    float* master = nullptr;
    float* exp_avg = nullptr;
    float* exp_avg_sq = nullptr;
    int set = -1;
  };
  // The k-th module whose update is queued after the one running now (k = 0: the next), or -1.
  using Upcoming = std::function<int(std::size_t k)>;

  // `sets` swap sets of `window_numel` fp32 elements per state, from the store's pinned pool
  // (none when sets is 0: nothing on NVMe).
  SwapRing(tiers::TierStore& store, int sets, std::size_t window_numel, bool pipeline_read, bool pipeline_write);
  ~SwapRing();  // waits for the I/O in flight (errors are logged: flush() reports them)
  SwapRing(const SwapRing&) = delete;
  SwapRing& operator=(const SwapRing&) = delete;

  // The window [offset, offset + n) of module m's states, read (the reads ahead topped up first).
  Window acquire(int module, std::size_t offset, std::size_t n, const Upcoming& upcoming);
  // Its states were updated in place: write them back.
  void release(const Window& window);
  // Waits for every read and write in flight and forgets the reads ahead: before anything else
  // reads or writes NVMe optimizer states (checkpoints, export, initial values).
  void flush();

 private:
  struct Key {
    int module = -1;
    std::size_t offset = 0, n = 0;
  };
  struct Set {
    offload::HostBuffer master, exp_avg, exp_avg_sq;
    offload::AioHandle reads[3], writes[3];
    int writing_module = -1;  // whose writes may be in flight
  };
  struct Queued {
    Key key;
    int set = -1;
  };
  bool next_key(const Key& after, const Upcoming& upcoming, Key* next) const;
  void issue_read(const Key& key);
  void wait_writes(Set& set);
  void wait_reads(Set& set);
  tiers::TierState& state(int module, int k);
  offload::AioEngine& io();

  tiers::TierStore& store_;
  std::size_t window_numel_ = 0;
  std::size_t lookahead_ = 0;  // windows read ahead of the one being updated
  bool pipeline_write_ = true;
  std::vector<Set> sets_;
  std::size_t next_set_ = 0;
  int running_ = -1;           // the module of the window acquired last
  std::deque<Queued> queued_;  // reads issued, in the order the windows will be updated
};

}  // namespace strata::runtime::zero
