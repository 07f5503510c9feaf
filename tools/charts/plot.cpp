// Palette, ticks and the common parts of a chart (plot.h).
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

const char* palette(std::size_t i) {
  static constexpr const char* kColors[] = {"#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f",
                                            "#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac"};
  return kColors[i % (sizeof kColors / sizeof kColors[0])];
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

std::string tick_label(double v, double step, Unit unit) {
  const UnitScale scale = unit_scale(std::abs(v) > 0 ? std::max(std::abs(v), step) : step, unit);
  return fixed(v / scale.divisor, decimals_for(step / scale.divisor)) + scale.suffix;
}

std::string value_label(double v, Unit unit) {
  const UnitScale scale = unit_scale(std::abs(v), unit);
  const double scaled = std::abs(v / scale.divisor);
  const int decimals = scaled == 0 || scaled >= 100 ? 0 : scaled >= 10 ? 1 : scaled >= 1 ? 2 : 3;
  return fixed(v / scale.divisor, decimals) + scale.suffix;
}

void draw_title(Svg& svg, std::string_view title, double width) {
  svg.text(width / 2, 26, title, kTitleSize, "middle", {{"font-weight", "bold"}, {"fill", kTextColor}});
}

void draw_y_axis(Svg& svg, const Frame& f, const Ticks& ticks, const Scale& y, Unit unit, std::string_view label) {
  svg.open("g", {{"class", "axis y"}});
  for (const double v : ticks.values) {
    const double py = y(v);
    svg.line(f.left, py, f.right(), py, kGridColor);
    svg.text(f.left - 6, py + 4, tick_label(v, ticks.step, unit), kTickSize, "end", {{"fill", kTextColor}});
  }
  svg.line(f.left, f.top, f.left, f.bottom(), kAxisColor);
  const double cx = 16, cy = f.top + f.height / 2;
  svg.text(cx, cy, label, kLabelSize, "middle",
           {{"fill", kTextColor}, {"transform", "rotate(-90 " + num(cx) + " " + num(cy) + ")"}});
  svg.close();
}

void draw_x_axis(Svg& svg, const Frame& f, std::string_view label) {
  svg.open("g", {{"class", "axis x"}});
  svg.line(f.left, f.bottom(), f.right(), f.bottom(), kAxisColor);
  svg.text(f.left + f.width / 2, f.bottom() + 40, label, kLabelSize, "middle", {{"fill", kTextColor}});
  svg.close();
}

void draw_no_data(Svg& svg, const Frame& f) {
  svg.text(f.left + f.width / 2, f.top + f.height / 2, "no data", 14, "middle",
           {{"class", "no-data"}, {"fill", "#888888"}});
}

double draw_legend(Svg& svg, const std::vector<LegendEntry>& entries, double x, double y, double max_x) {
  if (entries.empty()) return y;
  svg.open("g", {{"class", "legend"}});
  double px = x;
  for (const LegendEntry& e : entries) {
    // About 6.5 px per character at 12 px, plus the sample and a gap.
    const double w = 22 + 6.5 * static_cast<double>(e.name.size()) + 16;
    if (px > x && px + w > max_x) {
      px = x;
      y += 18;
    }
    if (e.line) {
      svg.line(px, y - 4, px + 16, y - 4, e.color, 2,
               e.dashed ? Attrs{{"stroke-dasharray", "5 3"}} : Attrs{});
    } else {
      svg.rect(px, y - 10, 16, 12, e.color);
    }
    svg.text(px + 22, y, e.name, kLabelSize, "start", {{"fill", kTextColor}});
    px += w;
  }
  svg.close();
  return y + 18;
}

}  // namespace strata::tools::charts::plot
