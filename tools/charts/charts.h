#pragma once
// Charts as SVG: plain data in, a standalone SVG document out (viewable in any browser, no
// script, no external font or stylesheet). The *_svg functions do no I/O; the write_* ones
// write the same text to a file (strata::Error naming the path when they cannot).
//
// Every chart marks its data so that tests and scripts can read it back: each series is one
// <g class="series" data-series="NAME" data-color="#rrggbb">, in the order the data first names
// it; a bar also carries data-kind (memory) or data-cell, and a line chart's series holds one
// <polyline> with one point per finite value. Labels may hold any text (it is escaped). Empty
// data gives a chart that says "no data"; a single point or a zero range gives a readable axis
// (no division by 0). The plot area is an invisible <rect class="frame">.
//
// What every chart keeps to, so that it reads at a glance:
//   - a series' color follows from its name (palette.h): a tier, a kind of memory or a resource
//     has one color in every chart of estimate, compare and a run;
//   - the y axis spans the data: a budget up to 1.5 times the data's top is drawn on the scale, a
//     higher one is a labeled arrow above the plot ("nvme budget 77.4 GiB (above the scale)")
//     instead of flattening the data to the axis;
//   - legends sit above the plot, labels in margins measured from their text or above the bars
//     they name: no label is clipped by the image's edge or drawn over a series;
//   - bar charts are 900 to 1200 px wide (past that the bars get thinner), line charts 900.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace strata::tools::charts {

// What the y axis counts: ticks and labels are scaled to it (KiB/MiB/GiB; ms or s; k/M/G).
enum class Unit { kNumber, kBytes, kMs };

// ---- Line chart: y over x (loss, tokens/s, memory over steps) -------------------------------

struct Series {
  std::string name;                               // legend label and data-series
  std::vector<std::pair<double, double>> points;  // (x, y), x ascending; a non-finite y is left out
};

// A dashed horizontal line at y (a budget, a target), in the color of the series it names ("" or
// no such series: gray), labeled in the right margin. One above 1.5 times the data's top is not
// drawn: an arrow and "LABEL VALUE (above the scale)" above the plot say it instead (a <g
// class="ref-line off-scale">), so that a budget of all host memory does not flatten a few MiB of
// use to the axis.
struct RefLine {
  std::string label;
  double y = 0;
  std::string series;
};

struct LineChart {
  std::string title;
  std::string x_label = "step";
  std::string y_label;
  Unit y_unit = Unit::kNumber;
  bool y_from_zero = true;   // false: the y axis spans the data only (a loss curve)
  bool x_integer = true;     // x ticks at whole numbers (steps)
  std::vector<Series> series;
  std::vector<RefLine> ref_lines;
};

std::string line_chart_svg(const LineChart& chart);
void write_line_chart(const std::string& path, const LineChart& chart);

// ---- Memory per tier per cell, stacked by kind (strata estimate / compare / a run) ------------

// One tier of one cell: its bytes by kind ("parameters", "gradients", "optimizer states",
// "activations", "buffers", or any other name), stacked bottom-up in this order; kinds with the
// same name share a color across the chart.
struct TierBytes {
  std::string tier;                                                  // "device", "pinned", "nvme"
  std::vector<std::pair<std::string, std::uint64_t>> bytes_by_kind;
  std::optional<std::uint64_t> budget_bytes;  // a dashed line over the bar, or an arrow above it
};

// One group of bars: a stage x placement ("stage 3 / cpu"), a run, a step.
struct MemoryCell {
  std::string label;
  std::vector<TierBytes> tiers;
};

// Groups along x (one per cell), within a group one bar per tier, each bar stacked by kind;
// y in bytes. Each tier is one series: <g class="series" data-series="TIER"> holds that tier's
// bars of every cell (each a <g class="bar" data-cell="LABEL">: its rects with data-kind and a
// <title> tooltip, a key in the tier's color under the axis (rect class "tier-key"), its budget:
// a dashed line (class "budget") or, above 1.5 times the tallest bar, an arrow over the plot in
// the tier's color (<g class="budget off-scale">), listed with its value above the plot).
std::string memory_chart_svg(const std::vector<MemoryCell>& cells, std::string_view title);
void write_memory_chart(const std::string& path, const std::vector<MemoryCell>& cells, std::string_view title);

// ---- Step time per resource (busy time of each resource against the step time) --------------

struct StepTimeCell {
  std::string label;                                    // "stage 3 / nvme", "median of steps 2-10"
  // resource ("compute", "h2d", "cpu adam", "disk read", ...) -> its busy ms in one step
  std::vector<std::pair<std::string, double>> busy_ms;
  std::optional<double> measured_step_ms;               // a solid marker across the group
  std::optional<double> predicted_step_ms;              // a dashed marker across the group
};

// Groups along x (one per cell), within a group one bar per resource, y in ms, the step times as
// markers across the group, their values written above the group's bars. Resources run
// concurrently, so the bars are side by side rather than stacked: the tallest bar is the
// bottleneck and the gap to the step marker is what did not overlap. A busy time above zero is at
// least 2 px tall, so that it shows. Each resource is one series: <g class="series"
// data-series="RESOURCE"> holds its bar of every cell (a rect with data-cell); markers are
// <g class="marker" data-marker="measured"> or "predicted".
std::string step_time_chart_svg(const std::vector<StepTimeCell>& cells, std::string_view title);
void write_step_time_chart(const std::string& path, const std::vector<StepTimeCell>& cells,
                           std::string_view title);

}  // namespace strata::tools::charts
