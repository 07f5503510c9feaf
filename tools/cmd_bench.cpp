// strata bench convert [--elements N] [--reps R] [--threads T]
// strata bench adam [--params 16M,256M] [--threads 1,all] [--grad fp32,bf16] [--reps N] [--json]
//                   [--aligned] [--no-torch] [--python PATH] [--torch-script PATH]
#include <memory>

#include "tools/bench.h"
#include "tools/commands.h"

namespace strata::tools {

void add_bench_command(CLI::App& app) {
  CLI::App* bench = app.add_subcommand("bench", "benchmarks of the hot paths, as ratios to a limit measured in the same run");
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
}

}  // namespace strata::tools
