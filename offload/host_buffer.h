#pragma once
// Host memory for offloaded states and I/O staging: 4 KiB-aligned buffers fit for O_DIRECT,
// and a pool with a hard byte budget (strata.pinned_memory) whose buffers are pinned through a
// hook that the runtime installs (cudaHostRegister on a CUDA device; nothing on the host
// device). offload/ never includes CUDA: the hook is two plain functions.
//
// Ownership: a HostBuffer owns its memory and returns it (unpinned, unmapped, its bytes given
// back to the budget) when destroyed. A pooled HostBuffer points at its pool, so the pool must
// outlive every buffer it handed out (asserted in ~HostPool).
//
// The I/O engine watches the pool (BufferObserver) to register every pooled buffer with its
// rings once, so that reads and writes into pool memory use read_fixed / write_fixed.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/tier_names.h"
#include "offload/aio_limits.h"  // kDirectIoAlignment

namespace strata::offload {

// Pins and unpins host memory for fast device copies. Empty functions = no pinning.
// pin throws strata::Error on failure; unpin must not throw (it runs in destructors).
//
// touch, when set, runs on every new pool buffer before pin: it writes the fresh (zeroed)
// mapping so that its pages are faulted in by the threads that will use them — in parallel,
// and on their NUMA node — instead of one page at a time inside pin (cudaHostRegister faults
// in whatever is missing on the calling thread: ~7 M faults for 27 GiB). It must leave the
// memory zeroed and must not throw.
struct PinHook {
  std::function<void(void* ptr, std::size_t bytes)> pin;
  std::function<void(void* ptr)> unpin;
  std::function<void(void* ptr, std::size_t bytes)> touch;
};

class HostPool;

// Told when a pool buffer comes to life and just before its memory is unmapped. on_release
// must not return until the memory is no longer referenced (the I/O engine unregisters it from
// every ring first), because the address range may be reused right after.
class BufferObserver {
 public:
  virtual ~BufferObserver() = default;
  virtual void on_allocate(std::byte* data, std::size_t capacity) = 0;
  virtual void on_release(std::byte* data, std::size_t capacity) noexcept = 0;
};

// An owned, page-aligned, zero-initialised host allocation. size() is what was asked for;
// capacity() is size() rounded up to kDirectIoAlignment (the bytes an O_DIRECT transfer of
// the tail may touch). Move-only.
class HostBuffer {
 public:
  HostBuffer() = default;
  // Not pooled and not pinned: scratch buffers, tests, tools. Throws strata::Error when the
  // system is out of memory. bytes may be 0 (an empty buffer).
  static HostBuffer allocate(std::size_t bytes, std::string_view what);

  ~HostBuffer();
  HostBuffer(HostBuffer&& other) noexcept;
  HostBuffer& operator=(HostBuffer&& other) noexcept;
  HostBuffer(const HostBuffer&) = delete;
  HostBuffer& operator=(const HostBuffer&) = delete;

  std::byte* data() const { return data_; }
  std::size_t size() const { return size_; }
  std::size_t capacity() const { return capacity_; }
  std::span<std::byte> bytes() const { return {data_, size_}; }
  bool pooled() const { return pool_ != nullptr; }
  explicit operator bool() const { return data_ != nullptr; }

 private:
  friend class HostPool;
  void reset() noexcept;

  std::byte* data_ = nullptr;
  std::size_t size_ = 0;
  std::size_t capacity_ = 0;  // multiple of kDirectIoAlignment; the mapping's length
  HostPool* pool_ = nullptr;  // borrowed; null = not pooled
};

struct HostPoolStats {
  std::uint64_t budget_bytes = 0;
  std::uint64_t current_bytes = 0;  // capacity of the live buffers
  std::uint64_t peak_bytes = 0;
  std::uint64_t buffers = 0;        // live buffers
  // Time spent making buffers, summed over every allocation (allocations may run
  // concurrently, so the sum can exceed the wall time): the touch hook, and the pin hook.
  double touch_seconds = 0;
  double pin_seconds = 0;
};

// Pinned host memory with a hard budget. Thread-safe.
class HostPool {
 public:
  // name appears in errors and reports (the pinned tier's name); budget_key is the config key that
  // sets the budget, named in the over-budget error ("strata.pinned_memory").
  HostPool(std::uint64_t budget_bytes, PinHook pin = {}, std::string name = tier_names::kPinned,
           std::string budget_key = "strata.pinned_memory");
  ~HostPool();
  HostPool(const HostPool&) = delete;
  HostPool& operator=(const HostPool&) = delete;

  // A zeroed, aligned, pinned buffer of `bytes` (capacity rounded up to 4 KiB). Throws
  // strata::Error when the capacity would take the pool past its budget: the message names
  // `what`, the request, the budget, what is in use and the budget's config key.
  HostBuffer allocate(std::size_t bytes, std::string_view what);

  HostPoolStats stats() const;
  const std::string& name() const { return name_; }

  // The observer is told about every live buffer at once, then about each later allocation and
  // release. Borrowed: remove it before it is destroyed.
  void add_observer(BufferObserver* observer);
  void remove_observer(BufferObserver* observer);

 private:
  friend class HostBuffer;
  void release(HostBuffer& buffer) noexcept;

  struct Live {
    std::byte* data;
    std::size_t capacity;
  };

  const std::uint64_t budget_bytes_;
  const PinHook pin_;
  const std::string name_;
  const std::string budget_key_;
  mutable std::mutex mutex_;
  std::uint64_t current_bytes_ = 0;
  std::uint64_t peak_bytes_ = 0;
  double touch_seconds_ = 0;
  double pin_seconds_ = 0;
  std::vector<Live> live_;
  std::vector<BufferObserver*> observers_;
};

}  // namespace strata::offload
