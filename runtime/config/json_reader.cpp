// Typed, path-aware reads from the config's JSON (see json_reader.h).
#include "runtime/config/json_reader.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <limits>

#include <fmt/format.h>

namespace strata::runtime::config::detail {
namespace {

// 2^64 as a double: the first value that does not fit in std::uint64_t.
constexpr double kTwoPow64 = 18446744073709551616.0;
constexpr double kTwoPow63 = 9223372036854775808.0;

// A float written where DeepSpeed takes an integer (5e8) is fine when it has no fraction.
bool is_integral_float(const Json& v) {
  if (!v.is_number_float()) return false;
  double d = v.get<double>();
  return std::isfinite(d) && d == std::floor(d);
}

}  // namespace

std::string join_path(std::string_view parent, std::string_view key) {
  if (parent.empty()) return std::string(key);
  return fmt::format("{}.{}", parent, key);
}

std::string describe_json(const Json& value) {
  switch (value.type()) {
    case Json::value_t::object: return "an object";
    case Json::value_t::array: return fmt::format("an array of {}", value.size());
    case Json::value_t::null: return "null";
    case Json::value_t::string: {
      // U+FFFD for invalid UTF-8: a message must never throw.
      std::string text = value.dump(-1, ' ', false, Json::error_handler_t::replace);
      constexpr std::size_t kMaxChars = 60;  // keep one-line messages one line
      if (text.size() > kMaxChars) text = text.substr(0, kMaxChars) + "...\"";
      return "the string " + text;
    }
    default: return value.dump();
  }
}

void throw_bad_value(const std::string& path, std::string_view expected, const Json& got,
                     std::string hint) {
  if (hint.empty()) hint = "fix this key in the config file (or its --set override); see docs/config.md";
  throw Error(fmt::format("invalid config value: expected {}, got {}", expected, describe_json(got)),
              path, std::move(hint));
}

bool is_auto(const Json& value) {
  return value.is_string() && value.get_ref<const std::string&>() == kAuto;
}

bool iequals(std::string_view a, std::string_view b) {
  return a.size() == b.size() &&
         std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) ==
                  std::tolower(static_cast<unsigned char>(y));
         });
}

void convert(const Json& v, const std::string& path, std::uint64_t& out) {
  constexpr std::string_view kExpected = "a non-negative integer";
  if (v.is_number_unsigned()) {
    out = v.get<std::uint64_t>();
  } else if (v.is_number_integer()) {
    std::int64_t i = v.get<std::int64_t>();
    if (i < 0) throw_bad_value(path, kExpected, v);
    out = static_cast<std::uint64_t>(i);
  } else if (is_integral_float(v)) {
    double d = v.get<double>();
    if (d < 0 || d >= kTwoPow64) throw_bad_value(path, kExpected, v);
    out = static_cast<std::uint64_t>(d);
  } else {
    throw_bad_value(path, kExpected, v);
  }
}

void convert(const Json& v, const std::string& path, std::uint32_t& out) {
  std::uint64_t wide = 0;
  convert(v, path, wide);
  if (wide > std::numeric_limits<std::uint32_t>::max())
    throw_bad_value(path, "an integer in [0, 4294967295]", v);
  out = static_cast<std::uint32_t>(wide);
}

void convert(const Json& v, const std::string& path, std::int64_t& out) {
  constexpr std::string_view kExpected = "an integer";
  if (v.is_number_unsigned()) {
    std::uint64_t u = v.get<std::uint64_t>();
    if (u > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()))
      throw_bad_value(path, "an integer that fits in 64 bits", v);
    out = static_cast<std::int64_t>(u);
  } else if (v.is_number_integer()) {
    out = v.get<std::int64_t>();
  } else if (is_integral_float(v)) {
    double d = v.get<double>();
    if (d < -kTwoPow63 || d >= kTwoPow63) throw_bad_value(path, "an integer that fits in 64 bits", v);
    out = static_cast<std::int64_t>(d);
  } else {
    throw_bad_value(path, kExpected, v);
  }
}

void convert(const Json& v, const std::string& path, std::int32_t& out) {
  std::int64_t wide = 0;
  convert(v, path, wide);
  if (wide < std::numeric_limits<std::int32_t>::min() ||
      wide > std::numeric_limits<std::int32_t>::max())
    throw_bad_value(path, "an integer that fits in 32 bits", v);
  out = static_cast<std::int32_t>(wide);
}

void convert(const Json& v, const std::string& path, double& out) {
  if (!v.is_number()) throw_bad_value(path, "a number", v);
  out = v.get<double>();
}

void convert(const Json& v, const std::string& path, bool& out) {
  if (!v.is_boolean()) throw_bad_value(path, "true or false", v);
  out = v.get<bool>();
}

void convert(const Json& v, const std::string& path, std::string& out) {
  if (!v.is_string()) throw_bad_value(path, "a string", v);
  out = v.get<std::string>();
}

void convert(const Json& v, const std::string& path, std::array<double, 2>& out) {
  constexpr std::string_view kExpected = "an array of two numbers, e.g. [0.9, 0.999]";
  if (!v.is_array() || v.size() != 2) throw_bad_value(path, kExpected, v);
  for (std::size_t i = 0; i < 2; ++i) {
    if (!v[i].is_number()) throw_bad_value(fmt::format("{}[{}]", path, i), "a number", v[i]);
    out[i] = v[i].get<double>();
  }
}

void convert(const Json& v, const std::string& path, std::vector<std::string>& out) {
  constexpr std::string_view kExpected =
      "a folder, or a list of folders to stripe over (e.g. [\"/mnt/nvme0\", \"/mnt/nvme1\"])";
  auto one = [&](const Json& item, const std::string& item_path) {
    if (!item.is_string() || item.get_ref<const std::string&>().empty())
      throw_bad_value(item_path, kExpected, item);
    return item.get<std::string>();
  };
  out.clear();
  if (v.is_array()) {
    if (v.empty()) throw_bad_value(path, kExpected, v);
    for (std::size_t i = 0; i < v.size(); ++i)
      out.push_back(one(v[i], fmt::format("{}[{}]", path, i)));
    return;
  }
  out.push_back(one(v, path));
}

std::uint64_t to_bytes(const Json& v, const std::string& path) {
  constexpr std::string_view kExpected =
      "a byte count: a non-negative integer or a string such as \"512MiB\" or \"2GB\"";
  if (v.is_string()) {
    if (auto bytes = parse_bytes(v.get_ref<const std::string&>())) return *bytes;
    throw_bad_value(path, kExpected, v);
  }
  if (!v.is_number()) throw_bad_value(path, kExpected, v);
  std::uint64_t bytes = 0;
  try {
    convert(v, path, bytes);
  } catch (const Error&) {
    throw_bad_value(path, kExpected, v);
  }
  return bytes;
}

ObjectReader::ObjectReader(const Json* node, std::string path, std::vector<ConfigWarning>* warnings)
    : node_(node != nullptr && node->is_null() ? nullptr : node),
      path_(std::move(path)),
      warnings_(warnings) {
  if (node_ != nullptr && !node_->is_object())
    throw_bad_value(path_.empty() ? std::string("<top level>") : path_, "an object ({...})", *node_);
}

const Json* ObjectReader::find(std::string_view key) {
  if (std::find(known_.begin(), known_.end(), key) == known_.end()) known_.emplace_back(key);
  if (node_ == nullptr) return nullptr;
  auto it = node_->find(key);
  if (it == node_->end() || it->is_null()) return nullptr;
  return &*it;
}

ObjectReader ObjectReader::object(std::string_view key) {
  return ObjectReader(find(key), path_of(key), warnings_);
}

void ObjectReader::ignore(std::initializer_list<std::string_view> keys) {
  ignore(std::span<const std::string_view>(keys.begin(), keys.size()));
}

void ObjectReader::ignore(std::span<const std::string_view> keys) {
  for (std::string_view key : keys) {
    if (find(key) == nullptr) continue;
    std::string path = path_of(key);
    std::string message = fmt::format(
        "config key '{}' is a DeepSpeed setting that strata does not use; it is ignored", path);
    warnings_->push_back(
        {ConfigWarning::Kind::kIgnoredKey, std::move(path), std::move(message), {}});
  }
}

void ObjectReader::reject(std::string_view key, std::string_view why, std::string_view hint) {
  if (const Json* v = find(key)) {
    throw Error(fmt::format("config key is not accepted: {} (got {})", why, describe_json(*v)),
                path_of(key), std::string(hint));
  }
}

void ObjectReader::finish() {
  if (node_ == nullptr) return;
  for (const auto& item : node_->items()) {
    const std::string& key = item.key();
    if (std::find(known_.begin(), known_.end(), key) != known_.end()) continue;
    // Suggest the closest known key when it is close enough to be a typo.
    std::string_view best;
    std::size_t best_distance = std::numeric_limits<std::size_t>::max();
    for (const std::string& candidate : known_) {
      std::size_t d = edit_distance(key, candidate);
      if (d < best_distance) {
        best_distance = d;
        best = candidate;
      }
    }
    std::string path = path_of(key);
    std::string message = fmt::format("unknown config key '{}' is ignored", path);
    std::string suggestion;
    // Suggest only near misses (a swap of two letters is two edits): at most one edit for
    // short keys, so that "foo" is not matched to "aio"; two, or one per four characters.
    const std::size_t allowed = std::max<std::size_t>(key.size() < 5 ? 1 : 2, key.size() / 4);
    if (!best.empty() && best_distance <= allowed) {
      suggestion = path_of(best);
      message += fmt::format(" (did you mean '{}'?)", suggestion);
    }
    warnings_->push_back({ConfigWarning::Kind::kUnknownKey, std::move(path), std::move(message),
                          std::move(suggestion)});
  }
}

std::size_t edit_distance(std::string_view a, std::string_view b) {
  // Levenshtein with one rolling row; case differences count half so that "Stage" is
  // closer to "stage" than to anything else.
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j * 2;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diagonal = row[0];
    row[0] = i * 2;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      std::size_t substitute = 2;
      if (a[i - 1] == b[j - 1]) {
        substitute = 0;
      } else if (iequals(a.substr(i - 1, 1), b.substr(j - 1, 1))) {
        substitute = 1;
      }
      std::size_t next = std::min({row[j] + 2, row[j - 1] + 2, diagonal + substitute});
      diagonal = row[j];
      row[j] = next;
    }
  }
  return (row[b.size()] + 1) / 2;
}

}  // namespace strata::runtime::config::detail
