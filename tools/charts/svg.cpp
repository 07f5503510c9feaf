// The SVG writer (svg.h).
#include "tools/charts/svg.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "core/error.h"

namespace strata::tools::charts {

std::string xml_escape(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (const char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&apos;"; break;
      default:
        // XML 1.0 allows no control characters but tab, LF and CR, not even as references.
        if (static_cast<unsigned char>(c) >= 0x20 || c == '\t' || c == '\n' || c == '\r') out += c;
    }
  }
  return out;
}

std::string num(double v) {
  if (!std::isfinite(v)) return "0";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.2f", v);
  std::string s = buf;
  while (!s.empty() && s.back() == '0') s.pop_back();
  if (!s.empty() && s.back() == '.') s.pop_back();
  if (s == "-0") s = "0";
  return s;
}

Svg::Svg(double width, double height, std::string_view title) {
  out_ = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";
  open("svg", {{"xmlns", "http://www.w3.org/2000/svg"},
               {"width", num(width)},
               {"height", num(height)},
               {"viewBox", "0 0 " + num(width) + " " + num(height)},
               {"font-family", "DejaVu Sans, Helvetica, Arial, sans-serif"}});
  text_element("title", {}, title);
  rect(0, 0, width, height, "#ffffff");
}

void Svg::write_attrs(const Attrs& attrs) {
  for (const auto& [name, value] : attrs) out_ += " " + name + "=\"" + xml_escape(value) + "\"";
}

void Svg::open(std::string_view tag, const Attrs& attrs) {
  out_ += "<";
  out_ += tag;
  write_attrs(attrs);
  out_ += ">\n";
  open_.emplace_back(tag);
}

void Svg::close() {
  STRATA_ASSERT(!open_.empty(), "Svg::close with no open element");
  out_ += "</" + open_.back() + ">\n";
  open_.pop_back();
}

void Svg::element(std::string_view tag, const Attrs& attrs) {
  out_ += "<";
  out_ += tag;
  write_attrs(attrs);
  out_ += "/>\n";
}

void Svg::text_element(std::string_view tag, const Attrs& attrs, std::string_view text) {
  out_ += "<";
  out_ += tag;
  write_attrs(attrs);
  out_ += ">" + xml_escape(text) + "</";
  out_ += tag;
  out_ += ">\n";
}

void Svg::rect(double x, double y, double w, double h, std::string_view fill, Attrs extra) {
  Attrs a{{"x", num(x)}, {"y", num(y)}, {"width", num(std::max(w, 0.0))}, {"height", num(std::max(h, 0.0))},
          {"fill", std::string(fill)}};
  a.insert(a.end(), extra.begin(), extra.end());
  element("rect", a);
}

void Svg::line(double x1, double y1, double x2, double y2, std::string_view stroke, double stroke_width,
               Attrs extra) {
  Attrs a{{"x1", num(x1)}, {"y1", num(y1)}, {"x2", num(x2)}, {"y2", num(y2)}, {"stroke", std::string(stroke)},
          {"stroke-width", num(stroke_width)}};
  a.insert(a.end(), extra.begin(), extra.end());
  element("line", a);
}

void Svg::text(double x, double y, std::string_view text, double font_size, std::string_view anchor, Attrs extra) {
  Attrs a{{"x", num(x)}, {"y", num(y)}, {"font-size", num(font_size)}, {"text-anchor", std::string(anchor)}};
  a.insert(a.end(), extra.begin(), extra.end());
  text_element("text", a, text);
}

std::string Svg::finish() {
  while (!open_.empty()) close();
  return std::move(out_);
}

}  // namespace strata::tools::charts
