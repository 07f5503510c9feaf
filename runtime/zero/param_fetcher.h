#pragma once
// The parameter fetcher: acquire / release of a module's full parameters, the prefetch
// scheduler, and the device memory for transient buffers. It needs no optimizer: inference
// streams parameters through it with no update gate.
//
// Bytes are the parameter state's (ModulePlan::shard_bytes, gathered_bytes): the compute dtype's,
// or the packed values and scales of a quantized module, which the fetcher moves as they are
// (the inference engine dequantizes them).
//
// A module that is not resident moves idle -> (NVMe: reading) -> gathered -> idle. gather()
// allocates its device buffer from the stream-ordered pool of its size class, copies this
// rank's shard into its slice on the H2D stream (from pinned memory or on the device; from a
// pinned staging buffer the NVMe read filled on the staged H2D stream, Note [Staged copies] in
// param_fetcher.cpp) and all-gathers in place on the comm stream;
// the module's `ready` event marks the end. The compute stream waits only on that event (the
// model does, with the view's `ready`). release() hands the buffer back to the pool after the
// compute stream's work so far, unless the trace says the module comes back soon
// (stage3_max_reuse_distance).
//
// prefetch() runs after every acquire and release: along the trace of the previous step
// (fetch_trace.h; routed modules, a mixture's experts, stay off it and are fetched when acquired
// or hinted, a hinted read going before the trace's: Note [Hinted reads first]), it starts NVMe
// reads while staging buffers are free, and gathers ahead while
// the elements in flight stay under stage3_prefetch_bucket_size, the gathered elements under
// stage3_max_live_parameters, and the device memory suffices without waiting. A gather ahead of
// a read still in flight makes the staged H2D stream wait for a host flag (device.h) that the read
// watcher, a thread of strata's own, raises when the read completes: no host function runs on a
// stream (on CUDA one thread runs those of every stream, and a waiting one would hold it).
//
// The expert cache (inference; set_expert_cache): a routed module (a mixture's expert) released
// by the model stays gathered on the device, across passes, while the cache's bytes stay under
// its limit; when the limit is passed or memory is needed (allocate_now), the least recently used
// expert of the layer holding the most cached bytes goes first (Note [The expert cache's policy]). A routed module acquired from the cache is a hit, else a miss.
//
// Transient memory: two regions carved from the arena at start, one per size class (plan.h),
// with stream-ordered reuse (runtime/device/device_pool.h). allocate_now() serves gathered
// parameters, gradient buffers and buckets: it waits for buffers whose work is finishing, then
// gives up modules kept for reuse or fetched ahead (the one needed last first), and only then
// throws OutOfMemory.
//
// Driven by one thread (the trainer); not thread-safe.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "runtime/comm/comm.h"
#include "runtime/config/config.h"
#include "runtime/device/device.h"
#include "runtime/device/device_pool.h"
#include "runtime/params/param_provider.h"
#include "runtime/tiers/tier_store.h"
#include "runtime/zero/engine_streams.h"
#include "runtime/zero/fetch_trace.h"
#include "runtime/zero/host_worker.h"
#include "runtime/zero/update_gate.h"

namespace strata::runtime::zero {

struct FetchCounters {
  std::uint64_t collective_bytes = 0;  // all-gathers' bus volume, this rank
  std::uint64_t fetches = 0;           // gathers of a non-resident module
  std::uint64_t prefetched = 0;        // of which issued ahead of their acquire
  std::uint64_t reused = 0;            // acquires served by a module kept gathered
  std::uint64_t trace_divergences = 0;
  std::uint64_t expert_hits = 0;       // acquires of a routed module found in the expert cache
  std::uint64_t expert_misses = 0;     // acquires of a routed module that had to be fetched
  // Fetched ahead and given up before any acquire (the lookahead's wrong guesses, reads dropped
  // for room): how many, their NVMe bytes read and their bytes copied to the device.
  std::uint64_t unused_fetches = 0;
  std::uint64_t unused_read_bytes = 0;
  std::uint64_t unused_h2d_bytes = 0;
};

class ParamFetcher {
 public:
  // Borrowed references outlive the fetcher. `gate` is null without an optimizer.
  // `activation_bytes`: what the model reserves on the device besides (left outside the regions).
  ParamFetcher(const config::Config& config, tiers::TierStore& store, device::Device& device, device::Stream& compute,
               EngineStreams& streams, comm::Communicator& comm, UpdateGate* gate, std::uint64_t activation_bytes);
  ~ParamFetcher();
  ParamFetcher(const ParamFetcher&) = delete;
  ParamFetcher& operator=(const ParamFetcher&) = delete;

  params::ModuleView acquire(int module);
  // A resident module's view without an acquire (ParamProvider::resident_view): no holder, no
  // trace, no block passed. Null data for a module not resident, or one whose other ranks'
  // slices are still to be gathered again.
  params::ModuleView resident_view(int module) const;
  void release(int module);
  void begin_step() {
    trace_.begin_step();
    current_block_ = 0;
  }
  // The end of the step's acquires: the trace is complete; every gathered buffer goes back.
  void end_step();
  // Module m's parameters were rewritten on this rank (an update, a checkpoint): a resident
  // module of several ranks gathers the others' slices again at its next acquire.
  void params_changed(int module);
  // Keeps up to `bytes` of released routed modules gathered (0: none, the default). Inference
  // only: parameters that an update rewrites are never cached.
  void set_expert_cache(std::uint64_t bytes);
  // Starts fetching module m ahead of its acquire (ParamProvider::prefetch): its NVMe read when a
  // staging buffer is free, its gather when the element budgets and the memory allow without
  // waiting; else nothing (the acquire fetches it).
  void hint(int module);
  // Module m's hint was wrong (ParamProvider::cancel_prefetch): its read is dropped if it has not
  // started, and fetched it is no longer awaited (evicted first).
  void unhint(int module);
  std::uint64_t expert_cache_bytes() const { return cache_bytes_; }
  bool held(int module) const { return modules_[static_cast<std::size_t>(module)].holders > 0; }
  // Being read or on the device (gathered, fetched ahead or in the expert cache).
  bool fetched(int module) const { return modules_.at(static_cast<std::size_t>(module)).fetch != FetchState::idle; }

  // Device memory for a buffer needed now (see the header comment), from `size_class`'s region.
  device::DeviceBuffer allocate_now(int size_class, std::size_t bytes, const std::string& what);
  // Back to its region once `stream`'s work so far has completed (Note [Stream-ordered reuse]).
  void free_after(int size_class, device::DeviceBuffer buffer, device::Stream& stream);
  // The arena's use with the regions counted by what is carved from them.
  device::ArenaStats device_memory() const;
  FetchCounters counters() const;

 private:
  enum class FetchState {
    idle,      // nothing on the device
    reading,   // NVMe read in flight into staging_[staging]
    gathered,  // gathered buffer allocated, H2D + all-gather enqueued (ready event recorded)
  };
  struct Module {
    FetchState fetch = FetchState::idle;
    int staging = -1;          // index into staging_ while reading
    std::uint64_t read_order = 0;  // when its last read started (read_clock_)
    std::vector<offload::AioHandle> reads;  // its shard's read in parts (Note [Reads in parts])
    std::uint32_t first_flag = 0;  // the staging buffer's read_done value before its first part's
    device::DeviceBuffer gathered;     // the gathered parameters while fetched
    std::unique_ptr<device::Event> ready;  // when `gathered` (or, resident, the full parameters) may be read
    int holders = 0;           // acquires not yet released
    bool prefetched = false;   // fetched ahead and not acquired yet
    bool stale = false;        // resident, several ranks: updated since its last all-gather
    bool cached = false;       // a released routed module kept in the expert cache
    bool wanted = false;       // hinted while every staging buffer was busy: in wanted_
    bool hinted = false;       // a routed module hinted and not acquired since (awaited())
    std::uint64_t last_use = 0;  // the expert cache's clock at its last release
  };
  struct Staging {
    offload::HostBuffer buffer;
    std::unique_ptr<device::Event> done;  // the H2D from it
    std::unique_ptr<device::HostFlag> read_done;  // raised to `reads` when its last read part completed
    std::uint32_t reads = 0;              // read parts started into it
    bool busy = false;
  };

  const tiers::ModulePlan& plan_of(int module) const { return store_.module_plan(module); }
  std::size_t shard_bytes(int module) const;
  void make_pools(std::uint64_t activation_bytes);
  void start_read(int module);             // NVMe: read the shard into a staging buffer
  // Elements per read part of a staged shard (Note [Reads in parts]).
  std::size_t read_part_numel(const tiers::TierState& param) const;
  // Enqueues on `in` the H2D of a staged shard into `slice`, each part after its read (waited on
  // the host when `on_demand`, else on the stream).
  void copy_staged(int module, char* slice, device::Stream& in, bool on_demand);
  // A staging buffer not busy, one whose last H2D has run first (Note [Free staging buffers]);
  // -1 when every one is busy.
  int free_staging() const;
  void free_a_staging_buffer();            // every one is busy: gathers (or drops) the oldest read
  void gather_ahead(int module);           // gather(module, false) within the element budgets
  void start_wanted_reads();               // wanted_ into free staging buffers, in order
  bool gather(int module, bool on_demand); // H2D + all-gather into a new device buffer
  void prefetch(bool may_wait);            // runs fetches ahead along the trace
  bool keep_for_reuse(int module) const;
  void drop_gathered(int module);
  bool evict_one(int size_class);
  bool routed(int module) const { return store_.plan_inputs().routed(module); }
  // A routed module hinted for the layer being computed or a later one (its block not passed):
  // acquired in a moment, so evicted last (Note [Hinted reads first]).
  bool awaited(int module) const {
    const Module& s = modules_[static_cast<std::size_t>(module)];
    return s.hinted && layer_of_[static_cast<std::size_t>(module)] >= current_block_;
  }
  void pass_block(int module);  // a non-routed module acquired: the hints of layers before it are stale
  void cache_insert(int module);      // a released routed module joins the expert cache
  void cache_remove(int module);      // it leaves (acquired again, or dropped)
  bool evict_cached(int size_class);  // drops the least recently used cached module; -1: any class
  // Whether module m's posted update may not have finished. With one rank: not finished now.
  // With several, not waited for yet (Note [Fetch decisions in program order]).
  bool update_pending(int module) const {
    if (gate_ == nullptr) return false;
    if (!in_program_order_) return gate_->pending(module);
    return gate_->posted_count(module) != waited_updates_[static_cast<std::size_t>(module)];
  }
  void wait_update(int module) {
    if (gate_ == nullptr) return;
    gate_->wait(module);
    waited_updates_[static_cast<std::size_t>(module)] = gate_->posted_count(module);
  }
  void count_all_gather(std::size_t full_bytes);

  tiers::TierStore& store_;
  device::Device& device_;
  device::Stream& compute_;
  EngineStreams& streams_;
  comm::Communicator& comm_;
  UpdateGate* gate_;
  DType dtype_;
  int shards_ = 1;
  // Several ranks: every decision that issues a collective follows from the calls made, never
  // from timing (Note [Fetch decisions in program order]).
  bool in_program_order_ = false;
  std::vector<std::uint64_t> waited_updates_;  // per module: posted_count when last waited for
  std::vector<int> layer_of_;      // a routed module's block (its layer), for the cache's policy
  std::vector<std::uint64_t> layer_cache_bytes_;  // cached bytes per layer (by its block's index)
  std::vector<int> cached_;        // the modules in the expert cache
  std::vector<int> wanted_;        // hinted modules waiting for a staging buffer, in hint order
  int current_block_ = 0;          // the furthest non-routed module acquired this step
  std::uint64_t cache_limit_ = 0;  // the expert cache's bytes at most
  std::uint64_t cache_bytes_ = 0;  // its bytes now
  std::uint64_t cache_clock_ = 0;
  std::uint64_t read_clock_ = 0;   // NVMe reads started
  std::size_t read_part_bytes_ = 0;  // aio.block_size: the least bytes of a read part
  std::vector<Module> modules_;
  std::vector<Staging> staging_;  // NVMe parameter reads
  std::unique_ptr<device::Event> shard_copied_;  // a gather's H2D, for the all-gather to wait on
  std::unique_ptr<device::DevicePool> pools_[2];  // transient buffers, per size class (plan.h)

  FetchTrace trace_;
  std::uint64_t live_numel_ = 0;      // elements in gathered buffers
  std::uint64_t prefetch_numel_ = 0;  // of which fetched ahead and not acquired yet
  std::uint64_t prefetch_bucket_ = 0;
  std::uint64_t max_live_ = 0;
  std::uint64_t max_reuse_distance_ = 0;
  FetchCounters counters_;
  HostWorker read_watcher_;  // waits for reads fetched ahead; last: stops before the buffers go
};

}  // namespace strata::runtime::zero
