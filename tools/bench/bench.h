#pragma once
// `strata bench NAME`: benchmarks of the hot paths. Each prints its rate next to a limit
// measured in the same run (memory bandwidth, disk bandwidth, PCIe) and the ratio of the two.
#include <algorithm>
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/error.h"
#include "runtime/config/config.h"
#include "tools/device_flags.h"

namespace strata::tools {

// The items of a comma-separated flag value ("16M,256M"), empty items dropped.
inline std::vector<std::string> split_list(std::string_view text) {
  std::vector<std::string> out;
  std::size_t start = 0;
  while (start <= text.size()) {
    const std::size_t comma = std::min(text.find(',', start), text.size());
    if (comma > start) out.emplace_back(text.substr(start, comma - start));
    start = comma + 1;
  }
  return out;
}

// One item of --placements (strata compare and the benchmarks): a placement in the config's
// words, none, cpu or nvme (docs/config.md, "Names of tiers and placements"), or `device`, still
// taken for none: the benchmarks' result lines name that cell `device` (bench_cell_name), and
// command lines written before give it. nullopt for anything else.
inline std::optional<runtime::config::OffloadDevice> placement_word(std::string_view item) {
  using runtime::config::OffloadDevice;
  for (OffloadDevice d : {OffloadDevice::kNone, OffloadDevice::kCpu, OffloadDevice::kNvme}) {
    if (item == runtime::config::to_string(d)) return d;
  }
  if (item == "device") return OffloadDevice::kNone;
  return std::nullopt;
}
inline constexpr const char* kPlacementsHint = "give a comma-separated list of none, cpu and nvme (device: none), e.g. --placements cpu,nvme";

// The name of a placement's cell in the benchmarks' result lines (their "placement" key):
// "device" for none (nothing offloaded), else the config's word.
inline std::string bench_cell_name(runtime::config::OffloadDevice d) {
  return d == runtime::config::OffloadDevice::kNone ? "device" : std::string(runtime::config::to_string(d));
}

// "none,nvme" -> {"device", "nvme"}: the cells of --placements (placement_word) by
// bench_cell_name, each at most once, in the order given; throws strata::Error naming
// --placements for anything else or for an empty list.
inline std::vector<std::string> parse_placements(std::string_view text) {
  std::vector<std::string> out;
  for (const std::string& item : split_list(text)) {
    const std::optional<runtime::config::OffloadDevice> d = placement_word(item);
    if (!d) throw Error("'" + item + "' is not a placement", "--placements", kPlacementsHint);
    const std::string cell = bench_cell_name(*d);
    if (std::find(out.begin(), out.end(), cell) == out.end()) out.push_back(cell);
  }
  if (out.empty()) throw Error("no placement given", "--placements", kPlacementsHint);
  return out;
}

struct BenchOptions {
  std::size_t elements = 0;  // problem size; 0 = the benchmark's default
  int reps = 5;              // best of this many runs
  int threads = 0;           // 0 = OpenMP's default (the cores of the affinity mask)
};

void bench_convert(const BenchOptions& options);  // bench_convert.cpp

// `strata bench adam`: the CPU Adam step (cpu_adam/adam.h) against a memory-bound kernel with
// the same access pattern, and against torch.optim.AdamW when Debian's python3-torch is there.
struct AdamBenchOptions {
  std::string params = "16M,256M";   // parameter counts; K/M/G = 2^10/2^20/2^30
  std::string threads = "1,all";     // thread counts: N, all, or a range A..B (B may be all)
  std::string grads = "fp32,bf16";   // grad modes: fp32, or bf16 grads + bf16 params_out
  int reps = 0;                      // timed rounds per cell; 0 = by size (7 at 256M, up to 25 below)
  bool json = false;                 // one JSON object per cell on stdout, the table on stderr
  bool torch = true;                 // false: skip torch.optim.AdamW
  bool aligned = false;              // true: arrays at the same offset mod 2 MiB (not staggered)
  std::string python = "/usr/bin/python3";  // Debian's python3, the one with python3-torch
  std::string torch_script;          // empty: found next to the binary or in the source tree
};

void bench_adam(const AdamBenchOptions& options);  // bench_adam.cpp

// `strata bench nvme`: the NVMe tier's I/O engine (offload/aio_engine.h) on an O_DIRECT scratch
// file, against fio's io_uring engine on the same file and cells, interleaved. Lists are
// comma-separated; sizes take K/M/G = 2^10/2^20/2^30.
struct NvmeBenchOptions {
  std::string dir;                           // empty: $TMPDIR, else /var/tmp (a disk, not tmpfs)
  std::string size;                          // bytes per cell; empty: 1 GiB (shrunk on a full disk)
  std::string block_sizes = "128K,1M,8M";    // aio.block_size
  std::string queue_depths = "1,8,32,128";   // aio.queue_depth
  std::string parallelism = "1,2";           // aio.intra_op_parallelism
  std::string ops = "read,write";
  std::string patterns = "seq,rand";
  int reps = 3;                              // rounds per cell (ours, fio, ours, fio, ...)
  bool fio = true;                           // false: skip fio
  std::string fio_path = "fio";              // the fio binary (PATH lookup)
  bool fio_fixed = false;                    // fio with fixedbufs=1 registerfiles=1, as ours
  bool json = false;                         // one JSON object per cell on stdout, table on stderr
  bool tune = false;                         // print the best "aio" config section
};

void bench_nvme(const NvmeBenchOptions& options);  // bench_nvme.cpp

// `strata bench gpt`: a GPT-2 forward + backward micro-step on a device (parameters resident),
// against the model's largest GEMM measured in the same run.
struct GptBenchOptions {
  std::string preset = "gpt2";   // models::GptConfig::preset names
  std::string model;             // a config.json instead of a preset
  int batch = 4;
  int seq_len = 128;
  std::string dtype = "fp32";    // fp32, bf16 or fp16
  bool checkpointing = false;
  int steps = 5;                 // timed steps after one warm-up; the median is reported
  bool json = false;
  bool torch = true;             // also time PyTorch's fwd+bwd of the same model
  std::string python = "/usr/bin/python3";  // the interpreter with torch (Debian's python3-torch)
  bool profile = false;          // one more step with every op timed (runtime/ops/op_profiler.h)
  DeviceFlags device;            // --device, --device-memory, --config
};

void bench_gpt(const GptBenchOptions& options);  // bench_gpt.cpp

// `strata bench attention`: the causal attention op, forward + backward, at one shape on a
// device, against a GEMM of the same FLOPs measured in the same run; with --decode-past P,
// decoding one token after P cached positions instead, against a device-to-device copy.
struct AttentionBenchOptions {
  int batch = 8;
  int seq_len = 1024;            // T (ignored with decode_past)
  int heads = 12;                // NH, query heads
  int kv_heads = 0;              // NKV; 0 = heads (multi-head attention)
  int head_size = 64;
  std::string dtype = "bf16";    // fp32, bf16 or fp16
  int decode_past = 0;           // > 0: attention_decode of 1 new token after this many positions
  int steps = 10;                // timed runs after one warm-up; the median is reported
  bool json = false;
  DeviceFlags device;            // --device, --device-memory, --config
};

void bench_attention(const AttentionBenchOptions& options);  // bench_attention.cpp

// `strata bench infer`: decoding tokens/s of a model served by the inference engine, per
// placement of its parameters (device, cpu, nvme) and batch size, against the bound of the bytes
// each step streams (pinned H2D rate, disk read rate, measured in the same run).
struct InferBenchOptions {
  std::string preset = "llama-tiny";  // models::model_preset names
  std::string model;                   // a Hugging Face folder or config.json instead
  std::string placements = "none,cpu,nvme";
  std::string batches = "1,16,auto";  // "auto": the largest the server fits (up to 256)
  int prompt_len = 32;
  int steps = 8;                       // timed decoding steps after one untimed; the median is reported
  int slots = 3;                       // offload_param.buffer_count of the streamed cells
  std::string dtype = "auto";
  std::string quantize;                // int8 | int4: the streamed cells' weights (group 128)
  std::int64_t moe_expert_cache_mb = -1;  // a mixture's expert cache (infer/server.h; -1 auto, 0 none)
  std::string moe_prefetch = "off";       // on | off: the experts' lookahead (models::ModelOptions)
  std::string moe_fetch = "routed";       // routed | all: every expert fetched (models::ModelOptions)
  std::string moe_cpu_experts = "off";    // off | on | auto: experts on the host (infer/server.h)
  std::string profile_path;               // the machine profile auto reads
  bool peers = false;                  // the cpu cells also run transformers + Accelerate (infer_peers.py)
  std::string python;                  // its interpreter; empty: python3 with --device cuda, else /usr/bin/python3
  std::string peer_script;             // empty: tools/bench/infer_peers.py found as the other scripts
  std::string dir;                     // parent of the scratch folder (the NVMe swap); empty: $TMPDIR or /var/tmp
  bool json = false;
  DeviceFlags device;                  // --device, --device-memory (the streamed cells' budget)
};

void bench_infer(const InferBenchOptions& options);  // bench_infer.cpp

// `strata bench serve`: the server's output tokens/s, requests/s, time to first token and
// inter-token latency with concurrent streaming clients over loopback, vs `strata infer`'s batch
// throughput on the same requests at the same batch (same run).
struct ServeBenchOptions {
  std::string preset = "llama-tiny";  // models::model_preset names (random weights)
  std::string model;            // a Hugging Face folder or config.json instead
  int batch = 8;                // the server's rows and the generation loop's batch
  int clients = 8;              // concurrent streaming clients
  int requests = 32;
  int prompt_min = 16, prompt_max = 128;
  int output_tokens = 64;
  std::string dtype = "auto";
  std::string kv_cache = "auto";
  std::uint64_t seed = 1;
  bool json = false;
  DeviceFlags device;           // --device, --device-memory, --config
};

void bench_serve(const ServeBenchOptions& options);  // bench_serve.cpp

// What the `strata train` children of `strata bench step` and `strata bench checkpoint` are run
// with (tools/bench/bench_children.h); the defaults are bench step's.
struct TrainChildOptions {
  std::string preset = "tiny";   // models::GptConfig::preset names
  std::string model;             // a config.json instead of a preset
  std::string text;              // training text (its bytes are the tokens); empty = generated
  int batch = 4;                 // train_micro_batch_size_per_gpu
  int seq_len = 128;
  std::string dtype = "fp32";    // fp32 or bf16
  int steps = 6;                 // per run; the first 2 are warm-up
  int rounds = 3;                // runs of every cell, interleaved; medians over every timed step
  double gradient_clipping = 1.0;  // 0: updates overlap backward; > 0: they wait for the norm
  std::string device = "host";   // strata.device of every run: host, cuda or auto
  std::string device_memory;     // strata.device_memory of the placements; empty = the backend's
  std::string dir;               // parent of the scratch folder (nvme_path is in it); empty:
                                 // $TMPDIR, else /var/tmp (a disk, not tmpfs)
  bool json = false;             // one JSON object per cell on stdout, the tables on stderr
  bool verbose = false;          // the children's output on stderr
  std::vector<std::string> launcher;  // run each child under this (e.g. mpirun -np 2); empty: directly
};

// `strata bench step`: the ZeRO training step for each placement of the model states (device,
// cpu, nvme) x stage (1, 2, 3), each a `strata train` child of this binary, against the same
// model fully resident on the device (stage 0, no offload) measured in the same run; then the
// peers (tools/bench/step_peers.py, one Python child each) on the same model and shapes.
struct StepBenchOptions : TrainChildOptions {
  bool checkpointing = false;    // --activation-checkpointing in every run, and in the peers
  // Comma-separated: torch (PyTorch resident), deepspeed (ZeRO-2 cpu, ZeRO-3 cpu, ZeRO-3 nvme),
  // fsdp2 (FSDP2 + CPUOffloadPolicy), or single peers by name (deepspeed_zero2_cpu, ...); all;
  // none. auto: all with --device cuda, none otherwise.
  std::string peers = "auto";
  std::string nvme_path;         // the DeepSpeed NVMe peer's swap folder; empty: in the scratch folder
  std::string python;            // the peers' interpreter; empty: python3 on PATH with --device
                                 // cuda, else /usr/bin/python3 (Debian's python3-torch)
  std::string peer_script;       // empty: tools/bench/step_peers.py, found as the other scripts
  // The cells besides the reference (always run): each placement at each stage, e.g. cpu and 3
  // alone for a GPT-2 XL run that must fit a short GPU lease.
  std::string placements = "none,cpu,nvme";
  std::string stages = "1,2,3";
};

void bench_step(const StepBenchOptions& options);  // bench_step.cpp

// `strata bench checkpoint`: what saving a checkpoint every step costs in step time, per
// placement at ZeRO stage 3 (runs with and without --checkpoint-every 1), and the checkpoint's
// write rate against the I/O engine writing as many bytes into the same folder, measured in the
// same run.
struct CheckpointBenchOptions : TrainChildOptions {
  CheckpointBenchOptions() {
    preset = "bytes-30m";
    batch = 2;
    steps = 8;
    rounds = 2;
  }
  std::string placements = "cpu,nvme";  // comma-separated: none, cpu, nvme (parse_placements)
};

void bench_checkpoint(const CheckpointBenchOptions& options);  // bench_checkpoint.cpp

// `strata bench checksum`: what strata.checksum costs: the xxh3-64 of a block against memcpy
// (1 thread, all), a swap space's round trip on the disk with checksums off and on, and a ZeRO
// stage-3 step with everything on NVMe with strata.checksum false and true (a `strata train`
// child each, interleaved). Sizes take K/M/G = 2^10/2^20/2^30.
struct ChecksumBenchOptions : TrainChildOptions {
  ChecksumBenchOptions() {
    preset = "bytes-30m";
    batch = 2;
  }
  std::string parts = "hash,swap,step";  // comma-separated: which parts to run
  std::string size = "256M";             // bytes hashed and copied, and moved per round trip
  std::string block_size = "1M";         // the checksum block (aio.block_size) of hash and swap
  std::string extent_size = "16M";       // bytes per swap extent
  std::string threads = "1,all";         // the hash's thread counts: N or all
  int reps = 5;                          // rounds of hash and swap (step: --rounds)
};

void bench_checksum(const ChecksumBenchOptions& options);  // bench_checksum.cpp

// `strata bench machine`: the rates a placement's step time depends on (CPU Adam, memory copy,
// pinned H2D and D2H, disk read and write through the I/O engine, the device's GEMM, a resident
// training step), each as a run would see it, written as a machine profile
// (runtime/estimate/machine_profile.h) for `strata estimate --profile`.
struct MachineBenchOptions {
  std::string out = "strata-machine.json";  // the profile, written atomically
  std::string dir;             // the disk's folder; empty: $TMPDIR, else /var/tmp (not tmpfs)
  std::string dtype = "auto";  // bf16 | fp32 | auto: with --config its bf16.enabled, else bf16 on cuda, fp32 on host
  double seconds = 5;          // per rate: timed repeats until this much time has passed (8 rates)
  std::string step_preset;     // the step's reference model; empty: bytes-30m on host, gpt2 on cuda
  bool json = false;           // the profile on stdout, the table on stderr
  bool verbose = false;        // the step points' `strata train` children's output on stderr
  DeviceFlags device;          // --device, --device-memory, --config (aio.*, strata.cpu_threads, bf16)
};

void bench_machine(const MachineBenchOptions& options);  // bench_machine.cpp

}  // namespace strata::tools
