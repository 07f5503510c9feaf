// strata bench convert [--elements N] [--reps R] [--threads T]
// strata bench adam [--params 16M,256M] [--threads 1,all] [--grad fp32,bf16] [--reps N] [--json]
//                   [--aligned] [--no-torch] [--python PATH] [--torch-script PATH]
// strata bench gpt [--preset gpt2 | --model config.json] [--batch 4] [--seq-len 128]
//                  [--dtype fp32] [--checkpointing] [--steps 5] [--json] [device flags]
// strata bench attention [--batch 8] [--seq-len 1024] [--heads 12] [--kv-heads 0] [--head-size 64]
//                        [--dtype bf16] [--decode-past 0] [--steps 10] [--json] [device flags]
// strata bench nvme [--dir DIR] [--size 1G] [--block-size 128K,1M,8M] [--queue-depth 1,8,32,128]
//                   [--parallelism 1,2] [--op read,write] [--pattern seq,rand] [--reps 3]
//                   [--no-fio] [--fio PATH] [--fio-fixedbufs] [--json] [--tune]
// strata bench step [--preset tiny | --model config.json] [--text FILE] [--batch 4] [--seq-len 128]
//                   [--dtype fp32|bf16] [--gradient-clipping 1.0] [--steps 6] [--rounds 3]
//                   [--device host|cuda|auto] [--device-memory SIZE] [--dir DIR] [--json] [--verbose]
//                   [--checkpointing] [--peers auto|all|none|torch,deepspeed,fsdp2] [--nvme-path DIR]
//                   [--python PATH] [--peer-script PATH]
// strata bench checkpoint [--preset bytes-30m | --model config.json] [--placements cpu,nvme]
//                   [--steps 8] [--rounds 2] [--dir|--scratch DIR] and the other flags of bench step
// strata bench checksum [--parts hash,swap,step] [--size 256M] [--block-size 1M] [--extent-size 16M]
//                      [--threads 1,all] [--reps 5] [--preset bytes-30m | --model config.json]
//                      [--steps 6] [--rounds 3] [--dir|--scratch DIR] and the other flags of bench step
// strata bench serve [--preset llama-tiny | --model DIR] [--batch 8] [--clients 8] [--requests 32]
//                    [--prompt-min 16] [--prompt-max 128] [--output-tokens 64] [--json] [device flags]
// strata bench machine [--out strata-machine.json] [--dir DIR] [--dtype auto|bf16|fp32] [--seconds 5]
//                      [--step-preset NAME] [--json] [--device host|cuda|auto] [--device-memory SIZE]
//                      [--config ds.json]
#include <memory>
#include <string>

#include "tools/bench/bench.h"
#include "tools/commands.h"

namespace strata::tools {
namespace {

// The flags of the benches whose cells are `strata train` children (bench step, bench
// checkpoint); their defaults are the ones `o` holds.
void add_train_child_flags(CLI::App& bench, TrainChildOptions& o, const std::string& device_memory_help) {
  bench.add_option("--preset", o.preset, "model preset (tiny, bytes-30m, gpt2, ...)")->capture_default_str();
  bench.add_option("--model", o.model, "a Hugging Face GPT-2 config.json instead");
  bench.add_option("--text", o.text, "training text, its bytes as tokens (default: generated in the scratch folder)");
  bench.add_option("--batch", o.batch, "micro-batch size (train_micro_batch_size_per_gpu)")
      ->check(CLI::PositiveNumber)->capture_default_str();
  bench.add_option("--seq-len", o.seq_len, "tokens per sequence")->check(CLI::PositiveNumber)->capture_default_str();
  bench.add_option("--dtype", o.dtype, "fp32, or bf16 (bf16.enabled)")
      ->check(CLI::IsMember({"fp32", "bf16"}))->capture_default_str();
  bench.add_option("--gradient-clipping", o.gradient_clipping,
                   "gradient_clipping of every run (0: no global norm, so each update starts while "
                   "backward goes on)")
      ->check(CLI::NonNegativeNumber)->capture_default_str();
  bench.add_option("--steps", o.steps,
                   "training steps per run; the first 2 are warm-up (and bench checkpoint leaves out the last)")
      ->check(CLI::PositiveNumber)->capture_default_str();
  bench.add_option("--rounds", o.rounds, "runs of every cell, round by round (medians over all their timed steps)")
      ->check(CLI::PositiveNumber)->capture_default_str();
  bench.add_option("--device", o.device, "strata.device of every run")
      ->check(CLI::IsMember({"host", "cuda", "auto"}))->capture_default_str();
  bench.add_option("--device-memory", o.device_memory, device_memory_help);
  bench.add_option("--dir,--scratch", o.dir,
                   "parent of the scratch folder that holds nvme_path (default: $TMPDIR, else /var/tmp; "
                   "removed afterwards)");
  bench.add_flag("--json", o.json, "one JSON object per cell on stdout (the tables go to stderr)");
  bench.add_flag("--verbose", o.verbose, "each child's command line and output on stderr");
}

}  // namespace

void add_bench_command(CLI::App& app) {
  CLI::App* bench =
      app.add_subcommand("bench", "benchmarks of the hot paths, as ratios to a limit measured in the same run");
  bench->require_subcommand(1);
  auto options = std::make_shared<BenchOptions>();
  CLI::App* convert = bench->add_subcommand("convert", "fp32 <-> bf16/fp16 bulk converters vs memcpy");
  convert->add_option("--elements", options->elements, "elements per conversion (default 32Mi)");
  convert->add_option("--reps", options->reps, "best of this many runs")->check(CLI::PositiveNumber);
  convert->add_option("--threads", options->threads, "threads for the parallel rows (default: all)")
      ->check(CLI::NonNegativeNumber);
  convert->callback([options] { bench_convert(*options); });

  auto adam_options = std::make_shared<AdamBenchOptions>();
  CLI::App* adam = bench->add_subcommand(
      "adam", "the CPU Adam step vs a memory-bound kernel with its access pattern, and vs torch AdamW");
  adam->add_option("--params", adam_options->params,
                   "parameter counts, comma-separated; K/M/G = 2^10/2^20/2^30")
      ->capture_default_str();
  adam->add_option("--threads", adam_options->threads,
                   "thread counts, comma-separated: N, all (the affinity mask's CPUs), or A..B")
      ->capture_default_str();
  adam->add_option("--grad", adam_options->grads,
                   "grad modes, comma-separated: fp32 (28 B/param) or bf16 (bf16 grads + bf16 params out)")
      ->capture_default_str();
  adam->add_option("--reps", adam_options->reps,
                   "timed rounds per cell, medians reported (default: 7 at 256M, up to 25 for smaller sizes)")
      ->check(CLI::PositiveNumber);
  adam->add_flag("--json", adam_options->json, "one JSON object per cell on stdout (the table goes to stderr)");
  adam->add_flag("--aligned", adam_options->aligned,
                 "place every array at the same offset modulo 2 MiB, as separate large allocations "
                 "land (default: staggered by 4 KiB + 64 B, see Note [Array placement])");
  adam->add_flag("!--no-torch", adam_options->torch, "skip torch.optim.AdamW");
  adam->add_option("--python", adam_options->python, "python with torch")->capture_default_str();
  adam->add_option("--torch-script", adam_options->torch_script,
                   "tools/bench/adam_torch.py (default: next to the binary, then the source tree)");
  adam->callback([adam_options] { bench_adam(*adam_options); });

  auto gpt_options = std::make_shared<GptBenchOptions>();
  CLI::App* gpt = bench->add_subcommand(
      "gpt", "a model's forward + backward step on the device (any family: a preset or --model) vs its largest "
             "GEMM alone, and vs PyTorch's (GPT-2 only)");
  gpt->add_option("--preset", gpt_options->preset, "model preset (gpt2, gpt2-medium, tiny, ...)")
      ->capture_default_str();
  gpt->add_option("--model", gpt_options->model, "a Hugging Face model folder or config.json (any family) instead");
  gpt->add_option("--batch", gpt_options->batch, "micro-batch size B")
      ->check(CLI::PositiveNumber)->capture_default_str();
  gpt->add_option("--seq-len", gpt_options->seq_len, "sequence length T")
      ->check(CLI::PositiveNumber)->capture_default_str();
  gpt->add_option("--dtype", gpt_options->dtype, "fp32, bf16 or fp16 storage")->capture_default_str();
  gpt->add_flag("--checkpointing", gpt_options->checkpointing, "recompute each block in backward");
  gpt->add_option("--steps", gpt_options->steps, "timed steps (median reported)")
      ->check(CLI::PositiveNumber)->capture_default_str();
  gpt->add_flag("--json", gpt_options->json, "one JSON object on stdout");
  gpt->add_flag("--profile", gpt_options->profile,
                "time every op of one more step (per op kind: ms, share, count)");
  gpt->add_flag("!--no-torch", gpt_options->torch, "skip PyTorch's fwd+bwd of the same model");
  gpt->add_option("--python", gpt_options->python, "python with torch")->capture_default_str();
  add_device_flags(*gpt, gpt_options->device);
  gpt->callback([gpt_options] { bench_gpt(*gpt_options); });

  auto attn_options = std::make_shared<AttentionBenchOptions>();
  CLI::App* attn = bench->add_subcommand(
      "attention", "causal attention forward + backward on the device vs a GEMM of the same FLOPs");
  attn->add_option("--batch", attn_options->batch, "batch size B")
      ->check(CLI::PositiveNumber)->capture_default_str();
  attn->add_option("--seq-len", attn_options->seq_len, "sequence length T")
      ->check(CLI::PositiveNumber)->capture_default_str();
  attn->add_option("--heads", attn_options->heads, "query heads NH")
      ->check(CLI::PositiveNumber)->capture_default_str();
  attn->add_option("--kv-heads", attn_options->kv_heads, "key/value heads NKV (0: as many as --heads)")
      ->check(CLI::NonNegativeNumber)->capture_default_str();
  attn->add_option("--head-size", attn_options->head_size, "head size hs")
      ->check(CLI::PositiveNumber)->capture_default_str();
  attn->add_option("--dtype", attn_options->dtype, "fp32, bf16 or fp16 storage")->capture_default_str();
  attn->add_option("--decode-past", attn_options->decode_past,
                   "instead: decoding of 1 new token after this many cached positions, vs a "
                   "device-to-device copy (0: forward + backward)")
      ->check(CLI::NonNegativeNumber)->capture_default_str();
  attn->add_option("--steps", attn_options->steps, "timed runs (median reported)")
      ->check(CLI::PositiveNumber)->capture_default_str();
  attn->add_flag("--json", attn_options->json, "one JSON object on stdout");
  add_device_flags(*attn, attn_options->device);
  attn->callback([attn_options] { bench_attention(*attn_options); });

  auto nvme_options = std::make_shared<NvmeBenchOptions>();
  CLI::App* nvme = bench->add_subcommand(
      "nvme", "the NVMe tier's I/O engine (io_uring, O_DIRECT) vs fio on the same file and cells");
  nvme->add_option("--dir", nvme_options->dir,
                   "folder for the scratch file, on the disk to measure (default: $TMPDIR, else "
                   "/var/tmp; not tmpfs)");
  nvme->add_option("--size", nvme_options->size,
                   "bytes each cell moves, e.g. 256M (default 1G; at most a quarter of the free space)");
  nvme->add_option("--block-size", nvme_options->block_sizes,
                   "block sizes (aio.block_size), comma-separated multiples of 4K")
      ->capture_default_str();
  nvme->add_option("--queue-depth", nvme_options->queue_depths,
                   "queue depths per engine thread (aio.queue_depth), comma-separated")
      ->capture_default_str();
  nvme->add_option("--parallelism", nvme_options->parallelism,
                   "engine threads (aio.intra_op_parallelism; fio numjobs), comma-separated")
      ->capture_default_str();
  nvme->add_option("--op", nvme_options->ops, "read, write or both")->capture_default_str();
  nvme->add_option("--pattern", nvme_options->patterns, "seq, rand or both")->capture_default_str();
  nvme->add_option("--reps", nvme_options->reps, "rounds per cell, medians reported")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  nvme->add_flag("!--no-fio", nvme_options->fio, "skip fio (no ratios)");
  nvme->add_option("--fio", nvme_options->fio_path, "the fio binary")->capture_default_str();
  nvme->add_flag("--fio-fixedbufs", nvme_options->fio_fixed,
                 "fio with registered buffers and files (fixedbufs=1, registerfiles=1), as the "
                 "engine uses them (default: fio's defaults, plain buffers)");
  nvme->add_flag("--json", nvme_options->json,
                 "one JSON object per cell on stdout (the table goes to stderr)");
  nvme->add_flag("--tune", nvme_options->tune,
                 "print the \"aio\" config section with the best sequential read and write "
                 "(geometric mean of their GB/s)");
  nvme->callback([nvme_options] { bench_nvme(*nvme_options); });

  auto step_options = std::make_shared<StepBenchOptions>();
  CLI::App* step = bench->add_subcommand(
      "step", "the ZeRO training step per placement (device, cpu, nvme) and stage (1-3) vs the "
              "same model fully resident");
  add_train_child_flags(*step, *step_options,
                        "strata.device_memory of the placements, e.g. 64MiB (default: the backend's; "
                        "the reference gets what it needs)");
  step->add_flag("--checkpointing", step_options->checkpointing,
                 "activation checkpointing in every run (--activation-checkpointing) and in the peers");
  step->add_option("--peers", step_options->peers,
                   "comma-separated peers on the same model and shapes, each a Python child: torch "
                   "(PyTorch resident), deepspeed (ZeRO-2 cpu, ZeRO-3 cpu, ZeRO-3 nvme), fsdp2 "
                   "(FSDP2 + CPUOffloadPolicy), a peer by name (deepspeed_zero2_cpu, ...), all, none; "
                   "auto = all with --device cuda, none otherwise")
      ->capture_default_str();
  step->add_option("--nvme-path", step_options->nvme_path,
                   "the DeepSpeed NVMe peer's swap folder (default: in the scratch folder)");
  step->add_option("--python", step_options->python,
                   "the peers' Python (default: python3 on PATH with --device cuda, else /usr/bin/python3)");
  step->add_option("--peer-script", step_options->peer_script,
                   "tools/bench/step_peers.py elsewhere (default: next to the binary, in the source tree "
                   "or under the current folder)");
  step->add_option("--placements", step_options->placements,
                   "comma-separated placements of the cells besides the reference: none (nothing offloaded; also device), cpu, nvme")
      ->capture_default_str();
  step->add_option("--stages", step_options->stages, "comma-separated ZeRO stages of those cells: 1, 2, 3")
      ->capture_default_str();
  step->callback([step_options] { bench_step(*step_options); });

  auto checkpoint_options = std::make_shared<CheckpointBenchOptions>();
  CLI::App* checkpoint = bench->add_subcommand(
      "checkpoint", "the step time with a checkpoint every step vs without, per placement at stage 3, "
                    "and the checkpoint's write rate vs the disk's");
  add_train_child_flags(*checkpoint, *checkpoint_options,
                        "strata.device_memory of every run, e.g. 64MiB (default: the backend's)");
  checkpoint->add_option("--placements", checkpoint_options->placements,
                         "comma-separated: none (nothing offloaded; also device), cpu, nvme")
      ->capture_default_str();
  checkpoint->callback([checkpoint_options] { bench_checkpoint(*checkpoint_options); });

  auto checksum_options = std::make_shared<ChecksumBenchOptions>();
  CLI::App* checksum = bench->add_subcommand(
      "checksum", "what strata.checksum costs: xxh3 per block vs memcpy, a swap round trip and a stage-3 NVMe "
                  "step with checksums off vs on");
  add_train_child_flags(*checksum, *checksum_options,
                        "strata.device_memory of the step's runs, e.g. 64MiB (default: the backend's)");
  checksum->add_option("--parts", checksum_options->parts, "comma-separated: hash, swap, step")
      ->capture_default_str();
  checksum->add_option("--size", checksum_options->size,
                       "bytes the hash and memcpy go over, and each swap round trip moves")
      ->capture_default_str();
  checksum->add_option("--block-size", checksum_options->block_size,
                       "the checksum block (aio.block_size) of hash and swap, a multiple of 4K")
      ->capture_default_str();
  checksum->add_option("--extent-size", checksum_options->extent_size,
                       "bytes per swap extent, a multiple of --block-size")
      ->capture_default_str();
  checksum->add_option("--threads", checksum_options->threads, "the hash's thread counts, comma-separated: N or all")
      ->capture_default_str();
  checksum->add_option("--reps", checksum_options->reps, "rounds of hash and swap, medians reported")
      ->check(CLI::PositiveNumber)->capture_default_str();
  checksum->callback([checksum_options] { bench_checksum(*checksum_options); });

  auto machine_options = std::make_shared<MachineBenchOptions>();
  CLI::App* machine = bench->add_subcommand(
      "machine", "what a placement's speed depends on (CPU Adam, memory, pinned H2D/D2H, disk, GEMM, a "
                 "resident step), written as the machine profile `strata estimate --profile` reads");
  machine->add_option("--out", machine_options->out, "the profile (JSON) to write")->capture_default_str();
  machine->add_option("--dir", machine_options->dir,
                      "folder for the disk's scratch file, on the disk the NVMe tier would use (default: "
                      "$TMPDIR, else /var/tmp; not tmpfs)");
  machine->add_option("--dtype", machine_options->dtype,
                      "compute dtype of the GEMM and the step: bf16, fp32, or auto (the config's bf16.enabled; "
                      "without --config bf16 on cuda, fp32 on host)")
      ->check(CLI::IsMember({"auto", "bf16", "fp32"}))->capture_default_str();
  machine->add_option("--seconds", machine_options->seconds, "timed repeats of each rate for about this long")
      ->check(CLI::PositiveNumber)->capture_default_str();
  machine->add_option("--step-preset", machine_options->step_preset,
                      "the reference model of the step rate (default: bytes-30m on host, gpt2 on cuda)");
  machine->add_flag("--json", machine_options->json, "the profile on stdout (the table goes to stderr)");
  machine->add_flag("--verbose", machine_options->verbose, "the step points' strata train children's output on stderr");
  add_device_flags(*machine, machine_options->device);
  machine->callback([machine_options] { bench_machine(*machine_options); });

  auto infer_options = std::make_shared<InferBenchOptions>();
  CLI::App* infer = bench->add_subcommand(
      "infer", "decoding tokens/s per placement of the parameters (device, cpu, nvme: streamed) and batch, vs the "
               "bound of the bytes each step streams (pinned H2D and disk read rates of the same run)");
  add_device_flags(*infer, infer_options->device);
  infer->add_option("--preset", infer_options->preset, "a model preset (random weights)")->capture_default_str();
  infer->add_option("--model", infer_options->model, "a Hugging Face model folder or config.json instead");
  infer->add_option("--placements", infer_options->placements,
                    "comma-separated placements of the parameters: none (all on the device; also device), cpu, nvme")
      ->capture_default_str();
  infer->add_option("--batches", infer_options->batches,
                    "comma-separated batch sizes; auto = the largest that fits (a quarter of the device)")
      ->capture_default_str();
  infer->add_option("--prompt-len", infer_options->prompt_len, "tokens per prompt")->capture_default_str();
  infer->add_option("--steps", infer_options->steps, "timed decoding steps (after one untimed)")->capture_default_str();
  infer->add_option("--slots", infer_options->slots, "offload_param.buffer_count of the streamed cells")
      ->capture_default_str();
  infer->add_option("--dtype", infer_options->dtype, "auto, fp32, bf16 or fp16")->capture_default_str();
  infer->add_option("--quantize", infer_options->quantize, "int8 or int4: the streamed cells' weights (group 128)");
  infer->add_option("--moe-expert-cache-mb", infer_options->moe_expert_cache_mb,
                    "a mixture of experts' device cache of experts in MiB (-1 default: what the device holds, 0 none)");
  infer->add_option("--moe-prefetch", infer_options->moe_prefetch,
                    "on or off (default): a mixture of experts' next-layer expert lookahead")
      ->check(CLI::IsMember({"on", "off"}));
  infer->add_option("--moe-fetch", infer_options->moe_fetch,
                    "routed (default) or all: a mixture's layer fetches every expert each step, as dense streaming "
                    "does (the baseline for the bytes routing saves; the same tokens)")
      ->check(CLI::IsMember({"routed", "all"}));
  infer->add_option("--moe-cpu-experts", infer_options->moe_cpu_experts,
                    "off (default), on or auto: a mixture's experts in pinned memory computed on the host")
      ->check(CLI::IsMember({"off", "on", "auto"}));
  infer->add_option("--profile", infer_options->profile_path,
                    "the machine profile --moe-cpu-experts auto decides by (strata bench machine)");
  infer->add_flag("--peers", infer_options->peers,
                  "also run transformers + Accelerate's offloaded decoding of the same model, batch and budget "
                  "next to each cpu cell (tools/bench/infer_peers.py)");
  infer->add_option("--python", infer_options->python, "the peers' interpreter (default python3 on cuda)");
  infer->add_option("--dir", infer_options->dir, "parent of the scratch folder (NVMe swap); default $TMPDIR or /var/tmp");
  infer->add_flag("--json", infer_options->json, "one JSON object per cell on stdout, the table on stderr");
  infer->callback([infer_options] { bench_infer(*infer_options); });

  auto serve_options = std::make_shared<ServeBenchOptions>();
  CLI::App* serve = bench->add_subcommand(
      "serve", "strata serve with concurrent streaming clients over loopback: tokens/s, requests/s, time to first "
               "token, inter-token latency, vs strata infer's batch throughput on the same requests");
  add_device_flags(*serve, serve_options->device);
  serve->add_option("--preset", serve_options->preset, "a model preset (random weights)")->capture_default_str();
  serve->add_option("--model", serve_options->model, "a Hugging Face model folder or config.json instead");
  serve->add_option("--batch", serve_options->batch, "the server's rows (--max-batch) and strata infer's --batch")
      ->check(CLI::PositiveNumber)->capture_default_str();
  serve->add_option("--clients", serve_options->clients, "concurrent streaming clients")
      ->check(CLI::PositiveNumber)->capture_default_str();
  serve->add_option("--requests", serve_options->requests, "requests in all")->check(CLI::PositiveNumber)->capture_default_str();
  serve->add_option("--prompt-min", serve_options->prompt_min, "shortest prompt (tokens)")->capture_default_str();
  serve->add_option("--prompt-max", serve_options->prompt_max, "longest prompt (tokens)")->capture_default_str();
  serve->add_option("--output-tokens", serve_options->output_tokens, "tokens generated per request")->capture_default_str();
  serve->add_option("--dtype", serve_options->dtype, "auto, fp32, bf16 or fp16")->capture_default_str();
  serve->add_option("--kv-cache", serve_options->kv_cache, "auto, device or host")->capture_default_str();
  serve->add_option("--seed", serve_options->seed, "seed of the prompts and the random weights")->capture_default_str();
  serve->add_flag("--json", serve_options->json, "one JSON object on stdout, the summary on stderr");
  serve->callback([serve_options] { bench_serve(*serve_options); });
}

}  // namespace strata::tools
