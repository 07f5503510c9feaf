// The palette (palette.h).
#include "tools/charts/palette.h"

#include <algorithm>
#include <cstdint>
#include <iterator>
#include <utility>

#include "core/tier_names.h"

namespace strata::tools::charts::palette {
namespace {

struct Named {
  std::string_view name;
  const char* color;
};

// Tiers: hues the kinds of memory do not use (purple, sienna, magenta), since every memory bar
// chart shows both.
// Keyed by the tiers' keys (runtime::tiers::tier_key).
constexpr Named kTiers[] = {
    {tier_names::kDevice, "#7b4fa6"}, {tier_names::kPinnedKey, "#a0522d"}, {tier_names::kNvme, "#d1499b"}};

// Kinds of memory (Tableau 10's first five, as the charts had them before).
constexpr Named kKinds[] = {{"parameters", "#4e79a7"},  {"gradients", "#f28e2b"}, {"optimizer states", "#e15759"},
                            {"activations", "#76b7b2"}, {"buffers", "#59a14f"}};

// Resources: trace tracks (runtime/zero/engine_streams.h, train/session.cpp, runtime/trace/trace.h,
// runtime/zero/updater.cpp and grad_path.cpp) and the predicted ones (runtime/estimate/step_model.cpp).
// A resource and a kind never share a chart; colors may repeat across the two lists.
constexpr Named kResources[] = {
    {"compute", "#4e79a7"},        {"h2d", "#f28e2b"},       {"h2d nvme", "#ffbe7d"},    {"d2h", "#59a14f"},
    {"comm", "#e15759"},           {"optimizer", "#b07aa1"}, {"cpu optimizer", "#76b7b2"}, {"cpu adam", "#76b7b2"},
    {"grad accumulate", "#edc948"}, {"nvme read", "#9c755f"}, {"nvme write", "#ff9da7"},  {"disk", "#17becf"},
    {"checkpoint", "#bcbd22"}};

constexpr Named kMetrics[] = {{"loss", "#4e79a7"}, {"tokens/s", "#59a14f"}};

// For other names; none is a color above.
constexpr const char* kSpare[] = {"#393b79", "#ad494a", "#8ca252", "#bd9e39",
                                  "#843c39", "#7b4173", "#6b6ecf", "#e6550d"};
constexpr std::size_t kSpares = std::size(kSpare);

const char* known(std::string_view name) {
  const auto find = [&](const auto& table) -> const char* {
    for (const Named& n : table) {
      if (n.name == name) return n.color;
    }
    return nullptr;
  };
  if (const char* c = find(kTiers)) return c;
  if (const char* c = find(kKinds)) return c;
  if (const char* c = find(kResources)) return c;
  return find(kMetrics);
}

// FNV-1a: a hash that stays the same across builds and machines (std::hash need not).
std::size_t spare_index(std::string_view name) {
  std::uint32_t h = 2166136261u;
  for (const char c : name) {
    h ^= static_cast<unsigned char>(c);
    h *= 16777619u;
  }
  return h % kSpares;
}

}  // namespace

std::string color_of(std::string_view name) {
  if (const char* c = known(name)) return c;
  return kSpare[spare_index(name)];
}

std::vector<std::string> colors_for(const std::vector<std::string>& names) {
  std::vector<std::string> colors;
  for (const std::string& name : names) {
    std::string c = color_of(name);
    const auto taken = [&](const std::string& x) { return std::find(colors.begin(), colors.end(), x) != colors.end(); };
    if (taken(c)) {
      // The next spare after the name's own that the chart has not used; with more series than
      // spares, colors repeat.
      const std::size_t first = spare_index(name);
      for (std::size_t k = 0; k < kSpares; ++k) {
        if (!taken(kSpare[(first + k) % kSpares])) {
          c = kSpare[(first + k) % kSpares];
          break;
        }
      }
    }
    colors.push_back(std::move(c));
  }
  return colors;
}

}  // namespace strata::tools::charts::palette
