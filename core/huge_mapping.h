#pragma once
// Large anonymous host mappings that ask for transparent huge pages: the pinned tiers' buffers
// (offload/host_buffer.cpp) and the host backend's device arena (runtime/device/host_device.cpp).
// A mapping of a few GiB then takes a page fault per 2 MiB rather than per 4 KiB when it is first
// touched (on a VM a fault costs about 12 us: 5 GB in 4 KiB pages is 15 s of kernel time).
#include <cstddef>

namespace strata {

inline constexpr std::size_t kHugePageBytes = std::size_t{2} << 20;

// mmap(PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | extra_flags) of `bytes` (> 0):
// zero-filled by the kernel, faulted in lazily. A mapping of kHugePageBytes or more starts on a
// 2 MiB boundary (mapped 2 MiB larger, the ends cut off) and asks for transparent huge pages,
// a hint the kernel may refuse (THP "never"): the memory is the same, only its faults slower.
// Returns nullptr with errno set when mmap fails; release with munmap(p, bytes).
void* map_anonymous(std::size_t bytes, int extra_flags = 0);

}  // namespace strata
