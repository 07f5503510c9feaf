// Progress: plain lines (count and spacing) off a terminal, one rewritten line on a terminal.
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "runtime/telemetry/progress.h"

namespace strata::runtime {
namespace {

telemetry::StepMetrics step_metrics(std::uint64_t step, double step_ms) {
  telemetry::StepMetrics m;
  m.step = step;
  m.loss = 4.1234;
  m.lr = 1e-3;
  m.step_ms = step_ms;
  m.tokens_per_s = 9900;
  m.overlap = 1.23;
  return m;
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// The step number of a plain line "step N/T  ...".
std::uint64_t step_of(const std::string& line) {
  EXPECT_EQ(line.rfind("step ", 0), 0u) << line;
  return std::stoull(line.substr(5));
}

std::vector<std::uint64_t> run_plain(std::uint64_t total, std::uint64_t last_step, std::string* text) {
  std::ostringstream out;
  telemetry::Progress progress(total, out, /*is_terminal=*/false);
  for (std::uint64_t s = 1; s <= last_step; ++s) progress.update(step_metrics(s, 100));
  progress.finish();
  progress.finish();  // idempotent
  *text = out.str();
  std::vector<std::uint64_t> steps;
  for (const std::string& line : lines_of(*text)) steps.push_back(step_of(line));
  return steps;
}

TEST(Progress, PlainPrintsEveryStepOfAShortRun) {
  std::string text;
  std::vector<std::uint64_t> steps = run_plain(20, 20, &text);
  ASSERT_EQ(steps.size(), 20u);
  for (std::uint64_t i = 0; i < 20; ++i) EXPECT_EQ(steps[i], i + 1);
  EXPECT_EQ(text.find('\r'), std::string::npos);
  const std::vector<std::string> lines = lines_of(text);
  // step 3 of 20 at 100 ms a step: 17 steps left -> ETA 2s (1.7 s rounded).
  EXPECT_EQ(lines[2], "step 3/20  loss 4.1234  lr 1.00e-03  100 ms  9.9k tok/s  overlap 1.23  ETA 2s");
  EXPECT_NE(lines.back().find("elapsed 2s"), std::string::npos) << lines.back();
}

TEST(Progress, PlainPrintsAboutFiftyEvenlySpacedLinesOfALongRun) {
  std::string text;
  std::vector<std::uint64_t> steps = run_plain(1000, 1000, &text);
  // The first step, then every 20th: 20, 40, ..., 1000 (the last).
  ASSERT_EQ(steps.size(), 51u);
  EXPECT_EQ(steps.front(), 1u);
  for (std::size_t i = 1; i < steps.size(); ++i) EXPECT_EQ(steps[i], 20 * i) << i;
  EXPECT_EQ(steps.back(), 1000u);
}

TEST(Progress, PlainUnevenTotalStillEndsWithTheLastStep) {
  std::string text;
  std::vector<std::uint64_t> steps = run_plain(1001, 1001, &text);
  EXPECT_GE(steps.size(), 50u);
  EXPECT_LE(steps.size(), 52u);
  EXPECT_EQ(steps.back(), 1001u);
  for (std::size_t i = 2; i < steps.size(); ++i) {
    const std::uint64_t gap = steps[i] - steps[i - 1];
    EXPECT_GE(gap, 20u);
    EXPECT_LE(gap, 21u);
  }
}

TEST(Progress, FinishShowsAStoppedRunsLastStep) {
  std::string text;
  std::vector<std::uint64_t> steps = run_plain(1000, 437, &text);
  ASSERT_FALSE(steps.empty());
  EXPECT_EQ(steps.back(), 437u);  // not due (every 20th), but the run stopped there
  EXPECT_EQ(steps[steps.size() - 2], 420u);
}

TEST(Progress, EtaLeavesOutTheFirstStep) {
  std::ostringstream out;
  telemetry::Progress progress(10, out, false);
  progress.update(step_metrics(1, 60'000));  // a slow first step: ETA from it alone, 9 min
  progress.update(step_metrics(2, 1'000));   // then 1 s steps: 8 left -> 8 s
  progress.finish();
  const std::vector<std::string> lines = lines_of(out.str());
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_NE(lines[0].find("ETA 9m00s"), std::string::npos) << lines[0];
  EXPECT_NE(lines[1].find("ETA 8s"), std::string::npos) << lines[1];
}

TEST(Progress, SkippedStepIsFlagged) {
  std::ostringstream out;
  telemetry::Progress progress(5, out, false);
  telemetry::StepMetrics m = step_metrics(1, 10);
  m.skipped = true;
  m.loss_scale = 32768;
  progress.update(m);
  EXPECT_NE(out.str().find("SKIPPED (fp16 overflow, loss scale 32768)"), std::string::npos)
      << out.str();
}

TEST(Progress, TerminalRewritesOneLine) {
  std::ostringstream out;
  telemetry::Progress progress(4, out, /*is_terminal=*/true);
  for (std::uint64_t s = 1; s <= 4; ++s) {
    progress.update(step_metrics(s, 250));
    EXPECT_EQ(out.str().find('\n'), std::string::npos);  // no newline while running
  }
  progress.finish();
  const std::string text = out.str();
  EXPECT_EQ(text.back(), '\n');
  std::size_t rewrites = 0;
  for (char c : text) rewrites += c == '\r' ? 1 : 0;
  EXPECT_EQ(rewrites, 4u);
  const std::string last = text.substr(text.rfind('\r') + 1);
  EXPECT_EQ(last.rfind("[########################] 4/4  loss 4.1234  9.9k tok/s  250 ms", 0), 0u)
      << last;
  // Half way: half the bar, and the ETA of the two steps left.
  const std::size_t second = text.find('\r', 1);
  const std::string line2 = text.substr(second + 1, text.find('\r', second + 1) - second - 1);
  EXPECT_EQ(line2.rfind("[############............] 2/4", 0), 0u) << line2;
  EXPECT_NE(line2.find("ETA 1s"), std::string::npos) << line2;  // 2 x 250 ms
}

TEST(Progress, TerminalBlanksTheRestOfALongerLine) {
  std::ostringstream out;
  telemetry::Progress progress(0, out, true);  // unknown total: no bar
  telemetry::StepMetrics m = step_metrics(1, 10);
  m.skipped = true;  // a longer line first
  progress.update(m);
  const std::size_t first_len = out.str().size() - 1;
  progress.update(step_metrics(2, 10));
  const std::string text = out.str();
  const std::string second = text.substr(text.rfind('\r') + 1);
  EXPECT_EQ(second.size(), first_len);  // padded with spaces over the old text
  EXPECT_EQ(second.rfind("step 2  loss", 0), 0u) << second;
}

}  // namespace
}  // namespace strata::runtime
