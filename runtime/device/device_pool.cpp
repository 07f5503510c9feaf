#include "runtime/device/device_pool.h"

#include <utility>

namespace strata::runtime::device {

DevicePool::DevicePool(Device& device, std::uint64_t region_bytes, const std::string& name)
    : device_(device) {
  region_ = device.allocate(region_bytes, name);
  arena_ = std::make_unique<Arena>(region_.data(), region_.bytes(), name);
}

DevicePool::~DevicePool() {
  for (Pending& p : pending_) p.done->synchronize();
}

std::unique_ptr<Event> DevicePool::take_event() {
  if (spare_events_.empty()) return device_.create_event();
  std::unique_ptr<Event> e = std::move(spare_events_.back());
  spare_events_.pop_back();
  return e;
}

void DevicePool::collect_completed() {
  // Buffers complete in any order across streams; free every one that has.
  for (auto it = pending_.begin(); it != pending_.end();) {
    if (it->done->query()) {
      it->buffer.reset();
      spare_events_.push_back(std::move(it->done));
      it = pending_.erase(it);
    } else {
      ++it;
    }
  }
}

DeviceBuffer DevicePool::try_allocate(std::size_t bytes, std::string_view what) {
  collect_completed();
  try {
    return arena_->allocate(bytes, what);
  } catch (const OutOfMemory&) {
    return {};
  }
}

DeviceBuffer DevicePool::allocate(std::size_t bytes, std::string_view what) {
  collect_completed();
  for (;;) {
    try {
      return arena_->allocate(bytes, what);
    } catch (const OutOfMemory&) {
      if (pending_.empty()) throw;
    }
    wait_one();
    collect_completed();
  }
}

void DevicePool::free_after(DeviceBuffer buffer, Stream& stream) {
  if (buffer.empty()) return;
  Pending p{std::move(buffer), take_event()};
  p.done->record(stream);
  pending_.push_back(std::move(p));
}

bool DevicePool::wait_one() {
  if (pending_.empty()) return false;
  pending_.front().done->synchronize();
  pending_.front().buffer.reset();
  spare_events_.push_back(std::move(pending_.front().done));
  pending_.pop_front();
  return true;
}

void DevicePool::drain() {
  while (wait_one()) {
  }
}

}  // namespace strata::runtime::device
