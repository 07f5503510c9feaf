// strata chart: the charts of a training run (loss, throughput, memory per tier, busy time per
// resource) as SVG files, from the metrics JSONL it wrote (tools/charts/metrics_charts.h).
#include <cstdio>
#include <memory>
#include <string>

#include "tools/charts/metrics_charts.h"
#include "tools/commands.h"

namespace strata::tools {

void add_chart_command(CLI::App& app) {
  auto metrics = std::make_shared<std::string>();
  auto dir = std::make_shared<std::string>();
  CLI::App* cmd = app.add_subcommand("chart", "draw a training run's charts as SVG from its metrics JSONL: loss, "
                                              "tokens/s, peak memory per tier, busy time per resource");
  cmd->add_option("--metrics", *metrics, "the run's metrics (strata train --metrics FILE)")->required();
  cmd->add_option("--svg", *dir, "write loss.svg, throughput.svg, memory.svg and busy.svg here (created when missing)")
      ->required();
  cmd->callback([metrics, dir] {
    for (const std::string& path : charts::write_metrics_charts(*metrics, *dir)) std::printf("%s\n", path.c_str());
  });
}

}  // namespace strata::tools
