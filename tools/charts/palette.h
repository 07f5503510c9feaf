#pragma once
// The one palette of every chart: a series' color follows from its name alone, so that a tier,
// a kind of memory or a resource has the same color in strata estimate's, compare's and a run's
// charts. Not a public header (charts.h is).
//
//   tiers      device, pinned, nvme
//   kinds      parameters, gradients, optimizer states, activations, buffers (the stacks of a
//              memory bar; never beside a resource, but always beside the tiers: their colors
//              differ from the tiers')
//   resources  the trace tracks a run measures (compute, h2d, h2d nvme, d2h, comm, optimizer,
//              cpu optimizer, grad accumulate, nvme read, nvme write, checkpoint) and the
//              resources strata estimate predicts (the same names, and cpu adam = cpu optimizer,
//              disk); all different from each other
//   metrics    loss, tokens/s
//
// Any other name takes a spare color chosen by a hash of the name (the same in every chart).
#include <string>
#include <string_view>
#include <vector>

namespace strata::tools::charts::palette {

// "#rrggbb" of a series named `name`.
std::string color_of(std::string_view name);

// The colors of one chart's series, in order: color_of each, except that a name whose color an
// earlier name of the same chart already took (two unknown names hashed alike) takes the next
// spare color no series of the chart has.
std::vector<std::string> colors_for(const std::vector<std::string>& names);

// Budgets, step markers and other marks that are no series.
inline constexpr const char* kMarkColor = "#222222";
// The color of a budget that names no series.
inline constexpr const char* kNeutralColor = "#888888";

}  // namespace strata::tools::charts::palette
