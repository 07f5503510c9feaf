// Text widths, ticks and the common parts of a chart (plot.h).
#include "tools/charts/plot.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace strata::tools::charts::plot {
namespace {

// The divisor and suffix of a unit's scale for values up to `magnitude`: bytes in KiB/MiB/GiB/TiB,
// milliseconds as ms then s, plain numbers with k/M/G once they need five digits.
struct UnitScale {
  double divisor = 1;
  const char* suffix = "";
};

UnitScale unit_scale(double magnitude, Unit unit) {
  switch (unit) {
    case Unit::kBytes: {
      static constexpr const char* kNames[] = {" B", " KiB", " MiB", " GiB", " TiB", " PiB"};
      double d = 1;
      int i = 0;
      while (i < 5 && magnitude >= 1024 * d) {
        d *= 1024;
        ++i;
      }
      return {d, kNames[i]};
    }
    case Unit::kMs:
      return magnitude >= 10'000 ? UnitScale{1000, " s"} : UnitScale{1, " ms"};
    case Unit::kNumber:
      if (magnitude >= 1e10) return {1e9, "G"};
      if (magnitude >= 1e7) return {1e6, "M"};
      if (magnitude >= 1e4) return {1e3, "k"};
      return {};
  }
  return {};
}

// Decimals that show a step of `step` (in scaled units) exactly enough: 0 for steps >= 1.
int decimals_for(double step) {
  if (!(step > 0) || step >= 1) return 0;
  return std::min(9, static_cast<int>(std::ceil(-std::log10(step) - 1e-9)));
}

std::string fixed(double v, int decimals) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  std::string s = buf;
  if (s.find('.') != std::string::npos) {
    while (s.back() == '0') s.pop_back();
    if (s.back() == '.') s.pop_back();
  }
  if (s == "-0") s = "0";
  return s;
}

}  // namespace

double text_width(std::string_view text, double font_size, bool bold) {
  // DejaVu Sans's advance widths of ' ' to '~' in thousandths of an em (its hmtx table).
  static constexpr short kAdvance[95] = {
      318, 401, 460, 838, 636, 950, 780, 275, 390, 390, 500, 838, 318, 361, 318, 337,
      636, 636, 636, 636, 636, 636, 636, 636, 636, 636, 337, 337, 838, 838, 838, 531,
      1000, 684, 686, 698, 770, 632, 575, 775, 752, 295, 295, 656, 557, 863, 748, 787,
      603, 787, 695, 635, 611, 732, 684, 989, 685, 611, 685, 390, 337, 390, 838, 500,
      500, 613, 635, 550, 635, 615, 352, 635, 634, 278, 278, 579, 278, 974, 634, 612,
      635, 635, 411, 521, 392, 634, 592, 818, 592, 592, 525, 636, 337, 636, 838};
  double em = 0;
  for (const char ch : text) {
    const auto c = static_cast<unsigned char>(ch);
    if (c >= 32 && c < 127) {
      em += kAdvance[c - 32] / 1000.0;
    } else if ((c & 0xC0) != 0x80) {  // the first byte of a UTF-8 sequence: one wide glyph
      em += 0.9;
    }  // continuation bytes add nothing
  }
  return em * font_size * (bold ? 1.12 : 1.0) * 1.04;
}

Ticks nice_ticks(double lo, double hi, int target, Unit unit, bool integer) {
  if (!std::isfinite(lo) || !std::isfinite(hi)) lo = hi = 0;
  if (lo > hi) std::swap(lo, hi);
  if (hi == lo) {  // one value: a range around it
    const double pad = lo == 0 ? 1 : std::abs(lo) * 0.1;
    lo -= lo >= 0 && lo - pad < 0 ? lo : pad;  // do not cross zero from a positive value
    hi += pad;
  }
  // The step in the unit's scale (GiB, k, ...), so that byte ticks land on round GiB.
  const UnitScale scale = unit_scale(std::max(std::abs(lo), std::abs(hi)), unit);
  const double raw = (hi - lo) / scale.divisor / std::max(1, target);
  const double power = std::pow(10.0, std::floor(std::log10(raw)));
  double step = power;
  for (const double m : {1.0, 2.0, 5.0, 10.0}) {
    step = m * power;
    if (step >= raw) break;
  }
  step *= scale.divisor;
  if (integer) step = std::max(1.0, std::round(step));
  Ticks t;
  t.step = step;
  const double first = std::floor(lo / step + 1e-9) * step;
  for (double v = first; t.values.empty() || t.values.back() < hi - step * 1e-9; v += step) {
    t.values.push_back(std::abs(v) < step * 1e-9 ? 0 : v);
    if (t.values.size() > 1000) break;  // a guard against a degenerate step, never hit
  }
  if (t.values.size() == 1) t.values.push_back(t.values.front() + step);
  return t;
}

std::string tick_label(double v, double step, Unit unit, double magnitude) {
  const UnitScale scale = unit_scale(std::max({std::abs(v), step, std::abs(magnitude)}), unit);
  return fixed(v / scale.divisor, decimals_for(step / scale.divisor)) + scale.suffix;
}

std::string value_label(double v, Unit unit) {
  const UnitScale scale = unit_scale(std::abs(v), unit);
  const double scaled = std::abs(v / scale.divisor);
  const int decimals = scaled == 0 || scaled >= 100 ? 0 : scaled >= 10 ? 1 : scaled >= 1 ? 2 : 3;
  return fixed(v / scale.divisor, decimals) + scale.suffix;
}

void draw_title(Svg& svg, std::string_view title, double width) {
  svg.text(width / 2, kTitleBaseline, title, kTitleSize, "middle", {{"font-weight", "bold"}, {"fill", kTextColor}});
}

double y_axis_width(const Ticks& ticks, Unit unit) {
  double widest = 0;
  const double magnitude = std::max(std::abs(ticks.lo()), std::abs(ticks.hi()));
  for (const double v : ticks.values) {
    widest = std::max(widest, text_width(tick_label(v, ticks.step, unit, magnitude), kTickSize));
  }
  // pad, the rotated label (a line of kLabelSize), a gap, the tick labels, a gap to the axis.
  return kPad + kLabelSize + 8 + widest + 6;
}

void draw_y_axis(Svg& svg, const Frame& f, const Ticks& ticks, const Scale& y, Unit unit, std::string_view label) {
  svg.rect(f.left, f.top, f.width, f.height, "none", {{"class", "frame"}});
  svg.open("g", {{"class", "axis y"}});
  const double magnitude = std::max(std::abs(ticks.lo()), std::abs(ticks.hi()));
  for (const double v : ticks.values) {
    const double py = y(v);
    svg.line(f.left, py, f.right(), py, kGridColor);
    svg.text(f.left - 6, py + 4, tick_label(v, ticks.step, unit, magnitude), kTickSize, "end", {{"fill", kTextColor}});
  }
  svg.line(f.left, f.top, f.left, f.bottom(), kAxisColor);
  // The label's baseline one line in from the image's edge, centered on the frame (rotated, its
  // text runs along the axis; a label longer than the frame is shortened).
  const double cx = kPad + kLabelSize - 2, cy = f.top + f.height / 2;
  std::string text(label);
  while (text.size() > 4 && text_width(text, kLabelSize) > f.height) text = text.substr(0, text.size() - 4) + "...";
  svg.text(cx, cy, text, kLabelSize, "middle",
           {{"fill", kTextColor}, {"transform", "rotate(-90 " + num(cx) + " " + num(cy) + ")"}});
  svg.close();
}

void draw_x_axis(Svg& svg, const Frame& f, std::string_view label, double below) {
  svg.open("g", {{"class", "axis x"}});
  svg.line(f.left, f.bottom(), f.right(), f.bottom(), kAxisColor);
  if (!label.empty()) {
    svg.text(f.left + f.width / 2, f.bottom() + below, label, kLabelSize, "middle", {{"fill", kTextColor}});
  }
  svg.close();
}

void draw_no_data(Svg& svg, const Frame& f) {
  svg.text(f.left + f.width / 2, f.top + f.height / 2, "no data", 14, "middle",
           {{"class", "no-data"}, {"fill", "#888888"}});
}

void draw_up_arrow(Svg& svg, double x, double tip_y, std::string_view color) {
  svg.element("path", {{"d", "M" + num(x) + " " + num(tip_y) + " l4 5 h-2.5 v3 h-3 v-3 h-2.5 z"},
                       {"fill", std::string(color)}});
}

namespace {

constexpr double kSample = 16;  // a legend sample's width, then a gap of 6 before the text

double entry_width(const LegendEntry& e) {
  const double sample = e.sample == Sample::kNone ? 0 : kSample + 6;
  return sample + text_width(e.name, kLabelSize) + 16;
}

// Calls place(entry, x, y) for each entry where it goes; returns the y below the last row.
template <typename Place>
double lay_out_legend(const std::vector<LegendEntry>& entries, double x, double y, double max_x, Place place) {
  if (entries.empty()) return y;
  double px = x;
  for (const LegendEntry& e : entries) {
    const double w = entry_width(e);
    if (px > x && px + w - 16 > max_x) {
      px = x;
      y += kLegendRow;
    }
    place(e, px, y);
    px += w;
  }
  return y + kLegendRow;
}

}  // namespace

double legend_bottom(const std::vector<LegendEntry>& entries, double x, double y, double max_x) {
  return lay_out_legend(entries, x, y, max_x, [](const LegendEntry&, double, double) {});
}

double draw_legend(Svg& svg, const std::vector<LegendEntry>& entries, double x, double y, double max_x) {
  if (entries.empty()) return y;
  svg.open("g", {{"class", "legend"}});
  const double bottom = lay_out_legend(entries, x, y, max_x, [&](const LegendEntry& e, double px, double py) {
    if (!e.css_class.empty()) svg.open("g", {{"class", e.css_class}, {"data-ref", e.name}});
    double tx = px + kSample + 6;
    switch (e.sample) {
      case Sample::kSwatch: svg.rect(px, py - 10, kSample, 12, e.color); break;
      case Sample::kLine: svg.line(px, py - 4, px + kSample, py - 4, e.color, 2); break;
      case Sample::kDashed:
        svg.line(px, py - 4, px + kSample, py - 4, e.color, 2, {{"stroke-dasharray", "5 3"}});
        break;
      case Sample::kArrow: draw_up_arrow(svg, px + kSample / 2, py - 11, e.color); break;
      case Sample::kNone: tx = px; break;
    }
    svg.text(tx, py, e.name, kLabelSize, "start", {{"fill", e.sample == Sample::kNone ? kMutedColor : kTextColor}});
    if (!e.css_class.empty()) svg.close();
  });
  svg.close();
  return bottom;
}

}  // namespace strata::tools::charts::plot
