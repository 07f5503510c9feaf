#pragma once
// The free list of one swap file (internal to the swap space): which byte ranges of the file
// are given to extents and which are free. Pure bookkeeping, no I/O and no locking (the swap
// space holds its mutex around every call), so it is tested on its own.
//
// Every offset and length is a multiple of `unit` (the swap space's block_size). allocate()
// takes the lowest free range that fits (first fit by address: it keeps the file's used part
// dense at the front, so growth stays rare); release() returns a range and merges it with its
// free neighbours on both sides, so the list never holds two adjacent free ranges.
//
// Growth. The file grows at its end: capacity() is its size. When no free range fits,
// allocate() asks its grow hook for the smallest capacity that would fit the request (the free
// range at the end, if any, is extended). The hook does the real work (fallocate) and may
// throw (ENOSPC): then nothing here changes. shrink_to() undoes a growth whose space was never
// used (the swap space rolls back a failed multi-path allocation with it).
#include <cstdint>
#include <functional>
#include <map>
#include <optional>

namespace strata::offload {

class ExtentAllocator {
 public:
  // Called with the capacity the file must grow to; throws to refuse (nothing changes then).
  using GrowHook = std::function<void(std::uint64_t new_capacity)>;

  // unit: positive; every offset, length and capacity is a multiple of it (asserted).
  explicit ExtentAllocator(std::uint64_t unit, std::uint64_t capacity = 0);

  // The lowest free range of `bytes` (a positive multiple of unit), or nullopt when none fits.
  std::optional<std::uint64_t> allocate(std::uint64_t bytes);
  // As above, but grows through `grow` when nothing fits. Throws what `grow` throws.
  std::uint64_t allocate(std::uint64_t bytes, const GrowHook& grow);
  // Returns a range that allocate() handed out, whole (asserted).
  void release(std::uint64_t offset, std::uint64_t bytes);

  // Adds [capacity(), new_capacity) to the free list (merged with a free range at the end).
  void grow_to(std::uint64_t new_capacity);
  // Takes [new_capacity, capacity()) off the end; that range must be free (asserted).
  void shrink_to(std::uint64_t new_capacity);
  // The capacity at which `bytes` more would fit at the end without a new growth:
  // capacity() when a free range already fits them anywhere.
  std::uint64_t capacity_to_fit(std::uint64_t bytes) const;

  std::uint64_t unit() const { return unit_; }
  std::uint64_t capacity() const { return capacity_; }
  std::uint64_t used_bytes() const { return used_bytes_; }
  std::uint64_t free_bytes() const { return capacity_ - used_bytes_; }
  std::uint64_t tail_free_bytes() const;     // the free range that ends at capacity(), or 0
  std::uint64_t largest_free_bytes() const;  // the longest free range
  std::size_t free_ranges() const { return free_.size(); }  // fragments
  std::size_t used_ranges() const { return used_.size(); }

 private:
  std::uint64_t unit_;
  std::uint64_t capacity_ = 0;
  std::uint64_t used_bytes_ = 0;
  std::map<std::uint64_t, std::uint64_t> free_;  // offset -> length; never two adjacent
  std::map<std::uint64_t, std::uint64_t> used_;  // offset -> length; what allocate() handed out
};

}  // namespace strata::offload
