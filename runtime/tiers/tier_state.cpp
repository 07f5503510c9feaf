#include "runtime/tiers/tier_state.h"

#include <cstdint>
#include <cstring>
#include <utility>

#include "core/error.h"

namespace strata::runtime::tiers {
namespace {

bool aligned_for_direct_io(const void* p) {
  return reinterpret_cast<std::uintptr_t>(p) % offload::kDirectIoAlignment == 0;
}

}  // namespace

TierState TierState::on_device(device::DeviceBuffer buffer, std::size_t numel, std::size_t elem_bytes,
                               std::size_t shard_offset_bytes, TransferCounters& counters) {
  TierState s;
  s.tier_ = Tier::device;
  s.numel_ = numel;
  s.elem_bytes_ = elem_bytes;
  s.device_ = std::move(buffer);
  s.shard_offset_bytes_ = shard_offset_bytes;
  s.counters_ = &counters;
  return s;
}

TierState TierState::on_pinned(offload::HostBuffer buffer, std::size_t numel, std::size_t elem_bytes,
                               TransferCounters& counters) {
  TierState s;
  s.tier_ = Tier::pinned;
  s.numel_ = numel;
  s.elem_bytes_ = elem_bytes;
  s.pinned_ = std::move(buffer);
  s.counters_ = &counters;
  return s;
}

TierState TierState::on_nvme(offload::SwapSpace& swap, offload::ExtentId extent, std::size_t numel,
                             std::size_t elem_bytes, TransferCounters& counters) {
  TierState s;
  s.tier_ = Tier::nvme;
  s.numel_ = numel;
  s.elem_bytes_ = elem_bytes;
  s.swap_ = &swap;
  s.extent_ = extent;
  s.counters_ = &counters;
  return s;
}

void* TierState::device_data() const {
  if (tier_ != Tier::device) return nullptr;
  return static_cast<char*>(device_.data()) + shard_offset_bytes_;
}

void TierState::read(std::size_t offset, std::size_t n, void* host, device::Stream& stream) const {
  STRATA_ASSERT(offset + n <= numel_, "TierState::read past the shard");
  const std::size_t bytes = n * elem_bytes_;
  switch (tier_) {
    case Tier::device:
      stream.copy_async(host, static_cast<const char*>(device_data()) + offset * elem_bytes_, bytes);
      stream.synchronize();
      counters_->add_d2h(bytes);
      return;
    case Tier::pinned: std::memcpy(host, pinned_.data() + offset * elem_bytes_, bytes); return;
    case Tier::nvme: {
      if (aligned_for_direct_io(host)) {
        engine().wait(read_async(offset, n, host));
        return;
      }
      offload::HostBuffer bounce = offload::HostBuffer::allocate(bytes, "state read");
      engine().wait(read_async(offset, n, bounce.data()));
      std::memcpy(host, bounce.data(), bytes);
      return;
    }
  }
}

void TierState::write(std::size_t offset, std::size_t n, const void* host, device::Stream& stream) {
  STRATA_ASSERT(offset + n <= numel_, "TierState::write past the shard");
  const std::size_t bytes = n * elem_bytes_;
  switch (tier_) {
    case Tier::device:
      stream.copy_async(static_cast<char*>(device_data()) + offset * elem_bytes_, host, bytes);
      stream.synchronize();
      counters_->add_h2d(bytes);
      return;
    case Tier::pinned: std::memcpy(pinned_.data() + offset * elem_bytes_, host, bytes); return;
    case Tier::nvme: {
      if (aligned_for_direct_io(host)) {
        engine().wait(write_async(offset, n, host));
        return;
      }
      offload::HostBuffer bounce = offload::HostBuffer::allocate(bytes, "state write");
      std::memcpy(bounce.data(), host, bytes);
      engine().wait(write_async(offset, n, bounce.data()));
      return;
    }
  }
}

void TierState::write_full(const void* host, device::Stream& stream) {
  STRATA_ASSERT(tier_ == Tier::device, "write_full of a state that is not on the device");
  stream.copy_async(device_.data(), host, device_.bytes());
  stream.synchronize();
  counters_->add_h2d(device_.bytes());
}

void TierState::fill_zero(device::Stream& stream) {
  switch (tier_) {
    case Tier::device: stream.memset_async(device_data(), 0, bytes()); return;
    case Tier::pinned: std::memset(pinned_.data(), 0, bytes()); return;
    case Tier::nvme: {
      offload::HostBuffer zeros = offload::HostBuffer::allocate(bytes(), "zeroed state");
      engine().wait(write_async(0, numel_, zeros.data()));
      return;
    }
  }
}

void TierState::copy_to_device(std::size_t offset, std::size_t n, void* device_dst, device::Stream& stream) const {
  STRATA_ASSERT(offset + n <= numel_, "TierState::copy_to_device past the shard");
  const std::size_t bytes = n * elem_bytes_;
  switch (tier_) {
    case Tier::device:  // on the device: not an H2D
      stream.copy_async(device_dst, static_cast<const char*>(device_data()) + offset * elem_bytes_, bytes);
      return;
    case Tier::pinned:
      stream.copy_async(device_dst, pinned_.data() + offset * elem_bytes_, bytes);
      counters_->add_h2d(bytes);
      return;
    case Tier::nvme: break;
  }
  detail::assert_fail("copy_to_device of an NVMe state (read it into pinned staging first)", __FILE__, __LINE__);
}

void TierState::copy_from_device(std::size_t offset, std::size_t n, const void* device_src, device::Stream& stream) {
  STRATA_ASSERT(offset + n <= numel_, "TierState::copy_from_device past the shard");
  const std::size_t bytes = n * elem_bytes_;
  switch (tier_) {
    case Tier::device:
      stream.copy_async(static_cast<char*>(device_data()) + offset * elem_bytes_, device_src, bytes);
      return;
    case Tier::pinned:
      stream.copy_async(pinned_.data() + offset * elem_bytes_, device_src, bytes);
      counters_->add_d2h(bytes);
      return;
    case Tier::nvme: break;
  }
  detail::assert_fail("copy_from_device into an NVMe state (stage it in pinned memory)", __FILE__, __LINE__);
}

offload::AioHandle TierState::write_from_staging(std::size_t offset, std::size_t n, const void* staging,
                                                device::Stream& stream) {
  STRATA_ASSERT(offset + n <= numel_, "TierState::write_from_staging past the shard");
  const std::size_t bytes = n * elem_bytes_;
  switch (tier_) {
    case Tier::device:
      stream.copy_async(static_cast<char*>(device_data()) + offset * elem_bytes_, staging, bytes);
      counters_->add_h2d(bytes);
      return {};
    case Tier::pinned: std::memcpy(pinned_.data() + offset * elem_bytes_, staging, bytes); return {};
    case Tier::nvme: return write_async(offset, n, staging);
  }
  return {};
}

void TierState::swap_host_buffer(offload::HostBuffer& other) {
  STRATA_ASSERT(tier_ == Tier::pinned && other.size() >= bytes(), "swap_host_buffer of a state not in host memory");
  std::swap(pinned_, other);
}

offload::AioHandle TierState::read_async(std::size_t offset, std::size_t n, void* buffer) const {
  STRATA_ASSERT(tier_ == Tier::nvme && offset + n <= numel_, "read_async of a state not on NVMe");
  return swap_->read(extent_, buffer, n * elem_bytes_, offset * elem_bytes_);
}

offload::AioHandle TierState::write_async(std::size_t offset, std::size_t n, const void* buffer) {
  STRATA_ASSERT(tier_ == Tier::nvme && offset + n <= numel_, "write_async of a state not on NVMe");
  return swap_->write(extent_, buffer, n * elem_bytes_, offset * elem_bytes_);
}

offload::AioEngine& TierState::engine() const {
  STRATA_ASSERT(swap_ != nullptr, "the I/O engine of a state not on NVMe");
  return swap_->engine();
}

}  // namespace strata::runtime::tiers
