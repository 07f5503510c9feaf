#include "runtime/tiers/tier_store.h"

#include <sys/stat.h>

#include <algorithm>
#include <utility>

#include "core/error.h"
#include "cpu_adam/adam.h"
#include "runtime/tiers/io_options.h"

namespace strata::runtime::tiers {
namespace {

// Pinned buffers are first touched in parallel before the device pins them (cudaHostRegister
// would fault every page in on one thread), window by window with the CPU Adam's partition and
// thread count, as the updater walks a pinned state: on a NUMA machine each page then lands on
// the node of the thread that updates it. Buffers of other element sizes (parameter shards,
// staging) are touched with the same byte stripes: in parallel, near enough.
offload::PinHook pin_hook(device::Device& device, const int& threads, const std::atomic<std::size_t>& window_numel) {
  auto touch = [&threads, &window_numel](void* ptr, std::size_t bytes) {
    auto* p = static_cast<float*>(ptr);
    const std::size_t numel = bytes / sizeof(float);  // capacity: a multiple of 4 KiB
    std::size_t window = window_numel.load(std::memory_order_relaxed);
    if (window == 0) window = numel;
    for (std::size_t off = 0; off < numel; off += window) {
      cpu_adam::first_touch_zeroed(p + off, std::min(window, numel - off), threads);
    }
  };
  return {[&device](void* ptr, std::size_t bytes) { device.pin_host(ptr, bytes); },
          [&device](void* ptr) { device.unpin_host(ptr); }, std::move(touch)};
}

offload::StateKind extent_kind(StateKind kind) {
  switch (kind) {
    case StateKind::param: return offload::StateKind::kParam;
    case StateKind::master: return offload::StateKind::kMaster;
    case StateKind::exp_avg: return offload::StateKind::kExpAvg;
    case StateKind::exp_avg_sq: return offload::StateKind::kExpAvgSq;
    case StateKind::grad_accum: return offload::StateKind::kGrad;
  }
  return offload::StateKind::kOther;
}

std::string label(const std::string& module, StateKind kind, DType grad_dtype) {
  switch (kind) {
    case StateKind::param: return module + " parameter shard";
    case StateKind::master: return module + " fp32 master";
    case StateKind::exp_avg: return module + " exp_avg";
    case StateKind::exp_avg_sq: return module + " exp_avg_sq";
    case StateKind::grad_accum: return module + " " + std::string(dtype_name(grad_dtype)) + " gradient";
  }
  return module;
}

}  // namespace

namespace {

offload::AioOptions with_hook(offload::AioOptions o, const offload::CompletionHook& hook) {
  o.completion_hook = hook;
  return o;
}

}  // namespace

TierStore::Backing::Backing(const config::Config& config, device::Device& device,
                            const offload::CompletionHook& io_hook)
    : cpu_threads(static_cast<int>(config.strata.cpu_threads)),
      pinned(config.strata.pinned_memory_bytes, pin_hook(device, cpu_threads, touch_window_numel), tier_name(Tier::pinned),
             "strata.pinned_memory"),
      io(with_hook(aio_options(config), io_hook), &pinned) {
  STRATA_ASSERT(config.strata.pinned_memory_bytes > 0,
                "the tier store needs a resolved config (strata.pinned_memory is still 0)");
  std::vector<std::string> paths = nvme_paths(config);
  if (!paths.empty()) swap = std::make_unique<offload::SwapSpace>(swap_options(config, std::move(paths)), io);
}

TierStore::TierStore(const config::Config& config, const StoreSetup& setup, device::Device& device,
                     device::Stream& init)
    : backing_(std::make_shared<Backing>(config, device, setup.io_completion_hook)), dtype_(setup.dtype) {
  register_usage(device);
  shard_rank_ = config.zero_optimization.stage >= 1 ? setup.rank : 0;
  // One NVMe block of elements: fp32 offsets (4 bytes each) and compute-dtype offsets (2 or 4)
  // are then whole blocks.
  chunk_numel_ = config.aio.block_size;
  fill_inputs(setup, device);
  inputs_.grad_dtype = config::to_dtype(config.data_types.grad_accum_dtype);
  plan_ = setup.optimizer ? make_plan(config, inputs_) : make_inference_plan(config, inputs_);
  backing_->touch_window_numel.store(window_numel(), std::memory_order_relaxed);
  allocate(setup, device, init);
}

TierStore::~TierStore() = default;

void TierStore::register_usage(device::Device& device) {
  std::weak_ptr<Backing> weak = backing_;
  device.add_tier([weak] {
    device::TierUsage usage{tier_name(Tier::pinned), 0, 0, 0};
    if (auto s = weak.lock()) {
      offload::HostPoolStats stats = s->pinned.stats();
      usage = {tier_name(Tier::pinned), stats.current_bytes, stats.peak_bytes, stats.budget_bytes};
    }
    return usage;
  });
  if (!backing_->swap) return;
  device.add_tier([weak] {
    device::TierUsage usage{tier_name(Tier::nvme), 0, 0, 0};
    if (auto s = weak.lock()) {
      offload::SwapStats stats = s->swap->stats();
      std::uint64_t free_bytes = 0;
      for (const offload::SwapPathStats& p : stats.paths) free_bytes += p.free_bytes;
      // The NVMe budget is what the files hold plus what the file systems have left.
      usage = {tier_name(Tier::nvme), stats.used_bytes, stats.peak_bytes, stats.file_bytes + free_bytes};
    }
    return usage;
  });
}

void TierStore::fill_inputs(const StoreSetup& setup, device::Device& device) {
  inputs_.module_numels = setup.module_numels;
  inputs_.module_names = setup.module_names;
  inputs_.routed_modules = setup.routed_modules;
  inputs_.world = setup.world;
  inputs_.dtype = setup.dtype;
  inputs_.activation_bytes = setup.activation_bytes;
  inputs_.kv_cache_pinned_bytes = setup.kv_cache_pinned_bytes;
  inputs_.activation_flags = setup.activation_flags;
  inputs_.optimizer = setup.optimizer;
  inputs_.quant = setup.quant;
  const device::ArenaStats arena = device.memory_stats();
  inputs_.device_budget_bytes = arena.budget_bytes - arena.current_bytes;
  const offload::HostPoolStats pinned_stats = pinned().stats();
  inputs_.pinned_budget_bytes = pinned_stats.budget_bytes - pinned_stats.current_bytes;
  if (offload::SwapSpace* sw = swap()) {
    // Folders on one file system share its free space: count each file system once.
    std::vector<dev_t> seen;
    for (const offload::SwapPathStats& p : sw->stats().paths) {
      inputs_.nvme_paths.push_back(p.path);
      struct stat st {};
      if (::stat(p.path.c_str(), &st) == 0) {
        if (std::find(seen.begin(), seen.end(), st.st_dev) != seen.end()) continue;
        seen.push_back(st.st_dev);
      }
      inputs_.nvme_free_bytes += p.free_bytes;
    }
  }
  inputs_.nvme_block_bytes = chunk_numel_;
}

void TierStore::allocate(const StoreSetup& setup, device::Device& device, device::Stream& init) {
  const std::size_t ds = dtype_size(dtype_);
  modules_.resize(plan_.modules.size());
  for (std::size_t m = 0; m < plan_.modules.size(); ++m) {
    const ModulePlan& mp = plan_.modules[m];
    const std::string& name = setup.module_names[m];
    auto make = [&](StateKind kind, Tier tier, std::size_t elem_bytes, std::size_t shard = 0) {
      if (shard == 0) shard = mp.part.shard_numel;
      const std::size_t bytes = shard * elem_bytes;
      const std::string what = label(name, kind, inputs_.grad_dtype);
      switch (tier) {
        case Tier::device:
          return TierState::on_device(device.allocate(bytes, what), shard, elem_bytes, 0, transfers_);
        case Tier::pinned:
          return TierState::on_pinned(pinned().allocate(bytes, what), shard, elem_bytes, transfers_);
        case Tier::nvme: {
          const offload::ExtentId extent = swap()->allocate({name, extent_kind(kind), setup.rank}, bytes);
          return TierState::on_nvme(*swap(), extent, shard, elem_bytes, transfers_);
        }
      }
      return TierState();
    };
    auto& states = modules_[m];
    TierState& param = states[static_cast<int>(StateKind::param)];
    if (mp.resident) {
      const std::size_t offset_bytes = mp.part.shard_offset(shard_rank_) * ds;
      param = TierState::on_device(device.allocate(mp.part.padded_numel * ds, name + " parameters"),
                                   mp.part.shard_numel, ds, offset_bytes, transfers_);
    } else if (mp.quantized) {
      param = make(StateKind::param, mp.param_tier, 1, mp.shard_bytes);
    } else {
      param = make(StateKind::param, mp.param_tier, ds);
    }
    if (!setup.optimizer) continue;
    // The accumulator sits beside the optimizer states, except that NVMe-offloaded states keep
    // it in pinned memory (the CPU Adam reads it there; it is rewritten every step).
    const Tier acc_tier = mp.optimizer_tier == Tier::nvme ? Tier::pinned : mp.optimizer_tier;
    states[static_cast<int>(StateKind::grad_accum)] =
        make(StateKind::grad_accum, acc_tier, dtype_size(inputs_.grad_dtype));
    for (StateKind k : {StateKind::master, StateKind::exp_avg, StateKind::exp_avg_sq}) {
      states[static_cast<int>(k)] = make(k, mp.optimizer_tier, 4);
    }
    if (mp.optimizer_tier == Tier::device) {
      for (StateKind k : {StateKind::grad_accum, StateKind::exp_avg, StateKind::exp_avg_sq}) {
        states[static_cast<int>(k)].fill_zero(init);
      }
    }
  }
  init.synchronize();
}

TierState& TierStore::state(int module, StateKind kind) {
  TierState& s = modules_.at(static_cast<std::size_t>(module))[static_cast<int>(kind)];
  STRATA_ASSERT(static_cast<bool>(s), "a state the store did not allocate (no optimizer?)");
  return s;
}

const TierState& TierStore::state(int module, StateKind kind) const {
  const TierState& s = modules_.at(static_cast<std::size_t>(module))[static_cast<int>(kind)];
  STRATA_ASSERT(static_cast<bool>(s), "a state the store did not allocate (no optimizer?)");
  return s;
}

std::size_t TierStore::window_numel() const {
  return plan_.optimizer_chunk_numel ? plan_.optimizer_chunk_numel : plan_.max_shard_numel;
}

}  // namespace strata::runtime::tiers
