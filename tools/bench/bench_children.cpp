#include "tools/bench/bench_children.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include <fmt/format.h>

#include "core/error.h"
#include "core/units.h"
#include "models/registry.h"

extern char** environ;

namespace strata::tools {
namespace {

namespace fs = std::filesystem;

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

struct ChildResult {
  int wait_status = 0;  // as waitpid gives it
  double cpu_seconds = 0;  // user + system CPU time of the child and the children it waited for
  std::string output;   // everything it wrote to stderr (and, with --verbose, to stdout)
};

// Runs `args` (args[0]: the executable, looked up on PATH when it has no '/') with stdin from /dev/null, stderr into a pipe that this
// process reads (and copies to its own stderr when `verbose`), stdout to /dev/null (to our
// stderr when `verbose`: our stdout carries --json).
ChildResult run_child(const std::vector<std::string>& args, bool verbose) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) throw system_error(errno, "pipe2", "a bench's child");
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
  if (rc == 0) rc = posix_spawnp(&pid, argv[0], &actions, nullptr, argv.data(), environ);
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
  struct rusage usage{};
  while (::wait4(pid, &result.wait_status, 0, &usage) < 0) {
    if (errno != EINTR) throw system_error(errno, "wait4", args[0]);
  }
  auto seconds = [](const timeval& t) { return static_cast<double>(t.tv_sec) + 1e-6 * static_cast<double>(t.tv_usec); };
  result.cpu_seconds = seconds(usage.ru_utime) + seconds(usage.ru_stime);
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

// Steps first..last of one child's JSONL metrics file; "" or why not in `error`.
std::vector<Json> timed_rows(const std::string& path, int first, int last, std::string& error) {
  std::ifstream in(path);
  std::vector<Json> rows;
  for (std::string line; std::getline(in, line);) {
    if (line.empty()) continue;
    Json j = Json::parse(line, nullptr, false);
    if (j.is_discarded() || !j.is_object()) {
      error = "a line of " + path + " is not JSON";
      return {};
    }
    const int step = j.value("step", 0);
    if (step >= first && step <= last) rows.push_back(std::move(j));
  }
  if (static_cast<int>(rows.size()) != last - first + 1) {
    error = fmt::format("{} has {} of steps {}..{}", path, rows.size(), first, last);
  }
  return rows;
}

}  // namespace

models::ModelSpecPtr child_model(const TrainChildOptions& o, int untimed_steps, const std::string& untimed_text) {
  const models::ModelSpecPtr model = o.model.empty() ? models::model_preset(o.preset) : models::model_from_path(o.model);
  if (o.seq_len > model->max_positions()) {
    throw Error(fmt::format("--seq-len {} is longer than the model's longest sequence ({} {})", o.seq_len,
                            model->max_positions_key(), model->max_positions()),
                "--seq-len", fmt::format("give at most {}", model->max_positions()));
  }
  if (o.steps <= untimed_steps) {
    throw Error(fmt::format("--steps {} leaves no timed step: {}", o.steps, untimed_text), "--steps",
                fmt::format("give at least {}", untimed_steps + 1));
  }
  return model;
}

// Note [The cell configs]
// Every run: micro-batch --batch, gradient_accumulation_steps 1, AdamW (lr 1e-3, weight decay
// 0.01), gradient_clipping --gradient-clipping (1.0: step() computes the global norm, then the
// updates run, overlapped with the next forward; 0: each module's update starts as soon as its
// gradient is final, overlapped with the rest of backward), bf16 with --dtype bf16,
// strata.device = --device and strata.device_memory = --device-memory when given. Placements:
//   device  zero_optimization.stage S, nothing offloaded
//   cpu     offload_optimizer {device cpu}; at stage 3 also offload_param {device cpu}
//   nvme    offload_optimizer {device nvme, pipeline_read, pipeline_write}; at stage 3 also
//           offload_param {device nvme}; nvme_path = SCRATCH/nvme
// (pin_memory true in both sections, as DeepSpeed users write it; offloaded states always live
// in the pinned pool.)
Json cell_config(const TrainChildOptions& o, const std::string& placement, int stage, const std::string& nvme_path) {
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

void write_config(const std::string& path, const Json& config) {
  std::ofstream out(path);
  out << config.dump(1) << "\n";
  out.close();
  if (!out) throw Error("cannot write a run's config", path, "give --dir a writable folder");
}

ScratchFolder::ScratchFolder(const std::string& parent, const std::string& name) {
  std::string path = (fs::path(parent) / ("strata-bench-" + name + "-XXXXXX")).string();
  if (::mkdtemp(path.data()) == nullptr) {
    throw system_error(errno, "mkdtemp", path, "give --dir a writable folder on a disk");
  }
  path_ = path;
}

ScratchFolder::~ScratchFolder() {
  std::error_code ec;
  fs::remove_all(path_, ec);
}

std::string ScratchFolder::file(const std::string& name) const { return (fs::path(path_) / name).string(); }

std::string training_text(const TrainChildOptions& o, const ScratchFolder& scratch) {
  if (!o.text.empty()) return o.text;
  const std::string path = scratch.file("text.txt");
  // Enough for every step without wrapping, at least 64 KiB.
  const std::uint64_t tokens = std::uint64_t(o.steps) * std::uint64_t(o.batch) * std::uint64_t(o.seq_len);
  write_text(path, std::max<std::uint64_t>(64 * kKiB, tokens + 1));
  return path;
}

std::string self_executable() {
  std::error_code ec;
  const std::string self = fs::read_symlink("/proc/self/exe", ec).string();
  if (ec) throw system_error(ec.value(), "readlink", "/proc/self/exe");
  return self;
}

ChildRun run_train_child(const std::string& self, const TrainChildOptions& o, const std::string& config_path,
                         const std::string& text, const std::string& metrics_path,
                         const std::vector<std::string>& extra_args, int first_timed, int last_timed) {
  std::vector<std::string> args = o.launcher;
  args.insert(args.end(), {self, "train", "--config", config_path});
  if (o.model.empty()) {
    args.insert(args.end(), {"--preset", o.preset});
  } else {
    args.insert(args.end(), {"--model", o.model});
  }
  args.insert(args.end(), {"--text", text, "--steps", std::to_string(o.steps), "--seq-len",
                           std::to_string(o.seq_len), "--report", "none", "--metrics", metrics_path});
  args.insert(args.end(), extra_args.begin(), extra_args.end());
  if (o.verbose) {
    std::string line;
    for (const std::string& a : args) line += (line.empty() ? "" : " ") + a;
    std::fprintf(stderr, "%s\n", line.c_str());
    std::fflush(stderr);
  }
  const auto t0 = std::chrono::steady_clock::now();
  const ChildResult result = run_child(args, o.verbose);
  ChildRun run;
  run.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  run.cpu_seconds = result.cpu_seconds;
  if (WIFEXITED(result.wait_status) && WEXITSTATUS(result.wait_status) == 0) {
    run.rows = timed_rows(metrics_path, first_timed, last_timed, run.error);
  } else {
    run.error = error_line(result);
  }
  return run;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

double number(const Json& j, const char* key) {
  return j.contains(key) && j[key].is_number() ? j[key].get<double>() : NAN;
}

double load_average() {
  double load = -1;
  if (std::FILE* f = std::fopen("/proc/loadavg", "r")) {
    if (std::fscanf(f, "%lf", &load) != 1) load = -1;
    std::fclose(f);
  }
  return load;
}

void run_until_signal(const std::function<void(const train::StopSignals&)>& bench) {
  train::StopSignals stop({SIGINT, SIGTERM, SIGHUP, SIGPIPE}, /*second_stops_now=*/false);
  bench(stop);  // the scratch folder is gone when it returns or throws
  if (const int sig = stop.received(); sig != 0) {
    stop.restore();
    std::raise(sig);
  }
}

}  // namespace strata::tools
