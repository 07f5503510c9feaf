// Text or file -> ParsedConfig: JSON syntax (with line and column), overrides, parsing,
// validation, and the warnings, logged once at the end so all of them are seen together.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include <fmt/format.h>

#include "core/log.h"
#include "runtime/config/json_reader.h"

namespace strata::runtime::config {
namespace {

using detail::Json;

struct AppliedOverride {
  std::string text;  // as given: "zero_optimization.stage=3"
  std::string path;  // the key path it set: "zero_optimization.stage"
};

// `path` is `parent` or lies under it ("a.b" within "a", "a[0]" within "a").
bool is_within(std::string_view path, std::string_view parent) {
  if (!path.starts_with(parent)) return false;
  if (path.size() == parent.size()) return true;
  char next = path[parent.size()];
  return next == '.' || next == '[';
}

const AppliedOverride* override_touching(std::string_view path,
                                         const std::vector<AppliedOverride>& overrides) {
  // The last override of a key wins, so it is the one to blame.
  for (auto it = overrides.rbegin(); it != overrides.rend(); ++it) {
    if (is_within(path, it->path) || is_within(it->path, path)) return &*it;
  }
  return nullptr;
}

Json parse_json(std::string_view text, std::string_view source) {
  try {
    return Json::parse(text);
  } catch (const Json::parse_error& e) {
    // e.byte counts the characters read, the offending one included.
    std::size_t offset = std::min<std::size_t>(e.byte > 0 ? e.byte - 1 : 0, text.size());
    std::string_view before = text.substr(0, offset);
    std::size_t line = 1 + static_cast<std::size_t>(std::count(before.begin(), before.end(), '\n'));
    std::size_t line_start = before.rfind('\n');
    std::size_t column = line_start == std::string_view::npos ? offset + 1 : offset - line_start;
    // nlohmann's text is "[json.exception.parse_error.101] parse error at ...: <detail>";
    // keep the detail, the position is given in our own form.
    std::string_view detail = e.what();
    if (std::size_t at = detail.find("parse error"); at != std::string_view::npos) {
      if (std::size_t colon = detail.find(": ", at); colon != std::string_view::npos)
        detail.remove_prefix(colon + 2);
    }
    throw Error(fmt::format("malformed JSON in config {} at line {}, column {}: {}", source, line,
                            column, detail),
                fmt::format("{}:{}:{}", source, line, column),
                "fix the JSON syntax there (config files are strict JSON, as for DeepSpeed: no "
                "comments, no trailing commas, keys in double quotes)");
  } catch (const Json::exception& e) {
    // out_of_range 406: a number too large for a double (1e999); nlohmann gives no position.
    throw Error(fmt::format("malformed JSON in config {}: {}", source, e.what()), std::string(source),
                "write the number within the range of a double (about 1.8e308)");
  }
}

// Adds where the bad value came from to an Error raised while parsing or validating.
[[noreturn]] void rethrow_with_origin(const Error& e, std::string_view source,
                                      const std::vector<AppliedOverride>& overrides) {
  if (const AppliedOverride* o = override_touching(e.where(), overrides)) {
    throw Error(fmt::format("{} (set by override '{}')", e.what_happened(), o->text), e.where(),
                e.hint());
  }
  throw Error(fmt::format("{} (in config {})", e.what_happened(), source), e.where(), e.hint());
}

std::string read_file(const std::string& path) {
  auto fail = [&](int err) -> Error {
    return Error(fmt::format("cannot read config file: {} (errno {})", std::strerror(err), err),
                 path,
                 err == ENOENT ? "check the path (relative paths start at the current directory)"
                               : "check that the path is a readable file");
  };
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw fail(errno);
  // Closes the descriptor on every path out, exceptions included.
  struct FdGuard {
    int fd;
    ~FdGuard() { ::close(fd); }
  } guard{fd};

  struct stat st{};
  if (::fstat(fd, &st) != 0) throw fail(errno);
  if (S_ISDIR(st.st_mode)) throw fail(EISDIR);

  std::string text;
  char buffer[64 * 1024];
  while (true) {
    ssize_t n = ::read(fd, buffer, sizeof buffer);
    if (n < 0) {
      if (errno == EINTR) continue;
      throw fail(errno);
    }
    if (n == 0) break;
    text.append(buffer, static_cast<std::size_t>(n));
  }
  return text;
}

}  // namespace

ParsedConfig parse_config(std::string_view json_text, std::string_view source,
                          std::span<const std::string> overrides) {
  Json root = parse_json(json_text, source);
  if (!root.is_object()) {
    throw Error(fmt::format("config {} is {}, not a JSON object", source, detail::describe_json(root)),
                std::string(source), "a config file is one JSON object: { \"zero_optimization\": ... }");
  }

  std::vector<AppliedOverride> applied;
  for (const std::string& text : overrides) {
    std::string path = detail::apply_override(root, text);
    applied.push_back({text, std::move(path)});
  }

  ParsedConfig parsed;
  try {
    parsed.config = detail::config_from_json(root, &parsed.warnings);
    std::vector<ConfigWarning> more = validate_config(parsed.config);
    parsed.warnings.insert(parsed.warnings.end(), more.begin(), more.end());
  } catch (const Error& e) {
    rethrow_with_origin(e, source, applied);
  }

  // A typo in a file is a warning (DeepSpeed configs carry keys strata does not know), but
  // a typo in an override the user just typed is surely a mistake.
  for (const ConfigWarning& w : parsed.warnings) {
    if (w.kind != ConfigWarning::Kind::kUnknownKey) continue;
    if (const AppliedOverride* o = override_touching(w.path, applied)) {
      throw Error(fmt::format("override '{}' sets unknown config key '{}'", o->text, w.path),
                  w.path,
                  w.suggestion.empty() ? "check the key against docs/config.md"
                                       : fmt::format("did you mean '{}'?", w.suggestion));
    }
  }

  for (const ConfigWarning& w : parsed.warnings) log::warn("config {}: {}", source, w.message);
  return parsed;
}

std::string apply_config_overrides(std::string_view json_text, std::string_view source,
                                   std::span<const std::string> overrides) {
  Json root = parse_json(json_text, source);
  if (!root.is_object()) {
    throw Error(fmt::format("config {} is {}, not a JSON object", source, detail::describe_json(root)),
                std::string(source), "a config file is one JSON object: { \"zero_optimization\": ... }");
  }
  for (const std::string& text : overrides) detail::apply_override(root, text);
  return root.dump();
}

ParsedConfig load_config_file(const std::string& path, std::span<const std::string> overrides) {
  std::string text = read_file(path);
  return parse_config(text, path, overrides);
}

}  // namespace strata::runtime::config
