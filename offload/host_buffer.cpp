#include "offload/host_buffer.h"

#include <sys/mman.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <utility>

#include <fmt/format.h>

#include "core/error.h"
#include "core/huge_mapping.h"
#include "core/units.h"

namespace strata::offload {
namespace {

std::size_t round_up(std::size_t bytes) {
  return (bytes + kDirectIoAlignment - 1) / kDirectIoAlignment * kDirectIoAlignment;
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// Anonymous mappings are page-aligned and zero-filled by the kernel, so no memset is needed,
// and munmap returns the memory to the system at once (malloc would keep large blocks cached).
// Large ones ask for transparent huge pages (core/huge_mapping.h): a state of a few GiB then
// takes a fault per 2 MiB rather than per 4 KiB when it is first touched or pinned.
std::byte* map_zeroed(std::size_t capacity, std::string_view what) {
  void* p = map_anonymous(capacity);
  if (p == nullptr) {
    const int e = errno;
    throw Error(fmt::format("cannot allocate {} of host memory for '{}': mmap: {}",
                            format_bytes(capacity), what, errno_text(e)),
                "host memory",
                "free host memory, lower the offload buffer sizes, or check ulimit -v");
  }
  return static_cast<std::byte*>(p);
}

}  // namespace

// --- HostBuffer --------------------------------------------------------------------------

HostBuffer HostBuffer::allocate(std::size_t bytes, std::string_view what) {
  HostBuffer b;
  if (bytes == 0) return b;
  b.capacity_ = round_up(bytes);
  b.data_ = map_zeroed(b.capacity_, what);
  b.size_ = bytes;
  return b;
}

HostBuffer::~HostBuffer() { reset(); }

HostBuffer::HostBuffer(HostBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)),
      capacity_(std::exchange(other.capacity_, 0)),
      pool_(std::exchange(other.pool_, nullptr)) {}

HostBuffer& HostBuffer::operator=(HostBuffer&& other) noexcept {
  if (this != &other) {
    reset();
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
    capacity_ = std::exchange(other.capacity_, 0);
    pool_ = std::exchange(other.pool_, nullptr);
  }
  return *this;
}

void HostBuffer::reset() noexcept {
  if (data_ == nullptr) return;
  if (pool_ != nullptr) {
    pool_->release(*this);  // observers, unpin and munmap happen there, in that order
  } else {
    ::munmap(data_, capacity_);
  }
  data_ = nullptr;
  size_ = 0;
  capacity_ = 0;
  pool_ = nullptr;
}

// --- HostPool ----------------------------------------------------------------------------

HostPool::HostPool(std::uint64_t budget_bytes, PinHook pin, std::string name,
                   std::string budget_key)
    : budget_bytes_(budget_bytes),
      pin_(std::move(pin)),
      name_(std::move(name)),
      budget_key_(std::move(budget_key)) {}

HostPool::~HostPool() {
  std::lock_guard lock(mutex_);
  // A live buffer would call release() on a destroyed pool.
  STRATA_ASSERT(live_.empty(), "a HostPool was destroyed while its buffers are still alive");
}

HostBuffer HostPool::allocate(std::size_t bytes, std::string_view what) {
  HostBuffer b;
  if (bytes == 0) return b;
  const std::size_t capacity = round_up(bytes);

  // Reserve the budget first, so that concurrent allocations cannot overshoot it together;
  // mapping and pinning (cudaHostRegister can take milliseconds) run outside the lock.
  {
    std::lock_guard lock(mutex_);
    if (current_bytes_ + capacity > budget_bytes_) {
      throw Error(
          fmt::format("{} pool: {} for '{}' would exceed the budget of {} ({} in use)", name_,
                      format_bytes(capacity), what, format_bytes(budget_bytes_),
                      format_bytes(current_bytes_)),
          budget_key_,
          fmt::format("raise {} (the {} memory budget), or lower the sizes that fill it "
                      "(buffer counts and sizes of the offload tiers)",
                      budget_key_, name_));
    }
    current_bytes_ += capacity;
    peak_bytes_ = std::max(peak_bytes_, current_bytes_);
  }
  auto give_back = [&] {
    std::lock_guard lock(mutex_);
    current_bytes_ -= capacity;
  };

  std::byte* data = nullptr;
  try {
    data = map_zeroed(capacity, what);
    const auto t0 = std::chrono::steady_clock::now();
    if (pin_.touch) pin_.touch(data, capacity);
    const double touch_s = seconds_since(t0);
    const auto t1 = std::chrono::steady_clock::now();
    if (pin_.pin) pin_.pin(data, capacity);
    const double pin_s = seconds_since(t1);
    std::lock_guard lock(mutex_);
    touch_seconds_ += touch_s;
    pin_seconds_ += pin_s;
  } catch (...) {
    if (data != nullptr) ::munmap(data, capacity);
    give_back();
    throw;
  }

  // Observers hear about the buffer under the lock, so that add/remove_observer and release
  // see a consistent list: no observer misses a buffer or hears about one twice.
  {
    std::lock_guard lock(mutex_);
    live_.push_back({data, capacity});
    for (BufferObserver* o : observers_) o->on_allocate(data, capacity);
  }
  b.data_ = data;
  b.size_ = bytes;
  b.capacity_ = capacity;
  b.pool_ = this;
  return b;
}

void HostPool::release(HostBuffer& buffer) noexcept {
  {
    std::lock_guard lock(mutex_);
    // on_release blocks until the rings no longer reference the memory: only then may it be
    // unpinned and unmapped (the address range can be reused by the next mmap).
    for (BufferObserver* o : observers_) o->on_release(buffer.data_, buffer.capacity_);
    auto it = std::find_if(live_.begin(), live_.end(),
                           [&](const Live& l) { return l.data == buffer.data_; });
    STRATA_ASSERT(it != live_.end(), "released a buffer this pool does not own");
    live_.erase(it);
  }
  if (pin_.unpin) pin_.unpin(buffer.data_);
  ::munmap(buffer.data_, buffer.capacity_);
  std::lock_guard lock(mutex_);
  current_bytes_ -= buffer.capacity_;
}

HostPoolStats HostPool::stats() const {
  std::lock_guard lock(mutex_);
  return {budget_bytes_, current_bytes_, peak_bytes_, live_.size(), touch_seconds_, pin_seconds_};
}

void HostPool::add_observer(BufferObserver* observer) {
  STRATA_ASSERT(observer != nullptr);
  std::lock_guard lock(mutex_);
  STRATA_ASSERT(std::find(observers_.begin(), observers_.end(), observer) == observers_.end(),
                "observer added twice");
  for (const Live& l : live_) observer->on_allocate(l.data, l.capacity);
  observers_.push_back(observer);
}

void HostPool::remove_observer(BufferObserver* observer) {
  std::lock_guard lock(mutex_);
  std::erase(observers_, observer);
}

}  // namespace strata::offload
