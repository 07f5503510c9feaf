#pragma once
// End-of-run summaries as text tables, sizes in binary units (core/units.h format_bytes):
//
//   tier       current        peak    budget  peak/budget
//   device  512.00 MiB  600.00 MiB  1.00 GiB        58.6%
//   nvme      2.00 GiB    2.00 GiB         -            -
//
//   link           bytes
//   NVMe read   4.00 GiB
//   ...
//   collective  1.50 GiB  (ZeRO theory 1.00 GiB: 1.50x)
//
// Every line ends with '\n'.
#include <string>
#include <utility>
#include <vector>

#include "runtime/telemetry/step_metrics.h"

namespace strata::runtime::telemetry {

// One row per (name, tier); budget 0 is shown as "-" (no limit).
std::string memory_table(const std::vector<std::pair<std::string, TierMemory>>& rows);

// Bytes per link over the run; the collective row compares with the ZeRO theory when
// collective_theory_bytes > 0.
std::string bytes_table(const LinkBytes& total, double collective_theory_bytes);

}  // namespace strata::runtime::telemetry
