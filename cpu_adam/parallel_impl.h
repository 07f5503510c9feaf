#pragma once
// Internal to cpu_adam: how a shard is split over OpenMP threads. Included only by files
// compiled for the baseline (adam.cpp, grad_ops.cpp), never by a SIMD variant.
//
// The partition: [0, numel) in `parts` contiguous runs, in order, each boundary on a multiple
// of kPartAlignNumel elements (64 fp32 bytes: neighbouring threads do not write the same cache
// line when the shard is aligned). Part i is run by OpenMP thread i when the team is complete,
// so first_touch() and adam_step() with the same thread count place each page on the thread
// that will update it. Results never depend on the partition: every element's update depends
// only on its own inputs, and the norm reduces fixed chunks (grad_ops.cpp).
#include <omp.h>

#include <algorithm>
#include <cstddef>

namespace strata::cpu_adam::detail {

constexpr std::size_t kPartAlignNumel = 16;
// A shard below 2 * kMinPartNumel runs on the calling thread: the fork/join (a few
// microseconds) would cost more than it saves.
constexpr std::size_t kMinPartNumel = std::size_t{1} << 15;

struct Range {
  std::size_t begin;
  std::size_t end;
};

// `threads` as given (>= 0; 0 = the CPUs of the affinity mask), resolved (adam.cpp).
int resolve_threads(int threads);

// How many parts a shard of numel elements is split into, for `threads` (already resolved).
inline int part_count(std::size_t numel, int threads) {
  const std::size_t by_size = std::max<std::size_t>(1, numel / kMinPartNumel);
  return static_cast<int>(std::min<std::size_t>(static_cast<std::size_t>(threads), by_size));
}

inline Range part_range(std::size_t numel, int parts, int part) {
  const std::size_t parts_z = static_cast<std::size_t>(parts);
  std::size_t per = (numel + parts_z - 1) / parts_z;
  per = (per + kPartAlignNumel - 1) / kPartAlignNumel * kPartAlignNumel;
  const std::size_t begin = std::min(numel, per * static_cast<std::size_t>(part));
  return {begin, std::min(numel, begin + per)};
}

// Calls fn(part) for every part in [0, parts), on OpenMP threads (part i on thread i when the
// runtime grants the whole team; a smaller team loops, so every part runs exactly once).
// fn must not throw.
template <typename Fn>
void for_each_part(int parts, Fn&& fn) {
  if (parts <= 1) {
    fn(0);
    return;
  }
#pragma omp parallel num_threads(parts)
  {
    const int team = omp_get_num_threads();
    for (int part = omp_get_thread_num(); part < parts; part += team) fn(part);
  }
}

}  // namespace strata::cpu_adam::detail
