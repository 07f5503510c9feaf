#pragma once
// A family's table of named configs (--preset NAME): the lookup and the listing every family's
// Config::preset / preset_names make of it.
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include "core/error.h"

namespace strata::models {

template <class Config>
struct NamedConfig {
  const char* name;
  Config config;
};

template <class Config>
std::vector<std::string> preset_names_of(const std::vector<NamedConfig<Config>>& presets) {
  std::vector<std::string> names;
  for (const NamedConfig<Config>& p : presets) names.emplace_back(p.name);
  return names;
}

// The config named `name`; throws strata::Error listing the names when there is none.
template <class Config>
Config preset_of(const std::vector<NamedConfig<Config>>& presets, std::string_view name) {
  for (const NamedConfig<Config>& p : presets) {
    if (name == p.name) return p.config;
  }
  std::string names;
  for (const std::string& n : preset_names_of(presets)) names += fmt::format("{}{}", names.empty() ? "" : ", ", n);
  throw Error(fmt::format("unknown model preset \"{}\"", name), "",
              fmt::format("use one of: {}; or give a config.json", names));
}

}  // namespace strata::models
