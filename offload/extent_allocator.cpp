#include "offload/extent_allocator.h"

#include <algorithm>
#include <iterator>

#include "core/error.h"

namespace strata::offload {

ExtentAllocator::ExtentAllocator(std::uint64_t unit, std::uint64_t capacity) : unit_(unit) {
  STRATA_ASSERT(unit > 0);
  grow_to(capacity);
}

std::optional<std::uint64_t> ExtentAllocator::allocate(std::uint64_t bytes) {
  STRATA_ASSERT(bytes > 0 && bytes % unit_ == 0, "extent lengths are positive multiples of the unit");
  for (auto it = free_.begin(); it != free_.end(); ++it) {
    if (it->second < bytes) continue;
    const std::uint64_t offset = it->first;
    const std::uint64_t rest = it->second - bytes;
    free_.erase(it);
    if (rest > 0) free_.emplace(offset + bytes, rest);
    used_.emplace(offset, bytes);
    used_bytes_ += bytes;
    return offset;
  }
  return std::nullopt;
}

std::uint64_t ExtentAllocator::allocate(std::uint64_t bytes, const GrowHook& grow) {
  if (std::optional<std::uint64_t> offset = allocate(bytes)) return *offset;
  const std::uint64_t new_capacity = capacity_to_fit(bytes);
  grow(new_capacity);  // may throw: nothing has changed yet
  grow_to(new_capacity);
  std::optional<std::uint64_t> offset = allocate(bytes);
  STRATA_ASSERT(offset.has_value(), "a grown file must fit the request");
  return *offset;
}

void ExtentAllocator::release(std::uint64_t offset, std::uint64_t bytes) {
  auto used = used_.find(offset);
  STRATA_ASSERT(used != used_.end() && used->second == bytes,
                "release() of a range that allocate() did not hand out");
  used_.erase(used);
  used_bytes_ -= bytes;

  // Merge with the free neighbours: the one that ends where this starts, the one that starts
  // where this ends.
  std::uint64_t start = offset;
  std::uint64_t length = bytes;
  auto next = free_.lower_bound(offset);
  if (next != free_.begin()) {
    auto prev = std::prev(next);
    STRATA_ASSERT(prev->first + prev->second <= offset, "free ranges overlap a used one");
    if (prev->first + prev->second == offset) {
      start = prev->first;
      length += prev->second;
      free_.erase(prev);
    }
  }
  if (next != free_.end()) {
    STRATA_ASSERT(offset + bytes <= next->first, "free ranges overlap a used one");
    if (offset + bytes == next->first) {
      length += next->second;
      free_.erase(next);
    }
  }
  free_.emplace(start, length);
}

void ExtentAllocator::grow_to(std::uint64_t new_capacity) {
  STRATA_ASSERT(new_capacity % unit_ == 0 && new_capacity >= capacity_);
  if (new_capacity == capacity_) return;
  std::uint64_t start = capacity_;
  std::uint64_t length = new_capacity - capacity_;
  if (!free_.empty()) {
    auto last = std::prev(free_.end());
    if (last->first + last->second == capacity_) {
      start = last->first;
      length += last->second;
      free_.erase(last);
    }
  }
  free_.emplace(start, length);
  capacity_ = new_capacity;
}

void ExtentAllocator::shrink_to(std::uint64_t new_capacity) {
  STRATA_ASSERT(new_capacity % unit_ == 0 && new_capacity <= capacity_);
  if (new_capacity == capacity_) return;
  STRATA_ASSERT(tail_free_bytes() >= capacity_ - new_capacity, "shrink_to() over used space");
  auto last = std::prev(free_.end());
  const std::uint64_t start = last->first;
  free_.erase(last);
  if (start < new_capacity) free_.emplace(start, new_capacity - start);
  capacity_ = new_capacity;
}

std::uint64_t ExtentAllocator::capacity_to_fit(std::uint64_t bytes) const {
  for (const auto& [offset, length] : free_) {
    if (length >= bytes) return capacity_;
  }
  return capacity_ - tail_free_bytes() + bytes;
}

std::uint64_t ExtentAllocator::tail_free_bytes() const {
  if (free_.empty()) return 0;
  auto last = std::prev(free_.end());
  return last->first + last->second == capacity_ ? last->second : 0;
}

std::uint64_t ExtentAllocator::largest_free_bytes() const {
  std::uint64_t largest = 0;
  for (const auto& [offset, length] : free_) largest = std::max(largest, length);
  return largest;
}

}  // namespace strata::offload
