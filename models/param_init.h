#pragma once
// The building blocks of a family's initialization (ModelSpec::init_module): a counter-based
// normal generator, so that element i of a tensor is a function of (seed, tensor name, i) only
// — any module on any rank, in any order, with any thread count, on any CPU, gives the same bits
// (Box-Muller in float, a pair of elements per 64-bit draw: Note [Fast normal init] in
// param_init.cpp).
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "models/model_layout.h"

namespace strata::models {

// Zeroes what no tensor of `module` covers (the alignment gaps) in out[0, module.numel).
void zero_gaps(const ModuleLayout& module, float* out);

// p[i] = stddev * N(0, 1)_(seed, name, i) for i < n (OpenMP inside).
void fill_normal(float* p, std::size_t n, std::uint64_t seed, std::string_view name, double stddev);

void fill_value(float* p, std::size_t n, float value);

bool ends_with(std::string_view s, std::string_view suffix);

}  // namespace strata::models
