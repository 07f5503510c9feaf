#include "core/units.h"

#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdint>

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
  std::string_view number = text.substr(0, digits);
  std::string_view unit = trim(text.substr(digits));

  struct Unit { std::string_view name; std::uint64_t factor; };
  static constexpr Unit kUnits[] = {
      {"", 1},
      {"b", 1},
      {"kb", 1000ull},
      {"mb", 1000ull * 1000},
      {"gb", 1000ull * 1000 * 1000},
      {"tb", 1000ull * 1000 * 1000 * 1000},
      {"k", 1ull << 10},
      {"m", 1ull << 20},
      {"g", 1ull << 30},
      {"kib", 1ull << 10},
      {"mib", 1ull << 20},
      {"gib", 1ull << 30},
      {"tib", 1ull << 40},
  };
  for (const Unit& u : kUnits) {
    if (!iequals(unit, u.name)) continue;
    if (number.find('.') == std::string_view::npos) {
      // Integers are exact: no detour through double, which loses bits above 2^53.
      std::uint64_t value = 0;
      auto [end, ec] = std::from_chars(number.data(), number.data() + number.size(), value);
      if (ec != std::errc() || end != number.data() + number.size()) return std::nullopt;
      if (value > UINT64_MAX / u.factor) return std::nullopt;
      return value * u.factor;
    }
    double value = 0;
    auto [end, ec] = std::from_chars(number.data(), number.data() + number.size(), value);
    if (ec != std::errc() || end != number.data() + number.size()) return std::nullopt;
    double bytes = value * static_cast<double>(u.factor);
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
