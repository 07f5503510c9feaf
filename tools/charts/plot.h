#pragma once
// Internals of the chart kinds (charts.cpp): the palette, axis ticks and their labels, and the
// parts every chart draws (title, axes with grid lines, legend, "no data"). Not a public header.
#include <string>
#include <string_view>
#include <vector>

#include "tools/charts/charts.h"
#include "tools/charts/svg.h"

namespace strata::tools::charts::plot {

inline constexpr double kWidth = 900;
inline constexpr double kHeight = 480;
inline constexpr double kTitleSize = 16;
inline constexpr double kLabelSize = 12;
inline constexpr double kTickSize = 11;
inline constexpr const char* kAxisColor = "#444444";
inline constexpr const char* kGridColor = "#e3e3e3";
inline constexpr const char* kTextColor = "#222222";

// A fixed palette (Tableau 10): color i of a chart's series, wrapping after ten.
const char* palette(std::size_t i);

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

// A tick label: "1.5 GiB", "250 ms", "12.5k", "0.003"; decimals follow the tick step.
std::string tick_label(double v, double step, Unit unit);
// A value for a person (bar tooltips, marker labels): "1.23 GiB", "12.4 ms", "5.432".
std::string value_label(double v, Unit unit);

// Maps a value of [lo, hi] to a pixel of [p0, p1] (p1 may be less than p0: y grows down).
struct Scale {
  double lo, hi, p0, p1;
  double operator()(double v) const { return hi == lo ? p0 : p0 + (v - lo) / (hi - lo) * (p1 - p0); }
};

// The title centered above the frame.
void draw_title(Svg& svg, std::string_view title, double width);
// Horizontal grid lines with their labels at the left, the y axis line and its label (rotated).
void draw_y_axis(Svg& svg, const Frame& f, const Ticks& ticks, const Scale& y, Unit unit, std::string_view label);
// The x axis line and its label below the frame (ticks are the caller's: numbers or groups).
void draw_x_axis(Svg& svg, const Frame& f, std::string_view label);
// "no data" in the middle of the frame.
void draw_no_data(Svg& svg, const Frame& f);

struct LegendEntry {
  std::string name;
  std::string color;
  bool line = false;    // a line sample instead of a swatch ...
  bool dashed = false;  // ... dashed
};
// One row of entries starting at (x, y), wrapping at max_x. Returns the y below it.
double draw_legend(Svg& svg, const std::vector<LegendEntry>& entries, double x, double y, double max_x);

}  // namespace strata::tools::charts::plot
