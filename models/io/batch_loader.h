#pragma once
// Deterministic batches of (inputs, targets) from tokens in memory, for data-parallel ranks.
//
// Windows. With B sequences of T tokens per micro-batch, window w covers the B*T + 1 tokens
// [w*B*T, (w+1)*B*T] (as llm.c's loader): inputs are its first B*T tokens, targets the same
// shifted by one (targets[i] = inputs[i+1] for i < B*T-1, and the window's last token).
// Consecutive windows share one token. There are W = (ntokens - 1) / (B*T) windows; the
// tokens after the last one are never read. W >= 1 is required (ntokens >= B*T + 1).
//
// Order. Micro-batch k (k = 0, 1, 2, ...) of rank r in a world of `world` ranks reads global
// slot g = k*world + r: at step k the ranks together read slots k*world .. k*world+world-1,
// which is exactly what a single rank reads in its steps k*world .. k*world+world-1.
//   - sequential (default): slot g is window g mod W (wraps to the start after W slots);
//   - shuffle: slot g is in epoch e = g / W and reads window perm_e[g mod W], where perm_e
//     is a permutation of [0, W) drawn by Fisher-Yates from a splitmix64 stream whose state
//     starts at mix64(seed) + e. Everything is integer arithmetic written here (not
//     std::shuffle or <random> distributions, which differ between standard libraries), so
//     the order is the same on every machine. The seed is mixed first so that seed s+1 does
//     not replay seed s's epochs shifted by one.
//
// State. The position is the count of micro-batches read (LoaderState::micro_batches); the
// state also records the shape it is valid for (B, T, world, ntokens, shuffle, seed), and
// restore() refuses a state made for another shape, since it would not resume bit-exactly.
// The rank is not recorded: ranks step in lockstep, so one rank's state serves all.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "models/io/token_file.h"

namespace strata::models {

struct LoaderOptions {
  bool shuffle = false;  // visit windows in a seeded permutation per epoch
  std::uint64_t seed = 0;
};

// Where a loader is; from BatchLoader::state(), for checkpoints.
struct LoaderState {
  std::uint64_t micro_batches = 0;  // micro-batches read by next() so far (per rank)
  // The shape the position is valid for (checked by restore()).
  std::int64_t batch_size = 0;  // B
  std::int64_t seq_len = 0;     // T
  std::int64_t world = 0;
  std::uint64_t ntokens = 0;
  bool shuffle = false;
  std::uint64_t seed = 0;

  bool operator==(const LoaderState&) const = default;

  // A JSON object: {"format": "strata.loader_state", "version": 1, "micro_batches": ..,
  // "batch_size": .., "seq_len": .., "world": .., "ntokens": .., "shuffle": .., "seed": ..}.
  std::string to_json() const;
  // Parses and validates to_json()'s output; throws strata::Error (where = `where`, e.g. the
  // checkpoint path) for bad JSON, a missing or mistyped key, or out-of-range values.
  static LoaderState from_json(std::string_view json, const std::string& where = "loader state");
};

class BatchLoader {
 public:
  // data is borrowed: it must outlive the loader and not change. batch_size (B) > 0,
  // seq_len (T) > 0 and 0 <= rank < world are the caller's invariants (asserted). Throws
  // strata::Error when the data is shorter than one window (B*T + 1 tokens).
  BatchLoader(const TokenData& data, std::int64_t batch_size, std::int64_t seq_len, int rank,
              int world, LoaderOptions options = {});

  BatchLoader(const BatchLoader&) = delete;
  BatchLoader& operator=(const BatchLoader&) = delete;
  BatchLoader(BatchLoader&&) = default;
  BatchLoader& operator=(BatchLoader&&) = delete;  // holds a reference

  // Fills inputs and targets, B*T int32 each, (B, T) row-major, with this rank's next
  // micro-batch, and advances by one.
  void next(std::int32_t* inputs, std::int32_t* targets);

  // The window that this rank's micro-batch k reads (pure: does not move the loader).
  std::uint64_t window_at(std::uint64_t k) const;

  std::uint64_t windows() const { return windows_; }                    // W
  std::uint64_t tokens_per_batch() const { return tokens_per_batch_; }  // B*T
  std::uint64_t micro_batches() const { return micro_batches_; }        // read so far

  LoaderState state() const;
  // Continues from `state` (next() then returns exactly what the saved loader's next() would
  // have). Throws strata::Error when the state was made for another B, T, world, data size,
  // shuffle or seed.
  void restore(const LoaderState& state);

 private:
  const std::vector<std::uint64_t>& permutation(std::uint64_t epoch) const;

  const TokenData& data_;
  std::int64_t batch_size_;
  std::int64_t seq_len_;
  int rank_;
  int world_;
  LoaderOptions options_;
  std::uint64_t tokens_per_batch_;
  std::uint64_t windows_;
  std::uint64_t micro_batches_ = 0;
  // Shuffle only: a cache of the permutation of the last epoch used (rebuilt when the epoch
  // changes; the order is a function of the epoch alone, so it never affects results).
  mutable std::uint64_t perm_epoch_ = 0;
  mutable bool perm_valid_ = false;
  mutable std::vector<std::uint64_t> perm_;
};

// The shuffled order of epoch `epoch`: a permutation of [0, windows), as BatchLoader uses
// it (exposed for tests and tools).
std::vector<std::uint64_t> shuffled_windows(std::uint64_t windows, std::uint64_t seed,
                                            std::uint64_t epoch);

}  // namespace strata::models
