#pragma once
// Byte sizes as people write them: "512MiB", "2 GiB", "1.5GB", "4096".
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace strata {

inline constexpr std::size_t kKiB = 1024;
inline constexpr std::size_t kMiB = 1024 * kKiB;
inline constexpr std::size_t kGiB = 1024 * kMiB;

// Parses a byte count: a non-negative number with an optional unit (B, KB, MB, GB, TB = powers
// of 1000; KiB, MiB, GiB, TiB = powers of 1024; case-insensitive, spaces allowed). Returns
// nullopt when the text is not such a size or the result does not fit in 64 bits.
std::optional<std::uint64_t> parse_bytes(std::string_view text);

// "512.00 MiB", "3 B", "1.50 GiB": for reports and errors.
std::string format_bytes(std::uint64_t bytes);

}  // namespace strata
