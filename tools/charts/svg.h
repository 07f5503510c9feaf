#pragma once
// A minimal SVG writer: elements and attributes in, well-formed SVG text out. Every attribute
// value and every text node is XML-escaped here, so callers pass plain strings (a label with
// `<&">` is safe). No I/O: charts.h writes files.
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace strata::tools::charts {

// name="value" pairs, written in this order.
using Attrs = std::vector<std::pair<std::string, std::string>>;

// `s` with & < > " ' replaced by their entities, and control characters that XML 1.0 forbids
// (everything below U+0020 but tab, newline and carriage return) dropped.
std::string xml_escape(std::string_view s);

// A coordinate or value as short text: at most 2 decimals, no trailing zeros ("12", "3.5").
// Non-finite values are written as 0 (SVG has no NaN).
std::string num(double v);

// Builds one <svg> document. Elements opened with open() are closed by close() (innermost
// first) or by finish().
class Svg {
 public:
  // The root <svg> with a viewBox of width x height, a <title> (what browsers show as the tab
  // name and screen readers read) and a white background.
  Svg(double width, double height, std::string_view title);

  void open(std::string_view tag, const Attrs& attrs = {});
  void close();
  // <tag attrs/>.
  void element(std::string_view tag, const Attrs& attrs);
  // <tag attrs>text</tag>.
  void text_element(std::string_view tag, const Attrs& attrs, std::string_view text);

  // Shorthands of the chart code.
  void rect(double x, double y, double w, double h, std::string_view fill, Attrs extra = {});
  void line(double x1, double y1, double x2, double y2, std::string_view stroke, double stroke_width = 1,
            Attrs extra = {});
  // anchor: "start", "middle" or "end".
  void text(double x, double y, std::string_view text, double font_size = 12, std::string_view anchor = "start",
            Attrs extra = {});

  // Closes what is still open and returns the document.
  std::string finish();

 private:
  void write_attrs(const Attrs& attrs);
  std::string out_;
  std::vector<std::string> open_;
};

}  // namespace strata::tools::charts
