// The bar charts (charts.h): memory per tier stacked by kind, and step time per resource.
// Layout: the title, the legend rows, the frame (kPlotHeight) with the y axis at its left, then
// the groups' labels under it: flat, wrapped at ", " when a flat one does not fit its group, or
// rotated when a wrapped one does not either, with the margins grown to hold them. The width
// grows with the bars from kWidth to kMaxWidth, never more: past it the bars get thinner.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <map>
#include <numbers>
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

constexpr double kRight = plot::kPad + 12;
constexpr double kMinBar = 12;          // below this the chart widens (up to kMaxWidth)
constexpr double kGroupLabelSize = 11;
constexpr double kGroupLine = 13;       // between the lines of a wrapped group label
constexpr double kRotation = 30;        // degrees, of group labels that do not fit flat or wrapped
constexpr std::size_t kMaxLabel = 60;   // a longer group label is shortened (its bars' tooltips hold it)
constexpr double kHeaderGap = 14;       // between the legend and the frame: room for the arrows up
constexpr double kMinVisible = 2;       // pixels: a bar above zero is at least this tall

// Index of `name` in `names`, appended when new.
std::size_t index_of(std::vector<std::string>& names, const std::string& name) {
  const auto it = std::find(names.begin(), names.end(), name);
  if (it != names.end()) return static_cast<std::size_t>(it - names.begin());
  names.push_back(name);
  return names.size() - 1;
}

// A group label's lines that fit `width`: the label split at ", " and packed greedily; empty
// when one part alone is wider.
std::vector<std::string> wrap(const std::string& label, double width) {
  std::vector<std::string> parts;
  for (std::size_t from = 0;;) {
    const std::size_t at = label.find(", ", from);
    parts.push_back(label.substr(from, at == std::string::npos ? std::string::npos : at + 1 - from));
    if (at == std::string::npos) break;
    from = at + 2;
  }
  std::vector<std::string> lines;
  for (const std::string& p : parts) {
    if (plot::text_width(p, kGroupLabelSize) > width) return {};
    if (!lines.empty() && plot::text_width(lines.back() + " " + p, kGroupLabelSize) <= width) {
      lines.back() += " " + p;
    } else {
      lines.push_back(p);
    }
  }
  return lines;
}

// Where the groups and their bars go.
struct Groups {
  double width = plot::kWidth;   // of the whole chart
  double height = 0;
  Frame frame;
  double group_w = 0;            // one group's slot
  double bar_w = 0;              // one bar
  std::size_t bars = 0;          // per group
  bool rotated = false;          // labels at -kRotation degrees, else lines[g] flat under each group
  std::vector<std::string> labels;
  std::vector<std::vector<std::string>> lines;
  double under_bars = 0;         // room under the axis above the group labels

  // The left edge of bar `b` of group `g`.
  double bar_x(std::size_t g, std::size_t b) const {
    const double used = bar_w * static_cast<double>(bars);
    return frame.left + group_w * static_cast<double>(g) + (group_w - used) / 2 + bar_w * static_cast<double>(b);
  }
  double group_left(std::size_t g) const { return bar_x(g, 0); }
  double group_right(std::size_t g) const { return bar_x(g, bars); }
  double group_center(std::size_t g) const { return frame.left + group_w * (static_cast<double>(g) + 0.5); }
};

// left: the y axis' room (plot::y_axis_width); header: the y below the legend rows; under_bars:
// pixels under the axis for the caller's own marks, above the group labels.
Groups layout_groups(const std::vector<std::string>& labels, std::size_t bars, double left, double header,
                     double under_bars) {
  Groups l;
  l.bars = std::max<std::size_t>(bars, 1);
  l.under_bars = under_bars;
  for (const std::string& s : labels) l.labels.push_back(s.size() > kMaxLabel ? s.substr(0, kMaxLabel - 3) + "..." : s);
  const double n = static_cast<double>(std::max<std::size_t>(labels.size(), 1));
  const double min_group = static_cast<double>(l.bars) * kMinBar + 20;
  l.width = std::clamp(std::ceil(left + kRight + n * min_group), plot::kWidth, plot::kMaxWidth);
  l.group_w = (l.width - left - kRight) / n;

  // Flat when every label fits its slot, else wrapped when every one does so, else rotated.
  const double room = l.group_w - 6;
  bool flat = true, wrapped = true;
  for (const std::string& s : l.labels) {
    flat = flat && plot::text_width(s, kGroupLabelSize) <= room;
    std::vector<std::string> w = wrap(s, room);
    wrapped = wrapped && !w.empty();
    l.lines.push_back(w.empty() ? std::vector<std::string>{s} : std::move(w));
  }
  double label_h = kGroupLine + 4;
  if (flat) {
    for (std::size_t g = 0; g < l.labels.size(); ++g) l.lines[g] = {l.labels[g]};
  } else if (wrapped) {
    std::size_t most = 1;
    for (const auto& w : l.lines) most = std::max(most, w.size());
    label_h = kGroupLine * static_cast<double>(most) + 4;
  } else {
    // Rotated: each label ends under its group and runs down to the left. The left margin grows
    // until the first labels fit (the slots shrink as it grows: a few rounds settle it).
    l.rotated = true;
    const double rad = kRotation * std::numbers::pi / 180;
    double widest = 0;
    for (int round = 0; round < 4; ++round) {
      l.group_w = (l.width - left - kRight) / n;
      for (std::size_t g = 0; g < l.labels.size(); ++g) {
        const double w = plot::text_width(l.labels[g], kGroupLabelSize);
        left = std::max(left, plot::kPad + w * std::cos(rad) - l.group_w * (static_cast<double>(g) + 0.5) + 4);
        widest = std::max(widest, w);
      }
    }
    l.group_w = (l.width - left - kRight) / n;
    label_h = widest * std::sin(rad) + kGroupLabelSize + 6;
  }
  l.frame = {left, header + kHeaderGap, l.width - left - kRight, plot::kPlotHeight};
  l.height = std::ceil(l.frame.bottom() + under_bars + label_h + plot::kPad);  // whole pixels, as rendered
  l.bar_w = std::min(48.0, (l.group_w * 0.8) / static_cast<double>(l.bars));
  return l;
}

void draw_group_labels(Svg& svg, const Groups& l) {
  const double y = l.frame.bottom() + l.under_bars + 14;
  svg.open("g", {{"class", "groups"}});
  for (std::size_t g = 0; g < l.labels.size(); ++g) {
    const double cx = l.group_center(g);
    if (l.rotated) {
      svg.text(cx, y, l.labels[g], kGroupLabelSize, "end",
               {{"fill", plot::kTextColor},
                {"transform", "rotate(-" + num(kRotation) + " " + num(cx) + " " + num(y) + ")"}});
      continue;
    }
    for (std::size_t i = 0; i < l.lines[g].size(); ++i) {
      svg.text(cx, y + kGroupLine * static_cast<double>(i), l.lines[g][i], kGroupLabelSize, "middle",
               {{"fill", plot::kTextColor}});
    }
  }
  svg.close();
}

// The y axis and the x axis line of a bar chart; `yt` from 0. Returns the y scale.
Scale draw_bar_axes(Svg& svg, const Groups& l, const Ticks& yt, Unit unit, std::string_view y_label, bool empty) {
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

std::string color_in(const std::vector<std::string>& names, const std::vector<std::string>& colors,
                     const std::string& name) {
  const auto it = std::find(names.begin(), names.end(), name);
  return colors[static_cast<std::size_t>(it - names.begin())];
}

}  // namespace

// ---- Memory per tier, stacked by kind ----

std::string memory_chart_svg(const std::vector<MemoryCell>& cells, std::string_view title) {
  std::vector<std::string> tiers, kinds, labels;
  double data_top = 0;
  for (const MemoryCell& c : cells) {
    labels.push_back(c.label);
    for (const TierBytes& t : c.tiers) {
      index_of(tiers, t.tier);
      double total = 0;
      for (const auto& [kind, bytes] : t.bytes_by_kind) {
        index_of(kinds, kind);
        total += static_cast<double>(bytes);
      }
      data_top = std::max(data_top, total);
    }
  }
  // Tiers and kinds share the chart: one palette call keeps their colors apart.
  std::vector<std::string> names = tiers;
  names.insert(names.end(), kinds.begin(), kinds.end());
  const std::vector<std::string> colors = palette::colors_for(names);

  // A budget up to kStretch times the tallest bar is drawn on the scale; a higher one is an
  // arrow over its bar and a line above the plot, so that the bars keep the height.
  const auto on_scale = [&](double budget) { return data_top <= 0 || budget <= plot::kStretch * data_top; };
  double top = data_top;
  bool any_drawn = false;
  std::map<std::string, std::pair<double, double>> off_scale;  // tier -> the least and most budget above
  for (const MemoryCell& c : cells) {
    for (const TierBytes& t : c.tiers) {
      if (!t.budget_bytes) continue;
      const double b = static_cast<double>(*t.budget_bytes);
      if (on_scale(b)) {
        top = std::max(top, b);
        any_drawn = true;
      } else {
        auto [it, added] = off_scale.try_emplace(t.tier, b, b);
        it->second = {std::min(it->second.first, b), std::max(it->second.second, b)};
      }
    }
  }

  std::vector<LegendEntry> kind_row, tier_row, above_row;
  for (const std::string& k : kinds) kind_row.push_back({k, color_in(names, colors, k), Sample::kSwatch, ""});
  if (any_drawn) kind_row.push_back({"budget", palette::kMarkColor, Sample::kDashed, ""});
  if (!tiers.empty()) tier_row.push_back({"bars left to right:", "", Sample::kNone, ""});
  for (const std::string& t : tiers) tier_row.push_back({t, color_in(names, colors, t), Sample::kSwatch, ""});
  for (const std::string& t : tiers) {
    const auto it = off_scale.find(t);
    if (it == off_scale.end()) continue;
    const auto [least, most] = it->second;
    const std::string value = least == most ? plot::value_label(most, Unit::kBytes)
                                            : "up to " + plot::value_label(most, Unit::kBytes);
    above_row.push_back({t + " budget " + value + " (above the scale)", color_in(names, colors, t), Sample::kArrow,
                         "budget off-scale"});
  }

  const Ticks yt = plot::nice_ticks(0, top, 6, Unit::kBytes);
  const double left = plot::y_axis_width(yt, Unit::kBytes);
  // The tiers' names run down under their bars, below a key in the tier's color.
  double longest_tier = 0;
  for (const std::string& t : tiers) longest_tier = std::max(longest_tier, plot::text_width(t.substr(0, 16), 9));
  const double under_bars = tiers.empty() ? 0 : 12 + longest_tier;
  // The legend wraps at the width, which depends on the groups alone.
  const double width = layout_groups(labels, tiers.size(), left, 0, under_bars).width;
  const double max_x = width - plot::kPad;
  const double header = plot::legend_bottom(
      above_row, left,
      plot::legend_bottom(tier_row, left, plot::legend_bottom(kind_row, left, plot::kLegendTop, max_x), max_x), max_x);
  const Groups l = layout_groups(labels, tiers.size(), left, header, under_bars);
  const Frame& f = l.frame;

  Svg svg(l.width, l.height, title);
  plot::draw_title(svg, title, l.width);
  plot::draw_legend(svg, above_row, left,
                    plot::draw_legend(svg, tier_row, left, plot::draw_legend(svg, kind_row, left, plot::kLegendTop, max_x),
                                      max_x),
                    max_x);
  const Scale sy = draw_bar_axes(svg, l, yt, Unit::kBytes, "bytes", cells.empty());

  for (std::size_t ti = 0; ti < tiers.size(); ++ti) {
    const std::string& tier_color = colors[ti];
    svg.open("g", {{"class", "series"}, {"data-series", tiers[ti]}, {"data-color", tier_color}});
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
          rect_with_tooltip(svg, x, sy(base + b), w, sy(base) - sy(base + b), color_in(names, colors, kind),
                            {{"data-kind", kind}, {"stroke", "#ffffff"}, {"stroke-width", "0.5"}},
                            cells[g].label + ", " + t.tier + ", " + kind + ": " + plot::value_label(b, Unit::kBytes) +
                                " of " + plot::value_label(total, Unit::kBytes));
          base += b;
        }
        if (t.budget_bytes && on_scale(static_cast<double>(*t.budget_bytes))) {
          const double by = sy(static_cast<double>(*t.budget_bytes));
          svg.line(x - 2, by, x + w + 2, by, palette::kMarkColor, 1.5,
                   {{"stroke-dasharray", "4 2"}, {"class", "budget"}});
        } else if (t.budget_bytes) {  // above the scale: an arrow over the frame, in the tier's color
          svg.open("g", {{"class", "budget off-scale"}});
          plot::draw_up_arrow(svg, x + w / 2, f.top - 10, tier_color);
          svg.close();
        }
        // The tier's key under its bar, and its name reading upwards below the key.
        svg.rect(x, f.bottom() + 2, w, 4, tier_color, {{"class", "tier-key"}});
        const double tx = x + w / 2 + 3, ty = f.bottom() + 9;
        svg.text(tx, ty, t.tier.substr(0, 16), 9, "end",
                 {{"fill", plot::kMutedColor}, {"transform", "rotate(-90 " + num(tx) + " " + num(ty) + ")"}});
        svg.close();
      }
    }
    svg.close();
  }
  draw_group_labels(svg, l);
  return svg.finish();
}

void write_memory_chart(const std::string& path, const std::vector<MemoryCell>& cells, std::string_view title) {
  write_file(path, memory_chart_svg(cells, title), false);
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
  const std::vector<std::string> colors = palette::colors_for(resources);
  std::vector<LegendEntry> legend;
  for (std::size_t i = 0; i < resources.size(); ++i) legend.push_back({resources[i], colors[i], Sample::kSwatch, ""});
  if (any_measured) legend.push_back({"measured step", palette::kMarkColor, Sample::kLine, ""});
  if (any_predicted) legend.push_back({"predicted step", palette::kMarkColor, Sample::kDashed, ""});

  // The step times are written over each group, above its bars and markers: room for the two
  // lines over the tallest group, so that the labels stay inside the frame.
  const double label_lines = (any_measured ? 1 : 0) + (any_predicted ? 1 : 0);
  const double headroom = label_lines * 12 + 6;
  const Ticks yt = plot::nice_ticks(0, top * plot::kPlotHeight / (plot::kPlotHeight - headroom), 6, Unit::kMs);
  const double left = plot::y_axis_width(yt, Unit::kMs);
  const double width = layout_groups(labels, resources.size(), left, 0, 0).width;
  const double header = plot::legend_bottom(legend, left, plot::kLegendTop, width - plot::kPad);
  const Groups l = layout_groups(labels, resources.size(), left, header, 0);

  Svg svg(l.width, l.height, title);
  plot::draw_title(svg, title, l.width);
  plot::draw_legend(svg, legend, left, plot::kLegendTop, l.width - plot::kPad);
  const Scale sy = draw_bar_axes(svg, l, yt, Unit::kMs, "busy time per step", cells.empty());

  std::vector<double> group_top(cells.size(), sy(0));  // the highest pixel of each group's bars
  for (std::size_t ri = 0; ri < resources.size(); ++ri) {
    svg.open("g", {{"class", "series"}, {"data-series", resources[ri]}, {"data-color", colors[ri]}});
    for (std::size_t g = 0; g < cells.size(); ++g) {
      for (const auto& [r, ms] : cells[g].busy_ms) {
        if (r != resources[ri] || !std::isfinite(ms)) continue;
        const double h = ms > 0 ? std::max(kMinVisible, sy(0) - sy(ms)) : 0;
        rect_with_tooltip(svg, l.bar_x(g, ri), sy(0) - h, l.bar_w * 0.9, h, colors[ri],
                          {{"data-cell", cells[g].label}},
                          cells[g].label + ", " + r + ": " + plot::value_label(ms, Unit::kMs));
        group_top[g] = std::min(group_top[g], sy(0) - h);
      }
    }
    svg.close();
  }
  // The step times as lines across each group; their values over the group, above the bars and
  // lines, when they fit the group's width (the tooltip holds them always).
  for (std::size_t g = 0; g < cells.size(); ++g) {
    const double x0 = l.group_left(g) - 4, x1 = l.group_right(g) + 4;
    std::vector<std::pair<std::string, bool>> values;  // value, dashed
    const auto marker = [&](const std::optional<double>& ms, const char* which, bool dashed) {
      if (!ms || !std::isfinite(*ms)) return;
      const double y = sy(*ms);
      group_top[g] = std::min(group_top[g], y);
      const std::string value = plot::value_label(*ms, Unit::kMs);
      svg.open("g", {{"class", "marker"}, {"data-marker", which}, {"data-cell", cells[g].label}});
      svg.open("line", {{"x1", num(x0)}, {"y1", num(y)}, {"x2", num(x1)}, {"y2", num(y)}, {"stroke", palette::kMarkColor},
                        {"stroke-width", "2"}, {"stroke-dasharray", dashed ? "6 3" : "none"}});
      svg.text_element("title", {}, cells[g].label + ": " + which + " step " + value);
      svg.close();
      svg.close();
      values.emplace_back(value, dashed);
    };
    marker(cells[g].measured_step_ms, "measured", false);
    marker(cells[g].predicted_step_ms, "predicted", true);
    // Each value after a sample of its line (solid: measured, dashed: predicted), the measured
    // one on top; none when they do not fit the group's slot.
    double widest = 0;
    for (const auto& v : values) widest = std::max(widest, plot::text_width(v.first, 10));
    const double block_w = 14 + 3 + widest;
    if (values.empty() || block_w > l.group_w - 4) continue;
    const double bx = l.group_center(g) - block_w / 2;
    double y = group_top[g] - 4 - 12 * static_cast<double>(values.size() - 1);
    svg.open("g", {{"class", "marker-label"}, {"data-cell", cells[g].label}});
    for (const auto& [value, dashed] : values) {
      svg.line(bx, y - 3.5, bx + 14, y - 3.5, palette::kMarkColor, 1.5,
               dashed ? Attrs{{"stroke-dasharray", "4 2"}} : Attrs{});
      svg.text(bx + 17, y, value, 10, "start", {{"fill", plot::kTextColor}});
      y += 12;
    }
    svg.close();
  }
  draw_group_labels(svg, l);
  return svg.finish();
}

void write_step_time_chart(const std::string& path, const std::vector<StepTimeCell>& cells,
                           std::string_view title) {
  write_file(path, step_time_chart_svg(cells, title), false);
}

}  // namespace strata::tools::charts
