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
// The peers (--peers; Note [The peers]): the same model and shapes trained by PyTorch resident,
// DeepSpeed (ZeRO-2 optimizer on CPU, ZeRO-3 on CPU, ZeRO-3 on NVMe) and PyTorch FSDP2 with
// CPUOffloadPolicy, each a Python child (tools/bench/step_peers.py) after the strata cells, as
// tokens/s and as a ratio to the strata cell that does the same (vs strata = the peer's tokens/s /
// the strata cell's).
//
// A child that fails (a plan that does not fit, a bad config, a crash; a peer that fails or cannot
// be imported) gives its error line in its row and the bench goes on. The cell configs: Note
// [The cell configs] (bench_children.cpp);
// the reference: stage 0, nothing offloaded, strata.device_memory = the plan's device need + 25 %
// + 64 MiB (or --device-memory when larger).
//
// This file runs the bench (the cells round by round, the disk bound, the peers) and prints;
// bench_step_peers.{h,cpp} are the peers, bench_step_report.{h,cpp} a cell's numbers, its rows
// and JSON lines.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/cpu_features.h"
#include "core/error.h"
#include "core/units.h"
#include "models/gpt/gpt_config.h"
#include "models/gpt/gpt_layout.h"
#include "models/gpt/gpt_spec.h"
#include "runtime/config/config.h"
#include "runtime/device/device.h"
#include "runtime/tiers/plan.h"
#include "tools/bench/bench.h"
#include "tools/bench/bench_children.h"
#include "tools/bench/bench_nvme_disk.h"
#include "tools/bench/bench_scripts.h"
#include "tools/bench/bench_step_peers.h"
#include "tools/bench/bench_step_report.h"

namespace strata::tools {
namespace {

using Clock = std::chrono::steady_clock;
using step_bench::Cell;
using step_bench::cell_json;
using step_bench::counterpart;
using step_bench::kReference;
using step_bench::median_step_ms;
using step_bench::Peer;
using step_bench::peer_json;
using step_bench::PeerSpec;
using step_bench::placement_title;
using step_bench::print_header;
using step_bench::print_peers;
using step_bench::print_row;
using step_bench::run_peer;
using step_bench::select_peers;
using step_bench::summarize;

// The reference's device budget: what the plan needs for stage 0 with nothing offloaded, plus
// headroom, rounded up to MiB; --device-memory instead when it is larger.
std::uint64_t resident_device_bytes(const StepBenchOptions& o, const models::ModelSpec& model,
                                    Json config) {
  config["strata"].erase("device_memory");
  runtime::config::ResolveInputs resolve;
  resolve.hidden_size = static_cast<std::uint64_t>(model.hidden_size());
  const runtime::config::Config resolved = runtime::config::resolve_config(
      runtime::config::parse_config(config.dump(), "strata bench step (reference)").config, resolve);
  const models::ModelLayout layout = model.layout();
  runtime::tiers::PlanInputs inputs;
  inputs.module_numels = layout.module_numels();
  inputs.module_names = layout.module_names();
  inputs.dtype = o.dtype == "bf16" ? DType::bf16 : DType::f32;
  inputs.activation_bytes =
      model.activation_bytes({.dtype = inputs.dtype}, o.batch, o.seq_len);
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

// "1,3" -> {1, 3}: each of 1, 2 and 3 at most once, ascending; throws strata::Error naming
// --stages for anything else.
std::vector<int> parse_stages(std::string_view text) {
  std::vector<int> out;
  for (const std::string& item : split_list(text)) {
    if (item != "1" && item != "2" && item != "3") {
      throw Error("'" + item + "' is not a ZeRO stage bench step runs", "--stages",
                  "give a comma-separated list of 1, 2 and 3 (stage 0 is the reference, always run)");
    }
    out.push_back(item[0] - '0');
  }
  if (out.empty()) throw Error("no stage given", "--stages", "give a comma-separated list of 1, 2 and 3");
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

// The name of the device the children run on ("NVIDIA H100 80GB HBM3": the first CUDA device,
// which a one-rank child takes), from the driver's listing, which creates no CUDA context.
std::string describe_device(const std::string& kind) {
  if (kind == "host") return "host";
  const runtime::device::CudaAvailability cuda = runtime::device::cuda_availability();
  if (cuda.devices.empty()) return kind == "cuda" ? "cuda (" + cuda.why_not + ")" : "host";
  return cuda.devices.front().name;
}

// Note [A stopped bench step]
// A signal (SIGTERM from `timeout` when a GPU lease runs out, SIGINT) reaches the running child
// too (Note [Stopping on a signal], bench_children.h). bench step then starts nothing more: the
// child's interrupted run is dropped, cells never run say "not run", the disk bound and the
// peers not yet run are left out, and what finished (every round of a cell that completed
// before, and the peers done) is printed as usual, each JSON line with "stopped": true. Then the
// signal ends the process.

// The bench (and when a signal stops it: Note [A stopped bench step]).
void run_bench(const StepBenchOptions& o, const train::StopSignals& stop) {
  const models::ModelSpecPtr model =
      child_model(o, kWarmupSteps, fmt::format("the first {} are warm-up", kWarmupSteps));
  const std::string self = self_executable();
  const std::vector<const PeerSpec*> peer_specs = select_peers(o);
  const std::vector<std::string> placements = parse_placements(o.placements);
  const std::vector<int> stages = parse_stages(o.stages);
  const std::string device_name = describe_device(o.device);
  if (!peer_specs.empty() && model->family() != "gpt2") {
    throw Error(fmt::format("--peers builds GPT-2 models only; {} is a {}", o.model.empty() ? o.preset : o.model,
                            model->architecture()),
                "--peers", "drop --peers, or compare on a GPT-2 preset");
  }
  std::string python, peer_script, reference_dir;
  if (!peer_specs.empty()) {
    python = !o.python.empty() ? o.python : o.device == "cuda" ? "python3" : "/usr/bin/python3";
    const auto script = find_bench_script("step_peers.py", o.peer_script);
    if (!script) {
      throw Error(o.peer_script.empty() ? "tools/bench/step_peers.py not found next to the binary, in the "
                                          "source tree or under the current folder"
                                        : "not a file: " + o.peer_script,
                  "--peer-script", "run from a checkout's root, give --peer-script, or --peers none");
    }
    peer_script = script->string();
    if (const auto reference = source_folder("tests/reference")) reference_dir = reference->string();
  }
  const std::vector<std::string> child_args =
      o.checkpointing ? std::vector<std::string>{"--activation-checkpointing"} : std::vector<std::string>{};

  const Clock::time_point start = Clock::now();
  const double load_start = load_average();
  ScratchFolder scratch(resolve_bench_dir(o.dir), "step");
  const std::string nvme_path = scratch.file("nvme");
  std::error_code ec;
  std::filesystem::create_directory(nvme_path, ec);
  if (ec) throw system_error(ec.value(), "mkdir", nvme_path);
  const std::string text = training_text(o, scratch);

  // The cells: the reference first, then placement by placement, stage by stage.
  std::vector<Cell> cells(1 + placements.size() * stages.size());
  cells[0].placement = kReference;
  for (std::size_t p = 0, i = 1; p < placements.size(); ++p) {
    for (int s : stages) {
      cells[i].placement = placements[p];
      cells[i++].stage = s;
    }
  }
  Json reference_config = cell_config(o, "device", 0, nvme_path);
  const std::uint64_t reference_bytes = resident_device_bytes(o, *model, reference_config);
  reference_config["strata"]["device_memory"] = reference_bytes;

  std::FILE* text_out = o.json ? stderr : stdout;
  const CpuInfo cpu = cpu_info();
  std::fprintf(
      text_out,
      "strata bench step: %s (%lld params), micro-batch %d x %d tokens, %s, gradient_clipping "
      "%g, %sactivation checkpointing, %d steps per cell (%d warm-up) x %d rounds, device %s%s\n  "
      "%s, %d CPUs in the "
      "affinity mask, load average %.2f at the start\n  scratch %s (nvme_path %s: %s)\n  "
      "reference: stage 0, nothing offloaded, device memory %s; vs resident = tokens/s / the "
      "reference's; overlap = step ms / busiest ms\n",
      o.model.empty() ? o.preset.c_str() : o.model.c_str(),
      static_cast<long long>(model->num_params()), o.batch, o.seq_len, o.dtype.c_str(),
      o.gradient_clipping, o.checkpointing ? "" : "no ", o.steps, kWarmupSteps, o.rounds, o.device.c_str(),
      o.device_memory.empty() ? "" : (", device memory " + o.device_memory).c_str(),
      cpu.model_name.c_str(), cpu.logical_cores_in_affinity_mask, load_start,
      scratch.path().c_str(), nvme_path.c_str(), describe_mount(nvme_path).c_str(),
      format_bytes(reference_bytes).c_str());
  const std::string ds_nvme_path = o.nvme_path.empty() ? scratch.file("deepspeed-nvme") : o.nvme_path;
  if (!peer_specs.empty()) {
    std::string names;
    for (const PeerSpec* p : peer_specs) names += (names.empty() ? "" : ", ") + std::string(p->name);
    std::fprintf(text_out, "  peers after the cells: %s (%s %s)%s\n", names.c_str(), python.c_str(),
                 peer_script.c_str(),
                 std::any_of(peer_specs.begin(), peer_specs.end(),
                             [](const PeerSpec* p) { return std::string(p->name) == "deepspeed_zero3_nvme"; })
                     ? fmt::format("; DeepSpeed's nvme_path {}: {}", ds_nvme_path, describe_mount(
                           o.nvme_path.empty() ? scratch.path() : o.nvme_path)).c_str()
                     : "");
  }
  std::fflush(text_out);

  // Round by round, every cell in the same order, so that a machine that gets busier or
  // quieter during the run moves the reference and the cells alike. A cell that failed is not
  // run again.
  // Stopped by a signal (Note [A stopped bench step]), no child is started after the one
  // running, and what finished is printed.
  auto stopped = [&stop] { return stop.received() != 0; };
  for (int round = 1; round <= o.rounds && !stopped(); ++round) {
    double reference_ms = 0;  // this round's, for the progress lines
    for (std::size_t i = 0; i < cells.size() && !stopped(); ++i) {
      Cell& cell = cells[i];
      if (!cell.error.empty()) continue;
      const std::string name = fmt::format("{}-stage{}", cell.placement, cell.stage);
      const std::string config_path = scratch.file(name + ".json");
      const std::string metrics = scratch.file(fmt::format("{}-round{}.jsonl", name, round));
      if (round == 1) {
        write_config(config_path, cell.placement == kReference
                                      ? reference_config
                                      : cell_config(o, cell.placement, cell.stage, nvme_path));
      }
      ChildRun run = run_train_child(self, o, config_path, text, metrics, child_args, kWarmupSteps + 1, o.steps);
      if (stopped()) break;  // the signal reached the child too: its run is not a result
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
  for (Cell& cell : cells) {
    if (cell.error.empty() && cell.rows.empty()) cell.error = "not run: the bench was stopped by a signal";
    if (cell.error.empty()) summarize(cell);
  }
  // The disk bound of the nvme cells: the I/O engine, with the cells' aio options, writing and
  // reading back as many bytes as the busiest cell moves each way per step, in nvme_path.
  std::uint64_t disk_bytes = 0;
  for (const Cell& cell : cells) {
    if (cell.placement != std::string("nvme") || !cell.error.empty()) continue;
    disk_bytes = std::max({disk_bytes, cell.bytes.value("nvme_read", std::uint64_t{0}),
                           cell.bytes.value("nvme_write", std::uint64_t{0})});
  }
  DiskRates disk;
  if (disk_bytes > 0 && !stopped()) {
    disk_bytes = std::clamp<std::uint64_t>(disk_bytes, 64 * kMiB, 4 * kGiB);
    disk = measure_disk_rates(run_aio_options(cell_config(o, "nvme", 3, nvme_path), *model),
                              nvme_path + "/disk-limit.bin", disk_bytes, /*read_back=*/true);
    std::fprintf(stderr, "[disk] %s written at %.3f GB/s, read back at %.3f GB/s (the nvme cells' bound)\n",
                 format_bytes(disk_bytes).c_str(), disk.write_gbps, disk.read_gbps);
    for (Cell& cell : cells) {
      if (cell.placement != std::string("nvme") || !cell.error.empty()) continue;
      const double read_ms = static_cast<double>(cell.bytes.value("nvme_read", std::uint64_t{0})) / disk.read_gbps / 1e6;
      const double write_ms =
          static_cast<double>(cell.bytes.value("nvme_write", std::uint64_t{0})) / disk.write_gbps / 1e6;
      cell.disk_bound_ms = std::max(read_ms, write_ms);
      cell.disk_serial_ms = read_ms + write_ms;
    }
  }

  // The peers, one child each, after every strata cell (the device is theirs alone).
  std::vector<Peer> peers;
  for (std::size_t i = 0; i < peer_specs.size() && !stopped(); ++i) {
    const PeerSpec& spec = *peer_specs[i];
    Peer peer = run_peer(o, static_cast<const models::GptSpec&>(*model).config(), spec, python, peer_script,
                         reference_dir, ds_nvme_path, scratch.file(fmt::format("peer-{}.log", spec.name)));
    if (stopped()) break;
    const Peer& p = peers.emplace_back(std::move(peer));
    const std::string where = fmt::format("[peer {}/{}] {}", i + 1, peer_specs.size(), spec.name);
    if (p.error.empty()) {
      const Cell* strata = counterpart(spec, cells);
      const std::string ratio =
          strata != nullptr && strata->error.empty()
              ? fmt::format(", {:.2f} of strata's {}", p.tokens_per_s / strata->tokens_per_s,
                            std::string(spec.placement) == kReference
                                ? std::string("resident")
                                : fmt::format("{} stage {}", spec.placement, spec.stage))
              : "";
      std::fprintf(stderr, "%s: %.1f ms/step%s (%.1f s)\n", where.c_str(), p.step_ms, ratio.c_str(), p.seconds);
    } else {
      std::fprintf(stderr, "%s: error: %s (%.1f s)\n", where.c_str(), p.error.c_str(), p.seconds);
    }
    std::fflush(stderr);
  }

  if (o.json) {
    for (const Cell& cell : cells) {
      Json j = cell_json(o, cell, cells.front(), peers);
      j["device_name"] = device_name;
      if (stopped()) j["stopped"] = true;
      std::printf("%s\n", j.dump().c_str());
    }
    for (const Peer& p : peers) {
      Json j = peer_json(o, p, cells);
      j["device_name"] = device_name;
      if (stopped()) j["stopped"] = true;
      std::printf("%s\n", j.dump().c_str());
    }
    std::fflush(stdout);
  }

  const Cell& reference = cells.front();
  for (const std::string& p : placements) {
    std::fprintf(text_out, "\n%s\n", placement_title(p).c_str());
    print_header(text_out);
    print_row(text_out, reference, reference);
    for (const Cell& c : cells) {
      if (c.placement == p) print_row(text_out, c, reference);
    }
  }
  if (!peers.empty()) print_peers(text_out, peers, cells);
  std::fprintf(text_out, "\n%.0f s in all, load average %.2f at the end\n",
               std::chrono::duration<double>(Clock::now() - start).count(), load_average());
  // Everything is printed; a strata cell that failed (its child, or a loss that is not finite)
  // still makes the bench fail, so a script never reads its numbers as a result.
  if (stopped()) return;
  std::string failed;
  for (const Cell& c : cells) {
    if (!c.error.empty()) failed += fmt::format("{}{} stage {}", failed.empty() ? "" : ", ", c.placement, c.stage);
  }
  if (!failed.empty()) {
    throw Error(fmt::format("bench step: {} failed (each cell's error is in its row above)", failed), "",
                "run that cell alone with strata train --verbose to see why");
  }
}

}  // namespace

void bench_step(const StepBenchOptions& o) {
  run_until_signal([&o](const train::StopSignals& stop) { run_bench(o, stop); });
}

}  // namespace strata::tools
