// ZeroEngine: acquire / release of parameters and the prefetch scheduler.
//
// A module that is not resident moves idle -> (NVMe: reading) -> gathered -> idle. gather()
// allocates its device buffer from the stream-ordered pool, copies this rank's shard into its
// slice on the H2D stream and all-gathers in place on the comm stream; the module's `ready`
// event marks the end. The compute stream waits only on that event (the model does, with the
// view's `ready`). release() hands the buffer back to the pool after the compute stream's work
// so far, unless the trace says the module comes back soon (stage3_max_reuse_distance).
//
// prefetch() runs after every acquire and release: along the trace of the previous step, it
// starts NVMe reads while staging buffers are free, and gathers ahead while the elements in
// flight stay under stage3_prefetch_bucket_size, the gathered elements under
// stage3_max_live_parameters, and the device memory suffices without waiting. A gather ahead of
// a read still in flight makes the H2D stream wait for the read (a host task that waits on the
// I/O engine: on CUDA it holds the host-function thread meanwhile).
#include <algorithm>
#include <span>

#include "core/error.h"
#include "runtime/zero/engine_impl.h"

namespace strata::runtime {

void ZeroEngine::Impl::start_read(int module) {
  ModuleState& s = modules[static_cast<std::size_t>(module)];
  STRATA_ASSERT(s.fetch == FetchState::idle && s.plan.param_tier == Tier::nvme, "start_read of a busy module");
  int free_index = -1;
  for (std::size_t i = 0; i < param_staging.size(); ++i) {
    if (!param_staging_busy[i]) {
      free_index = static_cast<int>(i);
      break;
    }
  }
  STRATA_ASSERT(free_index >= 0, "start_read without a free staging buffer");
  Staging& st = param_staging[static_cast<std::size_t>(free_index)];
  st.done->synchronize();  // the H2D of its previous module has finished
  param_staging_busy[static_cast<std::size_t>(free_index)] = true;
  s.staging = free_index;
  s.read = swap().read(s.shard_ext, st.buffer.data(), shard_bytes(s));
  s.fetch = FetchState::reading;
}

bool ZeroEngine::Impl::gather(int module, bool on_demand) {
  ModuleState& s = modules[static_cast<std::size_t>(module)];
  STRATA_ASSERT(!s.plan.resident && s.fetch != FetchState::gathered, "gather of a gathered module");
  const std::size_t ds = dtype_size(dtype);
  const std::size_t full_bytes = s.plan.part.padded_numel * ds;
  if (s.plan.param_tier == Tier::nvme) {
    if (s.fetch == FetchState::idle) {
      if (!on_demand) return false;
      // On demand with every staging buffer taken by reads ahead: wait for the oldest of them.
      if (std::find(param_staging_busy.begin(), param_staging_busy.end(), false) == param_staging_busy.end()) {
        // Cancel one read ahead (it is read again later) to make room for the module needed now.
        for (ModuleState& other : modules) {
          if (other.fetch == FetchState::reading) {
            drop_gathered(static_cast<int>(&other - modules.data()));
            break;
          }
        }
      }
      start_read(module);
    }
  }
  DeviceBuffer buffer = on_demand ? allocate_now(s.plan.size_class, full_bytes, s.name + " gathered parameters")
                                  : pool_of(s).try_allocate(full_bytes, s.name + " gathered parameters");
  if (buffer.empty()) return false;

  char* slice = static_cast<char*>(buffer.data()) + shard_offset_bytes(s);
  switch (s.plan.param_tier) {
    case Tier::device:
      copy_in->wait(*s.updated);  // the optimizer wrote the shard on its stream
      copy_in->copy_async(slice, s.shard_dev.data(), shard_bytes(s));  // on the device: not H2D
      break;
    case Tier::pinned: h2d(slice, s.shard_pin.data(), shard_bytes(s)); break;
    case Tier::nvme: {
      if (on_demand) {
        swap().engine().wait(s.read);  // throws the read's error, naming the extent
      } else if (!swap().engine().poll(s.read)) {
        // Fetched ahead: the H2D stream waits for the read itself, so the copy follows the
        // read's completion without the trainer thread coming back. A failed read fails the
        // stream (and the step, at its synchronize) with the read's error.
        offload::AioEngine* io = &swap().engine();
        copy_in->host_task([io, read = s.read] { io->wait(read); }, "wait for NVMe read");
      }
      Staging& st = param_staging[static_cast<std::size_t>(s.staging)];
      h2d(slice, st.buffer.data(), shard_bytes(s));
      st.done->record(*copy_in);
      param_staging_busy[static_cast<std::size_t>(s.staging)] = false;
      s.staging = -1;
      break;
    }
  }
  if (plan.shards > 1) {
    copy_in_done->record(*copy_in);
    comm_stream->wait(*copy_in_done);
    comm.all_gather(slice, buffer.data(), s.plan.part.shard_numel, dtype, *comm_stream);
    count_all_gather(full_bytes);
    s.ready->record(*comm_stream);
  } else {
    s.ready->record(*copy_in);
  }
  s.gathered = std::move(buffer);
  s.fetch = FetchState::gathered;
  live_numel += s.plan.part.padded_numel;
  ++counters.fetches;
  if (!on_demand) {
    s.prefetched = true;
    prefetch_numel += s.plan.part.padded_numel;
    ++counters.prefetched;
  }
  return true;
}

void ZeroEngine::Impl::prefetch(bool may_wait) {
  if (!trace.following()) return;
  if (may_wait) {
    // After a release the module just released is already enqueued on the compute stream, so
    // the trainer thread may wait for the update of the next module to fetch (the optimizer
    // worker runs the updates in the order the modules come).
    for (int m : trace.upcoming()) {
      const ModuleState& s = modules[static_cast<std::size_t>(m)];
      if (s.plan.resident || s.fetch == FetchState::gathered) continue;
      if (update_pending(m)) wait_update(m);
      break;
    }
  }
  // NVMe reads run furthest ahead: as many as there are staging buffers.
  for (int m : trace.upcoming()) {
    ModuleState& s = modules[static_cast<std::size_t>(m)];
    if (s.plan.resident || s.plan.param_tier != Tier::nvme || s.fetch != FetchState::idle) continue;
    if (update_pending(m)) break;  // its new parameters are still being written
    if (std::find(param_staging_busy.begin(), param_staging_busy.end(), false) == param_staging_busy.end()) break;
    start_read(m);
  }
  // Gathers follow, in trace order, within the element budgets.
  for (int m : trace.upcoming()) {
    ModuleState& s = modules[static_cast<std::size_t>(m)];
    if (s.plan.resident || s.fetch == FetchState::gathered) continue;
    if (update_pending(m)) break;
    if (prefetch_numel >= prefetch_bucket) break;
    if (live_numel + s.plan.part.padded_numel > max_live) break;
    if (!gather(m, false)) break;
  }
}

bool ZeroEngine::Impl::keep_for_reuse(int module) const {
  if (!trace.following()) return false;
  // Elements fetched between now and the module's next use along the trace.
  std::uint64_t distance = 0;
  for (int m : trace.upcoming()) {
    if (m == module) return distance <= max_reuse_distance && live_numel <= max_live;
    const ModuleState& s = modules[static_cast<std::size_t>(m)];
    if (!s.plan.resident) distance += s.plan.part.padded_numel;
    if (distance > max_reuse_distance) return false;
  }
  return false;
}

void ZeroEngine::Impl::drop_gathered(int module) {
  ModuleState& s = modules[static_cast<std::size_t>(module)];
  if (s.fetch == FetchState::reading) {
    swap().engine().wait(s.read);
    param_staging_busy[static_cast<std::size_t>(s.staging)] = false;
    s.staging = -1;
    s.fetch = FetchState::idle;
    return;
  }
  if (s.fetch != FetchState::gathered) return;
  STRATA_ASSERT(s.holders == 0, "dropping a module the model still holds");
  // The compute stream read it last (it waited on `ready`, so the copies are done by then).
  compute.wait(*s.ready);
  pool_of(s).free_after(std::move(s.gathered), compute);
  live_numel -= s.plan.part.padded_numel;
  if (s.prefetched) prefetch_numel -= s.plan.part.padded_numel;
  s.prefetched = false;
  s.fetch = FetchState::idle;
}

bool ZeroEngine::Impl::evict_one(int size_class) {
  // Candidates hold a gathered buffer nobody has acquired: kept for reuse, or fetched ahead.
  // Give up the one whose next use along the trace is furthest (or absent) first.
  const std::span<const int> upcoming = trace.following() ? trace.upcoming() : std::span<const int>();
  int victim = -1;
  std::size_t victim_next = 0;
  for (std::size_t m = 0; m < modules.size(); ++m) {
    const ModuleState& s = modules[m];
    if (s.fetch != FetchState::gathered || s.holders > 0 || s.plan.size_class != size_class) continue;
    std::size_t next = upcoming.size();  // not coming back this step: the best victim
    for (std::size_t k = 0; k < upcoming.size(); ++k) {
      if (upcoming[k] == static_cast<int>(m)) {
        next = k;
        break;
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

DeviceBuffer ZeroEngine::Impl::allocate_now(int size_class, std::size_t bytes, const std::string& what) {
  DevicePool& pool = *pools[size_class];
  for (;;) {
    DeviceBuffer buffer = pool.try_allocate(bytes, what);
    if (!buffer.empty()) return buffer;
    if (pool.wait_one()) continue;
    if (evict_one(size_class)) continue;
    return pool.allocate(bytes, what);  // nothing left to give up: the arena's OutOfMemory report
  }
}

void ZeroEngine::Impl::drop_all_gathered() {
  for (std::size_t m = 0; m < modules.size(); ++m) drop_gathered(static_cast<int>(m));
}

ModuleView ZeroEngine::acquire(int module) {
  Impl& d = *impl_;
  STRATA_ASSERT(module >= 0 && module < module_count(), "acquire: module index out of range");
  ModuleState& s = d.modules[static_cast<std::size_t>(module)];
  d.trace.on_acquire(module);
  d.wait_update(module);  // the last step's update of this module (only this one)
  ModuleView view;
  view.numel = s.plan.part.numel;
  view.dtype = d.dtype;
  ++s.holders;
  if (s.plan.resident) {
    view.data = s.full.data();
    if (d.plan.shards == 1) {
      view.ready = s.updated.get();
      return view;
    }
    if (s.stale) {
      // Every rank updated its shard: gather the others' (issued by this thread, so that the
      // ranks issue their collectives in the same order).
      d.comm_stream->wait(*s.updated);
      void* slice = static_cast<char*>(s.full.data()) + d.shard_offset_bytes(s);
      d.comm.all_gather(slice, s.full.data(), s.plan.part.shard_numel, d.dtype, *d.comm_stream);
      d.count_all_gather(s.plan.part.padded_numel * dtype_size(d.dtype));
      s.ready->record(*d.comm_stream);
      s.stale = false;
    }
    view.ready = s.ready.get();
    return view;
  }
  if (s.fetch == FetchState::gathered) {
    if (s.prefetched) {
      s.prefetched = false;
      d.prefetch_numel -= s.plan.part.padded_numel;
    } else if (s.holders == 1) {
      ++d.counters.reused;
    }
  } else {
    d.gather(module, true);
  }
  d.prefetch(/*may_wait=*/false);  // the model has not enqueued this module's work yet
  view.data = s.gathered.data();
  view.ready = s.ready.get();
  return view;
}

void ZeroEngine::release(int module, const Event& /*done: recorded on the compute stream*/) {
  Impl& d = *impl_;
  ModuleState& s = d.modules.at(static_cast<std::size_t>(module));
  STRATA_ASSERT(s.holders > 0, "release of a module that was not acquired");
  --s.holders;
  if (s.plan.resident || s.holders > 0) return;
  if (!d.keep_for_reuse(module)) d.drop_gathered(module);
  d.prefetch(/*may_wait=*/true);
}

}  // namespace strata::runtime
