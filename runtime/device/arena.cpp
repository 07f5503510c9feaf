#include "runtime/device/arena.h"

#include <utility>

#include <fmt/format.h>

#include "core/units.h"

namespace strata::runtime::device {
namespace {

std::uint64_t round_up(std::uint64_t x, std::uint64_t a) { return (x + a - 1) / a * a; }

}  // namespace

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  if (this != &other) {
    reset();
    arena_ = std::exchange(other.arena_, nullptr);
    data_ = std::exchange(other.data_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
    offset_ = std::exchange(other.offset_, 0);
  }
  return *this;
}

void DeviceBuffer::reset() {
  if (arena_ != nullptr) arena_->free(offset_);
  arena_ = nullptr;
  data_ = nullptr;
  bytes_ = 0;
  offset_ = 0;
}

Arena::Arena(void* base, std::uint64_t budget_bytes, std::string tier)
    : base_(static_cast<char*>(base)), budget_bytes_(budget_bytes), tier_(std::move(tier)) {
  STRATA_ASSERT(base != nullptr || budget_bytes == 0);
  STRATA_ASSERT(reinterpret_cast<std::uintptr_t>(base) % kAlignment == 0);
  stats_.budget_bytes = budget_bytes;
  // The usable span is the budget rounded down to the alignment, so every block stays aligned.
  std::uint64_t usable = budget_bytes / kAlignment * kAlignment;
  if (usable > 0) {
    free_by_offset_.emplace(0, usable);
    free_by_size_.emplace(usable, 0);
  }
}

Arena::~Arena() {
  // Buffers must not outlive their arena: that would be a use-after-free of device memory.
  STRATA_ASSERT(used_.empty(), "DeviceBuffers outlive their device arena");
}

DeviceBuffer Arena::allocate(std::size_t bytes, std::string_view what) {
  if (bytes == 0) return {};
  // Checked before rounding so that a huge request (a negative size cast to size_t) cannot
  // wrap around to a small one.
  const bool over_budget = bytes > budget_bytes_;
  const std::uint64_t need = over_budget ? 0 : round_up(bytes, kAlignment);
  ArenaStats own;
  {
    std::lock_guard lock(mutex_);
    auto it = over_budget ? free_by_size_.end() : free_by_size_.lower_bound(need);  // best fit
    if (it != free_by_size_.end()) return take(it, need, bytes);
    own = stats_;
    own.largest_free_bytes = free_by_size_.empty() ? 0 : free_by_size_.rbegin()->first;
  }
  // Out of memory. The report asks the other tiers for their usage outside our lock: their
  // callbacks take their own locks and may call back into this arena.
  const bool budget_cause = over_budget || own.current_bytes + need > budget_bytes_;
  std::string why = budget_cause ? "the budget would be exceeded"
                                 : fmt::format("the free space is fragmented (largest free block {})",
                                               format_bytes(own.largest_free_bytes));
  throw OutOfMemory(
      fmt::format("out of {} memory: {} for '{}' does not fit ({})\n{}", tier_, format_bytes(bytes),
                  what, why, usage_table(own)),
      std::string(what),
      "raise strata.device_memory, lower the micro-batch size, or offload more states "
      "(zero_optimization.offload_param / offload_optimizer)",
      bytes);
}

DeviceBuffer Arena::take(std::multimap<std::uint64_t, std::uint64_t>::iterator it, std::uint64_t need,
                         std::size_t bytes) {
  const std::uint64_t block_size = it->first;
  const std::uint64_t offset = it->second;
  free_by_size_.erase(it);
  free_by_offset_.erase(offset);
  if (block_size > need) {
    free_by_offset_.emplace(offset + need, block_size - need);
    free_by_size_.emplace(block_size - need, offset + need);
  }
  used_.emplace(offset, need);
  stats_.current_bytes += need;
  stats_.peak_bytes = std::max(stats_.peak_bytes, stats_.current_bytes);
  stats_.allocations += 1;
  stats_.live_allocations += 1;
  return DeviceBuffer(this, base_ + offset, bytes, offset);
}

void Arena::free(std::uint64_t offset) {
  std::lock_guard lock(mutex_);
  auto used = used_.find(offset);
  STRATA_ASSERT(used != used_.end(), "freeing a block the arena did not hand out");
  std::uint64_t start = offset;
  std::uint64_t size = used->second;
  used_.erase(used);
  stats_.current_bytes -= size;
  stats_.live_allocations -= 1;

  auto erase_free = [this](std::map<std::uint64_t, std::uint64_t>::iterator block) {
    auto [first, last] = free_by_size_.equal_range(block->second);
    for (auto s = first; s != last; ++s) {
      if (s->second == block->first) {
        free_by_size_.erase(s);
        break;
      }
    }
    return free_by_offset_.erase(block);
  };
  // Coalesce with the free neighbours on both sides.
  auto next = free_by_offset_.lower_bound(start);
  if (next != free_by_offset_.end() && next->first == start + size) {
    size += next->second;
    next = erase_free(next);
  }
  if (next != free_by_offset_.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == start) {
      start = prev->first;
      size += prev->second;
      erase_free(prev);
    }
  }
  free_by_offset_.emplace(start, size);
  free_by_size_.emplace(size, start);
}

ArenaStats Arena::stats() const {
  std::lock_guard lock(mutex_);
  ArenaStats s = stats_;
  s.largest_free_bytes = free_by_size_.empty() ? 0 : free_by_size_.rbegin()->first;
  return s;
}

void Arena::add_tier(std::function<TierUsage()> report) {
  std::lock_guard lock(mutex_);
  other_tiers_.push_back(std::move(report));
}

std::string Arena::usage_table(const ArenaStats& own) const {
  std::vector<std::function<TierUsage()>> reports;
  {
    std::lock_guard lock(mutex_);
    reports = other_tiers_;
  }
  std::string out = fmt::format("  {:<12} {:>14} {:>14} {:>14}\n", "tier", "current", "peak", "budget");
  auto row = [&out](const TierUsage& r) {
    out += fmt::format("  {:<12} {:>14} {:>14} {:>14}\n", r.tier, format_bytes(r.current_bytes),
                       format_bytes(r.peak_bytes), format_bytes(r.budget_bytes));
  };
  row({tier_, own.current_bytes, own.peak_bytes, own.budget_bytes});
  for (const auto& report : reports) {
    try {
      row(report());
    } catch (const std::exception& e) {
      out += fmt::format("  (a tier could not report its usage: {})\n", e.what());
    }
  }
  out += fmt::format("  ({} live allocations in the {} arena)", own.live_allocations, tier_);
  return out;
}

}  // namespace strata::runtime::device
