#pragma once
// Times every compute op enqueued on one stream, per op kind, without a profiler: each op of
// runtime/ops is bracketed by two timing events (device::TimingEvent: cudaEvents with timing on
// cuda, the steady clock on the host backend). `strata bench gpt --profile` prints the table.
//
// What it measures is the stream's time from the op's first to its last piece of work, so on
// cuda it includes launch gaps inside an op made of several kernels, but not the gaps between
// ops; copies and memsets enqueued outside runtime/ops are not counted. The events themselves
// cost a few microseconds per op: profile a step apart from the steps that are timed.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "runtime/device/device.h"

namespace strata::runtime::ops {

struct OpTime {
  std::string op;  // the op's name, e.g. "matmul_fwd"
  int count = 0;
  double ms = 0;   // total over `count` calls
};

class OpProfiler final : public device::OpObserver {
 public:
  // Attaches to `stream` (replacing no other observer: one profiler per stream at a time) until
  // destroyed. `device` and `stream` are borrowed and must outlive the profiler.
  OpProfiler(device::Device& device, device::Stream& stream);
  ~OpProfiler() override;
  OpProfiler(const OpProfiler&) = delete;
  OpProfiler& operator=(const OpProfiler&) = delete;

  void op_begin(device::Stream& stream, const char* op) override;
  void op_end(device::Stream& stream) override;

  // Synchronizes the stream and returns the time per op kind, the largest first, and forgets
  // what it returned (the events are reused).
  std::vector<OpTime> collect();

 private:
  struct Mark {
    const char* op;
    device::TimingEvent* begin;
    device::TimingEvent* end;
  };
  device::TimingEvent* next_event();

  device::Device& device_;
  device::Stream& stream_;
  std::vector<std::unique_ptr<device::TimingEvent>> events_;  // a pool, used in order
  std::size_t used_ = 0;
  std::vector<Mark> marks_;
  bool open_ = false;
};

}  // namespace strata::runtime::ops
