#pragma once
// The device arena: one contiguous region (host pages or one cudaMalloc) with a hard byte
// budget, carved into DeviceBuffers by best fit with coalescing of free neighbours.
// Thread-safe. Out of memory throws OutOfMemory, which names the request and reports
// current / peak / budget of every registered memory tier.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "core/error.h"
#include "core/tier_names.h"

namespace strata::runtime::device {

class Arena;

struct ArenaStats {
  std::uint64_t current_bytes = 0;      // bytes handed out now (after alignment)
  std::uint64_t peak_bytes = 0;         // high-water mark of current_bytes
  std::uint64_t budget_bytes = 0;       // the hard limit
  std::uint64_t allocations = 0;        // allocations made since creation
  std::uint64_t live_allocations = 0;   // allocations not yet freed
  std::uint64_t largest_free_bytes = 0; // largest request that can succeed now
};

// One line of an out-of-memory report.
struct TierUsage {
  std::string tier;  // the tier's name (core/tier_names.h): "device", "pinned host", "nvme"
  std::uint64_t current_bytes = 0;
  std::uint64_t peak_bytes = 0;
  std::uint64_t budget_bytes = 0;
};

class OutOfMemory : public Error {
 public:
  OutOfMemory(std::string what, std::string where, std::string hint, std::uint64_t requested_bytes)
      : Error(std::move(what), std::move(where), std::move(hint)), requested_bytes_(requested_bytes) {}
  std::uint64_t requested_bytes() const noexcept { return requested_bytes_; }

 private:
  std::uint64_t requested_bytes_;
};

// An allocation in an arena. Owned, move-only; returns its bytes to the arena when destroyed
// (the owner guarantees that no enqueued work still uses it, see device.h).
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  ~DeviceBuffer() { reset(); }
  DeviceBuffer(DeviceBuffer&& other) noexcept { *this = std::move(other); }
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  void* data() const noexcept { return data_; }
  template <typename T>
  T* as() const noexcept { return static_cast<T*>(data_); }
  std::size_t bytes() const noexcept { return bytes_; }
  bool empty() const noexcept { return data_ == nullptr; }
  void reset();  // frees now

 private:
  friend class Arena;
  DeviceBuffer(Arena* arena, void* data, std::size_t bytes, std::uint64_t offset)
      : arena_(arena), data_(data), bytes_(bytes), offset_(offset) {}
  Arena* arena_ = nullptr;
  void* data_ = nullptr;
  std::size_t bytes_ = 0;
  std::uint64_t offset_ = 0;
};

class Arena {
 public:
  static constexpr std::size_t kAlignment = 256;

  // Manages [base, base + budget_bytes); does not own the memory. `tier` names it in reports.
  Arena(void* base, std::uint64_t budget_bytes, std::string tier = tier_names::kDevice);
  ~Arena();
  Arena(const Arena&) = delete;
  Arena& operator=(const Arena&) = delete;

  // Returns kAlignment-aligned memory of at least `bytes` (0 gives an empty buffer).
  DeviceBuffer allocate(std::size_t bytes, std::string_view what);
  ArenaStats stats() const;
  void add_tier(std::function<TierUsage()> report);

 private:
  friend class DeviceBuffer;
  // Carves `need` bytes from the free block `it`; called with mutex_ held.
  DeviceBuffer take(std::multimap<std::uint64_t, std::uint64_t>::iterator it, std::uint64_t need,
                    std::size_t bytes);
  void free(std::uint64_t offset);
  std::string usage_table(const ArenaStats& own) const;

  char* base_;
  std::uint64_t budget_bytes_;
  std::string tier_;
  mutable std::mutex mutex_;
  std::map<std::uint64_t, std::uint64_t> free_by_offset_;       // offset -> size
  std::multimap<std::uint64_t, std::uint64_t> free_by_size_;    // size -> offset
  std::map<std::uint64_t, std::uint64_t> used_;                 // offset -> size
  ArenaStats stats_;
  std::vector<std::function<TierUsage()>> other_tiers_;
};

}  // namespace strata::runtime::device
