// strata bench NAME [--elements N] [--reps R] [--threads T]
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
}

}  // namespace strata::tools
