// The charts of a metrics JSONL (metrics_charts.h).
#include "tools/charts/metrics_charts.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <limits>
#include <optional>
#include <stdexcept>
#include <string>
#include <system_error>
#include <utility>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "runtime/tiers/tier.h"
#include "tools/charts/charts.h"

namespace strata::tools::charts {
namespace {

// ordered_json keeps the tracks in the order the run wrote them (series and colors follow it).
using Json = nlohmann::ordered_json;

// The tiers in index order, named by their JSON keys (runtime/tiers/tier.h).
const char* tier_key(std::size_t t) { return runtime::tiers::tier_key(static_cast<runtime::tiers::Tier>(t)); }
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// What the charts use of one step.
struct StepRow {
  double step = 0;
  double loss = kNaN;          // null when the loss was not finite
  double tokens_per_s = kNaN;
  double step_ms = kNaN;
  double peak_bytes[3] = {0, 0, 0};    // Tier order
  double budget_bytes[3] = {0, 0, 0};
  std::vector<std::pair<std::string, double>> busy_ms;
};

// A number, or NaN for null / absent; anything else is an error the caller names.
double number_or_nan(const Json& j, const char* key) {
  const auto it = j.find(key);
  if (it == j.end() || it->is_null()) return kNaN;
  if (!it->is_number()) throw std::invalid_argument(std::string("\"") + key + "\" is not a number");
  return it->get<double>();
}

StepRow parse_row(const Json& j) {
  if (!j.is_object()) throw std::invalid_argument("not a JSON object");
  if (!j.contains("step")) throw std::invalid_argument("no \"step\"");
  StepRow r;
  r.step = number_or_nan(j, "step");
  r.loss = number_or_nan(j, "loss");
  r.tokens_per_s = number_or_nan(j, "tokens_per_s");
  r.step_ms = number_or_nan(j, "step_ms");
  if (const auto mem = j.find("memory"); mem != j.end() && mem->is_object()) {
    for (std::size_t t = 0; t < 3; ++t) {
      const auto tier = mem->find(tier_key(t));
      if (tier == mem->end() || !tier->is_object()) continue;
      const double peak = number_or_nan(*tier, "peak_bytes"), budget = number_or_nan(*tier, "budget_bytes");
      r.peak_bytes[t] = std::isfinite(peak) ? peak : 0;
      r.budget_bytes[t] = std::isfinite(budget) ? budget : 0;
    }
  }
  if (const auto busy = j.find("busy_ms"); busy != j.end() && busy->is_object()) {
    for (const auto& [track, ms] : busy->items()) {
      if (!ms.is_number()) throw std::invalid_argument("busy_ms \"" + track + "\" is not a number");
      r.busy_ms.emplace_back(track, ms.get<double>());
    }
  }
  return r;
}

std::vector<StepRow> read_metrics(const std::string& path) {
  std::ifstream in(path);
  if (!in) {
    throw Error("cannot read the metrics file: " + errno_text(errno), path,
                "pass the --metrics file of a strata train run");
  }
  std::vector<StepRow> rows;
  std::string line;
  for (std::uint64_t n = 1; std::getline(in, line); ++n) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    try {
      rows.push_back(parse_row(Json::parse(line)));
    } catch (const std::exception& e) {  // nlohmann's parse_error or parse_row's complaint
      throw Error(std::string("line ") + std::to_string(n) + " is not a step's metrics: " + e.what(),
                  path + ":" + std::to_string(n), "pass the --metrics file of a strata train run (JSONL)");
    }
  }
  if (in.bad()) throw Error("cannot read the metrics file: " + errno_text(errno), path);
  return rows;
}

double median(std::vector<double> v) {
  if (v.empty()) return kNaN;
  std::sort(v.begin(), v.end());
  const std::size_t h = v.size() / 2;
  return v.size() % 2 ? v[h] : (v[h - 1] + v[h]) / 2;
}

// Busy ms per track of rows [first, last): the median of each track over the rows that name it.
StepTimeCell busy_cell(const std::vector<StepRow>& rows, std::size_t first, std::size_t last, std::string label) {
  StepTimeCell cell;
  cell.label = std::move(label);
  std::vector<std::string> tracks;
  for (std::size_t i = first; i < last; ++i) {
    for (const auto& [track, ms] : rows[i].busy_ms) {
      if (std::find(tracks.begin(), tracks.end(), track) == tracks.end()) tracks.push_back(track);
    }
  }
  for (const std::string& track : tracks) {
    std::vector<double> values;
    for (std::size_t i = first; i < last; ++i) {
      for (const auto& [t, ms] : rows[i].busy_ms) {
        if (t == track) values.push_back(ms);
      }
    }
    cell.busy_ms.emplace_back(track, median(values));
  }
  std::vector<double> step_ms;
  for (std::size_t i = first; i < last; ++i) {
    if (std::isfinite(rows[i].step_ms)) step_ms.push_back(rows[i].step_ms);
  }
  if (!step_ms.empty()) cell.measured_step_ms = median(step_ms);
  return cell;
}

std::string step_text(double step) { return std::to_string(static_cast<long long>(step)); }

}  // namespace

void make_chart_dir(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) throw Error("cannot create the chart folder: " + ec.message(), dir, "pass a writable --svg folder");
}

std::vector<std::string> write_metrics_charts(const std::string& metrics_jsonl, const std::string& dir) {
  const std::vector<StepRow> rows = read_metrics(metrics_jsonl);
  make_chart_dir(dir);

  const std::string name = std::filesystem::path(metrics_jsonl).filename().string();
  std::vector<std::string> written;
  const auto path = [&](const char* file) {
    written.push_back((std::filesystem::path(dir) / file).string());
    return written.back();
  };

  LineChart loss, speed, memory;
  loss.title = "loss per step (" + name + ")";
  loss.y_label = "loss";
  loss.y_from_zero = false;
  speed.title = "throughput (" + name + ")";
  speed.y_label = "tokens/s";
  memory.title = "peak memory per tier (" + name + ")";
  memory.y_label = "peak bytes";
  memory.y_unit = Unit::kBytes;
  loss.series.push_back({"loss", {}});
  speed.series.push_back({"tokens/s", {}});
  for (const StepRow& r : rows) {
    loss.series[0].points.emplace_back(r.step, r.loss);
    speed.series[0].points.emplace_back(r.step, r.tokens_per_s);
  }
  // A tier is charted when the run used it: a budget or a peak above 0 at some step.
  for (std::size_t t = 0; t < 3; ++t) {
    double budget = 0, peak = 0;
    Series s{tier_key(t), {}};
    for (const StepRow& r : rows) {
      s.points.emplace_back(r.step, r.peak_bytes[t]);
      budget = std::max(budget, r.budget_bytes[t]);
      peak = std::max(peak, r.peak_bytes[t]);
    }
    if (budget <= 0 && peak <= 0) continue;
    memory.series.push_back(std::move(s));
    if (budget > 0) memory.ref_lines.push_back({std::string(tier_key(t)) + " budget", budget, tier_key(t)});
  }
  write_line_chart(path("loss.svg"), loss);
  write_line_chart(path("throughput.svg"), speed);
  write_line_chart(path("memory.svg"), memory);

  // Step 1 pays the warm-up (first touches, allocations); the later steps are the steady state.
  std::vector<StepTimeCell> busy;
  if (!rows.empty()) busy.push_back(busy_cell(rows, 0, 1, "step " + step_text(rows.front().step)));
  if (rows.size() > 1) {
    busy.push_back(busy_cell(rows, 1, rows.size(),
                             "median of steps " + step_text(rows[1].step) + "-" + step_text(rows.back().step)));
  }
  write_step_time_chart(path("busy.svg"), busy, "busy time per resource (" + name + ")");
  return written;
}

}  // namespace strata::tools::charts
