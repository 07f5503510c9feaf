#pragma once
// How each module's flat buffer is split between the ranks (ZeRO partitioning).
//
// A module of `numel` elements is padded to `padded_numel` = world * shard_numel, where
// shard_numel = ceil(numel / world) rounded up to kShardAlignment elements (so that every shard
// starts 256-byte aligned in fp32 and can be read or written with whole vectors). Rank r owns
// elements [r * shard_numel, (r + 1) * shard_numel) of the padded buffer; the padding is zero and
// its gradient is zero, so it never changes the math.
//
// Stage 0 replicates everything: the partition then has one shard (world 1, rank 0) whatever
// the number of ranks (ZeroPartition::sharded false).
#include <cstddef>
#include <vector>

namespace strata::runtime::tiers {

inline constexpr std::size_t kShardAlignment = 64;  // elements

struct ModulePartition {
  std::size_t numel = 0;         // the module's real elements
  std::size_t shard_numel = 0;   // elements per rank
  std::size_t padded_numel = 0;  // shards * shard_numel
  std::size_t shard_offset(int rank) const { return static_cast<std::size_t>(rank) * shard_numel; }
  // Elements of this rank's shard that are real (not padding).
  std::size_t real_numel(int rank) const {
    const std::size_t begin = shard_offset(rank);
    if (begin >= numel) return 0;
    return numel - begin < shard_numel ? numel - begin : shard_numel;
  }
};

inline ModulePartition partition_module(std::size_t numel, int shards) {
  ModulePartition p;
  p.numel = numel;
  const std::size_t per = (numel + static_cast<std::size_t>(shards) - 1) / static_cast<std::size_t>(shards);
  p.shard_numel = (per + kShardAlignment - 1) / kShardAlignment * kShardAlignment;
  if (p.shard_numel == 0) p.shard_numel = kShardAlignment;
  p.padded_numel = p.shard_numel * static_cast<std::size_t>(shards);
  return p;
}

}  // namespace strata::runtime::tiers
