// strata bench step: the ZeRO training step for each placement of the model states (device,
// cpu, nvme) and ZeRO stage (1, 2, 3), against the same model fully resident on the device
// (stage 0, no offload) measured in the same run.
//
// Every cell is a `strata train` child of this binary (/proc/self/exe) with a DeepSpeed-style
// config written to a scratch folder (Note [The cell configs]), `--report none --metrics
// cell.jsonl`; the bench reads the JSONL back. --rounds R runs every cell R times, round by
// round in the same order (the reference first), so that the load of a shared machine moves the
// reference and the cells alike. The first kWarmupSteps steps of each run are left out (step 1
// records the prefetch trace and first touches every buffer); the timed steps of all rounds give
// medians of the step time, its phases and the busy time of the busiest resource (the trace
// track that was busy longest in the step). tokens/s = tokens per step / median step; TFLOPS =
// strata train's 6 N FLOPs per token x tokens/s. overlap = step ms / busiest ms: 1.00 when the
// step takes no longer than its busiest resource, above 1 when resources take turns. vs resident
// = the cell's tokens/s / the reference's: what the placement and the stage cost.
//
// A child that fails (a plan that does not fit, a bad config, a crash) gives its error line in
// its row and the bench goes on.
#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
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
#include "models/gpt/gpt_model.h"
#include "runtime/config/config.h"
#include "runtime/zero/plan.h"
#include "tools/bench.h"
#include "tools/stop_signals.h"
#include "tools/bench_nvme_disk.h"

extern char** environ;

namespace strata::tools {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using Json = nlohmann::ordered_json;

constexpr int kWarmupSteps = 2;
constexpr int kStages[] = {1, 2, 3};
constexpr const char* kPlacements[] = {"device", "cpu", "nvme"};
constexpr const char* kReference = "resident";

// Note [The cell configs]
// Every cell: micro-batch --batch, gradient_accumulation_steps 1, AdamW (lr 1e-3, weight decay
// 0.01), gradient_clipping --gradient-clipping (1.0: step() computes the global norm, then the
// updates run, overlapped with the next forward; 0: each module's update starts as soon as its
// gradient is final, overlapped with the rest of backward), bf16 with --dtype bf16,
// strata.device = --device and strata.device_memory = --device-memory when given. Placements:
//   device  zero_optimization.stage S, nothing offloaded
//   cpu     offload_optimizer {device cpu}; at stage 3 also offload_param {device cpu}
//   nvme    offload_optimizer {device nvme, pipeline_read, pipeline_write}; at stage 3 also
//           offload_param {device nvme}; nvme_path = SCRATCH/nvme
// (pin_memory true in both sections, as DeepSpeed users write it; offloaded states always live
// in the pinned pool.) The reference: stage 0, nothing offloaded, strata.device_memory = the
// plan's device need + 25 % + 64 MiB (or --device-memory when larger).
Json cell_config(const StepBenchOptions& o, const std::string& placement, int stage,
                 const std::string& nvme_path) {
  Json c;
  c["train_micro_batch_size_per_gpu"] = o.batch;
  c["gradient_accumulation_steps"] = 1;
  c["gradient_clipping"] = o.gradient_clipping;
  if (o.dtype == "bf16") c["bf16"] = {{"enabled", true}};
  c["optimizer"] = {{"type", "AdamW"}, {"params", {{"lr", 1e-3}, {"weight_decay", 0.01}}}};
  Json zero;
  zero["stage"] = stage;
  if (placement == "cpu" || placement == "nvme") {
    Json opt = {{"device", placement}, {"pin_memory", true}};
    if (placement == "nvme") {
      opt["nvme_path"] = nvme_path;
      opt["pipeline_read"] = true;
      opt["pipeline_write"] = true;
    }
    if (stage == 3) {
      Json param = {{"device", placement}, {"pin_memory", true}};
      if (placement == "nvme") param["nvme_path"] = nvme_path;
      zero["offload_param"] = param;
    }
    zero["offload_optimizer"] = opt;
  }
  c["zero_optimization"] = zero;
  c["strata"] = {{"device", o.device}};
  if (!o.device_memory.empty()) c["strata"]["device_memory"] = o.device_memory;
  return c;
}

// The reference's device budget: what the plan needs for stage 0 with nothing offloaded, plus
// headroom, rounded up to MiB; --device-memory instead when it is larger.
std::uint64_t resident_device_bytes(const StepBenchOptions& o, const models::GptConfig& model,
                                    Json config) {
  config["strata"].erase("device_memory");
  runtime::ResolveInputs resolve;
  resolve.hidden_size = static_cast<std::uint64_t>(model.n_embd);
  const runtime::Config resolved = runtime::resolve_config(
      runtime::parse_config(config.dump(), "strata bench step (reference)").config, resolve);
  const models::GptLayout layout = models::GptLayout::build(model);
  runtime::PlanInputs inputs;
  inputs.module_numels = layout.module_numels();
  inputs.module_names = layout.module_names();
  inputs.dtype = o.dtype == "bf16" ? DType::bf16 : DType::f32;
  inputs.activation_bytes =
      models::GptModel::activation_bytes(model, inputs.dtype, o.batch, o.seq_len, false);
  inputs.device_budget_bytes = std::uint64_t{1} << 60;  // ask for the need, not the fit
  inputs.pinned_budget_bytes = std::uint64_t{1} << 60;
  const std::uint64_t need = runtime::make_plan(resolved, inputs).needed(runtime::Tier::device);
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

// Training text for the children: words of lowercase letters (bytes under 128, so any model
// with a vocabulary of 128 or more takes them as tokens), deterministic.
void write_text(const std::string& path, std::uint64_t bytes) {
  std::mt19937 rng(20261121);
  std::string text;
  text.reserve(bytes + 16);
  while (text.size() < bytes) {
    const int letters = 2 + static_cast<int>(rng() % 8);
    for (int i = 0; i < letters; ++i) text += static_cast<char>('a' + rng() % 26);
    text += rng() % 12 == 0 ? '\n' : ' ';
  }
  std::ofstream out(path, std::ios::binary);
  out.write(text.data(), static_cast<std::streamsize>(text.size()));
  out.close();
  if (!out) throw Error("cannot write the training text", path, "give --dir a writable folder");
}

// The scratch folder: configs, metrics, the generated text and the NVMe swap folder. Owned;
// removed with everything in it when destroyed.
class ScratchFolder {
 public:
  explicit ScratchFolder(const std::string& parent) {
    std::string name = (fs::path(parent) / "strata-bench-step-XXXXXX").string();
    if (::mkdtemp(name.data()) == nullptr) {
      throw system_error(errno, "mkdtemp", name, "give --dir a writable folder on a disk");
    }
    path_ = name;
  }
  ~ScratchFolder() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  ScratchFolder(const ScratchFolder&) = delete;
  ScratchFolder& operator=(const ScratchFolder&) = delete;

  std::string file(const std::string& name) const { return (fs::path(path_) / name).string(); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

struct ChildResult {
  int wait_status = 0;  // as waitpid gives it
  std::string output;   // everything it wrote to stderr (and, with --verbose, to stdout)
};

// Runs `args` (args[0]: the executable) with stdin from /dev/null, stderr into a pipe that this
// process reads (and copies to its own stderr when `verbose`), stdout to /dev/null (to our
// stderr when `verbose`: our stdout carries --json).
ChildResult run_child(const std::vector<std::string>& args, bool verbose) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) throw system_error(errno, "pipe2", "strata bench step");
  posix_spawn_file_actions_t actions;
  int rc = posix_spawn_file_actions_init(&actions);
  if (rc == 0) rc = posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  if (rc == 0) {
    rc = verbose ? posix_spawn_file_actions_adddup2(&actions, 2, 1)
                 : posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0);
  }
  if (rc == 0) rc = posix_spawn_file_actions_adddup2(&actions, fds[1], 2);
  std::vector<char*> argv;
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  pid_t pid = -1;
  if (rc == 0) rc = posix_spawn(&pid, argv[0], &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  ::close(fds[1]);
  if (rc != 0) {
    ::close(fds[0]);
    throw system_error(rc, "posix_spawn", args[0]);
  }
  ChildResult result;
  char buf[4096];
  for (;;) {
    const ssize_t n = ::read(fds[0], buf, sizeof buf);
    if (n == 0) break;
    if (n < 0) {
      if (errno == EINTR) continue;
      const int err = errno;
      ::close(fds[0]);
      ::waitpid(pid, nullptr, 0);
      throw system_error(err, "read", "the pipe from " + args[0]);
    }
    result.output.append(buf, static_cast<std::size_t>(n));
    if (verbose) std::fwrite(buf, 1, static_cast<std::size_t>(n), stderr);
  }
  ::close(fds[0]);
  while (::waitpid(pid, &result.wait_status, 0) < 0) {
    if (errno != EINTR) throw system_error(errno, "waitpid", args[0]);
  }
  return result;
}

// "device needs 37.96 MiB of 16.00 MiB" from a plan table row "  device  37.96 MiB  16.00 MiB
// <- does not fit"; the row as it is when it has another shape.
std::string does_not_fit(const std::string& row) {
  std::istringstream in(row);
  std::vector<std::string> w;
  for (std::string word; in >> word;) w.push_back(word);
  if (w.size() < 9) return row;
  const std::size_t n = w.size() - 4;  // without "<- does not fit"
  std::string tier;
  for (std::size_t i = 0; i + 4 < n; ++i) tier += (tier.empty() ? "" : " ") + w[i];
  return fmt::format("{} needs {} {} of {} {}", tier, w[n - 4], w[n - 3], w[n - 2], w[n - 1]);
}

// One line saying why the child failed: strata's error line (with the tiers that do not fit,
// for a plan), else the last line it wrote, with how it ended.
std::string error_line(const ChildResult& r) {
  std::istringstream in(r.output);
  std::string line, error, last;
  std::vector<std::string> misfits;
  for (; std::getline(in, line);) {
    for (const char* prefix : {"strata: error: ", "strata: internal error: "}) {
      if (error.empty() && line.rfind(prefix, 0) == 0) error = line.substr(std::string(prefix).size());
    }
    if (line.find("<- does not fit") != std::string::npos) misfits.push_back(does_not_fit(line));
    if (line.find_first_not_of(" \t") != std::string::npos) last = line;
  }
  if (!error.empty()) {
    if (!misfits.empty() && error.back() == ':') {
      error.back() = ' ';
      for (std::size_t i = 0; i < misfits.size(); ++i) error += (i == 0 ? "(" : ", ") + misfits[i];
      error += ")";
    }
    return error;
  }
  const std::string how = WIFSIGNALED(r.wait_status)
                              ? fmt::format("killed by signal {}", WTERMSIG(r.wait_status))
                              : fmt::format("exit status {}", WEXITSTATUS(r.wait_status));
  return last.empty() ? how : last + " (" + how + ")";
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
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

// The timed steps (after kWarmupSteps) of one child's JSONL metrics file; "" or why not in
// `error`.
std::vector<Json> timed_rows(const std::string& path, int steps, std::string& error) {
  std::ifstream in(path);
  std::vector<Json> rows;
  for (std::string line; std::getline(in, line);) {
    if (line.empty()) continue;
    Json j = Json::parse(line, nullptr, false);
    if (j.is_discarded() || !j.is_object()) {
      error = "a line of " + path + " is not JSON";
      return {};
    }
    if (j.value("step", 0) > kWarmupSteps) rows.push_back(std::move(j));
  }
  if (static_cast<int>(rows.size()) != steps - kWarmupSteps) {
    error = fmt::format("{} has {} timed steps, expected {}", path, rows.size(), steps - kWarmupSteps);
  }
  return rows;
}

double number(const Json& j, const char* key) {
  return j.contains(key) && j[key].is_number() ? j[key].get<double>() : NAN;
}

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

// Note [Stopping on a signal]
// The scratch folder may hold the NVMe swap files of a large model, so the bench removes it
// also when it is stopped: SIGINT, SIGTERM, SIGHUP and SIGPIPE (stdout piped into `head`) only
// set a flag here. A child (which gets the terminal's SIGINT too) ends; the bench starts no
// other, removes the folder, puts the previous handlers back and raises the signal again, so
// that it ends as it would have (tools/stop_signals.h).
double load_average() {
  double load = -1;
  if (std::FILE* f = std::fopen("/proc/loadavg", "r")) {
    if (std::fscanf(f, "%lf", &load) != 1) load = -1;
    std::fclose(f);
  }
  return load;
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

// The bench; returns early, without the tables, when `stop` caught a signal.
void run_bench(const StepBenchOptions& o, const StopSignals& stop) {
  const models::GptConfig model =
      o.model.empty() ? models::GptConfig::preset(o.preset) : models::GptConfig::from_file(o.model);
  if (o.seq_len > model.n_positions) {
    throw Error(fmt::format("--seq-len {} is longer than the model's n_positions ({})", o.seq_len,
                            model.n_positions),
                "--seq-len", "give at most n_positions");
  }
  if (o.steps <= kWarmupSteps) {
    throw Error(fmt::format("--steps {} leaves no timed step after the {} warm-up steps", o.steps,
                            kWarmupSteps),
                "--steps", fmt::format("give at least {}", kWarmupSteps + 1));
  }
  std::error_code ec;
  const std::string self = fs::read_symlink("/proc/self/exe", ec).string();
  if (ec) throw system_error(ec.value(), "readlink", "/proc/self/exe");

  const Clock::time_point start = Clock::now();
  const double load_start = load_average();
  ScratchFolder scratch(resolve_bench_dir(o.dir));
  const std::string nvme_path = scratch.file("nvme");
  fs::create_directory(nvme_path, ec);
  if (ec) throw system_error(ec.value(), "mkdir", nvme_path);
  std::string text = o.text;
  if (text.empty()) {
    text = scratch.file("text.txt");
    // Enough for every step without wrapping, at least 64 KiB.
    const std::uint64_t tokens = std::uint64_t(o.steps) * std::uint64_t(o.batch) * std::uint64_t(o.seq_len);
    write_text(text, std::max<std::uint64_t>(64 * kKiB, tokens + 1));
  }

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
        const Json config = cell.placement == kReference
                                ? reference_config
                                : cell_config(o, cell.placement, cell.stage, nvme_path);
        std::ofstream out(config_path);
        out << config.dump(1) << "\n";
        out.close();
        if (!out) throw Error("cannot write a cell's config", config_path, "give --dir a writable folder");
      }
      std::vector<std::string> args = {self, "train", "--config", config_path};
      if (o.model.empty()) {
        args.insert(args.end(), {"--preset", o.preset});
      } else {
        args.insert(args.end(), {"--model", o.model});
      }
      args.insert(args.end(), {"--text", text, "--steps", std::to_string(o.steps), "--seq-len",
                               std::to_string(o.seq_len), "--report", "none", "--metrics", metrics});
      if (o.verbose) {
        std::string line;
        for (const std::string& a : args) line += (line.empty() ? "" : " ") + a;
        std::fprintf(stderr, "%s\n", line.c_str());
        std::fflush(stderr);
      }
      const Clock::time_point t0 = Clock::now();
      const ChildResult result = run_child(args, o.verbose);
      const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
      std::vector<Json> rows;
      if (WIFEXITED(result.wait_status) && WEXITSTATUS(result.wait_status) == 0) {
        rows = timed_rows(metrics, o.steps, cell.error);
      } else {
        cell.error = error_line(result);
      }
      const std::string where = fmt::format("[round {}/{}, {}/{}] {} stage {}", round, o.rounds,
                                            i + 1, cells.size(), cell.placement, cell.stage);
      if (cell.error.empty()) {
        const double ms = median_step_ms(rows);
        if (i == 0) reference_ms = ms;
        const std::string ratio =
            reference_ms > 0 ? fmt::format(", {:.2f} of this round's resident", reference_ms / ms) : "";
        std::fprintf(stderr, "%s: %.1f ms/step%s (%.1f s)\n", where.c_str(), ms, ratio.c_str(), seconds);
        cell.rows.insert(cell.rows.end(), rows.begin(), rows.end());
      } else {
        std::fprintf(stderr, "%s: error: %s (%.1f s)\n", where.c_str(), cell.error.c_str(), seconds);
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
  StopSignals stop({SIGINT, SIGTERM, SIGHUP, SIGPIPE}, /*second_stops_now=*/false);
  run_bench(o, stop);  // the scratch folder is gone when it returns or throws
  if (const int sig = stop.received(); sig != 0) {
    stop.restore();
    std::raise(sig);
  }
}

}  // namespace strata::tools
