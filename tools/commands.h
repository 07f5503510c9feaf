#pragma once
// Each subcommand of `strata` registers itself on the app; its callback does the work and
// throws strata::Error on failure (main prints it and exits 1).
#include <CLI/CLI.hpp>

namespace strata::tools {

void add_info_command(CLI::App& app);    // strata info: what this machine offers
void add_config_command(CLI::App& app);  // strata config FILE: validate and print resolved config
void add_bench_command(CLI::App& app);    // strata bench NAME: benchmarks of the hot paths
void add_train_command(CLI::App& app);    // strata train: ZeRO training of a GPT
void add_convert_command(CLI::App& app);  // strata convert: a checkpoint to HF safetensors
void add_tokenize_command(CLI::App& app);  // strata tokenize: text files into an llm.c token file
void add_infer_command(CLI::App& app);    // strata infer: generation, layers streamed through the device
void add_serve_command(CLI::App& app);    // strata serve: the OpenAI API over HTTP, continuous batching
void add_chart_command(CLI::App& app);    // strata chart: a run's charts (SVG) from its metrics JSONL
void add_estimate_command(CLI::App& app);  // strata estimate: memory per tier (and step time) of every stage, before a run
void add_compare_command(CLI::App& app);   // strata compare: each stage x placement trained a few steps, beside the estimate

}  // namespace strata::tools
