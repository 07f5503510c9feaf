// The chart kinds (charts.h): a line chart, memory per tier stacked by kind, and step time per
// resource. Layout in pixels: the title on top, the legend under it, then the plot frame with
// the y axis at its left and the x labels below it.
#include "tools/charts/charts.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <string>

#include "runtime/checkpoint/checkpoint_dir.h"
#include "tools/charts/plot.h"
#include "tools/charts/svg.h"

namespace strata::tools::charts {
namespace {

using plot::Frame;
using plot::LegendEntry;
using plot::Scale;
using plot::Ticks;

constexpr double kLeft = 86;     // room for the y tick labels and the axis label
constexpr double kRight = 40;
constexpr double kLegendTop = 50;
constexpr double kOffScale = 4;  // a line chart's reference line above 4x the data is listed, not drawn

// Index of `name` in `names`, appended when new.
std::size_t index_of(std::vector<std::string>& names, const std::string& name) {
  const auto it = std::find(names.begin(), names.end(), name);
  if (it != names.end()) return static_cast<std::size_t>(it - names.begin());
  names.push_back(name);
  return names.size() - 1;
}

// ---- Groups of bars (memory and step-time charts) ----

// Where the groups and their bars go along x.
struct Groups {
  double width = plot::kWidth;  // of the whole chart
  Frame frame;
  double group_w = 0;            // one group's slot
  double bar_w = 0;              // one bar
  std::size_t bars = 0;          // per group
  bool rotate_labels = false;    // group labels at -30 degrees when they do not fit flat
  double under_bars = 0;         // room under the axis above the group labels

  // The left edge of bar `b` of group `g`.
  double bar_x(std::size_t g, std::size_t b) const {
    const double used = bar_w * static_cast<double>(bars);
    return frame.left + group_w * static_cast<double>(g) + (group_w - used) / 2 + bar_w * static_cast<double>(b);
  }
  double group_left(std::size_t g) const { return bar_x(g, 0); }
  double group_right(std::size_t g) const { return bar_x(g, bars); }
};

// The chart widens past kWidth so that each bar keeps at least 14 px.
// under_bars: pixels under the axis for the caller's own labels, above the group labels.
Groups layout_groups(const std::vector<std::string>& labels, std::size_t bars, double legend_bottom,
                     double under_bars = 0) {
  Groups l;
  l.bars = std::max<std::size_t>(bars, 1);
  const double n = static_cast<double>(std::max<std::size_t>(labels.size(), 1));
  const double min_group = static_cast<double>(l.bars) * 14 + 20;
  l.width = std::max(plot::kWidth, kLeft + kRight + n * min_group);
  std::size_t longest = 0;
  for (const std::string& s : labels) longest = std::max(longest, s.size());
  l.group_w = (l.width - kLeft - kRight) / n;
  l.rotate_labels = static_cast<double>(longest) * 6.5 > l.group_w - 4;
  l.under_bars = under_bars;
  const double below =
      under_bars + (l.rotate_labels ? 30 + 3.4 * static_cast<double>(std::min<std::size_t>(longest, 40)) : 40);
  l.frame = {kLeft, legend_bottom + 8, l.width - kLeft - kRight, plot::kHeight - (legend_bottom + 8) - below};
  l.bar_w = std::min(48.0, (l.group_w * 0.8) / static_cast<double>(l.bars));
  return l;
}

void draw_group_labels(Svg& svg, const Groups& l, const std::vector<std::string>& labels) {
  const double y = l.frame.bottom() + l.under_bars + 16;
  svg.open("g", {{"class", "groups"}});
  for (std::size_t g = 0; g < labels.size(); ++g) {
    const double cx = (l.group_left(g) + l.group_right(g)) / 2;
    if (l.rotate_labels) {
      svg.text(cx, y, labels[g], plot::kTickSize, "end",
               {{"fill", plot::kTextColor}, {"transform", "rotate(-30 " + num(cx) + " " + num(y) + ")"}});
    } else {
      svg.text(cx, y, labels[g], plot::kTickSize, "middle", {{"fill", plot::kTextColor}});
    }
  }
  svg.close();
}

// The axes of a bar chart, y from 0 to `top`; returns the y scale.
Scale draw_bar_axes(Svg& svg, const Groups& l, double top, Unit unit, std::string_view y_label, bool empty) {
  const Ticks yt = plot::nice_ticks(0, top, 6, unit);
  const Scale sy{yt.lo(), yt.hi(), l.frame.bottom(), l.frame.top};
  plot::draw_y_axis(svg, l.frame, yt, sy, unit, y_label);
  plot::draw_x_axis(svg, l.frame, "");
  if (empty) plot::draw_no_data(svg, l.frame);
  return sy;
}

// A rect with a tooltip (<title> child: browsers show it on hover).
void rect_with_tooltip(Svg& svg, double x, double y, double w, double h, const std::string& fill, Attrs extra,
                       const std::string& tooltip) {
  Attrs a{{"x", num(x)}, {"y", num(y)}, {"width", num(std::max(w, 0.0))}, {"height", num(std::max(h, 0.0))},
          {"fill", fill}};
  a.insert(a.end(), extra.begin(), extra.end());
  svg.open("rect", a);
  svg.text_element("title", {}, tooltip);
  svg.close();
}

// Kinds of memory that every chart colors alike (estimate, compare and a run side by side).
std::string kind_color(const std::string& kind, std::vector<std::string>& other_kinds) {
  static constexpr const char* kKnown[] = {"parameters", "gradients", "optimizer states", "activations", "buffers"};
  for (std::size_t i = 0; i < std::size(kKnown); ++i) {
    if (kind == kKnown[i]) return plot::palette(i);
  }
  return plot::palette(std::size(kKnown) + index_of(other_kinds, kind));
}

}  // namespace

// ---- Line chart ----

std::string line_chart_svg(const LineChart& chart) {
  Svg svg(plot::kWidth, plot::kHeight, chart.title);
  plot::draw_title(svg, chart.title, plot::kWidth);

  std::vector<LegendEntry> legend;
  for (std::size_t i = 0; i < chart.series.size(); ++i) {
    legend.push_back({chart.series[i].name, plot::palette(i), true, false});
  }
  const double legend_bottom =
      chart.series.size() > 1 ? plot::draw_legend(svg, legend, kLeft, kLegendTop, plot::kWidth - kRight)
                              : kLegendTop - 12;  // one series: its name is the title's
  const double right = chart.ref_lines.empty() ? kRight : 130;  // room for the ref lines' labels
  const Frame f{kLeft, legend_bottom + 8, plot::kWidth - kLeft - right, plot::kHeight - legend_bottom - 8 - 56};

  // The data's extent: finite points and the reference lines.
  bool any = false, any_y = false;
  double x0 = 0, x1 = 0, y0 = 0, y1 = 0;
  const auto extend_y = [&](double y) {
    y0 = any_y ? std::min(y0, y) : y;
    y1 = any_y ? std::max(y1, y) : y;
    any_y = true;
  };
  for (const Series& s : chart.series) {
    for (const auto& [x, y] : s.points) {
      if (!std::isfinite(x) || !std::isfinite(y)) continue;
      x0 = any ? std::min(x0, x) : x;
      x1 = any ? std::max(x1, x) : x;
      any = true;
      extend_y(y);
    }
  }
  // A reference line far above the data (a budget of all host memory over a few MiB of use) is
  // listed instead of drawn, so that it does not flatten the data to the axis.
  const double data_top = y1;
  std::vector<const RefLine*> drawn, listed;
  for (const RefLine& r : chart.ref_lines) {
    if (!std::isfinite(r.y)) continue;
    if (any && data_top > 0 && r.y > kOffScale * data_top) {
      listed.push_back(&r);
    } else {
      drawn.push_back(&r);
      extend_y(r.y);
    }
  }
  if (chart.y_from_zero) y0 = std::min(y0, 0.0);
  const Ticks xt = plot::nice_ticks(x0, x1, 8, Unit::kNumber, chart.x_integer);
  const Ticks yt = plot::nice_ticks(y0, y1, 6, chart.y_unit);
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
  if (!any) plot::draw_no_data(svg, f);

  std::vector<std::string> names;
  for (const Series& s : chart.series) names.push_back(s.name);
  for (std::size_t i = 0; i < chart.series.size(); ++i) {
    const Series& s = chart.series[i];
    const std::string color = plot::palette(i);
    svg.open("g", {{"class", "series"}, {"data-series", s.name}});
    std::string points;
    std::size_t n = 0;
    for (const auto& [x, y] : s.points) {
      if (!std::isfinite(x) || !std::isfinite(y)) continue;
      points += (points.empty() ? "" : " ") + num(sx(x)) + "," + num(sy(y));
      ++n;
    }
    if (n > 0) {
      svg.element("polyline", {{"points", points}, {"fill", "none"}, {"stroke", color}, {"stroke-width", "2"},
                               {"stroke-linejoin", "round"}});
    }
    // Dots where the points are few enough to see (and always for a single point, which a line
    // alone would not show).
    if (n > 0 && n <= 60) {
      for (const auto& [x, y] : s.points) {
        if (!std::isfinite(x) || !std::isfinite(y)) continue;
        svg.open("circle", {{"cx", num(sx(x))}, {"cy", num(sy(y))}, {"r", "3"}, {"fill", color}});
        svg.text_element("title", {}, s.name + " at " + chart.x_label + " " + plot::value_label(x, Unit::kNumber) +
                                          ": " + plot::value_label(y, chart.y_unit));
        svg.close();
      }
    }
    svg.close();
  }

  const auto ref_color = [&](const RefLine& r) {
    const auto it = std::find(names.begin(), names.end(), r.series);
    return it == names.end() ? std::string("#888888") : plot::palette(static_cast<std::size_t>(it - names.begin()));
  };
  for (const RefLine* r : drawn) {
    svg.open("g", {{"class", "ref-line"}, {"data-ref", r->label}});
    svg.line(f.left, sy(r->y), f.right(), sy(r->y), ref_color(*r), 1.5, {{"stroke-dasharray", "6 4"}});
    svg.text(f.right() + 4, sy(r->y) + 4, r->label, plot::kTickSize, "start", {{"fill", ref_color(*r)}});
    svg.close();
  }
  double listed_y = f.top + 12;
  for (const RefLine* r : listed) {
    svg.open("g", {{"class", "ref-line off-scale"}, {"data-ref", r->label}});
    svg.text(f.right() - 4, listed_y, r->label + ": " + plot::value_label(r->y, chart.y_unit) + " (off the scale)",
             plot::kTickSize, "end", {{"fill", ref_color(*r)}});
    svg.close();
    listed_y += 16;
  }
  return svg.finish();
}

void write_line_chart(const std::string& path, const LineChart& chart) {
  runtime::checkpoint::write_file(path, line_chart_svg(chart), false);
}

// ---- Memory per tier, stacked by kind ----

std::string memory_chart_svg(const std::vector<MemoryCell>& cells, std::string_view title) {
  std::vector<std::string> tiers, kinds, other_kinds, labels;
  double top = 0;
  for (const MemoryCell& c : cells) {
    labels.push_back(c.label);
    for (const TierBytes& t : c.tiers) {
      index_of(tiers, t.tier);
      double total = 0;
      for (const auto& [kind, bytes] : t.bytes_by_kind) {
        index_of(kinds, kind);
        total += static_cast<double>(bytes);
      }
      top = std::max(top, total);
      if (t.budget_bytes) top = std::max(top, static_cast<double>(*t.budget_bytes));
    }
  }
  std::vector<LegendEntry> legend;
  for (const std::string& k : kinds) legend.push_back({k, kind_color(k, other_kinds)});
  if (!cells.empty()) legend.push_back({"budget", "#333333", true, true});

  // The width depends on the groups, the legend's rows on the width: lay out twice.
  // The tiers' names run down under their bars.
  std::size_t longest_tier = 0;
  for (const std::string& t : tiers) longest_tier = std::max(longest_tier, t.size());
  const double under_bars = tiers.empty() ? 0 : 8 + 5.5 * static_cast<double>(std::min<std::size_t>(longest_tier, 16));
  Groups l = layout_groups(labels, tiers.size(), kLegendTop, under_bars);
  Svg svg(l.width, plot::kHeight, title);
  plot::draw_title(svg, title, l.width);
  double legend_bottom = plot::draw_legend(svg, legend, kLeft, kLegendTop, l.width - kRight);
  if (!tiers.empty()) {
    std::string order = "bars left to right: ";
    for (std::size_t i = 0; i < tiers.size(); ++i) order += (i ? ", " : "") + tiers[i];
    svg.text(kLeft, legend_bottom, order, plot::kTickSize, "start", {{"fill", "#666666"}, {"class", "tier-order"}});
    legend_bottom += 10;
  }
  l = layout_groups(labels, tiers.size(), legend_bottom, under_bars);
  const Frame& f = l.frame;
  const Scale sy = draw_bar_axes(svg, l, top, Unit::kBytes, "bytes", cells.empty());

  for (std::size_t ti = 0; ti < tiers.size(); ++ti) {
    svg.open("g", {{"class", "series"}, {"data-series", tiers[ti]}});
    for (std::size_t g = 0; g < cells.size(); ++g) {
      for (const TierBytes& t : cells[g].tiers) {
        if (t.tier != tiers[ti]) continue;
        const double x = l.bar_x(g, ti), w = l.bar_w * 0.9;
        svg.open("g", {{"class", "bar"}, {"data-cell", cells[g].label}});
        double base = 0, total = 0;
        for (const auto& [kind, bytes] : t.bytes_by_kind) total += static_cast<double>(bytes);
        for (const auto& [kind, bytes] : t.bytes_by_kind) {
          if (bytes == 0) continue;
          const double b = static_cast<double>(bytes);
          rect_with_tooltip(svg, x, sy(base + b), w, sy(base) - sy(base + b), kind_color(kind, other_kinds),
                            {{"data-kind", kind}, {"stroke", "#ffffff"}, {"stroke-width", "0.5"}},
                            cells[g].label + ", " + t.tier + ", " + kind + ": " + plot::value_label(b, Unit::kBytes) +
                                " of " + plot::value_label(total, Unit::kBytes));
          base += b;
        }
        if (t.budget_bytes) {
          const double by = sy(static_cast<double>(*t.budget_bytes));
          svg.line(x - 2, by, x + w + 2, by, "#333333", 1.5, {{"stroke-dasharray", "4 2"}, {"class", "budget"}});
        }
        // The tier under its bar, reading upwards.
        const double tx = x + w / 2 + 3, ty = f.bottom() + 4;
        svg.text(tx, ty, t.tier.substr(0, 16), 9, "end",
                 {{"fill", "#666666"}, {"transform", "rotate(-90 " + num(tx) + " " + num(ty) + ")"}});
        svg.close();
      }
    }
    svg.close();
  }
  draw_group_labels(svg, l, labels);
  return svg.finish();
}

void write_memory_chart(const std::string& path, const std::vector<MemoryCell>& cells, std::string_view title) {
  runtime::checkpoint::write_file(path, memory_chart_svg(cells, title), false);
}

// ---- Step time per resource ----

std::string step_time_chart_svg(const std::vector<StepTimeCell>& cells, std::string_view title) {
  std::vector<std::string> resources, labels;
  double top = 0;
  bool any_measured = false, any_predicted = false;
  for (const StepTimeCell& c : cells) {
    labels.push_back(c.label);
    for (const auto& [r, ms] : c.busy_ms) {
      index_of(resources, r);
      if (std::isfinite(ms)) top = std::max(top, ms);
    }
    for (const std::optional<double>& m : {c.measured_step_ms, c.predicted_step_ms}) {
      if (m && std::isfinite(*m)) top = std::max(top, *m);
    }
    any_measured = any_measured || c.measured_step_ms.has_value();
    any_predicted = any_predicted || c.predicted_step_ms.has_value();
  }
  std::vector<LegendEntry> legend;
  for (std::size_t i = 0; i < resources.size(); ++i) legend.push_back({resources[i], plot::palette(i)});
  if (any_measured) legend.push_back({"measured step", "#222222", true, false});
  if (any_predicted) legend.push_back({"predicted step", "#222222", true, true});

  Groups l = layout_groups(labels, resources.size(), kLegendTop);
  Svg svg(l.width, plot::kHeight, title);
  plot::draw_title(svg, title, l.width);
  l = layout_groups(labels, resources.size(), plot::draw_legend(svg, legend, kLeft, kLegendTop, l.width - kRight));
  const Scale sy = draw_bar_axes(svg, l, top, Unit::kMs, "busy time per step", cells.empty());

  for (std::size_t ri = 0; ri < resources.size(); ++ri) {
    svg.open("g", {{"class", "series"}, {"data-series", resources[ri]}});
    for (std::size_t g = 0; g < cells.size(); ++g) {
      for (const auto& [r, ms] : cells[g].busy_ms) {
        if (r != resources[ri] || !std::isfinite(ms)) continue;
        const double x = l.bar_x(g, ri);
        rect_with_tooltip(svg, x, sy(ms), l.bar_w * 0.9, sy(0) - sy(ms), plot::palette(ri),
                          {{"data-cell", cells[g].label}},
                          cells[g].label + ", " + r + ": " + plot::value_label(ms, Unit::kMs));
      }
    }
    svg.close();
  }
  // The step times across each group, labeled at the right end.
  for (std::size_t g = 0; g < cells.size(); ++g) {
    const auto marker = [&](const std::optional<double>& ms, const char* which, bool dashed) {
      if (!ms || !std::isfinite(*ms)) return;
      const double y = sy(*ms), x0 = l.group_left(g) - 4, x1 = l.group_right(g) + 4;
      svg.open("g", {{"class", "marker"}, {"data-marker", which}, {"data-cell", cells[g].label}});
      svg.line(x0, y, x1, y, "#222222", 2, dashed ? Attrs{{"stroke-dasharray", "6 3"}} : Attrs{});
      // Measured labeled at the right end, predicted at the left, so that close values do not collide.
      svg.text(dashed ? x0 : x1, y - 4, std::string(which) + " " + plot::value_label(*ms, Unit::kMs), 10,
               dashed ? "start" : "end", {{"fill", "#222222"}});
      svg.close();
    };
    marker(cells[g].measured_step_ms, "measured", false);
    marker(cells[g].predicted_step_ms, "predicted", true);
  }
  draw_group_labels(svg, l, labels);
  return svg.finish();
}

void write_step_time_chart(const std::string& path, const std::vector<StepTimeCell>& cells,
                           std::string_view title) {
  runtime::checkpoint::write_file(path, step_time_chart_svg(cells, title), false);
}

}  // namespace strata::tools::charts
