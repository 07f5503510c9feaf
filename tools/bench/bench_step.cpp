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
#include <sys/wait.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <sstream>
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

namespace strata::tools {
namespace {

using Clock = std::chrono::steady_clock;

constexpr const char* kReference = "resident";

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

// Note [The peers]
// Each peer is `PYTHON step_peers.py --peer NAME` with the model's config, --batch, --seq-len,
// --dtype, --gradient-clipping, --checkpointing, AdamW as the cells have it (lr 1e-3, weight decay
// 0.01, betas 0.9/0.999, eps 1e-8), --warmup kWarmupSteps and as many timed steps as a strata cell
// has over all rounds; random token ids. Its stdout's last JSON line is its result; its stderr
// goes to the scratch folder (to ours with --verbose), and its last line is the row's error when
// the JSON says nothing. The strata cell each is compared with:
//   torch_resident        resident (stage 0)     PyTorch, fp32 parameters + autocast, AdamW
//   deepspeed_zero2_cpu   cpu, stage 2           ZeRO-Offload
//   deepspeed_zero3_cpu   cpu, stage 3
//   deepspeed_zero3_nvme  nvme, stage 3          ZeRO-Infinity, swap folder --nvme-path
//   fsdp2_cpu             cpu, stage 3           FSDP2 + CPUOffloadPolicy
// DeepSpeed and FSDP2 need CUDA; torch_resident runs on the CPU with --device host.
struct PeerSpec {
  const char* name;
  const char* group;      // what --peers names it by, besides its name
  const char* title;
  const char* placement;  // the strata cell it is compared with
  int stage;
};

constexpr PeerSpec kPeers[] = {
    {"torch_resident", "torch", "PyTorch resident", kReference, 0},
    {"deepspeed_zero2_cpu", "deepspeed", "DeepSpeed ZeRO-2, optimizer on CPU", "cpu", 2},
    {"deepspeed_zero3_cpu", "deepspeed", "DeepSpeed ZeRO-3, params + optimizer on CPU", "cpu", 3},
    {"deepspeed_zero3_nvme", "deepspeed", "DeepSpeed ZeRO-3, params + optimizer on NVMe", "nvme", 3},
    {"fsdp2_cpu", "fsdp2", "PyTorch FSDP2, CPUOffloadPolicy", "cpu", 3},
};

// The peers --peers names, in kPeers' order. Throws strata::Error naming --peers for an unknown
// name, and for a peer that needs CUDA without --device cuda.
std::vector<const PeerSpec*> select_peers(const StepBenchOptions& o) {
  std::vector<std::string> names = split_list(o.peers);
  if (names.size() == 1 && names[0] == "auto") {
    names = {o.device == "cuda" ? "all" : "none"};
  }
  std::vector<const PeerSpec*> out;
  for (const PeerSpec& p : kPeers) {
    for (const std::string& n : names) {
      if (n == "all" || n == p.name || n == p.group) {
        out.push_back(&p);
        break;
      }
    }
  }
  for (const std::string& n : names) {
    const bool known = n == "all" || n == "none" ||
                       std::any_of(std::begin(kPeers), std::end(kPeers),
                                   [&](const PeerSpec& p) { return n == p.name || n == p.group; });
    if (!known) {
      throw Error(fmt::format("unknown peer \"{}\"", n), "--peers",
                  "give auto, all, none, or a comma-separated list of torch, deepspeed, fsdp2, "
                  "torch_resident, deepspeed_zero2_cpu, deepspeed_zero3_cpu, deepspeed_zero3_nvme, fsdp2_cpu");
    }
    if (n == "none" && names.size() > 1) {
      throw Error("--peers none with other peers", "--peers", "give none alone");
    }
  }
  if (o.device == "auto" && !out.empty()) {
    throw Error("--peers with --device auto: the peers need to know where the cells ran", "--device",
                "give --device cuda or host");
  }
  if (o.device != "cuda") {
    for (const PeerSpec* p : out) {
      if (std::string(p->name) != "torch_resident") {
        throw Error(fmt::format("the peer {} needs CUDA, and the bench runs with --device {}", p->name,
                                o.device),
                    "--peers", "give --device cuda, or --peers torch (PyTorch on the CPU) or none");
      }
    }
  }
  return out;
}

struct Peer {
  const PeerSpec* spec = nullptr;
  std::string error;      // not empty: it failed or could not be imported
  double step_ms = 0, tokens_per_s = 0;
  std::size_t timed_steps = 0;
  double seconds = 0;     // wall time of the child
  Json info;              // its JSON line (versions, model, optimizer, ...)
};

// The last line of `text` that is not blank.
std::string last_line(const std::string& text) {
  std::istringstream in(text);
  std::string last;
  for (std::string line; std::getline(in, line);) {
    if (line.find_first_not_of(" \t\r") != std::string::npos) last = line;
  }
  return last;
}

// Runs one peer (Note [The peers]).
Peer run_peer(const StepBenchOptions& o, const models::GptConfig& model, const PeerSpec& spec,
              const std::string& python, const std::string& script, const std::string& reference_dir,
              const std::string& nvme_path, const std::string& log_path) {
  Peer peer;
  peer.spec = &spec;
  const int timed = o.rounds * (o.steps - kWarmupSteps);
  std::string command = fmt::format(
      "{} {} --peer {} --vocab-size {} --n-positions {} --n-embd {} --n-layer {} --n-head {} "
      "--layer-norm-epsilon {} --batch {} --seq-len {} --steps {} --warmup {} --dtype {} --device {} "
      "--lr 1e-3 --betas 0.9 0.999 --eps 1e-8 --weight-decay 0.01 --gradient-clipping {}",
      shell_quote(python), shell_quote(script), spec.name, model.vocab_size, model.n_positions, model.n_embd,
      model.n_layer, model.n_head, model.layer_norm_epsilon, o.batch, o.seq_len, timed, kWarmupSteps,
      o.dtype, o.device == "cuda" ? "cuda" : "cpu", o.gradient_clipping);
  if (o.checkpointing) command += " --checkpointing";
  if (std::string(spec.name) == "deepspeed_zero3_nvme") command += " --nvme-path " + shell_quote(nvme_path);
  if (!reference_dir.empty()) command += " --reference-dir " + shell_quote(reference_dir);
  command += " </dev/null 2>" + shell_quote(log_path);
  if (o.verbose) std::fprintf(stderr, "%s\n", command.c_str());
  std::fflush(nullptr);
  const auto t0 = Clock::now();
  std::FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) {
    peer.error = fmt::format("cannot start {}", python);
    return peer;
  }
  std::string out;
  char buf[4096];
  while (std::fgets(buf, sizeof buf, pipe) != nullptr) out += buf;
  const int status = pclose(pipe);
  peer.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  // Its result: the last line of stdout that is its JSON (DeepSpeed prints on stdout too).
  Json result;
  std::istringstream in(out);
  for (std::string line; std::getline(in, line);) {
    Json j = Json::parse(line, nullptr, false);
    if (!j.is_discarded() && j.is_object() && j.value("peer", std::string()) == spec.name) result = std::move(j);
  }
  const std::string how = WIFEXITED(status) ? fmt::format("exit status {}", WEXITSTATUS(status))
                                            : fmt::format("killed by signal {}", WTERMSIG(status));
  std::string log;
  if (std::FILE* f = std::fopen(log_path.c_str(), "r")) {
    while (std::fgets(buf, sizeof buf, f) != nullptr) log += buf;
    std::fclose(f);
  }
  if (o.verbose) std::fprintf(stderr, "%s%s", out.c_str(), log.c_str());
  if (!result.is_object()) {
    const std::string last = last_line(log);
    peer.error = fmt::format("{}no result from {} ({})", last.empty() ? "" : last + "; ",
                             std::filesystem::path(script).filename().string(), how);
    return peer;
  }
  peer.info = result;
  if (!result.value("ok", false)) {
    peer.error = (result.value("importable", true) ? "" : "not importable: ") +
                 result.value("error", std::string("failed"));
    return peer;
  }
  std::vector<double> ms;
  if (result.contains("step_ms") && result["step_ms"].is_array()) {
    for (const Json& v : result["step_ms"]) {
      if (v.is_number()) ms.push_back(v.get<double>());
    }
  }
  const double tokens = number(result, "tokens_per_step");
  if (ms.empty() || !(tokens > 0)) {
    peer.error = "its JSON lacks step_ms or tokens_per_step";
    return peer;
  }
  peer.timed_steps = ms.size();
  peer.step_ms = median(ms);
  peer.tokens_per_s = tokens / (peer.step_ms / 1e3);
  if (!std::isfinite(peer.tokens_per_s) || peer.tokens_per_s <= 0) {
    peer.error = "its step times are not positive";
  }
  return peer;
}

struct Cell {
  std::string placement;  // kReference, or "device", "cpu" or "nvme"
  int stage = 0;
  std::string error;      // not empty: the child failed and the numbers are unset
  std::vector<Json> rows; // the timed steps of every round's JSONL
  double step_ms = 0, tokens_per_s = 0, tflops = 0;
  double forward_ms = 0, backward_ms = 0, optimizer_ms = 0;
  std::string busiest;    // the track most often busiest over the timed steps
  double busiest_ms = 0;  // median over the timed steps of the busiest track's busy time
  // nvme cells: the disk's time for the step's bytes at the rates measured in the same run
  // (reads and writes overlapped: the larger of the two; one after the other: their sum).
  double disk_bound_ms = 0, disk_serial_ms = 0;
  double overlap = 0;     // step_ms / busiest_ms
  Json bytes;             // bytes moved in the last timed step, per link
  // The CPU Adam's busy time per step (the median over the timed steps of the "cpu optimizer"
  // track's busy_ms); null when the cell has no CPU Adam (optimizer states on the device).
  Json cpu_adam_busy_ms;
  // Every timed step's global gradient norm (with clipping), and over the timed steps the module
  // updates speculated and redone: speculation pays only in steps whose norm stays under the
  // threshold (Note [Speculative updates], runtime/zero/speculation.h).
  std::vector<double> grad_norms;
  std::uint64_t speculative_updates = 0, speculative_redone = 0;
  Json losses = Json::array();  // every timed step's loss (null where it was not finite)
};

constexpr const char* kCpuAdamTrack = "cpu optimizer";  // runtime/zero/updater.cpp's spans
constexpr const char* kCpuAdamNote = "null: the cell runs no CPU Adam (its optimizer states are on the device)";

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

// The strata cell a peer is compared with.
const Cell* counterpart(const PeerSpec& spec, const std::vector<Cell>& cells) {
  for (const Cell& c : cells) {
    if (c.placement == spec.placement && c.stage == spec.stage) return &c;
  }
  return nullptr;
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
