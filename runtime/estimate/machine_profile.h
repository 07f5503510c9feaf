#pragma once
// What a placement's speed depends on, measured once per machine by `strata bench machine`
// (tools/bench/bench_machine.cpp) and read by `strata estimate --profile` to predict step times
// (step_model.h). Rates are per second, over the whole machine as a run would use it (all the
// CPU Adam threads, one device, the disk at the configured block size and queue depth).
//
// The JSON form (one object; unknown keys are ignored, a missing or non-positive rate is an
// error naming the key and the file):
//   {"strata_machine_profile": 1, "device": {"backend": "host", "name": "..."},
//    "dtype": "bf16", "threads": 2,
//    "cpu_adam_elements_per_s": ..., "memory_bytes_per_s": ..., "h2d_bytes_per_s": ...,
//    "d2h_bytes_per_s": ..., "disk_read_bytes_per_s": ..., "disk_write_bytes_per_s": ...,
//    "disk_block_bytes": ..., "disk_queue_depth": ..., "disk_dir": "...",
//    "gemm_flops_per_s": ..., "step_flops_per_s": ...,
//    "cpu_matmul_bytes_per_s": ..., "cpu_matmul_flops_per_s": ...,   (optional: 0 when absent)
//    "step_points": [{"hidden": 128, "layers": 2, "batch": 4, "seq_len": 128,
//                     "flops_per_s": ...}, ...]}
#include <cstdint>
#include <string>
#include <vector>

namespace strata::runtime::estimate {

inline constexpr int kMachineProfileVersion = 1;

// `strata train`'s resident step (stage 0, nothing offloaded; so the engine's own work is in it)
// of a GPT-2 of `layers` blocks of width `hidden` (vocabulary 256) at batch x seq_len, as model
// flops per second: a transformer's speed on a device depends on its width far more than on its
// depth, so the step model interpolates a model's rate between these points by width.
struct StepPoint {
  int hidden = 0;
  int layers = 0;
  int batch = 0;
  int seq_len = 0;
  double flops_per_s = 0;
};

struct MachineProfile {
  std::string backend;   // "host" | "cuda"
  std::string device_name;
  std::string dtype;     // the compute dtype the device rates were measured in ("bf16", "fp32")
  int threads = 0;       // CPU Adam threads
  double cpu_adam_elements_per_s = 0;  // fp32 AdamW step, elements of one shard per second
  double memory_bytes_per_s = 0;       // host memory copy bandwidth (read + write bytes)
  double h2d_bytes_per_s = 0;          // pinned host -> device
  double d2h_bytes_per_s = 0;          // device -> pinned host
  double disk_read_bytes_per_s = 0;    // O_DIRECT io_uring at disk_block_bytes x disk_queue_depth
  double disk_write_bytes_per_s = 0;
  std::uint64_t disk_block_bytes = 0;
  int disk_queue_depth = 0;
  std::string disk_dir;                // where the disk was measured
  double gemm_flops_per_s = 0;         // the device's matmul at a square shape, in dtype
  // A resident training step of a small reference model on the device (forward, backward and
  // the optimizer, in dtype), as model flops (6 x parameters x tokens + attention) per second:
  // what the step model divides a model's flops by.
  double step_flops_per_s = 0;
  std::vector<StepPoint> step_points;  // by increasing width; at least one
  // The host's own matmul (kernels/host's matmul_fwd, the calling thread's team, in dtype) over a weight in
  // host memory, as `--moe-cpu-experts auto` computes a mixture's cold expert: at one row, weight
  // bytes per second (what reading the weight costs), and at kMatmulFewRows (16) rows, flops per second (what
  // each further row costs). Optional in the JSON (profiles written before them): 0 when absent.
  double cpu_matmul_bytes_per_s = 0;
  double cpu_matmul_flops_per_s = 0;
};

// Model flops of one training step of a transformer with `params` parameters, `layers` blocks of
// width `hidden`, over `tokens` tokens of sequences of `seq_len`: 6 x params x tokens for the
// matmuls, plus 12 x layers x hidden x seq_len x tokens for attention (PaLM's count, the one
// `strata bench gpt` reports); with activation checkpointing the forward runs twice, so 8 and 16.
double model_step_flops(double params, int layers, int hidden, int seq_len, double tokens, bool checkpointing);

// Throws strata::Error naming the file (and the key) when it is missing, not JSON, of another
// version, or lacks a rate.
MachineProfile read_machine_profile(const std::string& path);
std::string machine_profile_json(const MachineProfile& profile);  // the form above, indented
// Writes machine_profile_json atomically (a temporary file renamed); throws naming the path.
void write_machine_profile(const MachineProfile& profile, const std::string& path);

}  // namespace strata::runtime::estimate
