#pragma once
// The I/O sizes defined once: O_DIRECT's alignment, and aio.block_size's default and limit. The
// I/O engine, the swap space and the pinned buffers use them as their defaults and checks, and
// the config (runtime/config) as the key's default and range.
#include <cstddef>

namespace strata::offload {

// O_DIRECT wants the buffer address, the file offset and the length aligned to the logical
// block size of the device; 4 KiB covers every device strata meets. Block sizes are multiples.
inline constexpr std::size_t kDirectIoAlignment = 4096;

inline constexpr std::size_t kDefaultBlockBytes = std::size_t{1} << 20;  // 1 MiB
inline constexpr std::size_t kMaxBlockBytes = std::size_t{1} << 30;      // 1 GiB

}  // namespace strata::offload
