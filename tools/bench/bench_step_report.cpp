#include "tools/bench/bench_step_report.h"

#include <algorithm>
#include <cmath>
#include <map>

#include <fmt/format.h>

namespace strata::tools::step_bench {
namespace {

constexpr const char* kCpuAdamTrack = "cpu optimizer";  // runtime/zero/updater.cpp's spans
constexpr const char* kCpuAdamNote = "null: the cell runs no CPU Adam (its optimizer states are on the device)";

// What every JSON line of the run carries: the device, the model and the shapes.
Json run_json(const StepBenchOptions& o) {
  return {{"device", o.device}, {"model", o.model.empty() ? o.preset : o.model}, {"batch", o.batch},
          {"seq_len", o.seq_len}, {"dtype", o.dtype}, {"checkpointing", o.checkpointing},
          {"gradient_clipping", o.gradient_clipping}};
}

// The peers' tokens/s (null where one was not run or failed), as `<peer>_tokens_per_s`.
void add_peer_rates(Json& j, const std::vector<Peer>& peers) {
  for (const PeerSpec& spec : kPeers) {
    Json v;
    for (const Peer& p : peers) {
      if (p.spec == &spec && p.error.empty()) v = p.tokens_per_s;
    }
    j[std::string(spec.name) + "_tokens_per_s"] = v;
  }
}

}  // namespace

// The median step of `rows` (one child's, or every round's).
double median_step_ms(const std::vector<Json>& rows) {
  std::vector<double> ms;
  for (const Json& r : rows) ms.push_back(number(r, "step_ms"));
  return median(ms);
}

// cell.rows -> the cell's numbers: medians over every timed step of every round.
void summarize(Cell& cell) {
  std::vector<double> step_ms, tokens, flops_per_token, fwd, bwd, opt, busy, adam;
  std::map<std::string, int> busiest_count;
  // A kernel that is wrong at real shapes shows as a loss or a gradient norm that is not finite
  // (the metrics write it as null): the cell fails, saying where, with its losses, instead of
  // reporting a speed. An fp16 step skipped for overflow has an infinite norm by design.
  std::string not_finite;
  for (const Json& r : cell.rows) {
    const double loss = number(r, "loss"), norm = number(r, "grad_norm");
    cell.losses.push_back(std::isfinite(loss) ? Json(loss) : Json());
    const bool skipped = r.value("skipped", false);
    if (not_finite.empty() && (!std::isfinite(loss) || (!skipped && !std::isfinite(norm)))) {
      not_finite = fmt::format("step {}: loss {}, grad norm {}", r.value("step", -1), r.value("loss", Json()).dump(),
                               r.value("grad_norm", Json()).dump());
    }
  }
  if (!not_finite.empty()) {
    cell.error = fmt::format("a loss or gradient norm is not finite ({}); losses {}", not_finite, cell.losses.dump());
    return;
  }
  for (const Json& r : cell.rows) {
    const double ms = number(r, "step_ms"), tps = number(r, "tokens_per_s");
    step_ms.push_back(ms);
    tokens.push_back(tps * ms / 1e3);  // tokens per step, the same every step
    flops_per_token.push_back(number(r, "tflops") * 1e12 / tps);
    const Json phases = r.value("phase_ms", Json::object());
    fwd.push_back(number(phases, "forward"));
    bwd.push_back(number(phases, "backward"));
    opt.push_back(number(phases, "optimizer"));
    busy.push_back(number(r, "busiest_ms"));
    const Json tracks = r.value("busy_ms", Json::object());
    if (tracks.contains(kCpuAdamTrack)) adam.push_back(number(tracks, kCpuAdamTrack));
    ++busiest_count[r.value("busiest", std::string("?"))];
    // null (not finite) or -1 (not computed) is left out
    if (const double norm = number(r, "grad_norm"); std::isfinite(norm) && norm >= 0) cell.grad_norms.push_back(norm);
    const Json speculative = r.value("speculative", Json::object());
    cell.speculative_updates += speculative.value("updates", std::uint64_t{0});
    cell.speculative_redone += speculative.value("redone", std::uint64_t{0});
  }
  cell.step_ms = median(step_ms);
  cell.tokens_per_s = median(tokens) / (cell.step_ms / 1e3);
  cell.tflops = median(flops_per_token) * cell.tokens_per_s / 1e12;
  cell.forward_ms = median(fwd);
  cell.backward_ms = median(bwd);
  cell.optimizer_ms = median(opt);
  cell.busiest_ms = median(busy);
  cell.overlap = cell.step_ms / cell.busiest_ms;
  cell.busiest = std::max_element(busiest_count.begin(), busiest_count.end(),
                                  [](const auto& a, const auto& b) { return a.second < b.second; })
                     ->first;
  cell.bytes = cell.rows.back().value("bytes", Json::object());
  if (!adam.empty()) cell.cpu_adam_busy_ms = median(adam);
  for (double v : {cell.step_ms, cell.tokens_per_s, cell.tflops, cell.busiest_ms, cell.overlap}) {
    if (!std::isfinite(v) || v <= 0) {
      cell.error = "the metrics lack step_ms, tokens_per_s, tflops or busiest_ms";
      return;
    }
  }
}

std::string placement_title(const std::string& placement) {
  if (placement == "device") return "device: nothing offloaded";
  if (placement == "cpu") return "cpu: offload_optimizer cpu; at stage 3 also offload_param cpu";
  return "nvme: offload_optimizer nvme; at stage 3 also offload_param nvme";
}

void print_header(std::FILE* out) {
  std::fprintf(out, "%-8s %8s %7s %7s %7s %10s %8s  %-22s %7s %11s\n", "stage", "step ms",
               "fwd ms", "bwd ms", "opt ms", "tokens/s", "TFLOPS", "busiest", "overlap",
               "vs resident");
}

void print_row(std::FILE* out, const Cell& c, const Cell& reference) {
  const std::string stage = c.placement == kReference ? "0 (ref)" : std::to_string(c.stage);
  if (!c.error.empty()) {
    std::fprintf(out, "%-8s error: %s\n", stage.c_str(), c.error.c_str());
    return;
  }
  const std::string ratio = reference.error.empty()
                                ? fmt::format("{:.2f}", c.tokens_per_s / reference.tokens_per_s)
                                : "-";
  std::fprintf(out, "%-8s %8.1f %7.1f %7.1f %7.1f %10.0f %8.4f  %-22s %7.2f %11s\n", stage.c_str(),
               c.step_ms, c.forward_ms, c.backward_ms, c.optimizer_ms, c.tokens_per_s, c.tflops,
               fmt::format("{} {:.1f} ms", c.busiest, c.busiest_ms).c_str(), c.overlap,
               ratio.c_str());
  if (c.disk_bound_ms > 0) {
    std::fprintf(out, "%-8s the disk's time for the step's bytes: %.1f ms overlapped, %.1f ms one after the other "
                 "(step / overlapped bound: %.2f)\n", "", c.disk_bound_ms, c.disk_serial_ms, c.step_ms / c.disk_bound_ms);
  }
}

void print_peers(std::FILE* out, const std::vector<Peer>& peers, const std::vector<Cell>& cells) {
  std::fprintf(out, "\npeers: the same model, micro-batch, dtype, AdamW and clipping; vs strata = the "
                    "peer's tokens/s / the strata cell's\n");
  std::fprintf(out, "%-22s %-44s %9s %10s %-16s %10s %9s\n", "peer", "", "step ms", "tokens/s",
               "strata cell", "tokens/s", "vs strata");
  for (const Peer& p : peers) {
    if (!p.error.empty()) {
      std::fprintf(out, "%-22s error: %s\n", p.spec->name, p.error.c_str());
      continue;
    }
    const Cell* strata = counterpart(*p.spec, cells);
    const std::string where = std::string(p.spec->placement) == kReference
                                  ? "resident"
                                  : fmt::format("{} stage {}", p.spec->placement, p.spec->stage);
    const bool ok = strata != nullptr && strata->error.empty();
    std::fprintf(out, "%-22s %-44s %9.1f %10.0f %-16s %10s %9s\n", p.spec->name, p.spec->title, p.step_ms,
                 p.tokens_per_s, where.c_str(), ok ? fmt::format("{:.0f}", strata->tokens_per_s).c_str() : "-",
                 ok ? fmt::format("{:.2f}", p.tokens_per_s / strata->tokens_per_s).c_str() : "-");
  }
}

// The strata cell a peer is compared with.
const Cell* counterpart(const PeerSpec& spec, const std::vector<Cell>& cells) {
  for (const Cell& c : cells) {
    if (c.placement == spec.placement && c.stage == spec.stage) return &c;
  }
  return nullptr;
}

Json cell_json(const StepBenchOptions& o, const Cell& c, const Cell& reference, const std::vector<Peer>& peers) {
  Json j = run_json(o);
  j["placement"] = c.placement;
  j["stage"] = c.stage;
  j["resident_tokens_per_s"] = reference.error.empty() ? Json(reference.tokens_per_s) : Json();
  add_peer_rates(j, peers);
  if (!c.error.empty()) {
    j["error"] = c.error;
    if (!c.losses.empty()) j["losses"] = c.losses;
    return j;
  }
  j["step_ms"] = c.step_ms;
  j["tokens_per_s"] = c.tokens_per_s;
  j["tflops"] = c.tflops;
  j["busiest"] = c.busiest;
  j["busiest_ms"] = c.busiest_ms;
  j["overlap"] = c.overlap;
  j["ratio_to_resident"] =
      reference.error.empty() ? Json(c.tokens_per_s / reference.tokens_per_s) : Json();
  j["phase_ms"] = {{"forward", c.forward_ms}, {"backward", c.backward_ms}, {"optimizer", c.optimizer_ms}};
  j["bytes_per_step"] = c.bytes;
  j["timed_steps"] = c.rows.size();
  j["cpu_adam_busy_ms"] = c.cpu_adam_busy_ms;
  if (c.cpu_adam_busy_ms.is_null()) j["cpu_adam_busy_ms_note"] = kCpuAdamNote;
  // The bound of an offloaded step: the same model resident, or the CPU Adam, whichever is
  // longer (issue 15's target: vs_offload_bound <= 1.15 on a GPU).
  if (!c.cpu_adam_busy_ms.is_null() && reference.error.empty() && &c != &reference) {
    const double bound = std::max(reference.step_ms, c.cpu_adam_busy_ms.get<double>());
    j["offload_bound_ms"] = bound;
    j["vs_offload_bound"] = c.step_ms / bound;
  }
  j["grad_norms"] = c.grad_norms;
  j["losses"] = c.losses;
  j["speculative_updates"] = c.speculative_updates;
  j["speculative_redone"] = c.speculative_redone;
  if (c.disk_bound_ms > 0) {
    j["disk_bound_ms"] = c.disk_bound_ms;
    j["disk_serial_ms"] = c.disk_serial_ms;
    j["vs_disk"] = c.step_ms / c.disk_bound_ms;
  }
  return j;
}

Json peer_json(const StepBenchOptions& o, const Peer& p, const std::vector<Cell>& cells) {
  Json j = run_json(o);
  j["peer"] = p.spec->name;
  j["title"] = p.spec->title;
  const Cell* strata = counterpart(*p.spec, cells);
  j["strata_placement"] = p.spec->placement;
  j["strata_stage"] = p.spec->stage;
  const bool strata_ok = strata != nullptr && strata->error.empty();
  j["strata_tokens_per_s"] = strata_ok ? Json(strata->tokens_per_s) : Json();
  if (!p.error.empty()) {
    j["error"] = p.error;
  } else {
    j["step_ms"] = p.step_ms;
    j["tokens_per_s"] = p.tokens_per_s;
    j["timed_steps"] = p.timed_steps;
    j["vs_strata"] = strata_ok ? Json(p.tokens_per_s / strata->tokens_per_s) : Json();
  }
  // What the peer says it ran: versions, its model class, optimizer, precision, threads, GPU.
  for (const char* key : {"torch", "deepspeed", "model", "optimizer", "precision", "threads", "gpu",
                          "max_memory_allocated"}) {
    if (p.info.is_object() && p.info.contains(key)) j[std::string("peer_") + key] = p.info[key];
  }
  return j;
}

}  // namespace strata::tools::step_bench
