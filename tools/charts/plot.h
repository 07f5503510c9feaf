#pragma once
// Internals of the chart kinds (line_chart.cpp, bar_charts.cpp): text widths, axis ticks and
// their labels, and the parts every chart draws (title, axes with grid lines, legend rows,
// "no data"). Not a public header. Colors are palette.h's.
//
// Layout, top to bottom: the title, the legend rows (outside the plot, so that no label lies on
// a series), the plot frame of a fixed height, then the x labels; the chart's height follows
// from them. Margins are measured from the text they hold (text_width), so no label is clipped.
#include <string>
#include <string_view>
#include <vector>

#include "tools/charts/charts.h"
#include "tools/charts/svg.h"

namespace strata::tools::charts::plot {

inline constexpr double kWidth = 900;        // a line chart; bar charts from here ...
inline constexpr double kMaxWidth = 1200;    // ... to here, never wider (bars get thinner)
inline constexpr double kPlotHeight = 300;   // the frame's height
inline constexpr double kTitleSize = 16;
inline constexpr double kLabelSize = 12;
inline constexpr double kTickSize = 11;
inline constexpr double kTitleBaseline = 26;
inline constexpr double kLegendTop = 50;     // the first legend row's baseline
inline constexpr double kLegendRow = 18;
inline constexpr double kPad = 8;            // between the image's edge and any text
inline constexpr const char* kAxisColor = "#444444";
inline constexpr const char* kGridColor = "#e3e3e3";
inline constexpr const char* kTextColor = "#222222";
inline constexpr const char* kMutedColor = "#666666";

// A budget (or any reference) up to this many times the data's top stretches the axis to be
// drawn as a line; above, it is a labeled arrow at the top and the axis spans the data only.
inline constexpr double kStretch = 1.5;

// The width in pixels of `text` at `font_size` in DejaVu Sans (the first font the charts ask
// for; Helvetica and Arial are narrower), rounded up a little: enough to keep a label inside the
// chart and off the series. Bold text is about a tenth wider.
double text_width(std::string_view text, double font_size, bool bold = false);

// The plot area inside the margins, in pixels.
struct Frame {
  double left = 0, top = 0, width = 0, height = 0;
  double right() const { return left + width; }
  double bottom() const { return top + height; }
};

// Evenly spaced round values (1, 2 or 5 times a power of ten, in the unit's scale) covering
// [lo, hi]: first <= lo, last >= hi, about `target` of them. lo == hi (a single point) is
// widened; so is a range holding no finite value. integer: a step of at least 1.
struct Ticks {
  std::vector<double> values;
  double step = 1;
  double lo() const { return values.front(); }
  double hi() const { return values.back(); }
};
Ticks nice_ticks(double lo, double hi, int target, Unit unit, bool integer = false);

// A tick label: "1.5 GiB", "250 ms", "12.5k", "0.003"; decimals follow the tick step. The
// scale (GiB or MiB, s or ms) is that of the largest of |v|, step and `magnitude`: an axis
// passes its largest tick, so that all its labels have one unit ("0.5 GiB", not "512 MiB").
std::string tick_label(double v, double step, Unit unit, double magnitude = 0);
// A value for a person (bar tooltips, marker labels): "1.23 GiB", "12.4 ms", "5.432".
std::string value_label(double v, Unit unit);

// Maps a value of [lo, hi] to a pixel of [p0, p1] (p1 may be less than p0: y grows down).
struct Scale {
  double lo, hi, p0, p1;
  double operator()(double v) const { return hi == lo ? p0 : p0 + (v - lo) / (hi - lo) * (p1 - p0); }
};

// The title centered above the frame.
void draw_title(Svg& svg, std::string_view title, double width);
// The room left of the frame that draw_y_axis needs: the rotated axis label and the widest tick
// label, with gaps.
double y_axis_width(const Ticks& ticks, Unit unit);
// Horizontal grid lines with their labels at the left, the y axis line and its label (rotated,
// kPad from the image's left edge). Also an invisible <rect class="frame"> (where the plot is,
// for tests that look at the pixels).
void draw_y_axis(Svg& svg, const Frame& f, const Ticks& ticks, const Scale& y, Unit unit, std::string_view label);
// The x axis line and, when not empty, its label `below` pixels under the frame.
void draw_x_axis(Svg& svg, const Frame& f, std::string_view label, double below = 40);
// "no data" in the middle of the frame.
void draw_no_data(Svg& svg, const Frame& f);

enum class Sample {
  kSwatch,  // a filled square
  kLine,    // a line
  kDashed,  // a dashed line
  kArrow,   // an arrow up: a value above the scale
  kNone,    // text only (a row's caption)
};
struct LegendEntry {
  std::string name;
  std::string color;
  Sample sample = Sample::kSwatch;
  std::string css_class;  // of the entry's <g>, when not empty
};
// Rows of entries from (x, y) (a baseline), wrapping at max_x. legend_bottom gives the y below
// them without drawing (for the layout); draw_legend draws and returns the same.
double legend_bottom(const std::vector<LegendEntry>& entries, double x, double y, double max_x);
double draw_legend(Svg& svg, const std::vector<LegendEntry>& entries, double x, double y, double max_x);

// An arrow pointing up with its tip at (x, tip_y), 8 px tall: a value above the scale.
void draw_up_arrow(Svg& svg, double x, double tip_y, std::string_view color);

}  // namespace strata::tools::charts::plot
