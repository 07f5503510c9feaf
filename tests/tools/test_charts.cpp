// tools/charts: the SVG writer escapes, every chart kind gives well-formed XML (checked by a
// small parser here, which also decodes entities) with one <g class="series" data-series=NAME>
// per series, empty data and single points draw without NaN, and the charts of a metrics JSONL
// hold one series per tier the run used.
#include <gtest/gtest.h>

#include <cctype>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"
#include "tools/charts/charts.h"
#include "tools/charts/metrics_charts.h"
#include "tools/charts/palette.h"
#include "tools/charts/plot.h"
#include "tools/charts/svg.h"

namespace strata::tools::charts {
namespace {

// ---- A small XML parser: elements, attributes, text; throws on anything ill-formed ----

struct Node {
  std::string name;
  std::map<std::string, std::string> attrs;
  std::vector<std::unique_ptr<Node>> children;
  std::string text;  // the text directly inside, entities decoded

  std::string attr(const std::string& key) const {
    const auto it = attrs.find(key);
    return it == attrs.end() ? std::string() : it->second;
  }
};

class XmlParser {
 public:
  explicit XmlParser(const std::string& s) : s_(s) {}

  std::unique_ptr<Node> parse() {
    skip_space();
    if (s_.compare(i_, 5, "<?xml") == 0) {
      const std::size_t end = s_.find("?>", i_);
      if (end == std::string::npos) fail("unterminated XML declaration");
      i_ = end + 2;
    }
    skip_space();
    std::unique_ptr<Node> root = element();
    skip_space();
    if (i_ != s_.size()) fail("content after the root element");
    return root;
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    throw std::runtime_error(what + " at offset " + std::to_string(i_));
  }
  void skip_space() {
    while (i_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[i_]))) ++i_;
  }
  static bool name_char(char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == ':' || c == '.';
  }
  std::string name() {
    const std::size_t start = i_;
    while (i_ < s_.size() && name_char(s_[i_])) ++i_;
    if (i_ == start) fail("expected a name");
    return s_.substr(start, i_ - start);
  }
  // Decodes entities of s_[from, to); a bare & or < is an error.
  std::string decode(std::size_t from, std::size_t to) const {
    std::string out;
    for (std::size_t k = from; k < to; ++k) {
      const char c = s_[k];
      if (c == '<') throw std::runtime_error("raw < at offset " + std::to_string(k));
      if (c != '&') {
        out += c;
        continue;
      }
      const std::size_t semi = s_.find(';', k);
      if (semi == std::string::npos || semi >= to) throw std::runtime_error("bare & at offset " + std::to_string(k));
      const std::string ent = s_.substr(k + 1, semi - k - 1);
      static const std::map<std::string, char> kEntities{
          {"amp", '&'}, {"lt", '<'}, {"gt", '>'}, {"quot", '"'}, {"apos", '\''}};
      const auto it = kEntities.find(ent);
      if (it == kEntities.end()) throw std::runtime_error("unknown entity &" + ent + ";");
      out += it->second;
      k = semi;
    }
    return out;
  }
  std::unique_ptr<Node> element() {
    if (i_ >= s_.size() || s_[i_] != '<') fail("expected <");
    ++i_;
    auto node = std::make_unique<Node>();
    node->name = name();
    for (;;) {
      skip_space();
      if (i_ >= s_.size()) fail("unterminated tag");
      if (s_.compare(i_, 2, "/>") == 0) {
        i_ += 2;
        return node;
      }
      if (s_[i_] == '>') {
        ++i_;
        break;
      }
      const std::string key = name();
      if (i_ >= s_.size() || s_[i_] != '=') fail("expected = after " + key);
      ++i_;
      if (i_ >= s_.size() || (s_[i_] != '"' && s_[i_] != '\'')) fail("unquoted value of " + key);
      const char quote = s_[i_++];
      const std::size_t end = s_.find(quote, i_);
      if (end == std::string::npos) fail("unterminated value of " + key);
      if (!node->attrs.emplace(key, decode(i_, end)).second) fail("duplicate attribute " + key);
      i_ = end + 1;
    }
    for (;;) {  // content
      const std::size_t lt = s_.find('<', i_);
      if (lt == std::string::npos) fail("unclosed <" + node->name + ">");
      node->text += decode(i_, lt);
      i_ = lt;
      if (s_.compare(i_, 2, "</") == 0) {
        i_ += 2;
        if (name() != node->name) fail("mismatched </...> for <" + node->name + ">");
        skip_space();
        if (i_ >= s_.size() || s_[i_] != '>') fail("expected >");
        ++i_;
        return node;
      }
      node->children.push_back(element());
    }
  }

  const std::string& s_;
  std::size_t i_ = 0;
};

std::unique_ptr<Node> parse_svg(const std::string& svg) {
  std::unique_ptr<Node> root = XmlParser(svg).parse();
  EXPECT_EQ(root->name, "svg");
  EXPECT_EQ(root->attr("xmlns"), "http://www.w3.org/2000/svg");
  // No number went out as NaN or infinity.
  EXPECT_EQ(svg.find("nan"), std::string::npos);
  EXPECT_EQ(svg.find("inf"), std::string::npos);
  return root;
}

void collect(const Node& n, const std::string& name, const std::string& cls, std::vector<const Node*>& out) {
  if (n.name == name && (cls.empty() || n.attr("class") == cls)) out.push_back(&n);
  for (const auto& c : n.children) collect(*c, name, cls, out);
}
std::vector<const Node*> find_all(const Node& root, const std::string& name, const std::string& cls = "") {
  std::vector<const Node*> out;
  collect(root, name, cls, out);
  return out;
}
std::vector<std::string> series_names(const Node& root) {
  std::vector<std::string> names;
  for (const Node* g : find_all(root, "g", "series")) names.push_back(g->attr("data-series"));
  return names;
}
bool has_text(const Node& root, const std::string& text) {
  for (const Node* t : find_all(root, "text")) {
    if (t->text == text) return true;
  }
  return false;
}
// A memory bar's stacks (rects with data-kind; not the tier's key).
std::vector<const Node*> kind_rects(const Node& n) {
  std::vector<const Node*> out;
  for (const Node* r : find_all(n, "rect")) {
    if (!r->attr("data-kind").empty()) out.push_back(r);
  }
  return out;
}
std::size_t polyline_points(const Node& series) {
  const std::vector<const Node*> lines = find_all(series, "polyline");
  if (lines.empty()) return 0;
  std::istringstream in(lines.front()->attr("points"));
  std::size_t n = 0;
  for (std::string p; in >> p;) ++n;
  return n;
}

const std::string kNasty = "a <b> & \"c\" 'd'";

TEST(Svg, EscapesTextAndAttributes) {
  EXPECT_EQ(xml_escape("<&\">'"), "&lt;&amp;&quot;&gt;&apos;");
  EXPECT_EQ(xml_escape(std::string("a\x01") + "b\tc"), "ab\tc");  // control characters XML forbids
  Svg svg(100, 50, kNasty);
  svg.text(1, 2, kNasty, 12, "start", {{"data-x", kNasty}});
  const std::unique_ptr<Node> root = parse_svg(svg.finish());
  EXPECT_EQ(find_all(*root, "title").at(0)->text, kNasty);
  EXPECT_EQ(find_all(*root, "text").at(0)->attr("data-x"), kNasty);
  EXPECT_TRUE(has_text(*root, kNasty));
}

TEST(Svg, CheckerRefusesIllFormedXml) {  // the parser above is the test's oracle: it must refuse
  for (const char* bad : {"<svg><g></svg>", "<svg a=\"1\" a=\"2\"/>", "<svg>a & b</svg>", "<svg a=\"<\"/>",
                          "<svg>&bogus;</svg>", "<svg/><svg/>", "<svg a=1/>"}) {
    EXPECT_THROW(XmlParser(bad).parse(), std::runtime_error) << bad;
  }
}

TEST(Plot, TicksAndLabels) {
  const plot::Ticks t = plot::nice_ticks(0, 3.0 * (1ull << 30), 6, Unit::kBytes);
  EXPECT_EQ(t.lo(), 0);
  EXPECT_GE(t.hi(), 3.0 * (1ull << 30));
  EXPECT_EQ(plot::tick_label(1.5 * (1ull << 30), t.step, Unit::kBytes), "1.5 GiB");
  EXPECT_EQ(plot::tick_label(512 * 1024, 256 * 1024, Unit::kBytes), "512 KiB");
  EXPECT_EQ(plot::value_label(12.345, Unit::kMs), "12.3 ms");
  EXPECT_EQ(plot::tick_label(125000, 25000, Unit::kNumber), "125k");
  // A single value and a range with nothing finite still give an increasing axis.
  for (const auto& [lo, hi] : {std::pair{5.0, 5.0}, std::pair{0.0, 0.0}, std::pair{-2.0, -2.0},
                               std::pair{std::nan(""), std::nan("")}}) {
    const plot::Ticks s = plot::nice_ticks(lo, hi, 6, Unit::kNumber);
    ASSERT_GE(s.values.size(), 2u);
    EXPECT_LT(s.lo(), s.hi());
  }
  EXPECT_EQ(plot::nice_ticks(1, 3, 8, Unit::kNumber, true).step, 1);
}

TEST(Plot, TextWidthAndOneUnitPerAxis) {
  EXPECT_GT(plot::text_width("WWWW", 12), plot::text_width("iiii", 12));
  EXPECT_NEAR(plot::text_width("stage 0", 10), 10 * 3.9, 3);  // DejaVu Sans: about 3.8 em
  EXPECT_GT(plot::text_width("stage 0", 10, true), plot::text_width("stage 0", 10));
  EXPECT_EQ(plot::text_width("\xe2\x86\x91", 10), plot::text_width("\xc3\xa9", 10));  // a glyph per code point
  // An axis up to 10 s labels its 2000 ms tick in seconds too.
  EXPECT_EQ(plot::tick_label(2000, 2000, Unit::kMs, 10'000), "2 s");
  EXPECT_EQ(plot::tick_label(512 << 20, 512 << 20, Unit::kBytes, 3.0 * (1 << 30)), "0.5 GiB");
}

// One color per name in every chart; the tiers apart from the kinds they are drawn with, the
// resources apart from each other; two names of one chart never share a color.
TEST(Palette, OneColorPerNameAcrossCharts) {
  const std::vector<std::string> tiers{"device", "pinned", "nvme"};
  const std::vector<std::string> kinds{"parameters", "gradients", "optimizer states", "activations", "buffers"};
  const std::vector<std::string> resources{"compute", "h2d", "h2d nvme", "d2h", "comm", "optimizer", "cpu optimizer",
                                           "grad accumulate", "nvme read", "nvme write", "disk", "checkpoint"};
  std::vector<std::string> tiers_kinds = tiers;
  tiers_kinds.insert(tiers_kinds.end(), kinds.begin(), kinds.end());
  for (const std::vector<std::string>* names : {&std::as_const(tiers_kinds), &resources}) {
    const std::vector<std::string> colors = palette::colors_for(*names);
    for (std::size_t i = 0; i < names->size(); ++i) {
      EXPECT_EQ(colors[i], palette::color_of((*names)[i])) << (*names)[i];  // no clash among the known
      for (std::size_t j = 0; j < i; ++j) EXPECT_NE(colors[i], colors[j]) << (*names)[i] << " " << (*names)[j];
    }
  }
  EXPECT_EQ(palette::color_of("cpu adam"), palette::color_of("cpu optimizer"));  // estimate's name for it
  EXPECT_EQ(palette::color_of("some track"), palette::color_of("some track"));
  // Unknown names that hash alike, or one that hashes to a color the chart has: each its own.
  std::vector<std::string> many{"compute"};
  for (int i = 0; i < 8; ++i) many.push_back("track " + std::to_string(i));
  const std::vector<std::string> colors = palette::colors_for(many);
  for (std::size_t i = 0; i < colors.size(); ++i) {
    for (std::size_t j = 0; j < i; ++j) EXPECT_NE(colors[i], colors[j]);
  }
}

std::vector<MemoryCell> memory_cells() {
  const std::uint64_t mib = 1 << 20;
  std::vector<MemoryCell> cells;
  for (const char* label : {"stage 1 / device", "stage 3 / cpu"}) {
    MemoryCell c{label, {}};
    c.tiers.push_back({"device", {{"parameters", 300 * mib}, {"gradients", 100 * mib}, {"activations", 50 * mib}},
                       1024 * mib});
    c.tiers.push_back({"pinned", {{"optimizer states", 900 * mib}, {"buffers", 0}}, std::nullopt});
    c.tiers.push_back({"nvme", {{"optimizer states", 2048 * mib}}, 4096 * mib});
    cells.push_back(c);
  }
  cells.push_back({kNasty, {{"device", {{"parameters", 10 * mib}, {kNasty, 5 * mib}}, std::nullopt}}});
  return cells;
}

TEST(MemoryChart, OneSeriesPerTierStackedByKind) {
  const std::unique_ptr<Node> root = parse_svg(memory_chart_svg(memory_cells(), "memory " + kNasty));
  ASSERT_EQ(series_names(*root), (std::vector<std::string>{"device", "pinned", "nvme"}));
  const std::vector<const Node*> series = find_all(*root, "g", "series");
  // device: a bar in each of the three cells; pinned and nvme: the first two.
  const std::vector<const Node*> device_bars = find_all(*series[0], "g", "bar");
  ASSERT_EQ(device_bars.size(), 3u);
  EXPECT_EQ(device_bars[2]->attr("data-cell"), kNasty);
  EXPECT_EQ(find_all(*series[1], "g", "bar").size(), 2u);
  EXPECT_EQ(find_all(*series[2], "g", "bar").size(), 2u);
  // Stacked by kind, in the order given; a kind of 0 bytes draws nothing.
  std::vector<std::string> kinds;
  for (const Node* r : kind_rects(*device_bars[0])) kinds.push_back(r->attr("data-kind"));
  EXPECT_EQ(kinds, (std::vector<std::string>{"parameters", "gradients", "activations"}));
  EXPECT_EQ(kind_rects(*series[1]).size(), 2u);  // "buffers" (0 bytes) left out
  EXPECT_EQ(kind_rects(*find_all(*series[2], "g", "bar")[0])[0]->attr("data-kind"), "optimizer states");
  // The kinds share a color across bars; each bar has a key in its tier's color, which no kind has.
  EXPECT_EQ(kind_rects(*series[1])[0]->attr("fill"), kind_rects(*series[2])[0]->attr("fill"));
  for (const Node* tier : series) {
    const std::string color = tier->attr("data-color");
    EXPECT_EQ(color, palette::color_of(tier->attr("data-series")));
    EXPECT_EQ(find_all(*tier, "rect", "tier-key").size(), find_all(*tier, "g", "bar").size());
    for (const Node* key : find_all(*tier, "rect", "tier-key")) EXPECT_EQ(key->attr("fill"), color);
    for (const Node* r : kind_rects(*root)) EXPECT_NE(r->attr("fill"), color);
  }
  // The device's budget (1 GiB, under the tallest bar's 2 GiB) is a line; the nvme's (4 GiB, twice
  // the tallest bar) an arrow over each bar and a line of text above the plot.
  EXPECT_EQ(find_all(*root, "line", "budget").size(), 2u);
  EXPECT_EQ(find_all(*series[2], "g", "budget off-scale").size(), 2u);
  EXPECT_TRUE(has_text(*root, "nvme budget 4 GiB (above the scale)"));
  EXPECT_TRUE(has_text(*root, kNasty));
  EXPECT_EQ(kind_rects(*device_bars[2]).back()->attr("data-kind"), kNasty);
}

// The axis spans the data when a budget is far above it: the tallest bar fills most of the frame.
TEST(MemoryChart, BudgetFarAboveTheDataKeepsTheBarsTall) {
  const std::uint64_t mib = 1 << 20;
  std::vector<MemoryCell> cells;
  for (const char* label : {"stage 0, offload optimizer none", "stage 3, offload params nvme, optimizer nvme"}) {
    cells.push_back({label, {{"device", {{"parameters", 20 * mib}}, 80ull << 30}, {"nvme", {{"buffers", 30 * mib}}, 1ull << 40}}});
  }
  const std::unique_ptr<Node> root = parse_svg(memory_chart_svg(cells, "far budgets"));
  const Node& frame = *find_all(*root, "rect", "frame").at(0);
  double tallest = 0;
  for (const Node* r : kind_rects(*root)) tallest = std::max(tallest, std::stod(r->attr("height")));
  EXPECT_GT(tallest, 0.7 * std::stod(frame.attr("height")));
  EXPECT_TRUE(has_text(*root, "device budget 80 GiB (above the scale)"));
  EXPECT_TRUE(has_text(*root, "nvme budget 1 TiB (above the scale)"));
  EXPECT_TRUE(find_all(*root, "line", "budget").empty());
}

TEST(MemoryChart, EmptySaysNoData) {
  const std::unique_ptr<Node> root = parse_svg(memory_chart_svg({}, "nothing"));
  EXPECT_TRUE(series_names(*root).empty());
  EXPECT_TRUE(has_text(*root, "no data"));
  // A cell with no tiers, and tiers of zero bytes.
  const std::unique_ptr<Node> zero = parse_svg(memory_chart_svg({{"a", {}}, {"b", {{"device", {{"x", 0}}, 0}}}}, "z"));
  EXPECT_EQ(series_names(*zero), std::vector<std::string>{"device"});
}

TEST(StepTimeChart, OneSeriesPerResourceAndStepMarkers) {
  std::vector<StepTimeCell> cells{
      {"stage 3 / nvme", {{"compute", 40}, {"h2d", 25}, {"disk read", 60}}, 75.0, 70.0},
      {"stage 2 / cpu", {{"compute", 40}, {"cpu adam", 30}}, 52.0, std::nullopt},
      {kNasty, {{"compute", 10}}, std::nullopt, 12.0},
  };
  const std::unique_ptr<Node> root = parse_svg(step_time_chart_svg(cells, "step time"));
  ASSERT_EQ(series_names(*root), (std::vector<std::string>{"compute", "h2d", "disk read", "cpu adam"}));
  const std::vector<const Node*> series = find_all(*root, "g", "series");
  EXPECT_EQ(find_all(*series[0], "rect").size(), 3u);  // compute in every cell
  EXPECT_EQ(find_all(*series[3], "rect").at(0)->attr("data-cell"), "stage 2 / cpu");
  std::vector<std::string> markers;
  for (const Node* g : find_all(*root, "g", "marker")) markers.push_back(g->attr("data-marker"));
  EXPECT_EQ(markers, (std::vector<std::string>{"measured", "predicted", "measured", "predicted"}));
  const std::unique_ptr<Node> empty = parse_svg(step_time_chart_svg({}, "none"));
  EXPECT_TRUE(has_text(*empty, "no data"));
}

// Many cells of many resources: at most kMaxWidth wide, every bar above zero at least 2 px tall,
// the first rotated group label inside the image.
TEST(StepTimeChart, WideDataStaysNarrowAndVisible) {
  std::vector<StepTimeCell> cells;
  for (int i = 0; i < 20; ++i) {
    StepTimeCell c{"stage 3, offload params nvme, optimizer nvme #" + std::to_string(i), {}, 200.0, 40.0};
    for (const char* r : {"compute", "h2d", "d2h", "comm", "cpu optimizer", "nvme read", "nvme write"}) {
      c.busy_ms.emplace_back(r, std::string(r) == "compute" ? 190.0 : 0.01);
    }
    cells.push_back(std::move(c));
  }
  const std::unique_ptr<Node> root = parse_svg(step_time_chart_svg(cells, "wide"));
  EXPECT_LE(std::stod(root->attr("width")), plot::kMaxWidth);
  for (const Node* r : find_all(*root, "rect")) {
    if (!r->attr("data-cell").empty()) {
      EXPECT_GE(std::stod(r->attr("height")), 2);
    }
  }
  const Node& first = *find_all(*find_all(*root, "g", "groups").at(0), "text").at(0);
  const double w = plot::text_width(first.text, std::stod(first.attr("font-size")));
  EXPECT_GE(std::stod(first.attr("x")) - w * std::cos(30 * 3.14159265 / 180), 0);
}

TEST(LineChart, PointsEmptyAndSinglePoint) {
  LineChart c;
  c.title = "loss";
  c.y_from_zero = false;
  c.series.push_back({"loss", {{1, 5.5}, {2, std::nan("")}, {3, 5.1}, {4, 4.9}}});
  c.series.push_back({"flat", {{1, 5}, {4, 5}}});
  c.ref_lines.push_back({"target " + kNasty, 4.5, "flat"});
  c.ref_lines.push_back({"budget", 1000, "loss"});  // far above the data: listed, not drawn
  std::unique_ptr<Node> root = parse_svg(line_chart_svg(c));
  ASSERT_EQ(series_names(*root), (std::vector<std::string>{"loss", "flat"}));
  EXPECT_EQ(polyline_points(*find_all(*root, "g", "series")[0]), 3u);  // the NaN left out
  EXPECT_EQ(find_all(*root, "g", "ref-line").at(0)->attr("data-ref"), "target " + kNasty);
  const std::vector<const Node*> off = find_all(*root, "g", "ref-line off-scale");
  ASSERT_EQ(off.size(), 1u);
  EXPECT_EQ(find_all(*off[0], "line").size(), 0u);
  EXPECT_TRUE(has_text(*root, "budget 1000 (above the scale)"));
  EXPECT_EQ(find_all(*off[0], "path").size(), 1u);  // its arrow

  LineChart one;
  one.title = "one";
  one.series.push_back({"tokens/s", {{1, 1000}}});
  root = parse_svg(line_chart_svg(one));
  const Node& s = *find_all(*root, "g", "series").at(0);
  EXPECT_EQ(polyline_points(s), 1u);
  EXPECT_EQ(find_all(s, "circle").size(), 1u);  // a single point is still visible

  LineChart none;
  none.title = "none";
  root = parse_svg(line_chart_svg(none));
  EXPECT_TRUE(has_text(*root, "no data"));
  none.series.push_back({"not finite", {{1, std::nan("")}}});
  root = parse_svg(line_chart_svg(none));
  EXPECT_EQ(series_names(*root), std::vector<std::string>{"not finite"});
  EXPECT_TRUE(has_text(*root, "no data"));
}

// ---- The charts of a metrics JSONL ----

class MetricsCharts : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("strata-test-charts-" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string write(const std::string& name, const std::string& text) {
    const std::string path = (dir_ / name).string();
    std::ofstream(path) << text;
    return path;
  }
  static std::string read(const std::string& path) {
    std::ifstream in(path);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  }
  static std::string line(int step, const char* loss, std::uint64_t pinned_peak) {
    return "{\"step\":" + std::to_string(step) + ",\"loss\":" + loss + ",\"step_ms\":" + std::to_string(10 + step) +
           ",\"tokens_per_s\":" + std::to_string(1000 * step) +
           ",\"memory\":{\"device\":{\"current_bytes\":1,\"peak_bytes\":" + std::to_string(1000 * step) +
           ",\"budget_bytes\":8192},\"pinned\":{\"current_bytes\":0,\"peak_bytes\":" + std::to_string(pinned_peak) +
           ",\"budget_bytes\":0},\"nvme\":{\"current_bytes\":0,\"peak_bytes\":0,\"budget_bytes\":0}},"
           "\"busy_ms\":{\"compute\":" +
           std::to_string(5 + step) + ",\"h2d\":2.5}}\n";
  }
  std::filesystem::path dir_;
};

TEST_F(MetricsCharts, OneSeriesPerTierTheRunUsed) {
  const std::string jsonl = write("m.jsonl", line(1, "5.5", 0) + "\n" + line(2, "null", 4096) + line(3, "5.0", 0));
  const std::string out = (dir_ / "svg" / "deeper").string();  // created
  const std::vector<std::string> written = write_metrics_charts(jsonl, out);
  ASSERT_EQ(written.size(), 4u);
  std::map<std::string, std::unique_ptr<Node>> charts;
  for (const std::string& path : written) {
    charts[std::filesystem::path(path).filename().string()] = parse_svg(read(path));
  }
  // memory: device (budget and peaks) and pinned (a peak at step 2), not nvme (never used).
  EXPECT_EQ(series_names(*charts.at("memory.svg")), (std::vector<std::string>{"device", "pinned"}));
  EXPECT_EQ(polyline_points(*find_all(*charts.at("memory.svg"), "g", "series")[0]), 3u);
  // The device budget, 8 KiB over peaks of at most 3000 B: listed above the plot, not drawn.
  EXPECT_EQ(find_all(*charts.at("memory.svg"), "g", "ref-line off-scale").size(), 1u);
  ASSERT_EQ(series_names(*charts.at("loss.svg")), std::vector<std::string>{"loss"});
  EXPECT_EQ(polyline_points(*find_all(*charts.at("loss.svg"), "g", "series")[0]), 2u);  // null loss left out
  EXPECT_EQ(polyline_points(*find_all(*charts.at("throughput.svg"), "g", "series")[0]), 3u);
  const Node& busy = *charts.at("busy.svg");
  EXPECT_EQ(series_names(busy), (std::vector<std::string>{"compute", "h2d"}));
  std::vector<std::string> cells;
  for (const Node* r : find_all(*find_all(busy, "g", "series")[0], "rect")) cells.push_back(r->attr("data-cell"));
  EXPECT_EQ(cells, (std::vector<std::string>{"step 1", "median of steps 2-3"}));
  EXPECT_EQ(find_all(busy, "g", "marker").size(), 2u);
}

TEST_F(MetricsCharts, EmptyFileGivesEmptyCharts) {
  const std::vector<std::string> written = write_metrics_charts(write("empty.jsonl", ""), dir_.string());
  for (const std::string& path : written) parse_svg(read(path));
  EXPECT_TRUE(series_names(*parse_svg(read(written[2]))).empty());  // memory: no tier used
}

TEST_F(MetricsCharts, BadInputNamesFileAndLine) {
  const std::string bad = write("bad.jsonl", line(1, "5.5", 0) + "{\"step\": 2, \"loss\": \n");
  try {
    write_metrics_charts(bad, dir_.string());
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.where(), bad + ":2");
  }
  const std::string wrong = write("wrong.jsonl", "{\"step\": 1, \"loss\": \"high\"}\n");
  EXPECT_THROW(write_metrics_charts(wrong, dir_.string()), Error);
  const std::string no_step = write("no_step.jsonl", "[1, 2]\n");
  EXPECT_THROW(write_metrics_charts(no_step, dir_.string()), Error);
  try {
    write_metrics_charts((dir_ / "missing.jsonl").string(), dir_.string());
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.where(), (dir_ / "missing.jsonl").string());
  }
}

}  // namespace
}  // namespace strata::tools::charts
