// strata bench checkpoint: what saving a checkpoint every step costs in step time, per placement
// of the model states at ZeRO stage 3, and how fast the checkpoint writes against the disk's
// sequential write rate measured in the same run.
//
// Per placement (--placements: cpu and nvme by default) and round, in this order:
//   1. a `strata train` child (tools/bench/bench_children.h) without checkpoints;
//   2. the same child with `--checkpoint-dir SCRATCH/checkpoints --checkpoint-every 1`: the
//      states of step N are written into the shard file on the optimizer worker while step N+1
//      computes, and published at the end of step N+1 (runtime/checkpoint/checkpoint_saver.h);
//   3. the limit: the I/O engine with the runs' aio options writing as many bytes as the shard
//      file into a new file in the same folder (O_DIRECT where allowed, as the shard file),
//      from one buffer of random bytes, all requests at once, then fdatasync
//      (Note [The write limit]).
// The timed steps are 3 .. --steps - 1 in both runs: the first kWarmupSteps warm up, and the last
// is left out because `strata train` saves at the end of every run that has --checkpoint-dir and
// waits there for that save, which a step in the middle of training never does.
//
// Numbers, medians over the timed steps of every round: step ms without and with checkpoints;
// step ratio = with / without (what a save every step costs); ms per checkpoint = with - without
// (one save per step); boundary ms = phase_ms.checkpoint, the part of it spent at the step
// boundary (waiting for the shard file, the publish); the shard's bytes and write ms (the worker's
// time for the file: reading the states from their tier, hashing, writing, fdatasync); write
// GB/s = bytes / write ms, against the limit's GB/s (the median of the rounds): write ratio.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include "core/cpu_features.h"
#include "core/error.h"
#include "core/units.h"
#include "offload/aio_engine.h"
#include "offload/aio_file.h"
#include "offload/host_buffer.h"
#include "runtime/config/config.h"
#include "runtime/tiers/io_options.h"
#include "tools/bench/bench.h"
#include "tools/bench/bench_children.h"
#include "tools/bench/bench_nvme_disk.h"

namespace strata::tools {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

constexpr int kStage = 3;
// Note [The write limit]
struct Row {
  std::string placement;
  std::string error;                 // not empty: a run failed and the numbers are unset
  std::vector<Json> without, with;   // the timed steps of every round
  std::vector<double> limit_gbps;    // one per round
  double step_ms = 0, checkpoint_step_ms = 0, step_ratio = 0, ms_per_checkpoint = 0, boundary_ms = 0;
  double bytes = 0, write_ms = 0, write_gbps = 0, limit = 0, write_ratio = 0;
};

// The first checkpoint a metrics line reports finished in its step (the save begun one step
// earlier), or an empty object.
Json finished_checkpoint(const Json& row) {
  const Json list = row.value("checkpoints", Json::array());
  return list.empty() ? Json::object() : list.front();
}

// Why the timed steps of a run with a save every step are not as they must be: each carries the
// save of the step before, finished and published (ok), with its bytes and write time; "" when
// they are.
std::string check_saves(const std::vector<Json>& rows) {
  for (const Json& r : rows) {
    const int step = r.value("step", 0);
    const Json c = finished_checkpoint(r);
    if (c.empty()) return fmt::format("step {} finished no checkpoint (a save every step was asked for)", step);
    if (!c.value("ok", false)) {
      return fmt::format("the checkpoint of step {} failed (see --verbose)", c.value("step", 0));
    }
    if (c.value("step", 0) != step - 1) {
      return fmt::format("step {} finished the checkpoint of step {}, not of step {}", step, c.value("step", 0),
                         step - 1);
    }
    if (!(number(c, "bytes") > 0) || !(number(c, "write_ms") > 0)) {
      return fmt::format("the checkpoint finished in step {} has no bytes or write_ms", step);
    }
  }
  return "";
}

// row.without / with / limit_gbps -> the row's numbers.
void summarize(Row& row) {
  std::vector<double> without, with, boundary, bytes, write_ms, gbps;
  for (const Json& r : row.without) without.push_back(number(r, "step_ms"));
  for (const Json& r : row.with) {
    with.push_back(number(r, "step_ms"));
    boundary.push_back(number(r.value("phase_ms", Json::object()), "checkpoint"));
    const Json c = finished_checkpoint(r);
    bytes.push_back(number(c, "bytes"));
    write_ms.push_back(number(c, "write_ms"));
    gbps.push_back(bytes.back() / write_ms.back() / 1e6);
  }
  row.step_ms = median(without);
  row.checkpoint_step_ms = median(with);
  row.step_ratio = row.checkpoint_step_ms / row.step_ms;
  row.ms_per_checkpoint = row.checkpoint_step_ms - row.step_ms;
  row.boundary_ms = median(boundary);
  row.bytes = median(bytes);
  row.write_ms = median(write_ms);
  row.write_gbps = median(gbps);
  row.limit = median(row.limit_gbps);
  row.write_ratio = row.write_gbps / row.limit;
  for (double v : {row.step_ms, row.checkpoint_step_ms, row.boundary_ms, row.write_gbps, row.limit}) {
    if (!std::isfinite(v) || v < 0) {
      row.error = "the metrics lack step_ms or phase_ms.checkpoint";
      return;
    }
  }
}

void print_table(std::FILE* out, const std::vector<Row>& rows) {
  std::fprintf(out, "\n%-9s %8s %9s %6s %8s %9s %9s %9s %10s %10s %6s\n", "placement", "step ms", "ckpt ms",
               "ratio", "ms/ckpt", "bound ms", "ckpt MiB", "write ms", "ckpt GB/s", "disk GB/s", "ratio");
  for (const Row& r : rows) {
    if (!r.error.empty()) {
      std::fprintf(out, "%-9s error: %s\n", r.placement.c_str(), r.error.c_str());
      continue;
    }
    std::fprintf(out, "%-9s %8.1f %9.1f %6.2f %8.1f %9.1f %9.1f %9.1f %10.3f %10.3f %6.2f\n", r.placement.c_str(),
                 r.step_ms, r.checkpoint_step_ms, r.step_ratio, r.ms_per_checkpoint, r.boundary_ms, r.bytes / kMiB,
                 r.write_ms, r.write_gbps, r.limit, r.write_ratio);
  }
  std::fprintf(out, "\n");
  for (const Row& r : rows) {
    if (!r.error.empty()) continue;
    std::fprintf(out,
                 "%s: a checkpoint every step makes the step %.2fx as long (%+.1f ms per checkpoint, %.1f ms of it "
                 "at the step boundary); the shard file writes at %.2f of the disk's sequential rate\n",
                 r.placement.c_str(), r.step_ratio, r.ms_per_checkpoint, r.boundary_ms, r.write_ratio);
  }
}

Json row_json(const Row& r) {
  Json j;
  j["placement"] = r.placement;
  j["stage"] = kStage;
  if (!r.error.empty()) {
    j["error"] = r.error;
    return j;
  }
  j["step_ms"] = r.step_ms;
  j["checkpoint_step_ms"] = r.checkpoint_step_ms;
  j["step_ratio"] = r.step_ratio;
  j["ms_per_checkpoint"] = r.ms_per_checkpoint;
  j["boundary_ms"] = r.boundary_ms;
  j["checkpoint_bytes"] = r.bytes;
  j["write_ms"] = r.write_ms;
  j["write_gbps"] = r.write_gbps;
  j["limit_gbps"] = r.limit;
  j["write_ratio"] = r.write_ratio;
  j["timed_steps"] = r.with.size();
  return j;
}

// The runs' I/O engine options: aio.* of the resolved config (the cell configs set none, so
// DeepSpeed's defaults).

// The bench; returns early, without the table, when `stop` caught a signal
// (Note [Stopping on a signal], bench_children.h).
void run_bench(const CheckpointBenchOptions& o, const train::StopSignals& stop) {
  const std::vector<std::string> placements = parse_placements(o.placements);
  const int last_timed = o.steps - 1;
  const models::ModelSpecPtr model = child_model(
      o, kWarmupSteps + 1,
      fmt::format("the first {} are warm-up and the last waits for its checkpoint", kWarmupSteps));
  const std::string self = self_executable();
  const std::string parent = resolve_bench_dir(o.dir);
  check_bench_dir(parent);  // a disk that takes O_DIRECT, not tmpfs: the limit is a disk's

  const Clock::time_point start = Clock::now();
  const double load_start = load_average();
  ScratchFolder scratch(parent, "checkpoint");
  const std::string nvme_path = scratch.file("nvme");
  const std::string checkpoints = scratch.file("checkpoints");
  std::error_code ec;
  fs::create_directory(nvme_path, ec);
  if (ec) throw system_error(ec.value(), "mkdir", nvme_path);
  const std::string text = training_text(o, scratch);
  std::vector<Row> rows(placements.size());
  for (std::size_t p = 0; p < placements.size(); ++p) {
    rows[p].placement = placements[p];
    write_config(scratch.file(placements[p] + ".json"), cell_config(o, placements[p], kStage, nvme_path));
  }
  const offload::AioOptions aio = run_aio_options(cell_config(o, placements[0], kStage, nvme_path), *model);

  std::FILE* text_out = o.json ? stderr : stdout;
  const CpuInfo cpu = cpu_info();
  std::fprintf(text_out,
               "strata bench checkpoint: %s (%lld params), micro-batch %d x %d tokens, %s, ZeRO stage %d, "
               "gradient_clipping %g, %d steps per run (timed: %d..%d; the first %d warm up, the last waits for its "
               "checkpoint) x %d round(s), device %s%s\n  %s, %d CPUs in the affinity mask, load average %.2f at the "
               "start\n  scratch %s (%s)\n  checkpoints: --checkpoint-every 1 (a save every step); limit: the I/O "
               "engine (aio block %s, QD %u, %u thread(s)) writing as many bytes into the same folder, then "
               "fdatasync\n",
               o.model.empty() ? o.preset.c_str() : o.model.c_str(), static_cast<long long>(model->num_params()),
               o.batch, o.seq_len, o.dtype.c_str(), kStage, o.gradient_clipping, o.steps, kWarmupSteps + 1,
               last_timed, kWarmupSteps, o.rounds, o.device.c_str(),
               o.device_memory.empty() ? "" : (", device memory " + o.device_memory).c_str(), cpu.model_name.c_str(),
               cpu.logical_cores_in_affinity_mask, load_start, scratch.path().c_str(),
               describe_mount(scratch.path()).c_str(), format_bytes(aio.block_size).c_str(), aio.queue_depth,
               aio.parallelism);
  std::fflush(text_out);

  // Round by round, placement by placement: without, with, the limit, so that the load of a
  // shared machine moves all three alike. A placement that failed is not run again.
  const int runs = o.rounds * static_cast<int>(placements.size()) * 2;
  int run_index = 0;
  for (int round = 1; round <= o.rounds; ++round) {
    for (Row& row : rows) {
      for (const bool with : {false, true}) {
        if (stop.received() != 0) return;
        ++run_index;
        if (!row.error.empty()) continue;
        const std::string name = fmt::format("{}-{}-round{}", row.placement, with ? "checkpoints" : "plain", round);
        std::vector<std::string> extra;
        if (with) extra = {"--checkpoint-dir", checkpoints, "--checkpoint-every", "1"};
        ChildRun run = run_train_child(self, o, scratch.file(row.placement + ".json"), text,
                                       scratch.file(name + ".jsonl"), extra, kWarmupSteps + 1, last_timed);
        if (with && run.error.empty()) run.error = check_saves(run.rows);
        fs::remove_all(checkpoints, ec);  // room on the disk for the limit and the next runs
        std::string line = fmt::format("[round {}/{}, {}/{}] {} {}: ", round, o.rounds, run_index, runs,
                                       row.placement, with ? "with a checkpoint every step" : "without checkpoints");
        if (!run.error.empty()) {
          row.error = run.error;
          std::fprintf(stderr, "%serror: %s (%.1f s)\n", line.c_str(), row.error.c_str(), run.seconds);
          std::fflush(stderr);
          continue;
        }
        std::vector<double> ms;
        for (const Json& r : run.rows) ms.push_back(number(r, "step_ms"));
        line += fmt::format("{:.1f} ms/step", median(ms));
        if (with) {
          const Json last = finished_checkpoint(run.rows.back());
          const double bytes = number(last, "bytes");
          row.limit_gbps.push_back(
              measure_disk_rates(aio, scratch.file("limit.bin"), static_cast<std::uint64_t>(bytes), false).write_gbps);
          line += fmt::format(", {} shard written at {:.3f} GB/s; the limit {:.3f} GB/s",
                              format_bytes(static_cast<std::uint64_t>(bytes)),
                              bytes / number(last, "write_ms") / 1e6, row.limit_gbps.back());
        }
        std::fprintf(stderr, "%s (%.1f s)\n", line.c_str(), run.seconds);
        std::fflush(stderr);
        std::vector<Json>& timed = with ? row.with : row.without;
        timed.insert(timed.end(), run.rows.begin(), run.rows.end());
      }
    }
  }
  if (stop.received() != 0) return;
  for (Row& row : rows) {
    if (row.error.empty()) summarize(row);
  }
  if (o.json) {
    for (const Row& row : rows) std::printf("%s\n", row_json(row).dump().c_str());
    std::fflush(stdout);
  }
  print_table(text_out, rows);
  std::fprintf(text_out, "%.0f s in all, load average %.2f at the end\n",
               std::chrono::duration<double>(Clock::now() - start).count(), load_average());
}

}  // namespace

void bench_checkpoint(const CheckpointBenchOptions& o) {
  run_until_signal([&o](const train::StopSignals& stop) { run_bench(o, stop); });
}

}  // namespace strata::tools
