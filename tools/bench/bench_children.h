#pragma once
// The `strata train` children of `strata bench step` and `strata bench checkpoint`. Every run is
// a child of this binary (/proc/self/exe) with a DeepSpeed-style config written to a scratch
// folder (Note [The cell configs], bench_children.cpp), `--report none --metrics run.jsonl`;
// the bench reads the JSONL back. A child that fails (a plan that does not fit, a bad config, a
// crash) gives one error line, and the bench goes on.
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "models/model_spec.h"
#include "tools/bench/bench.h"
#include "train/stop_signals.h"

namespace strata::tools {

using Json = nlohmann::ordered_json;

// The first steps of every run are left out of the timings: step 1 records the prefetch trace
// and first touches every buffer.
constexpr int kWarmupSteps = 2;

// The model of --preset / --model. Throws strata::Error naming the flag when --seq-len is longer
// than its n_positions, or when --steps leaves no timed step after the `untimed_steps` that the
// bench leaves out (`untimed_text` says which).
models::ModelSpecPtr child_model(const TrainChildOptions& o, int untimed_steps, const std::string& untimed_text);

// The config of a run (Note [The cell configs]). placement: "device", "cpu" or "nvme".
Json cell_config(const TrainChildOptions& o, const std::string& placement, int stage, const std::string& nvme_path);

// Writes `config` to `path`; throws strata::Error saying what to do when it cannot.
void write_config(const std::string& path, const Json& config);

// A scratch folder PARENT/strata-bench-NAME-XXXXXX for configs, metrics, the generated text, the
// NVMe swap folder and checkpoints. Owned; removed with everything in it when destroyed.
class ScratchFolder {
 public:
  ScratchFolder(const std::string& parent, const std::string& name);
  ~ScratchFolder();
  ScratchFolder(const ScratchFolder&) = delete;
  ScratchFolder& operator=(const ScratchFolder&) = delete;

  std::string file(const std::string& name) const;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// --text, or generated text in `scratch` (enough for every step of a run without wrapping).
std::string training_text(const TrainChildOptions& o, const ScratchFolder& scratch);

// This binary, to run as the children.
std::string self_executable();

struct ChildRun {
  std::vector<Json> rows;  // the metrics of the timed steps, in order
  std::string error;       // not empty: the child failed, or its metrics lack timed steps
  double seconds = 0;      // wall time of the child
  double cpu_seconds = 0;  // its user + system CPU time (wait4), its own waited-for children included
};

// Runs `self train --config config_path` with the model, text, --steps and --seq-len of `o`,
// `--report none --metrics metrics_path` and `extra_args`; with `o.verbose` the command line and
// the child's output go to stderr. rows: the metrics of steps first_timed..last_timed (every one
// of them, or an error).
ChildRun run_train_child(const std::string& self, const TrainChildOptions& o, const std::string& config_path,
                         const std::string& text, const std::string& metrics_path,
                         const std::vector<std::string>& extra_args, int first_timed, int last_timed);

double median(std::vector<double> v);  // of a non-empty vector
// j[key] when it is a number, else NaN.
double number(const Json& j, const char* key);
// The 1-minute load average, -1 when unknown.
double load_average();

// Note [Stopping on a signal]
// The scratch folder may hold the NVMe swap files and checkpoints of a large model, so a bench
// removes it also when it is stopped: SIGINT, SIGTERM, SIGHUP and SIGPIPE (stdout piped into
// `head`) only set a flag while `bench` runs. A child (which gets the terminal's SIGINT too)
// ends; `bench` starts no other and returns (its ScratchFolder goes), then the previous handlers
// are put back and the signal raised again, so that the process ends as it would have.
void run_until_signal(const std::function<void(const train::StopSignals&)>& bench);

}  // namespace strata::tools
