#include "runtime/ops/op_profiler.h"

#include <algorithm>
#include <string_view>

#include "core/error.h"

namespace strata::runtime::ops {

OpProfiler::OpProfiler(device::Device& device, device::Stream& stream) : device_(device), stream_(stream) {
  STRATA_ASSERT(stream_.op_observer() == nullptr, "the stream already has an op observer");
  stream_.set_op_observer(this);
}

OpProfiler::~OpProfiler() { stream_.set_op_observer(nullptr); }

device::TimingEvent* OpProfiler::next_event() {
  if (used_ == events_.size()) events_.push_back(device_.create_timing_event());
  return events_[used_++].get();
}

void OpProfiler::op_begin(device::Stream& stream, const char* op) {
  STRATA_ASSERT(&stream == &stream_ && !open_, "ops do not nest");
  open_ = true;
  device::TimingEvent* begin = next_event();
  begin->record(stream);
  marks_.push_back(Mark{op, begin, nullptr});
}

void OpProfiler::op_end(device::Stream& stream) {
  STRATA_ASSERT(&stream == &stream_ && open_);
  open_ = false;
  device::TimingEvent* end = next_event();
  end->record(stream);
  marks_.back().end = end;
}

std::vector<OpTime> OpProfiler::collect() {
  STRATA_ASSERT(!open_);
  stream_.synchronize();
  std::vector<OpTime> times;  // in order of first appearance, then sorted
  for (const Mark& m : marks_) {
    auto it = std::find_if(times.begin(), times.end(), [&](const OpTime& t) { return t.op == m.op; });
    if (it == times.end()) it = times.insert(times.end(), OpTime{m.op, 0, 0.0});
    ++it->count;
    it->ms += m.end->ms_since(*m.begin);
  }
  std::stable_sort(times.begin(), times.end(), [](const OpTime& a, const OpTime& b) { return a.ms > b.ms; });
  marks_.clear();
  used_ = 0;
  return times;
}

}  // namespace strata::runtime::ops
