#pragma once
// strata bench step's cells and what it reports of them: a cell's numbers from its children's
// metrics (medians over every timed step of every round), the text table and the JSON lines of
// the cells and of the peers.
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "tools/bench/bench.h"
#include "tools/bench/bench_children.h"
#include "tools/bench/bench_step_peers.h"

namespace strata::tools::step_bench {

struct Cell {
  std::string placement;  // kReference, or "device", "cpu" or "nvme"
  int stage = 0;
  std::string error;      // not empty: the child failed and the numbers are unset
  std::vector<Json> rows; // the timed steps of every round's JSONL
  double step_ms = 0, tokens_per_s = 0, tflops = 0;
  double forward_ms = 0, backward_ms = 0, optimizer_ms = 0;
  std::string busiest;    // the track most often busiest over the timed steps
  double busiest_ms = 0;  // median over the timed steps of the busiest track's busy time
  // nvme cells: the disk's time for the step's bytes at the rates measured in the same run
  // (reads and writes overlapped: the larger of the two; one after the other: their sum).
  double disk_bound_ms = 0, disk_serial_ms = 0;
  double overlap = 0;     // step_ms / busiest_ms
  Json bytes;             // bytes moved in the last timed step, per link
  // The CPU Adam's busy time per step (the median over the timed steps of the "cpu optimizer"
  // track's busy_ms); null when the cell has no CPU Adam (optimizer states on the device).
  Json cpu_adam_busy_ms;
  // Every timed step's global gradient norm (with clipping), and over the timed steps the module
  // updates speculated and redone: speculation pays only in steps whose norm stays under the
  // threshold (Note [Speculative updates], runtime/zero/speculation.h).
  std::vector<double> grad_norms;
  std::uint64_t speculative_updates = 0, speculative_redone = 0;
  Json losses = Json::array();  // every timed step's loss (null where it was not finite)
};

// The median step of `rows` (one child's, or every round's).
double median_step_ms(const std::vector<Json>& rows);
// cell.rows -> the cell's numbers: medians over every timed step of every round; sets
// cell.error when a loss or gradient norm is not finite, or the metrics lack a number.
void summarize(Cell& cell);

// The text table: one per placement, the reference's row first.
std::string placement_title(const std::string& placement);
void print_header(std::FILE* out);
void print_row(std::FILE* out, const Cell& c, const Cell& reference);
void print_peers(std::FILE* out, const std::vector<Peer>& peers, const std::vector<Cell>& cells);

// The JSON lines (--json): one per cell, one per peer.
Json cell_json(const StepBenchOptions& o, const Cell& c, const Cell& reference, const std::vector<Peer>& peers);
Json peer_json(const StepBenchOptions& o, const Peer& p, const std::vector<Cell>& cells);

// The strata cell a peer is compared with (null when it was not run).
const Cell* counterpart(const PeerSpec& spec, const std::vector<Cell>& cells);

}  // namespace strata::tools::step_bench
