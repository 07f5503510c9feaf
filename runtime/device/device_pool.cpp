#include "runtime/device/device_pool.h"

#include <cstddef>
#include <utility>
#include <vector>

namespace strata::runtime::device {

DevicePool::DevicePool(Device& device, std::uint64_t region_bytes, const std::string& name, Reuse reuse)
    : device_(device), reuse_(reuse) {
  region_ = device.allocate(region_bytes, name);
  arena_ = std::make_unique<Arena>(region_.data(), region_.bytes(), name);
}

DevicePool::~DevicePool() {
  for (Pending& p : pending_) p.done->synchronize();
  for (Fence& f : fences_) f.done->synchronize();
}

std::unique_ptr<Event> DevicePool::take_event() {
  if (spare_events_.empty()) return device_.create_event();
  std::unique_ptr<Event> e = std::move(spare_events_.back());
  spare_events_.pop_back();
  return e;
}

void DevicePool::collect_completed() {
  // Fences hold no bytes: dropping the completed ones changes nothing but later waits.
  for (std::size_t i = 0; i < fences_.size();) {
    if (fences_[i].done->query()) {
      spare_events_.push_back(std::move(fences_[i].done));
      fences_.erase(fences_.begin() + static_cast<std::ptrdiff_t>(i));
    } else {
      ++i;
    }
  }
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

// Waits for the work still using any of the buffer's bytes (Note [Placement in issue order]).
void DevicePool::wait_for_fences(const DeviceBuffer& buffer) {
  const char* begin = static_cast<const char*>(buffer.data());
  const char* end = begin + buffer.bytes();
  for (std::size_t i = 0; i < fences_.size();) {
    Fence& f = fences_[i];
    if (f.end <= begin || end <= f.begin) {
      ++i;
      continue;
    }
    f.done->synchronize();  // should it throw, the fence stays
    spare_events_.push_back(std::move(f.done));
    fences_.erase(fences_.begin() + static_cast<std::ptrdiff_t>(i));
  }
}

DeviceBuffer DevicePool::try_allocate(std::size_t bytes, std::string_view what) {
  collect_completed();
  DeviceBuffer buffer;
  try {
    buffer = arena_->allocate(bytes, what);
  } catch (const OutOfMemory&) {
    return {};
  }
  wait_for_fences(buffer);
  return buffer;
}

DeviceBuffer DevicePool::allocate(std::size_t bytes, std::string_view what) {
  collect_completed();
  for (;;) {
    try {
      DeviceBuffer buffer = arena_->allocate(bytes, what);
      wait_for_fences(buffer);
      return buffer;
    } catch (const OutOfMemory&) {
      if (pending_.empty()) throw;
    }
    wait_one();
    collect_completed();
  }
}

void DevicePool::free_after(DeviceBuffer buffer, Stream& stream) {
  if (buffer.empty()) return;
  std::unique_ptr<Event> done = take_event();
  done->record(stream);
  if (reuse_ == Reuse::in_issue_order) {
    const char* begin = static_cast<const char*>(buffer.data());
    fences_.push_back({begin, begin + buffer.bytes(), std::move(done)});
    buffer.reset();  // back to the arena now; the next user of its bytes waits for the fence
    return;
  }
  pending_.push_back({std::move(buffer), std::move(done)});
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
  while (!fences_.empty()) {
    fences_.back().done->synchronize();
    spare_events_.push_back(std::move(fences_.back().done));
    fences_.pop_back();
  }
}

}  // namespace strata::runtime::device
