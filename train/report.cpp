// Memory per tier, bytes per link, and the end-of-run tables.
#include "train/report.h"

#include <cstdio>

#include "runtime/estimate/zero_theory.h"
#include "runtime/telemetry/tables.h"

namespace strata::train {
namespace {

runtime::telemetry::TierMemory tier_memory(std::uint64_t current, std::uint64_t peak, std::uint64_t budget) {
  runtime::telemetry::TierMemory t;
  t.current_bytes = current;
  t.peak_bytes = peak;
  t.budget_bytes = budget;
  t.allocated_bytes = peak;
  return t;
}

}  // namespace

TierSnapshot snapshot(const Session& s) {
  TierSnapshot snap;
  const runtime::device::ArenaStats a = s.engine->device_memory();
  snap.device = tier_memory(a.current_bytes, a.peak_bytes, a.budget_bytes);
  snap.device.allocated_bytes = s.device->memory_stats().peak_bytes;  // the pools' regions whole
  const offload::HostPoolStats p = s.pinned().stats();
  snap.pinned = tier_memory(p.current_bytes, p.peak_bytes, p.budget_bytes);
  if (offload::SwapSpace* sw = s.swap()) {
    const offload::SwapStats n = sw->stats();
    std::uint64_t free_bytes = 0;
    for (const offload::SwapPathStats& path : n.paths) free_bytes += path.free_bytes;
    snap.nvme = tier_memory(n.used_bytes, n.peak_bytes, n.file_bytes + free_bytes);
  }
  return snap;
}

runtime::telemetry::LinkBytes link_bytes(const runtime::zero::EngineCounters& c) {
  runtime::telemetry::LinkBytes b;
  b.nvme_read = c.nvme_read_bytes;
  b.nvme_write = c.nvme_write_bytes;
  b.h2d = c.h2d_bytes;
  b.d2h = c.d2h_bytes;
  b.collective = c.collective_bytes;
  return b;
}

runtime::telemetry::LinkBytes minus(const runtime::telemetry::LinkBytes& a, const runtime::telemetry::LinkBytes& b) {
  runtime::telemetry::LinkBytes d;
  d.nvme_read = a.nvme_read - b.nvme_read;
  d.nvme_write = a.nvme_write - b.nvme_write;
  d.h2d = a.h2d - b.h2d;
  d.d2h = a.d2h - b.d2h;
  d.collective = a.collective - b.collective;
  return d;
}

double collective_theory_bytes(const Session& s) {
  std::uint64_t psi = 0;  // Ψ as the collectives carry it: every module padded to its shards
  for (const runtime::tiers::ModulePlan& mp : s.engine->plan().modules) psi += mp.part.padded_numel;
  return runtime::estimate::zero_collective_bytes(s.config.zero_optimization.stage, s.comm->world(), psi,
                                                  static_cast<int>(dtype_size(s.dtype)));
}

void print_end_report(const Session& s, const TrainOptions& o, const TierSnapshot& after_init,
                      const RunTotals& totals) {
  PhaseMemory rows = {{"device after init", after_init.device}, {"pinned after init", after_init.pinned}};
  rows.insert(rows.end(), totals.phases.begin(), totals.phases.end());
  const runtime::zero::EngineCounters c = s.engine->counters();
  const double theory = collective_theory_bytes(s);
  std::fprintf(stderr, "\nmemory per tier:\n%s\nbytes moved (%llu steps, this rank):\n%s",
               runtime::telemetry::memory_table(rows).c_str(), static_cast<unsigned long long>(totals.steps),
               runtime::telemetry::bytes_table(totals.bytes, theory * static_cast<double>(totals.steps)).c_str());
  std::fprintf(stderr, "fetches %llu (prefetched %llu, kept for reuse %llu), trace divergences %llu\n",
               static_cast<unsigned long long>(c.fetches), static_cast<unsigned long long>(c.prefetched),
               static_cast<unsigned long long>(c.reused), static_cast<unsigned long long>(c.trace_divergences));
  if (!s.trace_path.empty()) std::fprintf(stderr, "trace: %s (open in ui.perfetto.dev)\n", s.trace_path.c_str());
  if (!o.save_path.empty()) std::fprintf(stderr, "weights: %s\n", o.save_path.c_str());
}

}  // namespace strata::train
