#include "runtime/telemetry/tables.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "core/units.h"

namespace strata::runtime::telemetry {
namespace {

// Columns separated by two spaces; the first left-aligned, the others right-aligned; a cell
// past the last column (a note) follows as is.
std::string render(const std::vector<std::vector<std::string>>& rows, std::size_t columns) {
  std::vector<std::size_t> width(columns, 0);
  for (const auto& row : rows) {
    for (std::size_t c = 0; c < columns && c < row.size(); ++c) width[c] = std::max(width[c], row[c].size());
  }
  std::string out;
  for (const auto& row : rows) {
    std::string line;
    for (std::size_t c = 0; c < row.size(); ++c) {
      if (c > 0) line += "  ";
      if (c >= columns) {
        line += row[c];
      } else if (c == 0) {
        line += fmt::format("{:<{}}", row[c], width[c]);
      } else {
        line += fmt::format("{:>{}}", row[c], width[c]);
      }
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out += line;
    out += '\n';
  }
  return out;
}

}  // namespace

std::string memory_table(const std::vector<std::pair<std::string, TierMemory>>& rows) {
  std::vector<std::vector<std::string>> cells;
  cells.push_back({"tier", "current", "peak", "budget", "peak/budget"});
  for (const auto& [name, t] : rows) {
    const bool limited = t.budget_bytes != 0;
    cells.push_back({name, format_bytes(t.current_bytes), format_bytes(t.peak_bytes),
                     limited ? format_bytes(t.budget_bytes) : "-",
                     limited ? fmt::format("{:.1f}%", 100.0 * static_cast<double>(t.peak_bytes) /
                                                          static_cast<double>(t.budget_bytes))
                             : "-"});
  }
  return render(cells, 5);
}

std::string bytes_table(const LinkBytes& total, double collective_theory_bytes) {
  std::vector<std::vector<std::string>> cells;
  cells.push_back({"link", "bytes"});
  cells.push_back({"NVMe read", format_bytes(total.nvme_read)});
  cells.push_back({"NVMe write", format_bytes(total.nvme_write)});
  cells.push_back({"H2D", format_bytes(total.h2d)});
  cells.push_back({"D2H", format_bytes(total.d2h)});
  std::vector<std::string> collective{"collective", format_bytes(total.collective)};
  if (collective_theory_bytes > 0 && std::isfinite(collective_theory_bytes)) {
    const auto theory = static_cast<std::uint64_t>(std::llround(collective_theory_bytes));
    collective.push_back(fmt::format("(ZeRO theory {}: {:.2f}x)", format_bytes(theory),
                                     static_cast<double>(total.collective) / collective_theory_bytes));
  }
  cells.push_back(std::move(collective));
  return render(cells, 2);
}

}  // namespace strata::runtime::telemetry
