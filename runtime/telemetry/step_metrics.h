#pragma once
// What one training step did, as numbers: loss, speed, time per phase, bytes per link, memory
// per tier and which resource was the bottleneck. The engine fills a StepMetrics per step;
// MetricsWriter appends it to a JSONL file (one object per line, for pandas / jq), Progress
// (progress.h) shows it to a person, and tables.h summarizes a run.
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace strata::runtime::telemetry {

// One memory tier at a point in time.
struct TierMemory {
  std::uint64_t current_bytes = 0;
  std::uint64_t peak_bytes = 0;
  std::uint64_t budget_bytes = 0;  // 0 = no limit
  // The most ever taken from the budget. The device's peak_bytes counts what is in use in the
  // parameter fetcher's pools; this counts the pools' regions whole, as they are carved from the
  // arena at start (what `strata estimate` predicts). Pinned and NVMe: their peak_bytes.
  std::uint64_t allocated_bytes = 0;
};

// Bytes moved over each link.
struct LinkBytes {
  std::uint64_t nvme_read = 0;
  std::uint64_t nvme_write = 0;
  std::uint64_t h2d = 0;
  std::uint64_t d2h = 0;
  std::uint64_t collective = 0;  // sent by this rank's collectives

  LinkBytes& operator+=(const LinkBytes& o) noexcept {
    nvme_read += o.nvme_read;
    nvme_write += o.nvme_write;
    h2d += o.h2d;
    d2h += o.d2h;
    collective += o.collective;
    return *this;
  }
};

// A checkpoint published (or failed) at the end of a step: the save begun one step earlier, and
// for the last step and a stop also the one begun in this step's boundary.
struct CheckpointMetrics {
  std::uint64_t step = 0;     // the step it holds
  bool ok = false;
  std::uint64_t bytes = 0;    // this rank's shard file
  double write_ms = 0;        // its write on the optimizer worker, overlapped with the next step
  double wait_ms = 0;         // the trainer waiting for that write at the step boundary
  double publish_ms = 0;      // agreeing and publishing it (manifest, renames, fsyncs, latest)
};

struct StepMetrics {
  std::uint64_t step = 0;             // 1-based
  double loss = 0;                    // mean over the step's micro-batches (this rank)
  double lr = 0;
  double step_ms = 0;
  double tokens_per_s = 0;            // all ranks
  double tflops = 0;                  // achieved: flops_per_token * tokens / time
  double grad_norm = -1;              // -1 = not computed
  double loss_scale = 1;
  bool skipped = false;               // fp16 overflow: the optimizer step was skipped
  std::vector<std::pair<std::string, double>> phase_ms;  // "forward", "backward", "optimizer", ...
  LinkBytes bytes;                    // moved during this step, this rank
  double collective_theory_bytes = 0; // what ZeRO theory says (filled by the engine)
  TierMemory device, pinned, nvme;    // at the end of the step
  std::vector<std::pair<std::string, TierMemory>> memory_at_phase;  // optional, "device/after_forward"
  std::string busiest;                // the busiest resource (trace track) ...
  double busiest_ms = 0;              // ... and its busy time in this step
  double overlap = 0;                 // step_ms / busiest_ms (1 = perfect overlap); 0 = unknown
  std::vector<std::pair<std::string, double>> busy_ms;  // every track's busy time in this step
  std::vector<CheckpointMetrics> checkpoints;  // finished at the end of this step (0, 1 or 2)
  // Module updates run before the global norm was known (Note [Speculative updates],
  // runtime/zero/speculation.h), and of those, redone because the norm was over the threshold.
  std::uint64_t speculative_updates = 0;
  std::uint64_t speculative_redone = 0;
};

// One JSON object, no newline. Keys, in this order: step, loss, lr, step_ms, tokens_per_s,
// tflops, grad_norm, loss_scale, skipped, phase_ms {name: ms, ...}, bytes {nvme_read,
// nvme_write, h2d, d2h, collective}, collective_theory_bytes, memory {device, pinned, nvme:
// {current_bytes, peak_bytes, budget_bytes, allocated_bytes}}, memory_at_phase {name: {current_bytes, ...}}
// (an empty object when none), busiest, busiest_ms, overlap, busy_ms {track: ms, ...} (every
// track, an empty object when none), speculative {updates, redone}, and checkpoints [{step, ok,
// bytes, write_ms, wait_ms, publish_ms}, ...] when checkpoints finished at the end of the step. A non-finite number (a NaN loss)
// is written as null.
std::string to_json_line(const StepMetrics& m);

// Appends one line per step to a JSONL file, flushed after each line so that a crashed or
// killed run keeps every step it finished. Path "" = disabled (write() does nothing).
// Owns its file; move-only; not thread-safe (one writer, the training loop).
class MetricsWriter {
 public:
  // Creates or truncates the file; throws strata::Error naming the path when it cannot.
  explicit MetricsWriter(std::string path);
  ~MetricsWriter();
  MetricsWriter(MetricsWriter&&) noexcept;
  MetricsWriter& operator=(MetricsWriter&&) noexcept;
  MetricsWriter(const MetricsWriter&) = delete;
  MetricsWriter& operator=(const MetricsWriter&) = delete;

  bool enabled() const noexcept { return file_ != nullptr; }
  const std::string& path() const noexcept { return path_; }

  // Writes to_json_line(m) and a newline, then flushes. A failure (disk full, I/O error) is
  // a strata::Error naming the path.
  void write(const StepMetrics& m);

 private:
  struct Closer {
    void operator()(std::FILE* f) const noexcept;
  };
  std::string path_;
  std::unique_ptr<std::FILE, Closer> file_;  // null when disabled
};

}  // namespace strata::runtime::telemetry
