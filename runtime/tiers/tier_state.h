#pragma once
// One state of one module on this rank (a parameter shard, the fp32 master, an Adam moment or
// the fp32 gradient accumulator), wherever the plan put it: a device buffer, a pinned host
// buffer or an NVMe extent. The tier store (tier_store.h) makes and owns every TierState; the
// engine reaches a state's bytes only through the operations below, so the tier is decided in
// one place and each operation's per-tier switch exists once, here.
//
// Elements are counted in the state's own type (compute dtype for `param`, fp32 otherwise);
// [offset, offset + n) is a window of this rank's shard. NVMe windows start on a multiple of
// the swap space's block (in bytes) and end on one or at the shard's end.
//
// Device-tier copies go on the stream the caller names, so they are ordered after the work
// that last touched the state on that stream (the optimizer stream for optimizer states).
// Thread safety: none of its own; the engine's owner of each state serialises access.
#include <cstddef>
#include <cstdint>
#include <mutex>

#include "offload/aio_engine.h"
#include "offload/host_buffer.h"
#include "offload/swap_space.h"
#include "runtime/device/device.h"
#include "runtime/tiers/tier.h"

namespace strata::runtime::tiers {

// Bytes the states moved between host memory and the device, for the engine's counters. Every
// H2D and D2H of model states is counted here, wherever it is issued from.
class TransferCounters {
 public:
  void add_h2d(std::uint64_t bytes) {
    std::lock_guard lock(mutex_);
    h2d_ += bytes;
  }
  void add_d2h(std::uint64_t bytes) {
    std::lock_guard lock(mutex_);
    d2h_ += bytes;
  }
  std::uint64_t h2d() const {
    std::lock_guard lock(mutex_);
    return h2d_;
  }
  std::uint64_t d2h() const {
    std::lock_guard lock(mutex_);
    return d2h_;
  }

 private:
  mutable std::mutex mutex_;
  std::uint64_t h2d_ = 0, d2h_ = 0;
};

class TierState {
 public:
  TierState() = default;
  TierState(TierState&&) noexcept = default;
  TierState& operator=(TierState&&) noexcept = default;
  TierState(const TierState&) = delete;
  TierState& operator=(const TierState&) = delete;

  // Device tier. `full_bytes` > shard: resident parameters, the full padded buffer with this
  // rank's shard at `shard_offset_bytes`.
  static TierState on_device(device::DeviceBuffer buffer, std::size_t numel, std::size_t elem_bytes,
                             std::size_t shard_offset_bytes, TransferCounters& counters);
  static TierState on_pinned(offload::HostBuffer buffer, std::size_t numel, std::size_t elem_bytes,
                             TransferCounters& counters);
  static TierState on_nvme(offload::SwapSpace& swap, offload::ExtentId extent, std::size_t numel,
                           std::size_t elem_bytes, TransferCounters& counters);

  explicit operator bool() const { return counters_ != nullptr; }
  Tier tier() const { return tier_; }
  std::size_t numel() const { return numel_; }
  std::size_t elem_bytes() const { return elem_bytes_; }
  std::size_t bytes() const { return numel_ * elem_bytes_; }

  // The shard's memory where the device or the host can address it directly; null in the
  // other tiers. device_full(): the whole buffer (resident parameters: every rank's slice).
  void* device_data() const;
  void* device_full() const { return device_.data(); }
  std::byte* host_data() const { return tier_ == Tier::pinned ? pinned_.data() : nullptr; }
  // Pinned tier: trades the state's buffer for `other` (at least bytes() long), which then holds
  // the old one. The updater's speculative updates commit this way (the CPU alone reads these
  // states, so the new buffer need not be registered with the device).
  void swap_host_buffer(offload::HostBuffer& other);

  // Synchronous: the window to / from any host memory. Device tier: a copy on `stream`, then
  // stream.synchronize(). NVMe: through an aligned bounce buffer when `host` is not aligned for
  // O_DIRECT. Errors (EIO, a short file) throw with the extent's name.
  void read(std::size_t offset, std::size_t n, void* host, device::Stream& stream) const;
  void write(std::size_t offset, std::size_t n, const void* host, device::Stream& stream);
  // Resident parameters: every rank's slice at once (the initial values), on `stream`, waited for.
  void write_full(const void* host, device::Stream& stream);
  // Zero the whole shard (device: enqueued on `stream`, not waited for).
  void fill_zero(device::Stream& stream);

  // Asynchronous copies of the window into / out of device memory on `stream` (the device
  // tier copies on the device; the pinned tier is an H2D / D2H from its buffer). Not for NVMe:
  // its bytes go through a pinned staging buffer first (read_async).
  void copy_to_device(std::size_t offset, std::size_t n, void* device_dst, device::Stream& stream) const;
  void copy_from_device(std::size_t offset, std::size_t n, const void* device_src, device::Stream& stream);

  // The window from a pinned staging buffer (valid until the copy or write completes), without
  // waiting: device tier an H2D on `stream`, pinned a memcpy, NVMe a write whose handle is
  // returned (empty otherwise).
  offload::AioHandle write_from_staging(std::size_t offset, std::size_t n, const void* staging, device::Stream& stream);
  // NVMe parameters go through pinned staging before the device; the other tiers copy directly.
  bool needs_staging() const { return tier_ == Tier::nvme; }

  // NVMe tier: asynchronous window transfers with a pinned, O_DIRECT-aligned buffer that stays
  // valid until the handle completes; wait with engine().wait() (errors surface there).
  offload::AioHandle read_async(std::size_t offset, std::size_t n, void* buffer) const;
  offload::AioHandle write_async(std::size_t offset, std::size_t n, const void* buffer);
  offload::AioEngine& engine() const;

 private:
  Tier tier_ = Tier::device;
  std::size_t numel_ = 0;
  std::size_t elem_bytes_ = 0;
  device::DeviceBuffer device_;
  std::size_t shard_offset_bytes_ = 0;  // device tier: where this rank's shard starts
  offload::HostBuffer pinned_;
  offload::SwapSpace* swap_ = nullptr;
  offload::ExtentId extent_ = 0;
  TransferCounters* counters_ = nullptr;
};

}  // namespace strata::runtime::tiers
