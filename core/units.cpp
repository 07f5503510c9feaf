#include "core/units.h"

#include <cctype>
#include <charconv>
#include <cmath>

#include <fmt/format.h>

namespace strata {
namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(a[i])) != std::tolower(static_cast<unsigned char>(b[i])))
      return false;
  }
  return true;
}

}  // namespace

std::optional<std::uint64_t> parse_bytes(std::string_view text) {
  text = trim(text);
  std::size_t digits = 0;
  while (digits < text.size() &&
         (std::isdigit(static_cast<unsigned char>(text[digits])) || text[digits] == '.'))
    ++digits;
  if (digits == 0) return std::nullopt;
  double value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + digits, value);
  if (ec != std::errc() || end != text.data() + digits) return std::nullopt;
  std::string_view unit = trim(text.substr(digits));

  struct Unit { std::string_view name; double factor; };
  static constexpr Unit kUnits[] = {
      {"", 1},          {"b", 1},
      {"kb", 1e3},      {"mb", 1e6},      {"gb", 1e9},      {"tb", 1e12},
      {"k", 1024.0},    {"m", 1048576.0}, {"g", 1073741824.0},
      {"kib", 1024.0},  {"mib", 1048576.0}, {"gib", 1073741824.0}, {"tib", 1099511627776.0},
  };
  for (const Unit& u : kUnits) {
    if (!iequals(unit, u.name)) continue;
    double bytes = value * u.factor;
    if (!(bytes >= 0) || bytes >= 18446744073709551616.0) return std::nullopt;
    if (bytes != std::floor(bytes)) return std::nullopt;  // fractional bytes
    return static_cast<std::uint64_t>(bytes);
  }
  return std::nullopt;
}

std::string format_bytes(std::uint64_t bytes) {
  static constexpr const char* kNames[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  if (bytes < 1024) return fmt::format("{} B", bytes);
  double v = static_cast<double>(bytes);
  int unit = 0;
  while (v >= 1024.0 && unit < 5) {
    v /= 1024.0;
    ++unit;
  }
  return fmt::format("{:.2f} {}", v, kNames[unit]);
}

}  // namespace strata
