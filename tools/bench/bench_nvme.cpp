// strata bench nvme: the NVMe tier's I/O engine (offload/aio_engine.h) against fio.
//
// Both sides move the same bytes of the same O_DIRECT scratch file: fio through its io_uring
// engine (tools/bench/fio_runner.h) is the limit this disk and kernel allow, and the ratio ours/fio
// is what to compare across machines. A cell is (op, pattern, block size, queue depth,
// parallelism); each transfers --size bytes:
//   ours, seq:  one request covering the file (a few when it is larger than the buffer), which
//               the engine cuts into block-size pieces and deals to its `parallelism` threads
//               as contiguous slices;
//   ours, rand: one request per block, at a random permutation of the block offsets, all
//               submitted at once, then wait_all();
//   fio:        numjobs = parallelism, job k on its own contiguous slice (offset_increment),
//               iodepth = queue depth, each block of its slice once (seq or random order).
// Our time runs from the first submit to wait_all() returning; fio's is its own job runtime.
// Buffers come from a HostPool, so the engine registers them with its rings (fixed buffers).
// The file is written once with real data before any cell (so that reads never meet
// unwritten extents) and removed at the end, on errors and on Ctrl-C. The machines these run
// on are shared and noisy: each cell runs `reps` rounds, ours then fio, round after round, so
// that drift hits both; the table shows medians, the ratio is the median of the per-round
// ratios.
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/units.h"
#include "offload/aio_engine.h"
#include "offload/aio_file.h"
#include "offload/host_buffer.h"
#include "offload/probe.h"
#include "tools/bench/bench.h"
#include "tools/bench/bench_children.h"  // load_average
#include "tools/bench/bench_nvme_disk.h"
#include "tools/bench/fio_runner.h"

namespace strata::tools {
namespace {

using offload::IoOp;

constexpr std::uint64_t kMaxBufferBytes = kGiB;           // larger files reuse the buffer
constexpr double kTargetRatio = 0.95;                     // the target: ours/fio (docs/benchmarks.md)
constexpr std::size_t kTargetBlocks[] = {kMiB, 8 * kMiB};  // ... at these block sizes,
constexpr unsigned kTargetQueueDepth = 32;                 // ... this queue depth, seq

// ---- command-line lists -------------------------------------------------------------------

template <typename T>
void add_unique(std::vector<T>& out, T value) {
  if (std::find(out.begin(), out.end(), value) == out.end()) out.push_back(value);
}

std::vector<std::size_t> parse_block_sizes(std::string_view text) {
  std::vector<std::size_t> out;
  for (const std::string& item : split_list(text)) {
    const auto bytes = parse_bytes(item);
    if (!bytes || *bytes == 0 || *bytes % offload::kDirectIoAlignment != 0 || *bytes > kGiB) {
      throw Error(fmt::format("'{}' is not a block size for O_DIRECT", item), "--block-size",
                  "give positive multiples of 4 KiB up to 1 GiB, e.g. 128K,1M,8M");
    }
    add_unique(out, static_cast<std::size_t>(*bytes));
  }
  if (out.empty()) throw Error("no block size given", "--block-size", "e.g. --block-size 1M");
  return out;
}

std::vector<unsigned> parse_counts(std::string_view text, const char* flag, unsigned max) {
  std::vector<unsigned> out;
  for (const std::string& item : split_list(text)) {
    unsigned value = 0;
    const auto [end, ec] = std::from_chars(item.data(), item.data() + item.size(), value);
    if (ec != std::errc{} || end != item.data() + item.size() || value == 0 || value > max) {
      throw Error(fmt::format("'{}' is not a count from 1 to {}", item, max), flag,
                  "give comma-separated counts, e.g. 1,8,32");
    }
    add_unique(out, value);
  }
  if (out.empty()) throw Error("no value given", flag, "e.g. 1,8,32");
  return out;
}

std::vector<IoOp> parse_ops(std::string_view text) {
  std::vector<IoOp> out;
  for (const std::string& item : split_list(text)) {
    if (item == "read") add_unique(out, IoOp::kRead);
    else if (item == "write") add_unique(out, IoOp::kWrite);
    else throw Error(fmt::format("unknown op '{}'", item), "--op", "use read, write or read,write");
  }
  if (out.empty()) throw Error("no op given", "--op", "use read, write or read,write");
  return out;
}

std::vector<bool> parse_patterns(std::string_view text) {  // true = random
  std::vector<bool> out;
  for (const std::string& item : split_list(text)) {
    if (item == "seq") add_unique(out, false);
    else if (item == "rand") add_unique(out, true);
    else throw Error(fmt::format("unknown pattern '{}'", item), "--pattern", "use seq, rand or seq,rand");
  }
  if (out.empty()) throw Error("no pattern given", "--pattern", "use seq, rand or seq,rand");
  return out;
}

std::string format_block(std::uint64_t b) {
  if (b % kGiB == 0) return fmt::format("{}G", b / kGiB);
  if (b % kMiB == 0) return fmt::format("{}M", b / kMiB);
  return fmt::format("{}K", b / kKiB);
}

// ---- cells and the report -------------------------------------------------------------------

struct Cell {
  IoOp op = IoOp::kRead;
  bool random = false;
  std::size_t block_size = 0;
  unsigned queue_depth = 0;
  unsigned parallelism = 0;
  std::uint64_t bytes = 0;        // moved per round: --size rounded down to block x parallelism
  std::vector<double> ours_gbps{};  // one per round
  std::vector<double> fio_gbps{};   // one per round where fio ran
  offload::AioStats stats{};        // the engine's counters over this cell's rounds
  double ours = 0, fio = 0, ratio = 0;  // medians (ratio: of the per-round ratios)
};

double median(std::vector<double> xs) {
  if (xs.empty()) return 0;
  std::sort(xs.begin(), xs.end());
  const std::size_t k = xs.size() / 2;
  return xs.size() % 2 == 1 ? xs[k] : 0.5 * (xs[k - 1] + xs[k]);
}

double spread(const std::vector<double>& xs) {  // (fastest - slowest) / median
  if (xs.empty()) return 0;
  const auto [lo, hi] = std::minmax_element(xs.begin(), xs.end());
  return (*hi - *lo) / median(xs);
}

const char* pattern_name(bool random) { return random ? "rand" : "seq"; }

offload::AioStats minus(const offload::AioStats& a, const offload::AioStats& b) {
  return {a.bytes_read - b.bytes_read,       a.bytes_written - b.bytes_written,
          a.requests - b.requests,           a.pieces - b.pieces,
          a.short_transfers - b.short_transfers, a.retries - b.retries,
          a.fixed_pieces - b.fixed_pieces};
}

// The progress line on stderr: rewritten in place on a terminal, one plain line per cell
// otherwise (logs, CI).
class Progress {
 public:
  explicit Progress(int total_runs) : tty_(::isatty(2) == 1), total_(total_runs) {}
  void show(const std::string& line, bool new_cell) {
    ++done_;
    if (tty_) std::fprintf(stderr, "\r[%d/%d] %s\033[K", done_, total_, line.c_str());
    else if (new_cell) std::fprintf(stderr, "[%d/%d] %s\n", done_, total_, line.c_str());
    std::fflush(stderr);
  }
  void clear() {
    if (tty_) std::fprintf(stderr, "\r\033[K");
  }

 private:
  bool tty_;
  int total_;
  int done_ = 0;
};

class Report {
 public:
  explicit Report(bool json) : json_(json), text_(json ? stderr : stdout) {}
  std::FILE* text() const { return text_; }

  void header() const {
    std::fprintf(text_, "%-5s %-4s %5s %4s %2s %10s %9s %6s %14s\n", "op", "pat", "block", "QD",
                 "P", "ours GB/s", "fio GB/s", "ratio", "spread ours/fio");
  }

  void add(Cell cell) {
    cell.ours = median(cell.ours_gbps);
    cell.fio = median(cell.fio_gbps);
    std::vector<double> ratios;
    for (std::size_t i = 0; i < cell.fio_gbps.size(); ++i) {
      ratios.push_back(cell.ours_gbps[i] / cell.fio_gbps[i]);
    }
    cell.ratio = median(ratios);
    const bool has_fio = !cell.fio_gbps.empty();
    std::fprintf(text_, "%-5s %-4s %5s %4u %2u %10.3f %9s %6s %6.0f%% / %s\n",
                 std::string(offload::to_string(cell.op)).c_str(), pattern_name(cell.random),
                 format_block(cell.block_size).c_str(), cell.queue_depth, cell.parallelism,
                 cell.ours, has_fio ? fmt::format("{:.3f}", cell.fio).c_str() : "-",
                 has_fio ? fmt::format("{:.2f}", cell.ratio).c_str() : "-",
                 spread(cell.ours_gbps) * 100,
                 has_fio ? fmt::format("{:.0f}%", spread(cell.fio_gbps) * 100).c_str() : "-");
    std::fflush(text_);
    if (json_) {
      nlohmann::json j = {{"op", offload::to_string(cell.op)},
                          {"pattern", pattern_name(cell.random)},
                          {"block_size", cell.block_size},
                          {"queue_depth", cell.queue_depth},
                          {"parallelism", cell.parallelism},
                          {"bytes", cell.bytes},
                          {"reps", cell.ours_gbps.size()},
                          {"gbps", cell.ours},
                          {"gbps_runs", cell.ours_gbps},
                          {"pieces", cell.stats.pieces},
                          {"fixed_pieces", cell.stats.fixed_pieces},
                          {"short_transfers", cell.stats.short_transfers},
                          {"retries", cell.stats.retries}};
      if (has_fio) {
        j["fio_gbps"] = cell.fio;
        j["fio_gbps_runs"] = cell.fio_gbps;
        j["ratio_to_fio"] = cell.ratio;
      }
      std::printf("%s\n", j.dump().c_str());
      std::fflush(stdout);
    }
    cells_.push_back(std::move(cell));
  }

  const Cell* find(IoOp op, bool random, std::size_t block, unsigned qd, unsigned p) const {
    for (const Cell& c : cells_) {
      if (c.op == op && c.random == random && c.block_size == block && c.queue_depth == qd &&
          c.parallelism == p) {
        return &c;
      }
    }
    return nullptr;
  }
  const std::vector<Cell>& cells() const { return cells_; }

 private:
  bool json_;
  std::FILE* text_;
  std::vector<Cell> cells_;
};

// ---- our side -----------------------------------------------------------------------------

// One round of a cell through `engine`: seconds from the first submit to wait_all().
// order: the random permutation of block indices (rand only). Requests past the buffer's
// end wrap around to its start: with a file larger than the buffer, several requests read
// into (or write from) the same memory, which costs the disk nothing.
double run_ours(offload::AioEngine& engine, offload::FileId file, const Cell& cell,
                const offload::HostBuffer& buffer, const std::vector<std::uint32_t>& order) {
  const std::size_t block = cell.block_size;
  const std::size_t slots = buffer.size() / block;
  const std::size_t chunk = slots * block;  // bytes per sequential request
  std::vector<offload::AioHandle> handles;
  handles.reserve(cell.random ? order.size() : cell.bytes / chunk + 1);
  const auto t0 = std::chrono::steady_clock::now();
  auto submit = [&](std::uint64_t offset, std::byte* data, std::size_t bytes) {
    handles.push_back(cell.op == IoOp::kRead ? engine.read(file, offset, data, bytes)
                                             : engine.write(file, offset, data, bytes));
  };
  if (cell.random) {
    for (std::size_t k = 0; k < order.size(); ++k) {
      submit(std::uint64_t{order[k]} * block, buffer.data() + (k % slots) * block, block);
    }
  } else {
    for (std::uint64_t offset = 0; offset < cell.bytes; offset += chunk) {
      submit(offset, buffer.data(), static_cast<std::size_t>(std::min<std::uint64_t>(chunk, cell.bytes - offset)));
    }
  }
  engine.wait_all();
  const auto t1 = std::chrono::steady_clock::now();
  return std::chrono::duration<double>(t1 - t0).count();
}

// Real data over the whole file, sequentially, untimed: reads must never meet unwritten
// extents (which the file system answers with zeros, without touching the disk).
void prefill(offload::AioEngine& engine, offload::FileId file, const offload::HostBuffer& buffer,
             std::uint64_t bytes) {
  std::mt19937_64 rng(0x5eed);
  auto* words = reinterpret_cast<std::uint64_t*>(buffer.data());
  for (std::size_t i = 0; i < buffer.size() / 8; ++i) words[i] = rng();
  for (std::uint64_t offset = 0; offset < bytes; offset += buffer.size()) {
    engine.write(file, offset, buffer.data(),
                 static_cast<std::size_t>(std::min<std::uint64_t>(buffer.size(), bytes - offset)));
  }
  engine.wait_all();
}

// ---- the summary: targets, --tune -----------------------------------------------------------

void print_targets(const Report& report, const std::vector<unsigned>& parallelism) {
  std::FILE* text = report.text();
  bool met = true;
  int found = 0;
  std::string all;
  for (IoOp op : {IoOp::kRead, IoOp::kWrite}) {
    std::string line;
    for (std::size_t block : kTargetBlocks) {
      for (unsigned p : parallelism) {
        const Cell* c = report.find(op, false, block, kTargetQueueDepth, p);
        if (c == nullptr || c->fio_gbps.empty()) continue;
        ++found;
        met = met && c->ratio >= kTargetRatio;
        line += fmt::format(" {} P{} {:.2f}", format_block(block), p, c->ratio);
      }
    }
    if (line.empty()) continue;
    std::fprintf(text, "target %-5s ours/fio, seq, QD %u:%s\n",
                 std::string(offload::to_string(op)).c_str(), kTargetQueueDepth, line.c_str());
    all += fmt::format("{}{}:{}", all.empty() ? "" : ";", offload::to_string(op), line);
  }
  if (found == 0) {
    const bool any_fio = std::any_of(report.cells().begin(), report.cells().end(),
                                     [](const Cell& c) { return !c.fio_gbps.empty(); });
    if (!any_fio) {
      std::fprintf(text, "target: not evaluated (fio did not run)\n");
      return;
    }
    std::fprintf(text, "target: not evaluated (it is set at 1M and 8M blocks, QD %u, seq, "
                 "which this run did not measure)\n", kTargetQueueDepth);
    return;
  }
  std::fprintf(text, "summary: ours/fio at QD %u seq (%s): target >= %.2f for every cell: %s\n",
               kTargetQueueDepth, all.c_str(), kTargetRatio, met ? "MET" : "NOT MET");
}

// DeepSpeed's ds_nvme_tune picks the setting with the best reads and writes together; here:
// the (block, QD, parallelism) maximising the geometric mean of our sequential read and write
// GB/s, printed as the "aio" section of a config (on stdout, one line under --json).
void print_tune(const Report& report, bool json) {
  const Cell* best_read = nullptr;
  const Cell* best_write = nullptr;
  double best = 0;
  for (const Cell& r : report.cells()) {
    if (r.op != IoOp::kRead || r.random) continue;
    const Cell* w = report.find(IoOp::kWrite, false, r.block_size, r.queue_depth, r.parallelism);
    if (w == nullptr) continue;
    const double score = std::sqrt(r.ours * w->ours);
    if (score > best) {
      best = score;
      best_read = &r;
      best_write = w;
    }
  }
  std::FILE* text = report.text();
  if (best_read == nullptr) {
    std::fprintf(text, "tune: no cell has both a sequential read and a sequential write\n");
    return;
  }
  std::fprintf(text, "tune: best geometric mean of sequential read and write GB/s (same block, "
               "QD and parallelism): %s QD %u P %u: read %.3f, write %.3f, geomean %.3f GB/s\n",
               format_block(best_read->block_size).c_str(), best_read->queue_depth,
               best_read->parallelism, best_read->ours, best_write->ours, best);
  std::fflush(text);
  const nlohmann::json aio = {{"aio", {{"block_size", best_read->block_size},
                                       {"queue_depth", best_read->queue_depth},
                                       {"intra_op_parallelism", best_read->parallelism},
                                       {"single_submit", false},
                                       {"overlap_events", true}}}};
  std::printf("%s\n", aio.dump(json ? -1 : 2).c_str());
  std::fflush(stdout);
}

}  // namespace

void bench_nvme(const NvmeBenchOptions& options) {
  // Bad flags and folders fail before anything is written.
  const std::vector<std::size_t> blocks = parse_block_sizes(options.block_sizes);
  const std::vector<unsigned> depths = parse_counts(options.queue_depths, "--queue-depth", 4096);
  const std::vector<unsigned> parallelism = parse_counts(options.parallelism, "--parallelism", 64);
  const std::vector<IoOp> ops = parse_ops(options.ops);
  const std::vector<bool> patterns = parse_patterns(options.patterns);
  if (options.tune && (std::find(patterns.begin(), patterns.end(), false) == patterns.end() ||
                       ops.size() < 2)) {
    throw Error("--tune compares sequential reads and writes", "--tune",
                "keep seq in --pattern and read,write in --op");
  }
  const std::string dir = resolve_bench_dir(options.dir);
  const offload::ODirectProbe probe = check_bench_dir(dir);

  Report report(options.json);
  std::FILE* text = report.text();
  const std::uint64_t size = resolve_bench_size(options.size, dir, text);

  std::string fio_version_text, fio_why;
  bool fio = options.fio;
  if (fio) {
    fio_version_text = fio_version(options.fio_path, &fio_why);
    fio = !fio_version_text.empty();
  }

  // One buffer for every cell: the file's size up to kMaxBufferBytes, from a pool whose budget
  // is exactly that, so that every engine registers it with its rings.
  const std::size_t buffer_bytes = static_cast<std::size_t>(std::min(size, kMaxBufferBytes));
  offload::HostPool pool(buffer_bytes, {}, "bench nvme", "--size");
  const offload::HostBuffer buffer = pool.allocate(buffer_bytes, "the benchmark's I/O buffer");
  ScratchFile scratch(dir);
  scratch.reserve(size);
  std::string engine_text;
  {
    offload::AioEngine engine(offload::AioOptions{}, &pool);
    engine_text = engine.describe();
    const offload::FileId id = engine.add_file(scratch.file());
    prefill(engine, id, buffer, size);
    engine.remove_file(id);
  }

  std::fprintf(text, "strata bench nvme: %s, %s; %s free of %s; load average %.2f at the start\n",
               dir.c_str(), describe_mount(dir).c_str(), format_bytes(probe.free_bytes).c_str(),
               format_bytes(probe.total_bytes).c_str(), load_average());
  std::fprintf(text, "  scratch file %s, %s, O_DIRECT, prefilled; buffer %s from a HostPool\n",
               scratch.path().c_str(), format_bytes(size).c_str(), format_bytes(buffer_bytes).c_str());
  std::fprintf(text, "  engine: %s (with the default options)\n", engine_text.c_str());
  if (fio) {
    const FioJob example{options.fio_path, scratch.path(), size, kMiB, 32, 1, false, false,
                         options.fio_fixed};
    std::fprintf(text, "  fio: %s, e.g. %s\n", fio_version_text.c_str(),
                 fio_command_line(example).c_str());
  } else {
    std::fprintf(text, "  fio: %s; fio cells skipped\n",
                 options.fio ? fio_why.c_str() : "--no-fio");
  }
  std::fprintf(text, "  %d round(s) per cell, ours then fio; GB/s = 1e9 bytes/s, medians; ratio "
               "= median of per-round ours/fio; spread = (fastest - slowest) / median\n",
               options.reps);

  // Every cell, in the order they run; cells the size cannot hold are said and skipped.
  std::vector<Cell> plan;
  for (std::size_t block : blocks) {
    for (unsigned qd : depths) {
      for (unsigned p : parallelism) {
        const std::uint64_t unit = std::uint64_t{block} * p;
        if (size < unit) {
          std::fprintf(text, "skipped: block %s x parallelism %u is more than --size %s\n",
                       format_block(block).c_str(), p, format_bytes(size).c_str());
          continue;
        }
        for (bool random : patterns) {
          for (IoOp op : ops) {
            plan.push_back(Cell{.op = op, .random = random, .block_size = block, .queue_depth = qd,
                                .parallelism = p, .bytes = size / unit * unit});
          }
        }
      }
    }
  }
  Progress progress(static_cast<int>(plan.size()) * options.reps * (fio ? 2 : 1));
  report.header();

  std::unique_ptr<offload::AioEngine> engine;
  offload::FileId file = 0;
  for (std::size_t i = 0; i < plan.size(); ++i) {
    Cell cell = plan[i];
    // One engine per (block, QD, parallelism), shared by its ops and patterns.
    if (!engine || engine->options().block_size != cell.block_size ||
        engine->options().queue_depth != cell.queue_depth ||
        engine->options().parallelism != cell.parallelism) {
      if (engine) engine->remove_file(file);
      engine.reset();
      offload::AioOptions aio;
      aio.block_size = cell.block_size;
      aio.queue_depth = cell.queue_depth;
      aio.parallelism = cell.parallelism;
      engine = std::make_unique<offload::AioEngine>(aio, &pool);
      file = engine->add_file(scratch.file());
    }
    std::vector<std::uint32_t> order;
    if (cell.random) {
      order.resize(cell.bytes / cell.block_size);
      std::iota(order.begin(), order.end(), 0u);
      std::shuffle(order.begin(), order.end(), std::mt19937_64(0xb10c + i));
    }
    const std::string name = fmt::format("{} QD{} P{} {} {}", format_block(cell.block_size),
                                         cell.queue_depth, cell.parallelism,
                                         pattern_name(cell.random), offload::to_string(cell.op));
    const offload::AioStats before = engine->stats();
    const FioJob job{options.fio_path, scratch.path(), cell.bytes, cell.block_size,
                     cell.queue_depth, cell.parallelism, cell.op == IoOp::kWrite, cell.random,
                     options.fio_fixed};
    for (int rep = 0; rep < options.reps; ++rep) {
      const double seconds = run_ours(*engine, file, cell, buffer, order);
      cell.ours_gbps.push_back(double(cell.bytes) / seconds / 1e9);
      progress.show(fmt::format("{}, round {}/{}: ours {:.3f} GB/s", name, rep + 1, options.reps,
                                cell.ours_gbps.back()),
                    rep == 0);
      if (!fio) continue;
      const FioResult r = run_fio(job);
      if (!r.ok) {
        // Cells already measured keep their fio column; the rest go on without.
        progress.clear();
        std::fprintf(text, "fio: %s; fio cells skipped from here on\n  command: %s\n",
                     r.error.c_str(), fio_command_line(job).c_str());
        fio = false;
        cell.fio_gbps.clear();
        continue;
      }
      cell.fio_gbps.push_back(r.gbps);
      progress.show(fmt::format("{}, round {}/{}: ours {:.3f}, fio {:.3f} GB/s", name, rep + 1,
                                options.reps, cell.ours_gbps.back(), r.gbps),
                    false);
    }
    cell.stats = minus(engine->stats(), before);
    progress.clear();
    report.add(std::move(cell));
  }
  if (engine) engine->remove_file(file);
  engine.reset();

  print_targets(report, parallelism);
  if (options.tune) print_tune(report, options.json);
}

}  // namespace strata::tools
