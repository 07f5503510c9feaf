#pragma once
// What a person watching a training run sees, one step at a time.
//  - On a terminal: one line rewritten in place with '\r': a bar, step/total, loss, tokens/s,
//    step time and ETA.
//  - Otherwise (a log file, CI): plain lines, e.g.
//      step 3/20  loss 4.1234  lr 1.00e-03  412 ms  9.9k tok/s  overlap 1.23  ETA 7s
//    every step when total_steps <= 50; else the first step, about 50 evenly spaced steps and
//    the last (whichever step update() is called with last, shown by finish()).
// ETA = mean step time x steps left; the mean leaves out the first step (warm-up: page faults,
// autotuning, first reads from NVMe) once there are others.
#include <cstdint>
#include <ostream>
#include <string>

#include "runtime/telemetry/step_metrics.h"

namespace strata::runtime::telemetry {

class Progress {
 public:
  // `out` is borrowed and must outlive the Progress. total_steps 0 = unknown (no bar, no ETA,
  // every step printed).
  Progress(std::uint64_t total_steps, std::ostream& out, bool is_terminal);

  // Shows step m.step (1-based; steps may be skipped but not go back).
  void update(const StepMetrics& m);
  // Ends the display: the terminal line gets its newline; in plain mode the last step is
  // printed if its line was not yet due. Idempotent; call it before printing anything else.
  void finish();

 private:
  bool due(std::uint64_t step) const;  // plain mode: is this step's line printed?
  std::string plain_line(const StepMetrics& m) const;
  std::string terminal_line(const StepMetrics& m) const;
  std::string eta_text(std::uint64_t step) const;

  std::uint64_t total_steps_;
  std::ostream& out_;
  bool terminal_;
  std::uint64_t steps_seen_ = 0;
  double first_step_ms_ = 0;
  double total_ms_ = 0;             // sum of step_ms of every step seen
  std::uint64_t last_printed_ = 0;  // plain mode: step of the last line printed (0 = none)
  std::string pending_;             // plain mode: the latest line when it was not printed
  std::size_t terminal_width_ = 0;  // terminal mode: length of the line on screen
  bool line_open_ = false;          // terminal mode: a line without its newline is on screen
};

// Whether stderr is a terminal (isatty), to choose Progress's mode.
bool stderr_is_terminal() noexcept;

}  // namespace strata::runtime::telemetry
