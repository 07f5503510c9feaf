#pragma once
// The order in which a step acquires its modules, for the prefetch scheduler.
//
// Step 1 records the order (every acquire, the tied embedding twice). Later steps follow the
// recorded trace: after the k-th acquire of a step, upcoming() is what the trace says comes
// next, and the scheduler fetches ahead along it. When an acquire differs from the trace the
// step has diverged: upcoming() is empty for the rest of the step (fetch on demand), and the
// order this step actually took becomes the trace at end_step() (record again).
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace strata::runtime::zero {

class FetchTrace {
 public:
  void begin_step() {
    current_.clear();
    diverged_ = false;
  }
  void on_acquire(int module) {
    const std::size_t k = current_.size();
    if (!diverged_ && (k >= trace_.size() || trace_[k] != module)) {
      if (!trace_.empty()) ++divergences_;
      diverged_ = true;
    }
    current_.push_back(module);
  }
  // The trace after the current position; empty while recording or after a divergence.
  std::span<const int> upcoming() const {
    if (diverged_ || trace_.empty() || current_.size() >= trace_.size()) return {};
    return std::span<const int>(trace_).subspan(current_.size());
  }
  bool following() const { return !diverged_ && !trace_.empty(); }
  void end_step() {
    if (current_.size() != trace_.size() && !diverged_ && !trace_.empty()) ++divergences_;
    trace_ = current_;
  }
  const std::vector<int>& trace() const { return trace_; }
  std::uint64_t divergences() const { return divergences_; }

 private:
  std::vector<int> trace_;    // the last complete step's order
  std::vector<int> current_;  // this step's order so far
  bool diverged_ = false;
  std::uint64_t divergences_ = 0;
};

}  // namespace strata::runtime::zero
