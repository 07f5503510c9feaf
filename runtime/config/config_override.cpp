// "key.path=value" overrides (strata ... --set key.path=value), applied to the JSON before it
// is parsed, so an override goes through exactly the checks a file value does.
#include <charconv>

#include <fmt/format.h>

#include "runtime/config/json_reader.h"

namespace strata::runtime::config::detail {
namespace {

constexpr std::string_view kOverrideForm =
    "write key.path=value, e.g. zero_optimization.stage=3 or strata.device_memory=\"2GiB\"";

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

[[noreturn]] void throw_override(std::string_view text, std::string where, std::string_view why,
                                 std::string_view hint = kOverrideForm) {
  throw Error(fmt::format("invalid override '{}': {}", text, why), std::move(where),
              std::string(hint));
}

std::vector<std::string_view> split_key(std::string_view text, std::string_view key) {
  std::vector<std::string_view> segments;
  std::size_t start = 0;
  while (true) {
    std::size_t dot = key.find('.', start);
    std::string_view segment = key.substr(start, dot == std::string_view::npos ? dot : dot - start);
    if (segment.empty()) throw_override(text, std::string(key), "the key has an empty part");
    segments.push_back(segment);
    if (dot == std::string_view::npos) return segments;
    start = dot + 1;
  }
}

// "3" -> 3 when `segment` is all digits.
std::optional<std::size_t> as_index(std::string_view segment) {
  std::size_t index = 0;
  auto [end, ec] = std::from_chars(segment.data(), segment.data() + segment.size(), index);
  if (ec != std::errc() || end != segment.data() + segment.size()) return std::nullopt;
  return index;
}

// The value as JSON when it parses ("3", "true", "[0.9, 0.95]", "\"auto\""), else the text
// itself as a string (cpu, /mnt/nvme), so shell quoting is rarely needed.
Json parse_value(std::string_view value_text) {
  Json value = Json::parse(value_text, nullptr, /*allow_exceptions=*/false);
  if (value.is_discarded()) return Json(std::string(value_text));
  return value;
}

}  // namespace

std::string apply_override(Json& root, std::string_view text) {
  // A file's JSON is UTF-8 (the parser checks it); an override must be too, or the config
  // could not be printed nor its value quoted in a message (nlohmann's dump() would throw).
  try {
    (void)Json(std::string(text)).dump();
  } catch (const Json::type_error&) {
    throw_override(text, std::string(text), "it is not valid UTF-8", "write the override in UTF-8");
  }
  std::size_t eq = text.find('=');
  if (eq == std::string_view::npos) throw_override(text, std::string(text), "it has no '='");
  std::string_view key = trim(text.substr(0, eq));
  if (key.empty()) throw_override(text, std::string(text), "the key before '=' is empty");
  Json value = parse_value(trim(text.substr(eq + 1)));

  std::vector<std::string_view> segments = split_key(text, key);
  Json* node = &root;
  std::string path;
  for (std::size_t i = 0; i < segments.size(); ++i) {
    std::string_view segment = segments[i];
    bool last = i + 1 == segments.size();
    if (node->is_null()) *node = Json::object();  // "a.b=1" creates a missing section a
    Json* child = nullptr;
    if (node->is_object()) {
      path = join_path(path, segment);
      child = &(*node)[std::string(segment)];
    } else if (node->is_array()) {
      std::optional<std::size_t> index = as_index(segment);
      if (!index || *index >= node->size()) {
        throw_override(text, path,
                       fmt::format("'{}' is an array of {}; '{}' is not an index into it", path,
                                   node->size(), segment));
      }
      path += fmt::format("[{}]", *index);
      child = &(*node)[*index];
    } else {
      throw_override(text, path,
                     fmt::format("'{}' is {}, not an object, so it has no key '{}'", path,
                                 describe_json(*node), segment),
                     "override the whole value instead, or fix the key path");
    }
    if (last) {
      *child = std::move(value);
    } else {
      node = child;
    }
  }
  return path;
}

}  // namespace strata::runtime::config::detail
