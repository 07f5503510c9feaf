// The line chart (charts.h): y over x, one polyline per series, reference lines (budgets).
// Layout: the title, a legend row when there is more than one series, a row of the reference
// lines above the scale, then the frame (kPlotHeight) with the x ticks and label under it; the
// drawn reference lines are labeled in the right margin, which is made wide enough for them.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <string>

#include "core/file_io.h"
#include "tools/charts/charts.h"
#include "tools/charts/palette.h"
#include "tools/charts/plot.h"
#include "tools/charts/svg.h"

namespace strata::tools::charts {
namespace {

using plot::Frame;
using plot::LegendEntry;
using plot::Sample;
using plot::Scale;
using plot::Ticks;

struct Extent {
  bool any = false;  // a finite point
  double x0 = 0, x1 = 0, y0 = 0, y1 = 0;
};

Extent data_extent(const LineChart& chart) {
  Extent e;
  for (const Series& s : chart.series) {
    for (const auto& [x, y] : s.points) {
      if (!std::isfinite(x) || !std::isfinite(y)) continue;
      e.x0 = e.any ? std::min(e.x0, x) : x;
      e.x1 = e.any ? std::max(e.x1, x) : x;
      e.y0 = e.any ? std::min(e.y0, y) : y;
      e.y1 = e.any ? std::max(e.y1, y) : y;
      e.any = true;
    }
  }
  return e;
}

// The drawn reference lines' label baselines: at their line, pushed apart so that no two
// labels overlap (13 px between baselines), kept inside [lo, hi].
std::vector<double> spread_labels(std::vector<double> ys, double lo, double hi) {
  std::vector<std::size_t> order(ys.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return ys[a] < ys[b]; });
  double prev = lo - 13;
  for (const std::size_t i : order) {
    ys[i] = std::max(ys[i], prev + 13);
    prev = ys[i];
  }
  for (auto it = order.rbegin(); it != order.rend(); ++it) {  // then back up from the bottom
    ys[*it] = std::min(ys[*it], hi);
    hi = ys[*it] - 13;
  }
  return ys;
}

}  // namespace

std::string line_chart_svg(const LineChart& chart) {
  std::vector<std::string> names;
  for (const Series& s : chart.series) names.push_back(s.name);
  const std::vector<std::string> colors = palette::colors_for(names);
  const auto ref_color = [&](const RefLine& r) {
    const auto it = std::find(names.begin(), names.end(), r.series);
    return it == names.end() ? std::string(palette::kNeutralColor) : colors[static_cast<std::size_t>(it - names.begin())];
  };

  // The y axis spans the data, and the reference lines up to kStretch times its top; a higher
  // one (a budget of all host memory over a few MiB of use) is listed above the plot instead.
  const Extent e = data_extent(chart);
  double y0 = e.y0, y1 = e.y1;
  bool any_y = e.any;
  std::vector<const RefLine*> drawn, listed;
  for (const RefLine& r : chart.ref_lines) {
    if (!std::isfinite(r.y)) continue;
    if (e.any && e.y1 > 0 && r.y > plot::kStretch * e.y1) {
      listed.push_back(&r);
      continue;
    }
    drawn.push_back(&r);
    y0 = any_y ? std::min(y0, r.y) : r.y;
    y1 = any_y ? std::max(y1, r.y) : r.y;
    any_y = true;
  }
  if (chart.y_from_zero) y0 = std::min(y0, 0.0);
  const Ticks xt = plot::nice_ticks(e.x0, e.x1, 8, Unit::kNumber, chart.x_integer);
  const Ticks yt = plot::nice_ticks(y0, y1, 6, chart.y_unit);

  // Margins from the text they hold: the tick labels at the left; at the right the drawn
  // reference lines' labels, or half of the last x tick label.
  const double left = plot::y_axis_width(yt, chart.y_unit);
  double right = plot::kPad + plot::text_width(plot::tick_label(xt.hi(), xt.step, Unit::kNumber), plot::kTickSize) / 2;
  for (const RefLine* r : drawn) right = std::max(right, 4 + plot::text_width(r->label, plot::kTickSize) + plot::kPad);
  right = std::max(right, 24.0);

  std::vector<LegendEntry> legend, above;
  if (chart.series.size() > 1) {  // one series: its name is the title's
    for (std::size_t i = 0; i < chart.series.size(); ++i) legend.push_back({names[i], colors[i], Sample::kLine, ""});
  }
  for (const RefLine* r : listed) {
    above.push_back({r->label + " " + plot::value_label(r->y, chart.y_unit) + " (above the scale)", ref_color(*r),
                     Sample::kArrow, "ref-line off-scale"});
  }
  const double max_x = plot::kWidth - plot::kPad;
  const double rows_top = legend.empty() && above.empty() ? plot::kTitleBaseline + 12 : plot::kLegendTop;
  const double header = plot::legend_bottom(above, left, plot::legend_bottom(legend, left, rows_top, max_x), max_x);
  const Frame f{left, header + 2, plot::kWidth - left - right, plot::kPlotHeight};
  const double height = std::ceil(f.bottom() + 56);  // whole pixels, as rendered

  Svg svg(plot::kWidth, height, chart.title);
  plot::draw_title(svg, chart.title, plot::kWidth);
  plot::draw_legend(svg, above, left, plot::draw_legend(svg, legend, left, rows_top, max_x), max_x);

  const Scale sx{xt.lo(), xt.hi(), f.left, f.right()};
  const Scale sy{yt.lo(), yt.hi(), f.bottom(), f.top};
  plot::draw_y_axis(svg, f, yt, sy, chart.y_unit, chart.y_label);
  plot::draw_x_axis(svg, f, chart.x_label);
  svg.open("g", {{"class", "ticks x"}});
  for (const double v : xt.values) {
    svg.line(sx(v), f.bottom(), sx(v), f.bottom() + 4, plot::kAxisColor);
    svg.text(sx(v), f.bottom() + 18, plot::tick_label(v, xt.step, Unit::kNumber), plot::kTickSize, "middle",
             {{"fill", plot::kTextColor}});
  }
  svg.close();
  if (!e.any) plot::draw_no_data(svg, f);

  for (std::size_t i = 0; i < chart.series.size(); ++i) {
    const Series& s = chart.series[i];
    svg.open("g", {{"class", "series"}, {"data-series", s.name}, {"data-color", colors[i]}});
    std::string points;
    std::size_t n = 0;
    for (const auto& [x, yv] : s.points) {
      if (!std::isfinite(x) || !std::isfinite(yv)) continue;
      points += (points.empty() ? "" : " ") + num(sx(x)) + "," + num(sy(yv));
      ++n;
    }
    if (n > 0) {
      svg.element("polyline", {{"points", points}, {"fill", "none"}, {"stroke", colors[i]}, {"stroke-width", "2"},
                               {"stroke-linejoin", "round"}});
    }
    // Dots where the points are few enough to see (and always for a single point, which a line
    // alone would not show).
    if (n > 0 && n <= 60) {
      for (const auto& [x, yv] : s.points) {
        if (!std::isfinite(x) || !std::isfinite(yv)) continue;
        svg.open("circle", {{"cx", num(sx(x))}, {"cy", num(sy(yv))}, {"r", "3"}, {"fill", colors[i]}});
        svg.text_element("title", {}, s.name + " at " + chart.x_label + " " + plot::value_label(x, Unit::kNumber) +
                                          ": " + plot::value_label(yv, chart.y_unit));
        svg.close();
      }
    }
    svg.close();
  }

  // The drawn reference lines, each labeled in the right margin.
  std::vector<double> label_y;
  for (const RefLine* r : drawn) label_y.push_back(sy(r->y) + 4);
  label_y = spread_labels(label_y, f.top + 4, f.bottom() + 4);
  for (std::size_t i = 0; i < drawn.size(); ++i) {
    const RefLine& r = *drawn[i];
    svg.open("g", {{"class", "ref-line"}, {"data-ref", r.label}});
    svg.line(f.left, sy(r.y), f.right(), sy(r.y), ref_color(r), 1.5, {{"stroke-dasharray", "6 4"}});
    svg.text(f.right() + 4, label_y[i], r.label, plot::kTickSize, "start", {{"fill", ref_color(r)}});
    svg.close();
  }
  return svg.finish();
}

void write_line_chart(const std::string& path, const LineChart& chart) {
  write_file(path, line_chart_svg(chart), false);
}

}  // namespace strata::tools::charts
