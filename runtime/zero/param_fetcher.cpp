#include "runtime/zero/param_fetcher.h"

#include <algorithm>
#include <span>

#include "core/error.h"
#include "core/units.h"
#include "offload/aio_limits.h"

namespace strata::runtime::zero {

// Note [Staged copies]: the H2D of a shard read from NVMe runs on EngineStreams::staged_in, not
// on copy_in. A gather fetched ahead of its read enqueues a wait for the read's HostFlag before
// the copy; on copy_in that wait held up everything enqueued behind it for as long as the disk
// took: the updater's new parameters of resident modules and its `updated` events (what the
// next fetch or acquire of those modules waits on), and the copies of modules gathered on
// demand after a trace divergence. Now a slow read delays its own module and the staged copies
// after it (gathered in trace order, so needed after it anyway).
// Sharing copy_in ordered a staged copy after all earlier copy_in work; what of that it relied
// on is ordered otherwise:
//  - the module's last update: an NVMe shard is written from the updater's pinned buffers
//    straight to the disk (no stream work; its `updated` event covers nothing of the shard),
//    and its read starts only once the gate opened, which is once those writes completed
//    (prefetch() skips modules with an update pending, acquire() waits for it): host order;
//  - the staging buffer: start_read() waits for its `done` event, recorded after its copy on
//    staged_in, on the host;
//  - the gathered buffer: the pool hands back only memory whose users' work has completed
//    (Note [Stream-ordered reuse]), whatever stream they were on;
//  - the all-gather (several ranks) waits for `shard_copied_` recorded on the stream that
//    copied; the module's `ready` is recorded on comm, or on that stream with one rank.
// Still shared: with several ranks the all-gathers run on comm in the order they were issued
// (every rank issues the same), so a slow read delays the collectives issued after its module's.

ParamFetcher::ParamFetcher(const config::Config& config, tiers::TierStore& store, device::Device& device,
                           device::Stream& compute, EngineStreams& streams, comm::Communicator& comm, UpdateGate* gate,
                           std::uint64_t activation_bytes)
    : store_(store),
      device_(device),
      compute_(compute),
      streams_(streams),
      comm_(comm),
      gate_(gate),
      dtype_(store.dtype()),
      shards_(store.plan().shards),
      in_program_order_(comm.world() > 1) {
  const config::ZeroConfig& z = config.zero_optimization;
  prefetch_bucket_ = config::value_or_default(z, &config::ZeroConfig::stage3_prefetch_bucket_size);
  max_live_ = z.stage3_max_live_parameters;
  max_reuse_distance_ = z.stage3_max_reuse_distance;
  read_part_bytes_ = config.aio.block_size;
  modules_.resize(static_cast<std::size_t>(store.module_count()));
  waited_updates_.assign(modules_.size(), 0);
  // A routed module's layer: the last module before it that is not routed (its block).
  layer_of_.assign(modules_.size(), 0);
  layer_cache_bytes_.assign(modules_.size(), 0);
  for (std::size_t m = 0, block = 0; m < modules_.size(); ++m) {
    if (!store.plan_inputs().routed(static_cast<int>(m))) block = m;
    layer_of_[m] = static_cast<int>(block);
  }
  std::size_t max_nvme_shard = 0;
  for (int m = 0; m < store.module_count(); ++m) {
    modules_[static_cast<std::size_t>(m)].ready = device.create_event();
    const tiers::TierState& param = store.state(m, tiers::StateKind::param);
    if (!plan_of(m).resident && param.needs_staging()) max_nvme_shard = std::max(max_nvme_shard, param.bytes());
  }
  for (int i = 0; i < store.plan().param_staging_buffers; ++i) {
    staging_.push_back({store.pinned().allocate(max_nvme_shard, "NVMe parameter read buffer"),
                        device.create_event(), device.create_host_flag(), 0, false});
  }
  shard_copied_ = device.create_event();
  make_pools(activation_bytes);
}

ParamFetcher::~ParamFetcher() {
  try {
    read_watcher_.drain();
  } catch (const std::exception&) {
  }
  // A run stopped by an error (an EIO reading a parameter shard in the middle of a forward)
  // leaves modules gathered: their buffers go back before the pools they came from (members
  // are destroyed in reverse order: pools_ before modules_), once their H2D / all-gather is done.
  for (Module& m : modules_) {
    if (m.gathered.empty()) continue;
    try {
      if (m.ready) m.ready->synchronize();
    } catch (const std::exception&) {
    }
    m.gathered.reset();
  }
}

std::size_t ParamFetcher::shard_bytes(int module) const {
  return plan_of(module).shard_bytes;  // the compute dtype's, or quantized (plan.h)
}

void ParamFetcher::make_pools(std::uint64_t activation_bytes) {
  const tiers::ZeroPlan& plan = store_.plan();
  // What the device has left once the model has its activations and a little scratch.
  const device::ArenaStats a = device_.memory_stats();
  const std::uint64_t held =
      a.current_bytes + activation_bytes + tiers::kDeviceScratchBytes + 4 * device::Arena::kAlignment;
  const std::uint64_t need = plan.class_minimum_bytes[0] + plan.class_minimum_bytes[1];
  const std::uint64_t avail = a.budget_bytes > held ? a.budget_bytes - held : 0;
  if (avail < need) {
    throw device::OutOfMemory("the device has " + format_bytes(avail) + " left for gathered parameters and gradient "
                      "buffers, and needs " + format_bytes(need),
                      "strata.device_memory", "raise strata.device_memory or offload more", need);
  }
  // The memory beyond the minimums goes to the classes in proportion to their sizes, up to what
  // each can use: room to fetch ahead and to keep modules for reuse (tiers::transient_pools, which
  // strata estimate calls too).
  const tiers::TransientPools sizes = tiers::transient_pools(plan, avail);
  const auto reuse = in_program_order_ ? device::DevicePool::Reuse::in_issue_order : device::DevicePool::Reuse::when_done;
  for (int c = 0; c < 2; ++c) {
    pools_[c] = std::make_unique<device::DevicePool>(
        device_, sizes.bytes[c], c == 0 ? "transient buffers (large modules)" : "transient buffers (small modules)",
        reuse);
  }
}

// Note [Free staging buffers]: a module gathered ahead of its read leaves its staging buffer not
// `busy` at once, with the H2D from it enqueued on the staged stream behind the read; a read
// started into that buffer waits on the host (start_read) for that copy, that is for the previous
// read. So a read takes a buffer whose copy has run when there is one. Taking the first buffer not
// busy, every hinted read after the first waited for the one before it, and the thread with it:
// at batch 1 from NVMe (configs/qwen3-moe-bytes.json, 5 staging buffers) a layer's two experts
// were read one after the other, the second starting once the first was read and copied.
int ParamFetcher::free_staging() const {
  int pending = -1;
  for (std::size_t i = 0; i < staging_.size(); ++i) {
    if (staging_[i].busy) continue;
    if (staging_[i].done->query()) return static_cast<int>(i);
    if (pending < 0) pending = static_cast<int>(i);
  }
  return pending;
}

// Note [Reads in parts]
// ~~~~~~~~~~~~~~~~~~~~~
// A staged shard is read in parts, each its own engine read of whole aio.block_size blocks (the
// swap's unit; at most kMaxReadParts parts), and each part's H2D waits for that part alone. The
// copy of the first parts then runs while the rest is read, and once the last byte has arrived
// only the last part is left to copy, not the whole shard: the copy leaves the critical path of
// a module needed as soon as it is read (a mixture's expert at batch 1: its layer's router ran just
// before). That needs a disk that completes a queue's requests in the order they were read, as
// an NVMe drive does; the dev VM's virtio disk completes a layer's queued parts together (one
// 4.8 ms wait, then all of them within 0.1 ms: `strata infer --trace`, qwen3-moe-bytes from NVMe,
// batch 1), so there the copies still follow the whole read and nothing was gained; the GPU
// machine's NVMe is where it is to be measured. A part that is not read yet when its module is
// gathered ahead makes its copy (and the later parts') wait on the stream for the staging
// buffer's HostFlag raised to that part's value (Staging::reads counts parts); the read watcher
// raises it, part after part.
namespace {
constexpr std::size_t kMaxReadParts = 16;
}  // namespace

std::size_t ParamFetcher::read_part_numel(const tiers::TierState& param) const {
  const std::size_t eb = param.elem_bytes();
  STRATA_ASSERT(eb > 0 && offload::kDirectIoAlignment % eb == 0, "a staged element does not divide the O_DIRECT block");
  // Whole swap blocks (aio.block_size, a multiple of the O_DIRECT block): where the swap lets a
  // read of an extent start and end.
  const std::size_t blocks = (param.bytes() + kMaxReadParts * read_part_bytes_ - 1) / (kMaxReadParts * read_part_bytes_);
  return std::max<std::size_t>(1, blocks) * read_part_bytes_ / eb;
}

void ParamFetcher::start_read(int module) {
  Module& s = modules_[static_cast<std::size_t>(module)];
  const tiers::TierState& param = store_.state(module, tiers::StateKind::param);
  STRATA_ASSERT(s.fetch == FetchState::idle && param.needs_staging(), "start_read of a busy module");
  const int index = free_staging();
  STRATA_ASSERT(index >= 0, "start_read without a free staging buffer");
  Staging& st = staging_[static_cast<std::size_t>(index)];
  st.done->synchronize();  // the H2D of its previous module has finished
  const std::size_t part = read_part_numel(param), numel = param.numel();
  s.reads.clear();
  try {
    for (std::size_t at = 0; at < numel; at += part) {
      s.reads.push_back(param.read_async(at, std::min(part, numel - at),
                                         st.buffer.data() + at * param.elem_bytes()));
    }
  } catch (...) {
    // Nothing changed but the parts in flight into the buffer: they finish before it is reused.
    for (const offload::AioHandle& r : s.reads) {
      try {
        param.engine().wait(r);
      } catch (const std::exception&) {
      }
    }
    s.reads.clear();
    throw;
  }
  st.busy = true;
  s.first_flag = st.reads;
  st.reads += static_cast<std::uint32_t>(s.reads.size());
  s.staging = index;
  s.read_order = ++read_clock_;
  s.fetch = FetchState::reading;
}

void ParamFetcher::copy_staged(int module, char* slice, device::Stream& in, bool on_demand) {
  Module& s = modules_[static_cast<std::size_t>(module)];
  const tiers::TierState& param = store_.state(module, tiers::StateKind::param);
  Staging& st = staging_[static_cast<std::size_t>(s.staging)];
  offload::AioEngine& io = param.engine();
  const std::size_t part_bytes = read_part_numel(param) * param.elem_bytes(), shard = shard_bytes(module);
  bool on_stream = false;  // a part not read yet: it and every later part wait on the stream
  // Once every copy is enqueued (or a part failed): the staging buffer is free after them.
  auto let_go_of_staging = [&] {
    st.done->record(in);
    st.busy = false;
    s.staging = -1;
    s.reads.clear();
  };
  std::size_t p = 0;
  try {
    for (; p < s.reads.size(); ++p) {
      const offload::AioHandle read = s.reads[p];
      if (on_demand) {
        io.wait(read);  // throws the read's error, naming the extent
      } else if (on_stream || !io.poll(read)) {
        // Fetched ahead: the H2D waits for the part on the stream itself (a host flag the read
        // watcher raises when the part completes), so the copy follows the read without the
        // trainer thread coming back and without a host function on the stream. A failed read
        // still raises the flag; its error is thrown at the next acquire or at end_step().
        // After an earlier failure the watcher skips `run` but still runs `finally`: it waits for
        // the part quietly there, so the flag never rises before the part's bytes have landed.
        on_stream = true;
        const std::uint32_t value = s.first_flag + static_cast<std::uint32_t>(p) + 1;
        in.wait_host(*st.read_done, value);
        read_watcher_.post([&io, read] { io.wait(read); },
                           [&io, read, flag = st.read_done.get(), value] {
                             try {
                               io.wait(read);
                             } catch (const std::exception&) {
                             }
                             flag->signal(value);
                           });
      } else {
        io.wait(read);  // done: reports a failure now
      }
      const std::size_t begin = p * part_bytes, end = std::min(shard, begin + part_bytes);
      if (begin < end) in.copy_async(slice + begin, st.buffer.data() + begin, end - begin);
    }
  } catch (...) {
    // A part failed (waited on demand): the parts still in flight finish before the staging
    // buffer is free again, and the copies enqueued so far are fenced by `done` (the caller
    // frees the device buffer after them). The module can be read again.
    for (std::size_t q = p + 1; q < s.reads.size(); ++q) {
      try {
        io.wait(s.reads[q]);
      } catch (const std::exception&) {
      }
    }
    let_go_of_staging();
    s.fetch = FetchState::idle;
    throw;
  }
  store_.transfers().add_h2d(shard);
  let_go_of_staging();
}

// On demand with every staging buffer taken by reads fetched ahead (along the trace, or hinted:
// a layer's experts, the lookahead's guesses): the oldest read's module is gathered ahead -- its
// H2D waits for the read on the staged stream (Note [Staged copies]), so its staging buffer is
// free for the next read once that read and copy are done, and the bytes read are kept. This
// gather may pass stage3_prefetch_bucket_size / stage3_max_live_parameters (its bytes are read
// already; the memory is there without waiting). Only when the device has no room for it now is
// the read dropped (its module is read again when wanted), which is what always happened before.
void ParamFetcher::free_a_staging_buffer() {
  int oldest = -1;
  for (std::size_t m = 0; m < modules_.size(); ++m) {
    const Module& s = modules_[m];
    if (s.fetch != FetchState::reading) continue;
    if (oldest < 0 || s.read_order < modules_[static_cast<std::size_t>(oldest)].read_order) {
      oldest = static_cast<int>(m);
    }
  }
  STRATA_ASSERT(oldest >= 0, "every staging buffer busy with no read in flight");
  if (gather(oldest, /*on_demand=*/false)) return;
  drop_gathered(oldest);
}

bool ParamFetcher::gather(int module, bool on_demand) {
  Module& s = modules_[static_cast<std::size_t>(module)];
  const tiers::ModulePlan& mp = plan_of(module);
  STRATA_ASSERT(!mp.resident && s.fetch != FetchState::gathered, "gather of a gathered module");
  const tiers::TierState& param = store_.state(module, tiers::StateKind::param);
  const std::size_t full_bytes = mp.gathered_bytes;
  if (param.needs_staging() && s.fetch == FetchState::idle) {
    if (!on_demand) return false;
    if (free_staging() < 0) free_a_staging_buffer();
    start_read(module);
  }
  const std::string what = store_.plan_inputs().module_names[static_cast<std::size_t>(module)] +
                           " gathered parameters";
  device::DeviceBuffer buffer = on_demand ? allocate_now(mp.size_class, full_bytes, what)
                                  : pools_[mp.size_class]->try_allocate(full_bytes, what);
  if (buffer.empty()) return false;

  char* slice = static_cast<char*>(buffer.data()) + static_cast<std::size_t>(store_.shard_rank()) * shard_bytes(module);
  // The shard's H2D: a staged (NVMe) shard's on a stream of its own (Note [Staged copies]).
  device::Stream& in = param.needs_staging() ? *streams_.staged_in : *streams_.copy_in;
  if (!param.needs_staging()) {
    // The last update wrote the shard: on the optimizer stream (device tier) or before this
    // module's gate opened (host tiers).
    if (gate_ != nullptr) in.wait(gate_->updated(module));
    param.copy_to_device(0, param.numel(), slice, in);
  } else {
    try {
      copy_staged(module, slice, in, on_demand);
    } catch (...) {
      // Copies of the parts before the failed one may still be enqueued: the memory goes back
      // after them.
      pools_[mp.size_class]->free_after(std::move(buffer), in);
      throw;
    }
  }
  if (shards_ > 1) {
    // The all-gather waits for this shard's copy, on whichever stream made it.
    shard_copied_->record(in);
    streams_.comm->wait(*shard_copied_);
    comm_.all_gather(slice, buffer.data(), mp.part.shard_numel, dtype_, *streams_.comm);
    count_all_gather(full_bytes);
    s.ready->record(*streams_.comm);
  } else {
    s.ready->record(in);
  }
  s.gathered = std::move(buffer);
  s.fetch = FetchState::gathered;
  live_numel_ += mp.part.padded_numel;
  ++counters_.fetches;
  if (!on_demand) {
    s.prefetched = true;
    prefetch_numel_ += mp.part.padded_numel;
    ++counters_.prefetched;
  }
  return true;
}

// Note [Fetch decisions in program order]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A module gathered ahead issues its all-gather then, before the collectives issued later (a
// reduce-scatter in the backward, a resident module's gather): every rank must decide the same
// (Note [Collective order] in runtime/comm/sequencer.h). Two inputs of those decisions were
// timing: whether the pool had room (which buffers' work had completed) and whether a module's
// update had finished (the optimizer worker's progress). With several ranks the pools place in
// issue order (Note [Placement in issue order] in runtime/device/device_pool.h) and an update
// counts as finished once this thread has waited for it (update_pending: posted_count against
// waited_updates_), both functions of the calls made. So with several ranks a fetch ahead waits
// for its module's update where one rank would skip it: after a release (the released module's
// work is enqueued) and at a hint (its acquire comes next); acquire's own prefetch still stops at
// the first module not waited for. One rank keeps the timing, which only decides how far ahead it
// fetches.
void ParamFetcher::prefetch(bool may_wait) {
  start_wanted_reads();
  if (!trace_.following()) return;
  if (may_wait) {
    // After a release the module just released is already enqueued on the compute stream, so
    // the trainer thread may wait for the update of the next module to fetch (the optimizer
    // worker runs the updates in the order the modules come).
    for (int m : trace_.upcoming()) {
      if (plan_of(m).resident || modules_[static_cast<std::size_t>(m)].fetch == FetchState::gathered) continue;
      if (update_pending(m)) wait_update(m);
      break;
    }
  }
  // NVMe reads run furthest ahead: as many as there are staging buffers, once no hinted module
  // waits for one (Note [Hinted reads first]).
  for (int m : trace_.upcoming()) {
    if (!wanted_.empty()) break;
    const Module& s = modules_[static_cast<std::size_t>(m)];
    if (plan_of(m).resident || !store_.state(m, tiers::StateKind::param).needs_staging() ||
        s.fetch != FetchState::idle) {
      continue;
    }
    if (free_staging() < 0) break;
    if (update_pending(m)) {  // its new parameters may still be being written
      if (!(may_wait && in_program_order_)) break;
      wait_update(m);
    }
    start_read(m);
  }
  // Gathers follow, in trace order, within the element budgets.
  for (int m : trace_.upcoming()) {
    const tiers::ModulePlan& mp = plan_of(m);
    if (mp.resident || modules_[static_cast<std::size_t>(m)].fetch == FetchState::gathered) continue;
    if (prefetch_numel_ >= prefetch_bucket_) break;
    if (live_numel_ + mp.part.padded_numel > max_live_) break;
    if (update_pending(m)) {
      if (!(may_wait && in_program_order_)) break;
      wait_update(m);
    }
    if (!gather(m, false)) break;
  }
}

bool ParamFetcher::keep_for_reuse(int module) const {
  if (!trace_.following()) return false;
  // Elements fetched between now and the module's next use along the trace.
  std::uint64_t distance = 0;
  for (int m : trace_.upcoming()) {
    if (m == module) return distance <= max_reuse_distance_ && live_numel_ <= max_live_;
    if (!plan_of(m).resident) distance += plan_of(m).part.padded_numel;
    if (distance > max_reuse_distance_) return false;
  }
  return false;
}

void ParamFetcher::drop_gathered(int module) {
  Module& s = modules_[static_cast<std::size_t>(module)];
  const tiers::TierState& param = store_.state(module, tiers::StateKind::param);
  // Fetched ahead and given up before any acquire: a wrong guess, a read dropped for room.
  if (s.fetch == FetchState::reading || (s.fetch == FetchState::gathered && s.prefetched)) {
    ++counters_.unused_fetches;
    if (param.needs_staging()) counters_.unused_read_bytes += shard_bytes(module);
    // Copied from the host (NVMe staging or pinned), not within the device.
    if (s.fetch == FetchState::gathered && (param.needs_staging() || param.host_data() != nullptr)) {
      counters_.unused_h2d_bytes += shard_bytes(module);
    }
  }
  if (s.fetch == FetchState::reading) {
    for (const offload::AioHandle& r : s.reads) param.engine().wait(r);
    s.reads.clear();
    staging_[static_cast<std::size_t>(s.staging)].busy = false;
    s.staging = -1;
    s.fetch = FetchState::idle;
    return;
  }
  if (s.fetch != FetchState::gathered) return;
  STRATA_ASSERT(s.holders == 0, "dropping a module the model still holds");
  const tiers::ModulePlan& mp = plan_of(module);
  if (s.cached) cache_remove(module);  // live again, for the subtraction below
  // The compute stream read it last (it waited on `ready`, so the copies are done by then).
  compute_.wait(*s.ready);
  pools_[mp.size_class]->free_after(std::move(s.gathered), compute_);
  live_numel_ -= mp.part.padded_numel;
  if (s.prefetched) prefetch_numel_ -= mp.part.padded_numel;
  s.prefetched = false;
  s.fetch = FetchState::idle;
}

void ParamFetcher::hint(int module) {
  Module& s = modules_.at(static_cast<std::size_t>(module));
  const tiers::ModulePlan& mp = plan_of(module);
  if (routed(module)) s.hinted = true;  // a cached one too: not the cache's victim now
  if (mp.resident || s.fetch == FetchState::gathered) return;
  if (update_pending(module)) {
    // Several ranks: pending until waited for, so wait (its acquire would in a moment).
    if (!in_program_order_) return;
    wait_update(module);
  }
  if (s.fetch == FetchState::idle && store_.state(module, tiers::StateKind::param).needs_staging()) {
    if (free_staging() < 0 || !wanted_.empty()) {  // behind the hints waiting already
      if (!s.wanted) {  // its read starts when a staging buffer frees (Note [Hinted reads first])
        s.wanted = true;
        wanted_.push_back(module);
      }
      start_wanted_reads();
      return;
    }
    start_read(module);
  }
  gather_ahead(module);
}

void ParamFetcher::unhint(int module) {
  Module& s = modules_.at(static_cast<std::size_t>(module));
  s.hinted = false;
  if (s.wanted) {
    s.wanted = false;
    wanted_.erase(std::find(wanted_.begin(), wanted_.end(), module));
  }
  // Fetched ahead and not needed: its memory and prefetch budget back now (a read still in
  // flight finishes; it is given up when a buffer is needed).
  if (s.fetch == FetchState::gathered && s.prefetched && s.holders == 0 && !s.cached) drop_gathered(module);
}

void ParamFetcher::pass_block(int module) {
  if (module <= current_block_) return;
  current_block_ = module;
  // Hints of layers passed (the lookahead's wrong guesses) read nothing more.
  std::size_t kept = 0;
  for (int m : wanted_) {
    if (layer_of_[static_cast<std::size_t>(m)] < current_block_) {
      modules_[static_cast<std::size_t>(m)].wanted = false;
    } else {
      wanted_[kept++] = m;
    }
  }
  wanted_.resize(kept);
}

void ParamFetcher::gather_ahead(int module) {
  const tiers::ModulePlan& mp = plan_of(module);
  if (prefetch_numel_ >= prefetch_bucket_ || live_numel_ + mp.part.padded_numel > max_live_) return;
  gather(module, false);
}

// Note [Hinted reads first]
// ~~~~~~~~~~~~~~~~~~~~~~~~~
// A hint (a layer's routed experts, once its router ran) finds the staging buffers taken by the
// trace's reads ahead (the next blocks) more often than not. Its module is then `wanted`: the
// next staging buffer to free goes to it, in hint order, and no trace read starts while one is
// waiting. A hinted module is `awaited` until acquired or until a later layer's block is: the
// last victim of evict_one and never the expert cache's. The lookahead's wrong guesses (models/
// moe) are hinted like the right ones; once the next block is acquired they are stale: no longer
// wanted (their reads never start) and no longer awaited (the first victims).
// Before, each acquire's prefetch gave the freed buffer back to the trace, the expert came on
// demand with every buffer busy, and with the device memory full of hinted experts the trace's
// read was dropped to make room, to be started again at the next prefetch: at batch 16 from NVMe
// (docs/benchmarks.md, "Mixtures of experts"), 479 MiB read per step for 388 MiB copied, and
// 390 MiB since.
void ParamFetcher::start_wanted_reads() {
  std::size_t done = 0;
  for (; done < wanted_.size(); ++done) {
    const int m = wanted_[done];
    Module& s = modules_[static_cast<std::size_t>(m)];
    if (s.fetch != FetchState::idle) {  // read meanwhile (an acquire, the trace)
      s.wanted = false;
      continue;
    }
    if (free_staging() < 0) break;
    s.wanted = false;
    if (update_pending(m)) continue;  // not read ahead of its update (hint() checked too)
    start_read(m);
    gather_ahead(m);
  }
  wanted_.erase(wanted_.begin(), wanted_.begin() + static_cast<std::ptrdiff_t>(done));
}

void ParamFetcher::set_expert_cache(std::uint64_t bytes) {
  STRATA_ASSERT(gate_ == nullptr || bytes == 0, "the expert cache is for inference: updates rewrite parameters");
  cache_limit_ = bytes;
  while (cache_bytes_ > cache_limit_ && evict_cached(-1)) {
  }
}

void ParamFetcher::cache_insert(int module) {
  Module& s = modules_[static_cast<std::size_t>(module)];
  const tiers::ModulePlan& mp = plan_of(module);
  if (mp.gathered_bytes > cache_limit_) {
    drop_gathered(module);
    return;
  }
  s.cached = true;
  s.last_use = ++cache_clock_;
  cache_bytes_ += mp.gathered_bytes;
  layer_cache_bytes_[static_cast<std::size_t>(layer_of_[static_cast<std::size_t>(module)])] += mp.gathered_bytes;
  cached_.push_back(module);
  live_numel_ -= mp.part.padded_numel;  // cached modules do not hold back the prefetch
  while (cache_bytes_ > cache_limit_ && evict_cached(-1)) {
  }
}

void ParamFetcher::cache_remove(int module) {
  Module& s = modules_[static_cast<std::size_t>(module)];
  const tiers::ModulePlan& mp = plan_of(module);
  s.cached = false;
  cache_bytes_ -= mp.gathered_bytes;
  layer_cache_bytes_[static_cast<std::size_t>(layer_of_[static_cast<std::size_t>(module)])] -= mp.gathered_bytes;
  cached_.erase(std::find(cached_.begin(), cached_.end(), module));
  live_numel_ += mp.part.padded_numel;
}

// Note [The expert cache's policy]: a pass takes every layer's experts in layer order, so one
// least-recently-used list over all layers evicts a layer's experts just before the next token
// needs them whenever the cache holds less than a token's experts (measured: no hit at all on
// configs/qwen3-moe-bytes.json with a 64 MiB device). The victim is therefore the least
// recently used expert of the layer holding the most cached bytes: the cache is shared evenly
// between the layers, and LRU within a layer keeps what consecutive tokens reuse.
bool ParamFetcher::evict_cached(int size_class) {
  int victim = -1;
  std::uint64_t victim_layer_bytes = 0;
  for (int m : cached_) {
    if (size_class >= 0 && plan_of(m).size_class != size_class) continue;
    if (awaited(m)) continue;  // picked for this layer: acquired in a moment
    const std::uint64_t layer_bytes = layer_cache_bytes_[static_cast<std::size_t>(layer_of_[static_cast<std::size_t>(m)])];
    if (victim < 0 || layer_bytes > victim_layer_bytes ||
        (layer_bytes == victim_layer_bytes &&
         modules_[static_cast<std::size_t>(m)].last_use < modules_[static_cast<std::size_t>(victim)].last_use)) {
      victim = m;
      victim_layer_bytes = layer_bytes;
    }
  }
  if (victim < 0) return false;
  drop_gathered(victim);
  return true;
}

bool ParamFetcher::evict_one(int size_class) {
  // The expert cache gives up a module first (Note [The expert cache's policy]).
  if (evict_cached(size_class)) return true;
  // Candidates hold a gathered buffer nobody has acquired: kept for reuse, or fetched ahead.
  // Give up the one whose next use is furthest first: one not coming back this step, then along
  // the trace the furthest. A routed module fetched on a hint (a layer's expert the router just
  // picked, acquired in a moment) is off the trace but not unwanted: it goes last, the one of
  // them acquired last (the highest index: a layer acquires its experts in order) first.
  const std::span<const int> upcoming = trace_.following() ? trace_.upcoming() : std::span<const int>();
  const auto none = static_cast<std::int64_t>(upcoming.size());
  int victim = -1;
  std::int64_t victim_next = 0;
  for (std::size_t m = 0; m < modules_.size(); ++m) {
    const Module& s = modules_[m];
    if (s.fetch != FetchState::gathered || s.holders > 0 || plan_of(static_cast<int>(m)).size_class != size_class) {
      continue;
    }
    std::int64_t next = none;  // not coming back this step: the best victim
    if (awaited(static_cast<int>(m))) {
      next = static_cast<std::int64_t>(m) - static_cast<std::int64_t>(modules_.size());  // < 0
    } else {
      for (std::size_t k = 0; k < upcoming.size(); ++k) {
        if (upcoming[k] == static_cast<int>(m)) {
          next = static_cast<std::int64_t>(k);
          break;
        }
      }
    }
    if (victim < 0 || next > victim_next) {
      victim = static_cast<int>(m);
      victim_next = next;
    }
  }
  if (victim < 0) return false;
  drop_gathered(victim);
  return true;
}

// Note [Placing a buffer needed now]: a region holding a block and one expert beside it (the
// plan's minimum, a mixture streamed at batch 16) split when a buffer took the first hole the
// oldest pending buffer left: the block went into the hole of the last expert while the previous
// block's bytes were still pending, and once those came back the region had two holes, neither
// large enough for the next expert (tools: bench infer --model configs/qwen3-moe-bytes.json
// --device-memory 60MiB --placements nvme --batches 16 ran out of memory mid-run, "the free
// space is fragmented"). With every pending buffer back first, the free bytes are one hole
// around the held buffers. The wait is for work already enqueued, and only when the region is
// full.
device::DeviceBuffer ParamFetcher::allocate_now(int size_class, std::size_t bytes, const std::string& what) {
  device::DevicePool& pool = *pools_[size_class];
  for (;;) {
    device::DeviceBuffer buffer = pool.try_allocate(bytes, what);
    if (!buffer.empty()) return buffer;
    // Every pending buffer back first, not the oldest alone (Note [Placing a buffer needed now]).
    if (pool.wait_one()) {
      pool.drain();
      continue;
    }
    if (evict_one(size_class)) continue;
    return pool.allocate(bytes, what);  // nothing left to give up: the arena's OutOfMemory report
  }
}

void ParamFetcher::free_after(int size_class, device::DeviceBuffer buffer, device::Stream& stream) {
  pools_[size_class]->free_after(std::move(buffer), stream);
}

void ParamFetcher::count_all_gather(std::size_t full_bytes) {
  counters_.collective_bytes +=
      full_bytes / static_cast<std::size_t>(comm_.world()) * static_cast<std::size_t>(comm_.world() - 1);
}

params::ModuleView ParamFetcher::acquire(int module) {
  STRATA_ASSERT(module >= 0 && module < store_.module_count(), "acquire: module index out of range");
  Module& s = modules_[static_cast<std::size_t>(module)];
  const tiers::ModulePlan& mp = plan_of(module);
  // A routed module (an expert) comes when its router picks it: the trace holds the modules every
  // pass takes, so that picks that change from pass to pass do not stop the prefetch.
  if (!routed(module)) {
    trace_.on_acquire(module);
    pass_block(module);
  }
  s.hinted = false;
  read_watcher_.check();  // a read fetched ahead failed
  wait_update(module);  // the last step's update of this module (only this one)
  params::ModuleView view;
  view.numel = mp.part.numel;
  view.dtype = dtype_;
  ++s.holders;
  // The expert cache: a routed module on the device already (resident, or cached) is a hit; one
  // that is fetched for this acquire (now or ahead) a miss.
  if (routed(module) && s.holders == 1) {
    if (mp.resident || s.cached) {
      ++counters_.expert_hits;
    } else if (s.fetch != FetchState::gathered || s.prefetched) {
      ++counters_.expert_misses;
    }
    if (s.cached) cache_remove(module);
  }
  if (mp.resident) {
    if (s.stale) {
      // Every rank updated its shard: gather the others' (issued by this thread, so that the
      // ranks issue their collectives in the same order).
      const tiers::TierState& param = store_.state(module, tiers::StateKind::param);
      if (gate_ != nullptr) streams_.comm->wait(gate_->updated(module));
      comm_.all_gather(param.device_data(), param.device_full(), mp.part.shard_numel, dtype_, *streams_.comm);
      count_all_gather(mp.part.padded_numel * dtype_size(dtype_));
      s.ready->record(*streams_.comm);
      s.stale = false;
    }
    return resident_view(module);
  }
  if (s.fetch == FetchState::gathered) {
    if (s.prefetched) {
      s.prefetched = false;
      prefetch_numel_ -= mp.part.padded_numel;
    } else if (s.holders == 1) {
      ++counters_.reused;
    }
  } else {
    gather(module, true);
  }
  prefetch(/*may_wait=*/false);  // the model has not enqueued this module's work yet
  view.data = s.gathered.data();
  view.ready = s.ready.get();
  return view;
}

params::ModuleView ParamFetcher::resident_view(int module) const {
  const Module& s = modules_.at(static_cast<std::size_t>(module));
  const tiers::ModulePlan& mp = plan_of(module);
  params::ModuleView view;
  if (!mp.resident || (shards_ > 1 && s.stale)) return view;
  view.data = store_.state(module, tiers::StateKind::param).device_full();
  view.numel = mp.part.numel;
  view.dtype = dtype_;
  if (shards_ == 1) {
    view.ready = gate_ != nullptr ? &gate_->updated(module) : nullptr;
  } else {
    view.ready = s.ready.get();
  }
  return view;
}

void ParamFetcher::release(int module) {
  Module& s = modules_.at(static_cast<std::size_t>(module));
  STRATA_ASSERT(s.holders > 0, "release of a module that was not acquired");
  --s.holders;
  if (plan_of(module).resident || s.holders > 0) return;
  if (cache_limit_ > 0 && routed(module) && s.fetch == FetchState::gathered) {
    cache_insert(module);
  } else if (!keep_for_reuse(module)) {
    drop_gathered(module);
  }
  prefetch(/*may_wait=*/true);
}

void ParamFetcher::end_step() {
  trace_.end_step();
  for (int m : wanted_) modules_[static_cast<std::size_t>(m)].wanted = false;
  wanted_.clear();
  for (Module& s : modules_) s.hinted = false;
  for (std::size_t m = 0; m < modules_.size(); ++m) {
    if (!modules_[m].cached) drop_gathered(static_cast<int>(m));  // the expert cache stays
  }
  read_watcher_.drain();  // every read of the step has completed; throws the first failure
}

void ParamFetcher::params_changed(int module) {
  if (plan_of(module).resident && shards_ > 1) modules_[static_cast<std::size_t>(module)].stale = true;
}

device::ArenaStats ParamFetcher::device_memory() const {
  device::ArenaStats a = device_.memory_stats();
  std::uint64_t regions = 0, used = 0, peak = 0;
  for (const auto& pool : pools_) {
    const device::ArenaStats p = pool->stats();
    regions += pool->region_bytes();
    used += p.current_bytes;
    peak += p.peak_bytes;
  }
  // The regions were carved right after the engine's resident states; the rest is outside.
  a.current_bytes = a.current_bytes - regions + used;
  a.peak_bytes = std::min(a.peak_bytes, a.peak_bytes - regions + peak);
  return a;
}

FetchCounters ParamFetcher::counters() const {
  FetchCounters c = counters_;
  c.trace_divergences = trace_.divergences();
  return c;
}

}  // namespace strata::runtime::zero
