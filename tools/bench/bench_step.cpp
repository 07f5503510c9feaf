// strata bench step: the ZeRO training step for each placement of the model states (device,
// cpu, nvme) and ZeRO stage (1, 2, 3), against the same model fully resident on the device
// (stage 0, no offload) measured in the same run.
//
// Every cell is a `strata train` child of this binary (tools/bench/bench_children.h). --rounds R runs
// every cell R times, round by round in the same order (the reference first), so that the load
// of a shared machine moves the reference and the cells alike. The first kWarmupSteps steps of
// each run are left out (step 1 records the prefetch trace and first touches every buffer); the
// timed steps of all rounds give medians of the step time, its phases and the busy time of the
// busiest resource (the trace track that was busy longest in the step). tokens/s = tokens per
// step / median step; TFLOPS = strata train's 6 N FLOPs per token x tokens/s. overlap = step ms /
// busiest ms: 1.00 when the step takes no longer than its busiest resource, above 1 when
// resources take turns. vs resident = the cell's tokens/s / the reference's: what the placement
// and the stage cost.
//
// A child that fails (a plan that does not fit, a bad config, a crash) gives its error line in
// its row and the bench goes on. The cell configs: Note [The cell configs] (bench_children.cpp);
// the reference: stage 0, nothing offloaded, strata.device_memory = the plan's device need + 25 %
// + 64 MiB (or --device-memory when larger).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/cpu_features.h"
#include "core/error.h"
#include "core/units.h"
#include "models/gpt/gpt_config.h"
#include "models/gpt/gpt_layout.h"
#include "models/gpt/gpt_model.h"
#include "runtime/config/config.h"
#include "runtime/tiers/plan.h"
#include "tools/bench/bench.h"
#include "tools/bench/bench_children.h"
#include "tools/bench/bench_nvme_disk.h"

namespace strata::tools {
namespace {

using Clock = std::chrono::steady_clock;

constexpr int kStages[] = {1, 2, 3};
constexpr const char* kPlacements[] = {"device", "cpu", "nvme"};
constexpr const char* kReference = "resident";

// The reference's device budget: what the plan needs for stage 0 with nothing offloaded, plus
// headroom, rounded up to MiB; --device-memory instead when it is larger.
std::uint64_t resident_device_bytes(const StepBenchOptions& o, const models::GptConfig& model,
                                    Json config) {
  config["strata"].erase("device_memory");
  runtime::config::ResolveInputs resolve;
  resolve.hidden_size = static_cast<std::uint64_t>(model.n_embd);
  const runtime::config::Config resolved = runtime::config::resolve_config(
      runtime::config::parse_config(config.dump(), "strata bench step (reference)").config, resolve);
  const models::GptLayout layout = models::GptLayout::build(model);
  runtime::tiers::PlanInputs inputs;
  inputs.module_numels = layout.module_numels();
  inputs.module_names = layout.module_names();
  inputs.dtype = o.dtype == "bf16" ? DType::bf16 : DType::f32;
  inputs.activation_bytes =
      models::GptModel::activation_bytes(model, {.dtype = inputs.dtype}, o.batch, o.seq_len);
  inputs.device_budget_bytes = std::uint64_t{1} << 60;  // ask for the need, not the fit
  inputs.pinned_budget_bytes = std::uint64_t{1} << 60;
  const std::uint64_t need = runtime::tiers::make_plan(resolved, inputs).needed(runtime::tiers::Tier::device);
  std::uint64_t bytes = need + need / 4 + (std::uint64_t{64} << 20);
  bytes = (bytes + kMiB - 1) / kMiB * kMiB;
  if (!o.device_memory.empty()) {
    const auto given = parse_bytes(o.device_memory);
    if (!given) {
      throw Error("not a size: " + o.device_memory, "--device-memory", "e.g. --device-memory 512MiB");
    }
    bytes = std::max(bytes, *given);
  }
  return bytes;
}

struct Cell {
  std::string placement;  // kReference, or one of kPlacements
  int stage = 0;
  std::string error;      // not empty: the child failed and the numbers are unset
  std::vector<Json> rows; // the timed steps of every round's JSONL
  double step_ms = 0, tokens_per_s = 0, tflops = 0;
  double forward_ms = 0, backward_ms = 0, optimizer_ms = 0;
  std::string busiest;    // the track most often busiest over the timed steps
  double busiest_ms = 0;  // median over the timed steps of the busiest track's busy time
  double overlap = 0;     // step_ms / busiest_ms
  Json bytes;             // bytes moved in the last timed step, per link
};

// The median step of `rows` (one child's, or every round's).
double median_step_ms(const std::vector<Json>& rows) {
  std::vector<double> ms;
  for (const Json& r : rows) ms.push_back(number(r, "step_ms"));
  return median(ms);
}

// cell.rows -> the cell's numbers: medians over every timed step of every round.
void summarize(Cell& cell) {
  std::vector<double> step_ms, tokens, flops_per_token, fwd, bwd, opt, busy;
  std::map<std::string, int> busiest_count;
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
    ++busiest_count[r.value("busiest", std::string("?"))];
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
}

Json cell_json(const Cell& c, const Cell& reference) {
  Json j;
  j["placement"] = c.placement;
  j["stage"] = c.stage;
  if (!c.error.empty()) {
    j["error"] = c.error;
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
  return j;
}

// The bench; returns early, without the tables, when `stop` caught a signal (Note [Stopping on a
// signal], bench_children.h).
void run_bench(const StepBenchOptions& o, const train::StopSignals& stop) {
  const models::GptConfig model =
      child_model(o, kWarmupSteps, fmt::format("the first {} are warm-up", kWarmupSteps));
  const std::string self = self_executable();

  const Clock::time_point start = Clock::now();
  const double load_start = load_average();
  ScratchFolder scratch(resolve_bench_dir(o.dir), "step");
  const std::string nvme_path = scratch.file("nvme");
  std::error_code ec;
  std::filesystem::create_directory(nvme_path, ec);
  if (ec) throw system_error(ec.value(), "mkdir", nvme_path);
  const std::string text = training_text(o, scratch);

  // The cells: the reference first, then placement by placement, stage by stage.
  std::vector<Cell> cells(1 + std::size(kPlacements) * std::size(kStages));
  cells[0].placement = kReference;
  for (std::size_t p = 0, i = 1; p < std::size(kPlacements); ++p) {
    for (int s : kStages) {
      cells[i].placement = kPlacements[p];
      cells[i++].stage = s;
    }
  }
  Json reference_config = cell_config(o, "device", 0, nvme_path);
  const std::uint64_t reference_bytes = resident_device_bytes(o, model, reference_config);
  reference_config["strata"]["device_memory"] = reference_bytes;

  std::FILE* text_out = o.json ? stderr : stdout;
  const CpuInfo cpu = cpu_info();
  std::fprintf(
      text_out,
      "strata bench step: %s (%lld params), micro-batch %d x %d tokens, %s, gradient_clipping "
      "%g, %d steps per cell (%d warm-up) x %d rounds, device %s%s\n  %s, %d CPUs in the "
      "affinity mask, load average %.2f at the start\n  scratch %s (nvme_path %s: %s)\n  "
      "reference: stage 0, nothing offloaded, device memory %s; vs resident = tokens/s / the "
      "reference's; overlap = step ms / busiest ms\n",
      o.model.empty() ? o.preset.c_str() : o.model.c_str(),
      static_cast<long long>(model.num_params()), o.batch, o.seq_len, o.dtype.c_str(),
      o.gradient_clipping, o.steps, kWarmupSteps, o.rounds, o.device.c_str(),
      o.device_memory.empty() ? "" : (", device memory " + o.device_memory).c_str(),
      cpu.model_name.c_str(), cpu.logical_cores_in_affinity_mask, load_start,
      scratch.path().c_str(), nvme_path.c_str(), describe_mount(nvme_path).c_str(),
      format_bytes(reference_bytes).c_str());
  std::fflush(text_out);

  // Round by round, every cell in the same order, so that a machine that gets busier or
  // quieter during the run moves the reference and the cells alike. A cell that failed is not
  // run again.
  for (int round = 1; round <= o.rounds; ++round) {
    double reference_ms = 0;  // this round's, for the progress lines
    for (std::size_t i = 0; i < cells.size(); ++i) {
      Cell& cell = cells[i];
      if (stop.received() != 0) return;
      if (!cell.error.empty()) continue;
      const std::string name = fmt::format("{}-stage{}", cell.placement, cell.stage);
      const std::string config_path = scratch.file(name + ".json");
      const std::string metrics = scratch.file(fmt::format("{}-round{}.jsonl", name, round));
      if (round == 1) {
        write_config(config_path, cell.placement == kReference
                                      ? reference_config
                                      : cell_config(o, cell.placement, cell.stage, nvme_path));
      }
      ChildRun run = run_train_child(self, o, config_path, text, metrics, {}, kWarmupSteps + 1, o.steps);
      cell.error = run.error;
      const std::string where = fmt::format("[round {}/{}, {}/{}] {} stage {}", round, o.rounds,
                                            i + 1, cells.size(), cell.placement, cell.stage);
      if (cell.error.empty()) {
        const double ms = median_step_ms(run.rows);
        if (i == 0) reference_ms = ms;
        const std::string ratio =
            reference_ms > 0 ? fmt::format(", {:.2f} of this round's resident", reference_ms / ms) : "";
        std::fprintf(stderr, "%s: %.1f ms/step%s (%.1f s)\n", where.c_str(), ms, ratio.c_str(), run.seconds);
        cell.rows.insert(cell.rows.end(), run.rows.begin(), run.rows.end());
      } else {
        std::fprintf(stderr, "%s: error: %s (%.1f s)\n", where.c_str(), cell.error.c_str(), run.seconds);
      }
      std::fflush(stderr);
    }
  }
  if (stop.received() != 0) return;
  for (Cell& cell : cells) {
    if (cell.error.empty()) summarize(cell);
  }
  if (o.json) {
    for (const Cell& cell : cells) std::printf("%s\n", cell_json(cell, cells.front()).dump().c_str());
    std::fflush(stdout);
  }

  const Cell& reference = cells.front();
  for (const char* p : kPlacements) {
    std::fprintf(text_out, "\n%s\n", placement_title(p).c_str());
    print_header(text_out);
    print_row(text_out, reference, reference);
    for (const Cell& c : cells) {
      if (c.placement == p) print_row(text_out, c, reference);
    }
  }
  std::fprintf(text_out, "\n%.0f s in all, load average %.2f at the end\n",
               std::chrono::duration<double>(Clock::now() - start).count(), load_average());
}

}  // namespace

void bench_step(const StepBenchOptions& o) {
  run_until_signal([&o](const train::StopSignals& stop) { run_bench(o, stop); });
}

}  // namespace strata::tools
