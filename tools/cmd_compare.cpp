// strata compare (--model DIR|config.json | --preset NAME) [--config ds.json] [--world N]
//                [--batch B] [--seq-len T] [--steps 4] [--stages 0,1,2,3] [--placements all]
//                [--profile machine.json] [--dir DIR] [--json] [--svg DIR] [device flags]
// After a run: each ZeRO stage x placement trained for a few steps (a `strata train` child of this
// binary, under `mpirun -np N` for N ranks), and what it measured beside what `strata estimate`
// says for the same config (runtime/estimate/estimate.h): rank 0's peak bytes per tier (the most
// each tier's budget gave out, and the in-use peak after forward, backward and the step), the
// bytes per link per step, the collective bytes against ZeRO's 2Ψ/3Ψ·(N−1)/N, and the median step
// time against the prediction of --profile. Its ranks all run on this machine: the pinned memory and
// the NVMe space are divided among all of them (no --ranks-per-node).
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/units.h"
#include "models/registry.h"
#include "runtime/config/config.h"
#include "tools/bench/bench.h"
#include "tools/bench/bench_children.h"
#include "tools/charts/charts.h"
#include "tools/charts/metrics_charts.h"
#include "tools/commands.h"
#include "tools/device_flags.h"
#include "runtime/estimate/estimate.h"
#include "tools/estimate/estimate_report.h"
#include "tools/estimate_flags.h"
#include "tools/bench/bench_nvme_disk.h"

namespace strata::tools {
namespace {

using runtime::estimate::Estimate;
using runtime::estimate::EstimateInputs;
using runtime::estimate::EstimateRow;
using runtime::estimate::Placement;
using runtime::tiers::Tier;

// Tier t's JSON key ("device", "pinned", "nvme").
const char* tier_key(int t) { return runtime::tiers::tier_key(static_cast<Tier>(t)); }

struct CompareOptions {
  EstimateFlags estimate;
  int steps = 4;
  std::string stages = "0,1,2,3";
  std::string placements = "all";  // or a list of "device", "cpu", "nvme": the tiers the states may use
  std::string dir;
  std::string svg_dir;
  bool json = false;
  bool verbose = false;
};

struct Measured {
  std::string error;
  double step_ms = 0;
  double tokens_per_s = 0;
  std::uint64_t allocated[3] = {0, 0, 0};  // the most each tier's budget gave out
  nlohmann::json phases;                   // "device after forward": in-use peak, ...
  nlohmann::json bytes_per_step;           // median per link
  double collective_theory_bytes = 0;
  std::vector<std::pair<std::string, double>> busy_ms;  // median per track
};

std::vector<Placement> chosen_placements(const CompareOptions& o) {
  std::vector<int> stages;
  for (const std::string& s : split_list(o.stages)) {
    if (s != "0" && s != "1" && s != "2" && s != "3") {
      throw Error("--stages " + o.stages + ": '" + s + "' is not a ZeRO stage", "--stages", "give stages 0-3, e.g. 1,3");
    }
    stages.push_back(std::stoi(s));
  }
  // The placements the cells' parameters and optimizer may have (bench.h: placement_word).
  bool all = false;
  std::vector<runtime::config::OffloadDevice> devices;
  for (const std::string& p : split_list(o.placements)) {
    const std::optional<runtime::config::OffloadDevice> d = placement_word(p);
    if (p == "all") {
      all = true;
    } else if (d) {
      devices.push_back(*d);
    } else {
      throw Error("--placements " + o.placements + ": '" + p + "' is not a placement", "--placements",
                  "give all, or a list of none, cpu, nvme (device: none)");
    }
  }
  std::vector<Placement> out;
  for (const Placement& p : runtime::estimate::all_placements()) {
    if (std::find(stages.begin(), stages.end(), p.stage) == stages.end()) continue;
    auto listed = [&](runtime::config::OffloadDevice d) {
      return all || std::find(devices.begin(), devices.end(), d) != devices.end();
    };
    const bool wanted = listed(p.param) && listed(p.optimizer);
    if (wanted) out.push_back(p);
  }
  if (out.empty()) throw Error("no stage x placement is left to compare", "--stages", "widen --stages or --placements");
  return out;
}

Measured measure(const ChildRun& run) {
  Measured m;
  if (!run.error.empty()) {
    m.error = run.error;
    return m;
  }
  std::vector<double> step_ms, tokens;
  std::map<std::string, std::vector<double>> links, busy;
  for (const Json& r : run.rows) {
    step_ms.push_back(number(r, "step_ms"));
    tokens.push_back(number(r, "tokens_per_s"));
    for (const auto& [k, v] : r["bytes"].items()) links[k].push_back(v.get<double>());
    for (const auto& [k, v] : r["busy_ms"].items()) busy[k].push_back(v.get<double>());
  }
  m.step_ms = median(step_ms);
  m.tokens_per_s = median(tokens);
  for (auto& [k, v] : links) m.bytes_per_step[k] = median(v);
  for (auto& [k, v] : busy) m.busy_ms.emplace_back(k, median(v));
  const Json& last = run.rows.back();
  for (int t = 0; t < 3; ++t) m.allocated[t] = last["memory"][tier_key(t)].value("allocated_bytes", std::uint64_t{0});
  for (const auto& [k, v] : last["memory_at_phase"].items()) m.phases[k] = v.value("peak_bytes", std::uint64_t{0});
  m.collective_theory_bytes = number(last, "collective_theory_bytes");
  return m;
}

double ratio(double measured, double estimated) { return estimated > 0 ? measured / estimated : NAN; }

nlohmann::json cell_json(const Estimate& e, const EstimateInputs& in, const EstimateRow& est, const Measured& m) {
  nlohmann::json j = estimate_row_json(in, e, est);
  nlohmann::json meas;
  if (!m.error.empty()) {
    meas["error"] = m.error;
  } else {
    meas["step_ms"] = m.step_ms;
    meas["tokens_per_s"] = m.tokens_per_s;
    for (int t = 0; t < 3; ++t) meas["allocated_bytes"][tier_key(t)] = m.allocated[t];
    meas["peak_bytes_at_phase"] = m.phases;
    meas["bytes_per_step"] = m.bytes_per_step;
    meas["collective_theory_bytes"] = m.collective_theory_bytes;
    for (const auto& [k, v] : m.busy_ms) meas["busy_ms"][k] = v;
    nlohmann::json r;
    for (int t = 0; t < 3; ++t) {
      r[tier_key(t)] = ratio(static_cast<double>(m.allocated[t]), static_cast<double>(est.bytes.tier_bytes(static_cast<Tier>(t))));
    }
    r["collective"] = ratio(m.bytes_per_step.value("collective", 0.0), est.collective_bytes);
    if (est.step) r["step"] = ratio(m.step_ms, est.step->step_ms);
    meas["vs_estimate"] = r;
  }
  j["measured"] = meas;
  return j;
}

std::string vs(std::uint64_t measured, std::uint64_t estimated) {
  if (measured == 0 && estimated == 0) return "-";
  return fmt::format("{} / {}", format_bytes(measured), format_bytes(estimated));
}

void print_tables(const EstimateInputs& in, const Estimate& e, const std::vector<Measured>& ms) {
  std::printf("strata compare: %s, micro-batch %d x %d, %d rank(s): measured (rank 0) / estimated\n\n",
              in.model.describe.c_str(), e.batch, e.seq_len, in.world);
  std::printf("%-45s %23s %23s %23s %22s %10s %10s %7s  %s\n", "stage, placement", tier_key(0), tier_key(1), tier_key(2),
              "collective/step", "step ms", "predicted", "ratio", "bottleneck (predicted)");
  for (std::size_t i = 0; i < e.rows.size(); ++i) {
    const EstimateRow& r = e.rows[i];
    const Measured& m = ms[i];
    if (!r.error.empty() || !m.error.empty()) {
      std::printf("%-45s error: %s\n", r.placement.label().c_str(), (r.error.empty() ? m.error : r.error).c_str());
      continue;
    }
    const double coll = m.bytes_per_step.value("collective", 0.0);
    std::printf("%-45s %23s %23s %23s %22s %10.1f %10s %7s  %s\n", r.placement.label().c_str(),
                vs(m.allocated[0], r.bytes.tier_bytes(Tier::device)).c_str(),
                vs(m.allocated[1], r.bytes.tier_bytes(Tier::pinned)).c_str(),
                vs(m.allocated[2], r.bytes.tier_bytes(Tier::nvme)).c_str(),
                r.collective_bytes > 0 ? vs(static_cast<std::uint64_t>(coll), static_cast<std::uint64_t>(r.collective_bytes)).c_str()
                                       : "-",
                m.step_ms, r.step ? fmt::format("{:.1f}", r.step->step_ms).c_str() : "-",
                r.step ? fmt::format("{:.2f}", m.step_ms / r.step->step_ms).c_str() : "-",
                r.step ? r.step->bottleneck.c_str() : "(no --profile)");
  }
  std::printf("\npeak bytes in use per phase (rank 0, the last step):\n");
  for (std::size_t i = 0; i < e.rows.size(); ++i) {
    if (!ms[i].error.empty() || !e.rows[i].error.empty()) continue;
    std::string line = fmt::format("  {:<43}", e.rows[i].placement.label());
    for (const auto& [k, v] : ms[i].phases.items()) line += fmt::format("  {} {}", k, format_bytes(v.get<std::uint64_t>()));
    std::printf("%s\n", line.c_str());
  }
  std::printf("\nmemory: the most each tier's budget gave out (the device's fetcher pools whole), against the plan's\n"
              "footprint; collectives: bytes rank 0 sent per step against ZeRO's 2Ψ(N-1)/N (3Ψ at stage 3; less when\n"
              "modules persist or are reused); ratio: measured step / predicted.\n");
}

void write_svgs(const std::string& dir, const EstimateInputs& in, const Estimate& e, const std::vector<Measured>& ms) {
  charts::make_chart_dir(dir);
  std::vector<charts::MemoryCell> memory;
  std::vector<charts::StepTimeCell> steps;
  for (std::size_t i = 0; i < e.rows.size(); ++i) {
    const EstimateRow& r = e.rows[i];
    if (!r.error.empty() || !ms[i].error.empty()) continue;
    memory.push_back(memory_cell(r, in.budgets));
    charts::StepTimeCell s;
    s.label = r.placement.label();
    s.busy_ms = ms[i].busy_ms;
    s.measured_step_ms = ms[i].step_ms;
    if (r.step) s.predicted_step_ms = r.step->step_ms;
    steps.push_back(std::move(s));
  }
  charts::write_memory_chart(dir + "/memory.svg", memory, "Estimated bytes per tier and rank, by kind");
  charts::write_step_time_chart(dir + "/step_time.svg", steps, "Busy time per resource (measured), step time");
  std::fprintf(stderr, "charts: %s/memory.svg, %s/step_time.svg\n", dir.c_str(), dir.c_str());
}

void run_compare(const CompareOptions& o, const train::StopSignals& stop) {
  const models::ModelSpecPtr model = models::model_from_flags(o.estimate.model_path, o.estimate.preset);
  // Every rank runs here (mpirun on this machine): they share its pinned memory and drive.
  EstimateFlags flags = o.estimate;
  flags.ranks_per_node = std::max(1, flags.world);
  EstimateInputs in = estimate_inputs(flags, *model);
  const std::vector<Placement> placements = chosen_placements(o);
  if (o.steps < kWarmupSteps + 1) {
    throw Error("--steps " + std::to_string(o.steps) + " leaves no timed step after the " +
                    std::to_string(kWarmupSteps) + " warm-up steps",
                "--steps", "give at least " + std::to_string(kWarmupSteps + 1));
  }
  TrainChildOptions child;
  child.preset = o.estimate.preset;
  child.model = o.estimate.model_path;
  child.steps = o.steps;
  child.verbose = o.verbose;
  child.dir = o.dir;
  if (in.world > 1) {
    child.launcher = {"mpirun", "-np", std::to_string(in.world), "--oversubscribe"};
    if (::geteuid() == 0) child.launcher.push_back("--allow-run-as-root");
  }
  ScratchFolder scratch(resolve_bench_dir(o.dir), "compare");
  in.nvme_path = scratch.file("nvme");
  std::filesystem::create_directories(in.nvme_path);
  in.budgets.set_node_nvme(runtime::estimate::free_nvme_bytes({in.nvme_path}));
  const Estimate e = runtime::estimate::make_estimate(in, placements);
  child.seq_len = e.seq_len;
  child.batch = e.batch;
  const std::string text = training_text(child, scratch);
  const std::string self = self_executable();
  std::vector<Measured> measured;
  for (std::size_t i = 0; i < e.rows.size(); ++i) {
    if (stop.received() != 0) return;
    const EstimateRow& r = e.rows[i];
    if (!r.error.empty() || !r.fits) {
      // The plan refuses it at start: no run, the estimate's reason.
      Measured refused;
      refused.error = r.error.empty() ? "not run: it does not fit (" + r.advice + ")" : r.error;
      std::fprintf(stderr, "[%zu/%zu] %s: %s\n", i + 1, e.rows.size(), r.placement.label().c_str(),
                   refused.error.c_str());
      measured.push_back(std::move(refused));
      continue;
    }
    const std::string name = fmt::format("s{}-{}-{}", r.placement.stage, static_cast<int>(r.placement.param),
                                         static_cast<int>(r.placement.optimizer));
    const std::string config_path = scratch.file(name + ".json");
    const std::string metrics = scratch.file(name + ".jsonl");
    write_config(config_path, Json::parse(runtime::config::config_to_json(runtime::estimate::placement_config(in, r.placement))));
    std::vector<std::string> extra;
    if (in.activation_checkpointing) extra.push_back("--activation-checkpointing");
    const ChildRun run = run_train_child(self, child, config_path, text, metrics, extra, kWarmupSteps + 1, o.steps);
    measured.push_back(measure(run));
    std::fprintf(stderr, "[%zu/%zu] %s: %s (%.1f s)\n", i + 1, e.rows.size(), r.placement.label().c_str(),
                 run.error.empty() ? fmt::format("{:.1f} ms/step", measured.back().step_ms).c_str() : run.error.c_str(),
                 run.seconds);
  }
  if (o.json) {
    for (std::size_t i = 0; i < e.rows.size(); ++i) std::printf("%s\n", cell_json(e, in, e.rows[i], measured[i]).dump().c_str());
  } else {
    print_tables(in, e, measured);
  }
  if (!o.svg_dir.empty()) write_svgs(o.svg_dir, in, e, measured);
}

}  // namespace

void add_compare_command(CLI::App& app) {
  auto o = std::make_shared<CompareOptions>();
  CLI::App* cmd = app.add_subcommand(
      "compare", "train each ZeRO stage x placement a few steps and print what it used and moved beside the estimate");
  add_estimate_flags(*cmd, o->estimate, /*ranks_per_node=*/false);
  cmd->add_option("--steps", o->steps, "steps per run (the first 2 are warm-up)")->capture_default_str();
  cmd->add_option("--stages", o->stages, "the ZeRO stages to run")->capture_default_str();
  cmd->add_option("--placements", o->placements,
                  "the placements the cells' parameters and optimizer may have: all, or a list of none, cpu, nvme (device: none)")
      ->capture_default_str();
  cmd->add_option("--dir", o->dir, "parent of the scratch folder (swap files, configs, metrics; removed afterwards)");
  cmd->add_option("--svg", o->svg_dir, "write the charts here (memory per tier, step time per resource)");
  cmd->add_flag("--json", o->json, "one JSON object per cell: the estimate's fields and \"measured\"");
  cmd->add_flag("--verbose", o->verbose, "each child's command line and output on stderr");
  cmd->callback([o] { run_until_signal([o](const train::StopSignals& stop) { run_compare(*o, stop); }); });
}

}  // namespace strata::tools
