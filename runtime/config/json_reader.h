#pragma once
// Internal to runtime/config: typed reads from JSON that know the key path of every value
// (for error messages) and which keys of an object were read (so the others can be reported
// as unknown, with the closest known key as a suggestion).
#include <array>
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/config/config.h"

namespace strata::runtime::config::detail {

// Ordered so that warnings and the printed config follow the file's order.
using Json = nlohmann::ordered_json;

inline constexpr std::string_view kAuto = "auto";

// "a.b" + "c" -> "a.b.c"; "" + "c" -> "c".
std::string join_path(std::string_view parent, std::string_view key);

// A short rendering of a value for messages: `"abc"`, `-5`, `1.5`, `true`, `an object`.
std::string describe_json(const Json& value);

// Throws Error: "expected <expected>, got <value>" at `path`.
[[noreturn]] void throw_bad_value(const std::string& path, std::string_view expected,
                                  const Json& got, std::string hint = {});

bool is_auto(const Json& value);

// Conversions into a field; each throws Error naming `path` and the expected form. Integers
// may be written as floats with no fraction (5e8), as DeepSpeed allows.
void convert(const Json& v, const std::string& path, std::uint64_t& out);
void convert(const Json& v, const std::string& path, std::uint32_t& out);
void convert(const Json& v, const std::string& path, std::int64_t& out);
void convert(const Json& v, const std::string& path, std::int32_t& out);
void convert(const Json& v, const std::string& path, double& out);
void convert(const Json& v, const std::string& path, bool& out);
void convert(const Json& v, const std::string& path, std::string& out);
void convert(const Json& v, const std::string& path, std::array<double, 2>& out);
// A folder list: one non-empty string, or an array of them.
void convert(const Json& v, const std::string& path, std::vector<std::string>& out);

template <typename T>
void convert(const Json& v, const std::string& path, AutoOr<T>& out) {
  if (is_auto(v)) {
    out = AutoOr<T>::automatic();
    return;
  }
  T value{};
  convert(v, path, value);
  out = std::move(value);
}

// An optional field becomes set when the key is present.
template <typename T>
void convert(const Json& v, const std::string& path, std::optional<T>& out) {
  T value{};
  convert(v, path, value);
  out = std::move(value);
}

// A byte count: a non-negative integer or a string such as "512MiB" (core/units.h).
std::uint64_t to_bytes(const Json& v, const std::string& path);

// Every value of each config enum, for parsing by name (case-insensitive).
inline constexpr std::array kOffloadDevices = {OffloadDevice::kNone, OffloadDevice::kCpu,
                                               OffloadDevice::kNvme};
inline constexpr std::array kOptimizerTypes = {OptimizerType::kAdam, OptimizerType::kAdamW};
inline constexpr std::array kSchedulerTypes = {
    SchedulerType::kWarmupLR, SchedulerType::kWarmupDecayLR, SchedulerType::kWarmupCosineLR};
inline constexpr std::array kWarmupTypes = {WarmupType::kLog, WarmupType::kLinear};
inline constexpr std::array kDeviceKinds = {DeviceKind::kAuto, DeviceKind::kHost,
                                            DeviceKind::kCuda};
inline constexpr std::array kIoBackends = {IoBackend::kAuto, IoBackend::kIoUring,
                                           IoBackend::kThreads};
inline constexpr std::array kDirectIoModes = {DirectIoMode::kAuto, DirectIoMode::kRequire,
                                              DirectIoMode::kOff};
inline constexpr std::array kCheckpointOnErrors = {CheckpointOnError::kContinue,
                                                   CheckpointOnError::kStop};
inline constexpr std::array kGradAccumDtypes = {GradAccumDtype::kFp32, GradAccumDtype::kBf16,
                                                GradAccumDtype::kFp16};

bool iequals(std::string_view a, std::string_view b);

template <typename E, std::size_t N>
E to_enum(const Json& v, const std::string& path, const std::array<E, N>& values) {
  std::string expected = "one of";
  for (std::size_t i = 0; i < N; ++i) {
    expected += (i == 0 ? " \"" : ", \"");
    expected += to_string(values[i]);
    expected += '"';
  }
  if (!v.is_string()) throw_bad_value(path, expected, v);
  const auto& text = v.get_ref<const std::string&>();
  for (E value : values) {
    if (iequals(text, to_string(value))) return value;
  }
  throw_bad_value(path, expected, v);
}

// One JSON object of the config. Reads mark keys as known; finish() reports the rest.
// Borrowed: the node and the warnings list must outlive the reader.
class ObjectReader {
 public:
  // node == nullptr (or a JSON null): an absent section whose lookups find nothing.
  // Anything else that is not an object throws Error at `path`.
  ObjectReader(const Json* node, std::string path, std::vector<ConfigWarning>* warnings);

  bool present() const { return node_ != nullptr; }
  const std::string& path() const { return path_; }
  std::string path_of(std::string_view key) const { return join_path(path_, key); }

  // The value of `key`, marked as known; nullptr when absent or null (null = not given).
  const Json* find(std::string_view key);

  // The object under `key` (absent or null = an empty reader).
  ObjectReader object(std::string_view key);

  // Reads `key` into `field` when present; leaves the default otherwise.
  template <typename T>
  void read(std::string_view key, T& field) {
    if (const Json* v = find(key)) convert(*v, path_of(key), field);
  }
  void read_bytes(std::string_view key, std::uint64_t& field) {
    if (const Json* v = find(key)) field = to_bytes(*v, path_of(key));
  }
  template <typename E, std::size_t N>
  void read_enum(std::string_view key, E& field, const std::array<E, N>& values) {
    if (const Json* v = find(key)) field = to_enum(*v, path_of(key), values);
  }

  // Keys DeepSpeed has and strata accepts without using: each one present is a warning
  // that says so (they parse, so DeepSpeed configs load, but they change nothing here).
  void ignore(std::initializer_list<std::string_view> keys);
  void ignore(std::span<const std::string_view> keys);

  // Keys strata refuses: present -> Error with `hint` (e.g. a deprecated spelling whose
  // meaning strata would otherwise silently drop).
  void reject(std::string_view key, std::string_view why, std::string_view hint);

  // Adds a kUnknownKey warning for every key never looked up, in file order.
  void finish();

 private:
  const Json* node_;
  std::string path_;
  std::vector<ConfigWarning>* warnings_;
  std::vector<std::string> known_;
};

// Edit distance, for "did you mean" suggestions.
std::size_t edit_distance(std::string_view a, std::string_view b);

// ---- between the files of runtime/config ----------------------------------------------------

// config_parse.cpp: JSON (already overridden) -> Config. Types and required keys only;
// ranges and cross-key rules are validate_config()'s.
Config config_from_json(const Json& root, std::vector<ConfigWarning>* warnings);

// config_print.cpp: Config -> JSON with every key.
Json config_to_json_value(const Config& config);

// config_override.cpp: applies one "key.path=value" to `root`; returns the key path in
// message form ("optimizer.params.betas[0]"). Throws Error quoting the override.
std::string apply_override(Json& root, std::string_view override_text);

}  // namespace strata::runtime::config::detail
