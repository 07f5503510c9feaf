#pragma once
// How the three memory tiers are spelled, at the bottom layer so that every layer that names one
// reads it here: runtime/tiers/tier.h (tier_key, tier_name: the naming functions of tiers and
// placements, which every printer and JSON writer above the tiers calls) returns these, and the
// layers that may not include runtime/tiers/ (offload's pinned pool, the device arena, the
// models' KV cache: tests/layering lets models/ reach the runtime only through params/, device/
// and ops/) use them directly. docs/config.md, "Names of tiers and placements".
namespace strata::tier_names {

// Tables and messages (runtime::tiers::tier_name).
inline constexpr const char* kDevice = "device";
inline constexpr const char* kPinned = "pinned host";
inline constexpr const char* kNvme = "nvme";
// JSON keys, chart series and narrow columns (runtime::tiers::tier_key): the pinned tier's is
// shorter; the others are their names.
inline constexpr const char* kPinnedKey = "pinned";

}  // namespace strata::tier_names
