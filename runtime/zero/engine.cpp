// ZeroEngine: construction, initial values, gathering the master weights, counters.
#include <algorithm>

#include <sys/stat.h>
#include <cstring>
#include <utility>

#include "core/error.h"
#include "core/log.h"
#include "core/units.h"
#include "runtime/zero/engine_impl.h"

namespace strata::runtime {

ZeroEngine::Impl::Impl(const Config& config_, const EngineSetup& setup, Device& device_,
                       Stream& compute_, Communicator& comm_, HostTiers& tiers_, Tracer& tracer_)
    : config(config_), dtype(setup.dtype), device(device_), compute(compute_), comm(comm_),
      tiers(tiers_), tracer(tracer_),
      scaler(config_.fp16, config_.fp16.enabled.value_or(false)),
      worker([&device_] { device_.bind_thread(); }) {
  world = comm.world();
  rank = comm.rank();
  const ZeroConfig& z = config.zero_optimization;
  if (z.stage < 0 || z.stage > 3) {
    throw Error("ZeRO stage " + std::to_string(z.stage) + " does not exist", "zero_optimization.stage",
                "use 0, 1, 2 or 3");
  }
  shard_rank = z.stage >= 1 ? rank : 0;
  threads = static_cast<int>(config.strata.cpu_threads);
  gas = static_cast<int>(config.gradient_accumulation_steps.value_or(std::uint64_t{1}).value_or(1));

  plan_inputs.module_numels = setup.module_numels;
  plan_inputs.module_names = setup.module_names;
  plan_inputs.world = world;
  plan_inputs.dtype = dtype;
  plan_inputs.activation_bytes = setup.activation_bytes;
  const ArenaStats arena = device.memory_stats();
  plan_inputs.device_budget_bytes = arena.budget_bytes - arena.current_bytes;
  const offload::HostPoolStats pinned = tiers.pinned().stats();
  plan_inputs.pinned_budget_bytes = pinned.budget_bytes - pinned.current_bytes;
  if (offload::SwapSpace* sw = tiers.swap()) {
    // Folders on one file system share its free space: count each file system once.
    std::vector<dev_t> seen;
    for (const offload::SwapPathStats& p : sw->stats().paths) {
      plan_inputs.nvme_paths.push_back(p.path);
      struct stat st {};
      if (::stat(p.path.c_str(), &st) == 0) {
        if (std::find(seen.begin(), seen.end(), st.st_dev) != seen.end()) continue;
        seen.push_back(st.st_dev);
      }
      plan_inputs.nvme_free_bytes += p.free_bytes;
    }
  }
  plan_inputs.nvme_block_bytes = config.aio.block_size;
  plan = make_plan(config, plan_inputs);

  for (std::size_t m = 0; m < setup.module_numels.size(); ++m) {
    ModuleState s;
    s.plan = plan.modules[m];
    s.name = setup.module_names[m];
    if (s.plan.optimizer_tier == Tier::device && !s.plan.resident && s.plan.param_tier != Tier::device) {
      throw Error("module " + s.name + " would keep its optimizer states on the device while its "
                  "parameters are offloaded to " + tier_name(s.plan.param_tier),
                  "zero_optimization.offload_optimizer",
                  "offload the optimizer too (offload_optimizer.device \"cpu\" or \"nvme\", ratio 1) "
                  "whenever offload_param.device is \"cpu\" or \"nvme\"");
    }
    modules.push_back(std::move(s));
  }

  copy_in = device.create_stream("h2d");
  copy_out = device.create_stream("d2h");
  comm_stream = device.create_stream("comm");
  accum = device.create_stream("grad accumulate");
  optim = device.create_stream("optimizer");
  copy_in_done = device.create_event();
  copy_out_done = device.create_event();
  comm_done = device.create_event();
  global_before_update = config.gradient_clipping.value_or(0.0) > 0.0 || config.fp16.enabled.value_or(false);
  updates_posted.assign(setup.module_numels.size(), 0);
  updates_done.assign(setup.module_numels.size(), 0);

  prefetch_bucket = z.stage3_prefetch_bucket_size.value_or(50'000'000);
  max_live = z.stage3_max_live_parameters;
  max_reuse_distance = z.stage3_max_reuse_distance;
  reduce_bucket = static_cast<std::size_t>(z.reduce_bucket_size.value_or(500'000'000));
  allocate_states();
  make_pools();
  if (offload::SwapSpace* sw = tiers.swap()) {
    const offload::AioStats io = sw->engine().stats();
    io_read_base = io.bytes_read;
    io_write_base = io.bytes_written;
  }
}

offload::SwapSpace& ZeroEngine::Impl::swap() const {
  offload::SwapSpace* sw = tiers.swap();
  STRATA_ASSERT(sw != nullptr, "an NVMe tier without swap space");
  return *sw;
}

void ZeroEngine::Impl::allocate_states() {
  const std::size_t ds = dtype_size(dtype);
  offload::HostPool& pinned = tiers.pinned();
  std::size_t max_nvme_param = 0, max_offloaded = 0;
  for (ModuleState& s : modules) {
    const std::size_t shard = s.plan.part.shard_numel;
    s.ready = device.create_event();
    s.updated = device.create_event();
    s.grad_done = device.create_event();
    if (s.plan.resident) {
      s.full = device.allocate(s.plan.part.padded_numel * ds, s.name + " parameters");
    } else if (s.plan.param_tier == Tier::device) {
      s.shard_dev = device.allocate(shard * ds, s.name + " parameter shard");
    } else if (s.plan.param_tier == Tier::pinned) {
      s.shard_pin = pinned.allocate(shard * ds, s.name + " parameter shard");
    } else {
      s.shard_ext = swap().allocate({s.name, offload::StateKind::kParam, rank}, shard * ds);
      max_nvme_param = std::max(max_nvme_param, shard);
    }
    switch (s.plan.optimizer_tier) {
      case Tier::device:
        s.acc_dev = device.allocate(shard * 4, s.name + " fp32 gradient");
        s.master_dev = device.allocate(shard * 4, s.name + " fp32 master");
        s.exp_avg_dev = device.allocate(shard * 4, s.name + " exp_avg");
        s.exp_avg_sq_dev = device.allocate(shard * 4, s.name + " exp_avg_sq");
        optim->memset_async(s.acc_dev.data(), 0, shard * 4);
        optim->memset_async(s.exp_avg_dev.data(), 0, shard * 4);
        optim->memset_async(s.exp_avg_sq_dev.data(), 0, shard * 4);
        break;
      case Tier::pinned:
        s.acc_pin = pinned.allocate(shard * 4, s.name + " fp32 gradient");
        s.master_pin = pinned.allocate(shard * 4, s.name + " fp32 master");
        s.exp_avg_pin = pinned.allocate(shard * 4, s.name + " exp_avg");
        s.exp_avg_sq_pin = pinned.allocate(shard * 4, s.name + " exp_avg_sq");
        break;
      case Tier::nvme:
        s.acc_pin = pinned.allocate(shard * 4, s.name + " fp32 gradient");
        s.master_ext = swap().allocate({s.name, offload::StateKind::kMaster, rank}, shard * 4);
        s.exp_avg_ext = swap().allocate({s.name, offload::StateKind::kExpAvg, rank}, shard * 4);
        s.exp_avg_sq_ext = swap().allocate({s.name, offload::StateKind::kExpAvgSq, rank}, shard * 4);
        break;
    }
    if (s.plan.optimizer_tier != Tier::device) max_offloaded = std::max(max_offloaded, shard);
  }
  auto make_staging = [&](std::vector<Staging>& v, int count, std::size_t bytes, const char* what) {
    for (int i = 0; i < count; ++i) v.push_back({pinned.allocate(bytes, what), device.create_event(), {}});
  };
  make_staging(param_staging, plan.param_staging_buffers, max_nvme_param * ds, "NVMe parameter read buffer");
  param_staging_busy.assign(param_staging.size(), false);
  if (max_offloaded > 0) make_staging(grad_staging, 2, max_offloaded * ds, "gradient D2H buffer");
  for (int i = 0; i < plan.optimizer_swap_buffers; ++i) {
    SwapSet set;
    const std::size_t bytes = plan.optimizer_chunk_numel * 4;
    set.master = pinned.allocate(bytes, "optimizer swap buffer (master)");
    set.exp_avg = pinned.allocate(bytes, "optimizer swap buffer (exp_avg)");
    set.exp_avg_sq = pinned.allocate(bytes, "optimizer swap buffer (exp_avg_sq)");
    swap_sets.push_back(std::move(set));
  }
  if (max_offloaded > 0 || max_nvme_param > 0) {
    const std::size_t chunk = plan.optimizer_chunk_numel ? plan.optimizer_chunk_numel : plan.max_shard_numel;
    make_staging(out_staging, 2, chunk * ds, "updated parameter buffer");
  }
  optim->synchronize();
}

void ZeroEngine::Impl::make_pools() {
  // What the device has left once the model has its activations and a little scratch.
  const ArenaStats a = device.memory_stats();
  const std::uint64_t held = a.current_bytes + plan_inputs.activation_bytes + kDeviceScratchBytes +
                             4 * Arena::kAlignment;
  const std::uint64_t need = plan.class_minimum_bytes[0] + plan.class_minimum_bytes[1];
  const std::uint64_t avail = a.budget_bytes > held ? a.budget_bytes - held : 0;
  if (avail < need) {
    throw OutOfMemory("the device has " + format_bytes(avail) + " left for gathered parameters and gradient "
                      "buffers, and needs " + format_bytes(need),
                      "strata.device_memory", "raise strata.device_memory or offload more", need);
  }
  // The memory beyond the minimums goes to the classes in proportion to their sizes: room to
  // fetch ahead and to keep modules for reuse.
  const std::uint64_t extra = avail - need;
  const double total = static_cast<double>(plan.class_total_bytes[0] + plan.class_total_bytes[1]);
  for (int c = 0; c < 2; ++c) {
    std::uint64_t bytes = plan.class_minimum_bytes[c];
    if (total > 0 && plan.class_minimum_bytes[c] > 0) {
      bytes += static_cast<std::uint64_t>(static_cast<double>(extra) *
                                          (static_cast<double>(plan.class_total_bytes[c]) / total));
    }
    bytes = bytes / Arena::kAlignment * Arena::kAlignment;
    pools[c] = std::make_unique<DevicePool>(device, bytes, c == 0 ? "transient buffers (large modules)"
                                                                  : "transient buffers (small modules)");
  }
}

Staging& ZeroEngine::Impl::take_staging(std::vector<Staging>& staging, int* next) {
  STRATA_ASSERT(!staging.empty(), "no staging buffers were planned");
  Staging& s = staging[static_cast<std::size_t>(*next)];
  *next = (*next + 1) % static_cast<int>(staging.size());
  s.done->synchronize();  // its last user has finished with it
  if (s.io) swap().engine().wait(s.io);
  s.io = {};
  return s;
}

void ZeroEngine::Impl::h2d(void* dst, const void* src, std::size_t bytes) {
  copy_in->copy_async(dst, src, bytes);
  std::lock_guard lock(counters_mutex);
  counters.h2d_bytes += bytes;
}

void ZeroEngine::Impl::d2h(void* dst, const void* src, std::size_t bytes) {
  copy_out->copy_async(dst, src, bytes);
  std::lock_guard lock(counters_mutex);  // a checkpoint's read_state counts on the worker
  counters.d2h_bytes += bytes;
}

void ZeroEngine::Impl::count_all_gather(std::size_t full_bytes) {
  counters.collective_bytes += full_bytes / static_cast<std::size_t>(world) * static_cast<std::size_t>(world - 1);
}

void ZeroEngine::Impl::count_reduce(std::size_t full_bytes, bool all_reduce) {
  const std::size_t once = full_bytes / static_cast<std::size_t>(world) * static_cast<std::size_t>(world - 1);
  counters.collective_bytes += all_reduce ? 2 * once : once;
}

void ZeroEngine::Impl::read_master(const ModuleState& s, float* out) {
  const std::size_t bytes = s.plan.part.shard_numel * 4;
  switch (s.plan.optimizer_tier) {
    case Tier::device:
      d2h(out, s.master_dev.data(), bytes);
      copy_out->synchronize();
      break;
    case Tier::pinned: std::memcpy(out, s.master_pin.data(), bytes); break;
    case Tier::nvme: {
      offload::HostBuffer tmp = offload::HostBuffer::allocate(bytes, "master shard read");
      swap().engine().wait(swap().read(s.master_ext, tmp.data(), bytes));
      std::memcpy(out, tmp.data(), bytes);
      break;
    }
  }
}

// ---- ZeroEngine ------------------------------------------------------------------------------

ZeroEngine::ZeroEngine(const Config& config, const EngineSetup& setup, Device& device, Stream& compute,
                       Communicator& comm, HostTiers& tiers, Tracer& tracer)
    : impl_(std::make_unique<Impl>(config, setup, device, compute, comm, tiers, tracer)) {}

ZeroEngine::~ZeroEngine() {
  try {
    impl_->worker.drain();
    impl_->device.synchronize();
    if (offload::SwapSpace* sw = impl_->tiers.swap()) sw->engine().wait_all();
  } catch (const std::exception& e) {
    log::warn("ZeRO engine: pending work failed at shutdown: {}", e.what());
  }
}

const ZeroPlan& ZeroEngine::plan() const { return impl_->plan; }
const PlanInputs& ZeroEngine::plan_inputs() const { return impl_->plan_inputs; }
int ZeroEngine::module_count() const { return static_cast<int>(impl_->modules.size()); }
std::size_t ZeroEngine::module_numel(int module) const {
  STRATA_ASSERT(module >= 0 && module < module_count(), "module index out of range");
  return impl_->modules[static_cast<std::size_t>(module)].plan.part.numel;
}

void ZeroEngine::load_module(int module, const float* values) {
  Impl& d = *impl_;
  ModuleState& s = d.modules.at(static_cast<std::size_t>(module));
  const ModulePartition& part = s.plan.part;
  const std::size_t ds = dtype_size(d.dtype);
  // The padded module, then this rank's shard of it.
  std::vector<float> padded(part.padded_numel, 0.0f);
  std::copy(values, values + part.numel, padded.begin());
  const float* shard = padded.data() + part.shard_offset(d.shard_rank);
  const std::size_t shard_bytes = part.shard_numel * 4;

  switch (s.plan.optimizer_tier) {
    case Tier::device:
      d.h2d(s.master_dev.data(), shard, shard_bytes);
      d.copy_in->synchronize();
      break;
    case Tier::pinned: std::memcpy(s.master_pin.data(), shard, shard_bytes); break;
    case Tier::nvme: {
      offload::SwapSpace& sw = d.swap();
      offload::HostBuffer tmp = offload::HostBuffer::allocate(shard_bytes, "initial optimizer states");
      std::memcpy(tmp.data(), shard, shard_bytes);
      sw.engine().wait(sw.write(s.master_ext, tmp.data(), shard_bytes));
      std::memset(tmp.data(), 0, shard_bytes);
      sw.engine().wait(sw.write(s.exp_avg_ext, tmp.data(), shard_bytes));
      sw.engine().wait(sw.write(s.exp_avg_sq_ext, tmp.data(), shard_bytes));
      break;
    }
  }

  // Parameters in the compute dtype.
  if (s.plan.resident) {
    std::vector<std::byte> full(part.padded_numel * ds);
    convert(padded.data(), DType::f32, full.data(), d.dtype, part.padded_numel);
    d.h2d(s.full.data(), full.data(), full.size());
    d.copy_in->synchronize();
    return;
  }
  std::vector<std::byte> cast(part.shard_numel * ds);
  convert(shard, DType::f32, cast.data(), d.dtype, part.shard_numel);
  switch (s.plan.param_tier) {
    case Tier::device:
      d.h2d(s.shard_dev.data(), cast.data(), cast.size());
      d.copy_in->synchronize();
      break;
    case Tier::pinned: std::memcpy(s.shard_pin.data(), cast.data(), cast.size()); break;
    case Tier::nvme: {
      offload::HostBuffer tmp = offload::HostBuffer::allocate(cast.size(), "initial parameters");
      std::memcpy(tmp.data(), cast.data(), cast.size());
      d.swap().engine().wait(d.swap().write(s.shard_ext, tmp.data(), cast.size()));
      break;
    }
  }
}

void ZeroEngine::gather_module(int module, float* out) {
  Impl& d = *impl_;
  ModuleState& s = d.modules.at(static_cast<std::size_t>(module));
  const ModulePartition& part = s.plan.part;
  std::vector<float> mine(part.shard_numel);
  d.wait_all_updates();
  d.device.synchronize();
  d.read_master(s, mine.data());
  const int shards = d.plan.shards;
  if (shards == 1) {
    std::copy(mine.begin(), mine.begin() + static_cast<std::ptrdiff_t>(part.numel), out);
    return;
  }
  // Through a bounded device buffer, a piece of every shard at a time.
  const std::size_t piece = std::min<std::size_t>(part.shard_numel, std::size_t{1} << 16);
  DeviceBuffer scratch = d.allocate_now(0, piece * 4 * static_cast<std::size_t>(shards), "gather scratch");
  std::vector<float> all(piece * static_cast<std::size_t>(shards));
  for (std::size_t begin = 0; begin < part.shard_numel; begin += piece) {
    const std::size_t n = std::min(piece, part.shard_numel - begin);
    float* slot = scratch.as<float>() + static_cast<std::size_t>(d.shard_rank) * n;
    d.comm_stream->copy_async(slot, mine.data() + begin, n * 4);
    d.comm.all_gather(slot, scratch.data(), n, DType::f32, *d.comm_stream);
    d.comm_stream->copy_async(all.data(), scratch.data(), n * 4 * static_cast<std::size_t>(shards));
    d.comm_stream->synchronize();
    for (int r = 0; r < shards; ++r) {
      const std::size_t dst = part.shard_offset(r) + begin;
      if (dst >= part.numel) continue;
      const std::size_t take = std::min(n, part.numel - dst);
      std::copy(all.begin() + static_cast<std::ptrdiff_t>(static_cast<std::size_t>(r) * n),
                all.begin() + static_cast<std::ptrdiff_t>(static_cast<std::size_t>(r) * n + take), out + dst);
    }
  }
  d.pools[0]->free_after(std::move(scratch), *d.comm_stream);
}

float ZeroEngine::backward_loss_scale() const {
  const Impl& d = *impl_;
  return d.scaler.scale() / static_cast<float>(d.gas * d.world);
}

void ZeroEngine::begin_step(double lr) {
  Impl& d = *impl_;
  d.worker.check();
  d.trace.begin_step();
  for (ModuleState& s : d.modules) s.grad_calls = 0;
  d.step_hyper = d.make_hyper(lr);
  // Without a global check the step's updates are posted from grads_ready: its Adam step
  // number is known now.
  if (!d.global_before_update) ++d.adam_steps;
}

StepOutcome ZeroEngine::step() { return impl_->step(); }

void ZeroEngine::finish_updates() { impl_->wait_all_updates(); }

ArenaStats ZeroEngine::device_memory() const {
  const Impl& d = *impl_;
  ArenaStats a = d.device.memory_stats();
  std::uint64_t regions = 0, used = 0, peak = 0;
  for (const auto& pool : d.pools) {
    const ArenaStats p = pool->stats();
    regions += pool->region_bytes();
    used += p.current_bytes;
    peak += p.peak_bytes;
  }
  // The regions were carved right after the engine's resident states; the rest is outside.
  a.current_bytes = a.current_bytes - regions + used;
  a.peak_bytes = std::min(a.peak_bytes, a.peak_bytes - regions + peak);
  return a;
}

EngineCounters ZeroEngine::counters() const {
  Impl& d = *impl_;
  EngineCounters c;
  {
    std::lock_guard lock(d.counters_mutex);
    c = d.counters;
  }
  if (offload::SwapSpace* sw = d.tiers.swap()) {
    const offload::AioStats io = sw->engine().stats();
    c.nvme_read_bytes = io.bytes_read - d.io_read_base;
    c.nvme_write_bytes = io.bytes_written - d.io_write_base;
  }
  c.trace_divergences = d.trace.divergences();
  return c;
}

}  // namespace strata::runtime
