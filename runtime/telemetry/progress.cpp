#include "runtime/telemetry/progress.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

namespace strata::runtime::telemetry {
namespace {

// Plain mode prints about this many lines for a long run.
constexpr std::uint64_t kPlainLines = 50;
constexpr std::size_t kBarWidth = 24;

// "9.9k", "412", "1.2M": for rates.
std::string human_count(double v) {
  if (!std::isfinite(v) || v < 0) return "?";
  if (v < 1e3) return fmt::format("{:.0f}", v);
  if (v < 1e6) return fmt::format("{:.1f}k", v / 1e3);
  if (v < 1e9) return fmt::format("{:.1f}M", v / 1e6);
  return fmt::format("{:.1f}G", v / 1e9);
}

// "7s", "3m05s", "2h07m".
std::string human_duration(double ms) {
  if (!std::isfinite(ms) || ms < 0) return "?";
  const auto s = static_cast<std::uint64_t>(std::llround(ms / 1e3));
  if (s < 60) return fmt::format("{}s", s);
  if (s < 3600) return fmt::format("{}m{:02}s", s / 60, s % 60);
  return fmt::format("{}h{:02}m", s / 3600, (s % 3600) / 60);
}

std::string step_time(double ms) {
  return ms < 10 ? fmt::format("{:.1f} ms", ms) : fmt::format("{:.0f} ms", ms);
}

}  // namespace

Progress::Progress(std::uint64_t total_steps, std::ostream& out, bool is_terminal)
    : total_steps_(total_steps), out_(out), terminal_(is_terminal) {}

bool Progress::due(std::uint64_t step) const {
  if (total_steps_ == 0 || total_steps_ <= kPlainLines) return true;
  if (step == 1 || step >= total_steps_ || last_printed_ == 0) return true;
  // Print when step crosses the next of kPlainLines evenly spaced marks (total/50, 2*total/50,
  // ...) since the last line printed.
  return step * kPlainLines / total_steps_ > last_printed_ * kPlainLines / total_steps_;
}

std::string Progress::eta_text(std::uint64_t step) const {
  if (total_steps_ == 0) return {};
  if (step >= total_steps_) return "elapsed " + human_duration(total_ms_);
  const double mean_ms = steps_seen_ > 1 ? (total_ms_ - first_step_ms_) / static_cast<double>(steps_seen_ - 1)
                                         : first_step_ms_;
  return "ETA " + human_duration(mean_ms * static_cast<double>(total_steps_ - step));
}

std::string Progress::plain_line(const StepMetrics& m) const {
  std::string line = total_steps_ != 0 ? fmt::format("step {}/{}", m.step, total_steps_)
                                       : fmt::format("step {}", m.step);
  line += fmt::format("  loss {:.4f}  lr {:.2e}  {}  {} tok/s", m.loss, m.lr, step_time(m.step_ms),
                      human_count(m.tokens_per_s));
  if (m.tflops > 0) line += fmt::format("  {:.1f} TFLOPS", m.tflops);
  if (m.grad_norm >= 0) line += fmt::format("  gnorm {:.3f}", m.grad_norm);
  if (m.overlap > 0) line += fmt::format("  overlap {:.2f}", m.overlap);
  if (!m.busiest.empty()) line += fmt::format("  busiest {} {}", m.busiest, step_time(m.busiest_ms));
  if (m.skipped) line += fmt::format("  SKIPPED (fp16 overflow, loss scale {:g})", m.loss_scale);
  if (std::string eta = eta_text(m.step); !eta.empty()) line += "  " + eta;
  return line;
}

std::string Progress::terminal_line(const StepMetrics& m) const {
  std::string line;
  if (total_steps_ != 0) {
    const auto filled =
        static_cast<std::size_t>(std::min(m.step, total_steps_) * kBarWidth / total_steps_);
    line = "[" + std::string(filled, '#') + std::string(kBarWidth - filled, '.') + "] ";
    line += fmt::format("{}/{}", m.step, total_steps_);
  } else {
    line = fmt::format("step {}", m.step);
  }
  line += fmt::format("  loss {:.4f}  {} tok/s  {}", m.loss, human_count(m.tokens_per_s),
                      step_time(m.step_ms));
  if (m.skipped) line += "  (skipped)";
  if (std::string eta = eta_text(m.step); !eta.empty()) line += "  " + eta;
  return line;
}

void Progress::update(const StepMetrics& m) {
  ++steps_seen_;
  if (steps_seen_ == 1) first_step_ms_ = m.step_ms;
  total_ms_ += m.step_ms;
  if (terminal_) {
    std::string line = terminal_line(m);
    const std::size_t width = line.size();
    // Blank out the rest of a longer previous line.
    if (width < terminal_width_) line.append(terminal_width_ - width, ' ');
    out_ << '\r' << line << std::flush;
    terminal_width_ = width;
    line_open_ = true;
    return;
  }
  if (due(m.step)) {
    out_ << plain_line(m) << '\n' << std::flush;
    last_printed_ = m.step;
    pending_.clear();
  } else {
    pending_ = plain_line(m);
  }
}

void Progress::finish() {
  if (terminal_) {
    if (line_open_) out_ << '\n' << std::flush;
    line_open_ = false;
    terminal_width_ = 0;
    return;
  }
  if (!pending_.empty()) {
    out_ << pending_ << '\n' << std::flush;
    pending_.clear();
  }
}

bool stderr_is_terminal() noexcept { return ::isatty(STDERR_FILENO) == 1; }

}  // namespace strata::runtime::telemetry
