#include "models/param_init.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <utility>
#include <vector>

namespace strata::models {
namespace {

std::uint64_t splitmix64(std::uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// FNV-1a: a stable hash of the tensor's name, so that values do not depend on layout order.
std::uint64_t name_hash(std::string_view s) {
  std::uint64_t h = 0xCBF29CE484222325ull;
  for (char c : s) {
    h ^= static_cast<unsigned char>(c);
    h *= 0x100000001B3ull;
  }
  return h;
}

// A standard normal for counter i of stream `key` (Box-Muller on two 53-bit uniforms).
double normal(std::uint64_t key, std::uint64_t i) {
  const std::uint64_t a = splitmix64(key ^ splitmix64(2 * i));
  const std::uint64_t b = splitmix64(key ^ splitmix64(2 * i + 1));
  const double u1 = (static_cast<double>(a >> 11) + 1.0) * 0x1.0p-53;  // (0, 1]
  const double u2 = static_cast<double>(b >> 11) * 0x1.0p-53;          // [0, 1)
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
}

}  // namespace

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

void zero_gaps(const ModuleLayout& module, float* out) {
  // Every tensor writes all of its elements, so the whole module is not cleared first (that was
  // a serial pass over 6 GB for GPT-2 XL).
  std::vector<std::pair<std::size_t, std::size_t>> covered;  // (offset, end)
  for (const TensorSlot& t : module.tensors) covered.emplace_back(t.offset, t.offset + t.numel);
  std::sort(covered.begin(), covered.end());
  std::size_t at = 0;
  for (const auto& [begin, end] : covered) {
    if (begin > at) std::memset(out + at, 0, (begin - at) * sizeof(float));
    at = std::max(at, end);
  }
  if (module.numel > at) std::memset(out + at, 0, (module.numel - at) * sizeof(float));
}

void fill_normal(float* p, std::size_t n, std::uint64_t seed, std::string_view name, double stddev) {
  const std::uint64_t key = splitmix64(seed ^ name_hash(name));
  const auto count = static_cast<std::int64_t>(n);
#pragma omp parallel for schedule(static)
  for (std::int64_t i = 0; i < count; ++i) {
    p[i] = static_cast<float>(stddev * normal(key, static_cast<std::uint64_t>(i)));
  }
}

void fill_value(float* p, std::size_t n, float value) { std::fill(p, p + n, value); }

}  // namespace strata::models
