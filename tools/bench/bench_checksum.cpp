// strata bench checksum: what strata.checksum (offload/swap_space.h: an xxh3-64 per aio.block_size
// block of a swap extent, computed on write, verified on read) costs, in three parts, each against
// a limit or a baseline measured in the same run:
//
//   hash  xxh3-64 over a buffer of --size bytes cut into --block-size blocks, on 1 thread and on
//         all (--threads), against memcpy of the same buffer on as many threads. Rates are bytes
//         of the buffer per second (hashed, or copied once), so ratio = hash GB/s / memcpy GB/s:
//         above 1 the hash is cheaper than copying the bytes once more.
//   swap  a SwapSpace round trip on the disk of --dir (O_DIRECT): --size bytes in extents of
//         --extent-size, all written, waited for, then all read back, waited for; two swap spaces
//         on the same I/O engine, checksum off and on, in the order off, on, on, off, off, on, ...
//         (Note [Alternating order]). ratio = median round-trip ms on / off.
//   step  a ZeRO stage-3 training step with the parameters and optimizer states on NVMe (the nvme
//         cell of `strata bench step`, Note [The cell configs] in bench_children.cpp), a `strata
//         train` child with strata.checksum false and one with true, round after round in the
//         alternating order. ratio =
//         median step ms on / off over the timed steps of every round. The bytes the swap moves per
//         step (the metrics' bytes.nvme_read + nvme_write), every one of them hashed, come with it,
//         and the CPU time of each child (user + system, from wait4): on a shared machine the wall
//         time swings with the load, the CPU a run spends much less. cpu_ratio = median CPU seconds
//         per run on / off; cpu_ms_per_step = their difference / --steps (the start included).
//
// Note [Alternating order]
// Odd rounds run off then on, even rounds on then off: on a shared machine whatever the run
// before leaves behind (a swap file being unlinked, dirty pages being written back, another
// session's load pattern) falls on both sides alike. In the first version (off, on every round)
// three bench runs of the step gave on/off 0.77, 0.74 and 0.80, and the next three 1.00, 0.81
// and 1.01: a position effect or the load, not the checksums.
//
// Medians throughout; the per-round numbers are in the JSON (`*_runs`). A step child that fails
// gives its error in its row and the bench goes on.
#include <omp.h>
#include <xxhash.h>

#include <algorithm>
#include <array>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include "core/cpu_features.h"
#include "core/error.h"
#include "core/units.h"
#include "offload/aio_engine.h"
#include "offload/host_buffer.h"
#include "offload/swap_space.h"
#include "tools/bench/bench.h"
#include "tools/bench/bench_children.h"
#include "tools/bench/bench_nvme_disk.h"

namespace strata::tools {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

constexpr const char* kKnownParts[] = {"hash", "swap", "step"};
constexpr int kStage = 3;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// Round 1, 3, ...: off then on; round 2, 4, ...: on then off (Note [Alternating order]).
std::array<bool, 2> checksum_order(int round) {
  return round % 2 == 1 ? std::array<bool, 2>{false, true} : std::array<bool, 2>{true, false};
}

// ---- flags ----------------------------------------------------------------------------------

struct Plan {
  std::vector<std::string> parts;
  std::uint64_t size = 0;
  std::size_t block = 0;
  std::uint64_t extent = 0;
  std::vector<int> threads;
};

bool has_part(const Plan& plan, const char* part) {
  return std::find(plan.parts.begin(), plan.parts.end(), part) != plan.parts.end();
}

std::vector<std::string> parse_parts(std::string_view text) {
  std::vector<std::string> out;
  for (const std::string& item : split_list(text)) {
    if (std::find(std::begin(kKnownParts), std::end(kKnownParts), item) == std::end(kKnownParts)) {
      throw Error(fmt::format("'{}' is not a part of the bench", item), "--parts",
                  "give a comma-separated list of hash, swap and step, e.g. --parts hash,swap");
    }
    if (std::find(out.begin(), out.end(), item) == out.end()) out.push_back(item);
  }
  if (out.empty()) throw Error("no part given", "--parts", "e.g. --parts hash,swap,step");
  return out;
}

// A size flag: a positive number of bytes that is a multiple of `unit` (K/M/G = 2^10/2^20/2^30).
std::uint64_t parse_size(const std::string& text, const char* flag, std::uint64_t unit, const char* example) {
  const auto bytes = parse_bytes(text);
  if (!bytes || *bytes == 0 || *bytes % unit != 0) {
    throw Error(fmt::format("'{}' is not a positive multiple of {} bytes", text, unit), flag,
                fmt::format("give a size such as {}", example));
  }
  return *bytes;
}

// "1,all": thread counts, `all` = OpenMP's default (the affinity mask's CPUs); sorted, unique.
std::vector<int> parse_thread_counts(std::string_view text) {
  std::vector<int> out;
  for (const std::string& item : split_list(text)) {
    if (item == "all") {
      out.push_back(omp_get_max_threads());
      continue;
    }
    int n = 0;
    const auto [end, ec] = std::from_chars(item.data(), item.data() + item.size(), n);
    if (ec != std::errc() || end != item.data() + item.size() || n <= 0 || n > 4096) {
      throw Error(fmt::format("'{}' is not a thread count", item), "--threads", "give counts such as 1,2,all");
    }
    out.push_back(n);
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  if (out.empty()) throw Error("no thread count given", "--threads", "e.g. --threads 1,all");
  return out;
}

Plan parse_plan(const ChecksumBenchOptions& o) {
  Plan plan;
  plan.parts = parse_parts(o.parts);
  plan.block = static_cast<std::size_t>(
      parse_size(o.block_size, "--block-size", offload::kDirectIoAlignment, "1M (aio.block_size)"));
  plan.extent = parse_size(o.extent_size, "--extent-size", plan.block,
                           fmt::format("16M (a multiple of --block-size {})", o.block_size).c_str());
  plan.size = parse_size(o.size, "--size", plan.extent,
                         fmt::format("256M (a multiple of --extent-size {})", o.extent_size).c_str());
  plan.threads = parse_thread_counts(o.threads);
  return plan;
}

// ---- hash: xxh3-64 per block against memcpy --------------------------------------------------

struct HashCell {
  int threads = 0;
  std::vector<double> hash_gbps, memcpy_gbps;  // one per round
  double hash = 0, memcpy = 0, ratio = 0;      // medians; ratio = hash / memcpy
};

// The checksums of every `block` bytes of `data`, the blocks dealt to `threads` in contiguous
// runs; returns their xor.
std::uint64_t hash_blocks(const std::byte* data, std::uint64_t bytes, std::size_t block, int threads) {
  const std::int64_t blocks = static_cast<std::int64_t>(bytes / block);
  std::uint64_t all = 0;
#pragma omp parallel for num_threads(threads) schedule(static) reduction(^ : all)
  for (std::int64_t b = 0; b < blocks; ++b) all ^= XXH3_64bits(data + b * block, block);
  return all;
}

// memcpy of `bytes`, in `threads` equal contiguous pieces.
void copy_parallel(std::byte* dst, const std::byte* src, std::uint64_t bytes, int threads) {
#pragma omp parallel for num_threads(threads) schedule(static)
  for (int t = 0; t < threads; ++t) {
    const std::uint64_t begin = bytes * t / threads;
    const std::uint64_t end = bytes * (t + 1) / threads;
    std::memcpy(dst + begin, src + begin, end - begin);
  }
}

void fill_random(std::byte* data, std::uint64_t bytes) {
  std::mt19937_64 rng(0xc5c5);
  auto* words = reinterpret_cast<std::uint64_t*>(data);
  for (std::uint64_t i = 0; i < bytes / 8; ++i) words[i] = rng();
}

// One cell: `reps` rounds of hash, then memcpy.
HashCell measure_hash(const Plan& plan, int threads, int reps, const offload::HostBuffer& src,
                      const offload::HostBuffer& dst) {
  HashCell cell;
  cell.threads = threads;
  const double gb = static_cast<double>(plan.size) / 1e9;
  volatile std::uint64_t sink = 0;  // the hashes' xor, so that none is optimised away
  for (int r = 0; r < reps; ++r) {
    Clock::time_point t0 = Clock::now();
    sink = sink ^ hash_blocks(src.data(), plan.size, plan.block, threads);
    cell.hash_gbps.push_back(gb / seconds_since(t0));
    t0 = Clock::now();
    copy_parallel(dst.data(), src.data(), plan.size, threads);
    cell.memcpy_gbps.push_back(gb / seconds_since(t0));
  }
  cell.hash = median(cell.hash_gbps);
  cell.memcpy = median(cell.memcpy_gbps);
  cell.ratio = cell.hash / cell.memcpy;
  return cell;
}

Json hash_json(const Plan& plan, const HashCell& c, int reps) {
  Json j;
  j["part"] = "hash";
  j["threads"] = c.threads;
  j["block_size"] = plan.block;
  j["bytes"] = plan.size;
  j["reps"] = reps;
  j["hash_gbps"] = c.hash;
  j["memcpy_gbps"] = c.memcpy;
  j["ratio_to_memcpy"] = c.ratio;
  j["hash_gbps_runs"] = c.hash_gbps;
  j["memcpy_gbps_runs"] = c.memcpy_gbps;
  return j;
}

// ---- swap: a SwapSpace round trip, checksum off and on -----------------------------------------

struct SwapSide {
  std::vector<double> write_ms, read_ms, round_trip_ms;  // one per round
};

struct SwapCell {
  SwapSide off, on;
  bool direct = false;
  double off_ms = 0, on_ms = 0, ratio = 0;  // medians of the round trip; ratio = on / off
};

// A swap space in `dir` (plan.size reserved up front) holding plan.size / plan.extent extents of
// plan.extent bytes.
struct SwapUnderTest {
  offload::SwapSpace swap;
  std::vector<offload::ExtentId> ids;
  SwapUnderTest(const std::string& dir, const Plan& plan, bool checksum, offload::AioEngine& engine)
      : swap(offload::SwapOptions{.paths = {dir},
                                  .block_size = plan.block,
                                  .checksum = checksum,
                                  .direct = offload::DirectIo::kRequire,
                                  .reserve_bytes = plan.size},
             engine) {
    for (std::uint64_t i = 0; i < plan.size / plan.extent; ++i) {
      ids.push_back(swap.allocate({fmt::format("e{}", i), offload::StateKind::kOther, 0}, plan.extent));
    }
  }
};

// One round trip: every extent written from `buffer` (extent i from its i-th slice), waited for,
// then read back into it, waited for. Errors (a checksum mismatch) surface at wait_all().
void round_trip(SwapUnderTest& s, const Plan& plan, const offload::HostBuffer& buffer, SwapSide& side) {
  offload::AioEngine& engine = s.swap.engine();
  const Clock::time_point t0 = Clock::now();
  for (std::size_t i = 0; i < s.ids.size(); ++i) {
    s.swap.write(s.ids[i], buffer.data() + i * plan.extent, plan.extent);
  }
  engine.wait_all();
  const Clock::time_point t1 = Clock::now();
  for (std::size_t i = 0; i < s.ids.size(); ++i) {
    s.swap.read(s.ids[i], buffer.data() + i * plan.extent, plan.extent);
  }
  engine.wait_all();
  const Clock::time_point t2 = Clock::now();
  side.write_ms.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
  side.read_ms.push_back(std::chrono::duration<double, std::milli>(t2 - t1).count());
  side.round_trip_ms.push_back(std::chrono::duration<double, std::milli>(t2 - t0).count());
}

SwapCell measure_swap(const Plan& plan, int reps, const std::string& dir, std::FILE* text) {
  offload::HostPool pool(plan.size, {}, "bench checksum", "--size");
  const offload::HostBuffer buffer = pool.allocate(plan.size, "the swap round trip's buffer");
  fill_random(buffer.data(), plan.size);
  offload::AioOptions aio;
  aio.block_size = plan.block;
  offload::AioEngine engine(aio, &pool);
  SwapUnderTest off(dir, plan, false, engine);
  SwapUnderTest on(dir, plan, true, engine);
  std::fprintf(text, "  swap: %s in %llu extents of %s, engine %s\n", format_bytes(plan.size).c_str(),
               static_cast<unsigned long long>(plan.size / plan.extent), format_bytes(plan.extent).c_str(),
               engine.describe().c_str());
  std::fflush(text);
  SwapCell cell;
  cell.direct = off.swap.stats().paths.at(0).direct && on.swap.stats().paths.at(0).direct;
  round_trip(off, plan, buffer, cell.off);  // untimed: first touch of the files' blocks
  round_trip(on, plan, buffer, cell.on);
  cell.off = {};
  cell.on = {};
  for (int r = 0; r < reps; ++r) {
    for (const bool checksum : checksum_order(r + 1)) {
      if (checksum) round_trip(on, plan, buffer, cell.on);
      else round_trip(off, plan, buffer, cell.off);
    }
    std::fprintf(stderr, "[swap round %d/%d] off %.1f ms, on %.1f ms\n", r + 1, reps, cell.off.round_trip_ms.back(),
                 cell.on.round_trip_ms.back());
    std::fflush(stderr);
  }
  cell.off_ms = median(cell.off.round_trip_ms);
  cell.on_ms = median(cell.on.round_trip_ms);
  cell.ratio = cell.on_ms / cell.off_ms;
  return cell;
}

Json swap_json(const Plan& plan, const SwapCell& c, int reps) {
  const double bytes = static_cast<double>(plan.size);
  auto gbps = [&](const std::vector<double>& ms) { return bytes / median(ms) / 1e6; };
  Json j;
  j["part"] = "swap";
  j["block_size"] = plan.block;
  j["extent_bytes"] = plan.extent;
  j["extents"] = plan.size / plan.extent;
  j["bytes"] = plan.size;
  j["direct"] = c.direct;
  j["reps"] = reps;
  j["off_ms"] = c.off_ms;
  j["on_ms"] = c.on_ms;
  j["ratio"] = c.ratio;
  j["off_write_gbps"] = gbps(c.off.write_ms);
  j["off_read_gbps"] = gbps(c.off.read_ms);
  j["on_write_gbps"] = gbps(c.on.write_ms);
  j["on_read_gbps"] = gbps(c.on.read_ms);
  j["off_ms_runs"] = c.off.round_trip_ms;
  j["on_ms_runs"] = c.on.round_trip_ms;
  return j;
}

// ---- step: a stage-3 NVMe training step, checksum off and on ------------------------------------

struct StepCell {
  std::string error;                  // not empty: a run failed and the numbers are unset
  std::vector<double> off_ms, on_ms;  // the timed steps of every round
  std::vector<double> swap_bytes;     // per timed step of the on runs: bytes.nvme_read + nvme_write
  std::vector<double> off_cpu_s, on_cpu_s;  // per run: the child's CPU seconds (user + system)
  double off = 0, on = 0, ratio = 0;  // medians; ratio = on / off
  double bytes = 0;                   // median of swap_bytes: what the checksums hash per step
  double off_cpu = 0, on_cpu = 0, cpu_ratio = 0;  // medians; cpu_ratio = on / off
};

void measure_step(const ChecksumBenchOptions& o, const ScratchFolder& scratch, const train::StopSignals& stop,
                  StepCell& cell) {
  const std::string nvme_path = scratch.file("nvme");
  std::error_code ec;
  fs::create_directory(nvme_path, ec);
  if (ec) throw system_error(ec.value(), "mkdir", nvme_path);
  for (const bool checksum : {false, true}) {
    Json config = cell_config(o, "nvme", kStage, nvme_path);
    config["strata"]["checksum"] = checksum;
    write_config(scratch.file(checksum ? "on.json" : "off.json"), config);
  }
  const std::string self = self_executable();
  const std::string text = training_text(o, scratch);
  for (int round = 1; round <= o.rounds; ++round) {
    for (const bool checksum : checksum_order(round)) {
      if (stop.received() != 0 || !cell.error.empty()) return;
      const std::string name = fmt::format("{}-round{}", checksum ? "on" : "off", round);
      const ChildRun run = run_train_child(self, o, scratch.file(checksum ? "on.json" : "off.json"), text,
                                           scratch.file(name + ".jsonl"), {}, kWarmupSteps + 1, o.steps);
      const std::string line = fmt::format("[step round {}/{}] checksum {}: ", round, o.rounds, checksum ? "on" : "off");
      if (!run.error.empty()) {
        cell.error = run.error;
        std::fprintf(stderr, "%serror: %s (%.1f s)\n", line.c_str(), run.error.c_str(), run.seconds);
        return;
      }
      std::vector<double> ms;
      for (const Json& r : run.rows) ms.push_back(number(r, "step_ms"));
      (checksum ? cell.on_cpu_s : cell.off_cpu_s).push_back(run.cpu_seconds);
      std::vector<double>& all = checksum ? cell.on_ms : cell.off_ms;
      all.insert(all.end(), ms.begin(), ms.end());
      for (const Json& r : run.rows) {
        const Json bytes = r.value("bytes", Json::object());
        if (checksum) cell.swap_bytes.push_back(number(bytes, "nvme_read") + number(bytes, "nvme_write"));
      }
      std::fprintf(stderr, "%s%.1f ms/step (%.1f s, %.1f CPU s)\n", line.c_str(), median(ms), run.seconds,
                   run.cpu_seconds);
      std::fflush(stderr);
    }
  }
  cell.off = median(cell.off_ms);
  cell.on = median(cell.on_ms);
  cell.ratio = cell.on / cell.off;
  cell.bytes = median(cell.swap_bytes);
  cell.off_cpu = median(cell.off_cpu_s);
  cell.on_cpu = median(cell.on_cpu_s);
  cell.cpu_ratio = cell.on_cpu / cell.off_cpu;
  for (double v : {cell.off, cell.on, cell.bytes, cell.off_cpu, cell.on_cpu}) {
    if (!std::isfinite(v) || v <= 0) cell.error = "the metrics lack step_ms or bytes.nvme_read / nvme_write";
  }
}

Json step_json(const ChecksumBenchOptions& o, const StepCell& c) {
  Json j;
  j["part"] = "step";
  j["model"] = o.model.empty() ? o.preset : o.model;
  j["placement"] = "nvme";
  j["stage"] = kStage;
  if (!c.error.empty()) {
    j["error"] = c.error;
    return j;
  }
  j["off_step_ms"] = c.off;
  j["on_step_ms"] = c.on;
  j["ratio"] = c.ratio;
  j["ms_per_step"] = c.on - c.off;
  j["swap_bytes_per_step"] = c.bytes;
  j["off_cpu_s"] = c.off_cpu;
  j["on_cpu_s"] = c.on_cpu;
  j["cpu_ratio"] = c.cpu_ratio;
  j["cpu_ms_per_step"] = (c.on_cpu - c.off_cpu) * 1e3 / o.steps;
  j["timed_steps"] = c.on_ms.size();
  j["off_step_ms_runs"] = c.off_ms;
  j["on_step_ms_runs"] = c.on_ms;
  j["off_cpu_s_runs"] = c.off_cpu_s;
  j["on_cpu_s_runs"] = c.on_cpu_s;
  return j;
}

// ---- the bench --------------------------------------------------------------------------------

void print_json(const Json& j) {
  std::printf("%s\n", j.dump().c_str());
  std::fflush(stdout);
}

void run_bench(const ChecksumBenchOptions& o, const Plan& plan, const train::StopSignals& stop) {
  std::FILE* text = o.json ? stderr : stdout;
  const bool disk = has_part(plan, "swap") || has_part(plan, "step");
  std::string parent;
  if (disk) {
    parent = resolve_bench_dir(o.dir);
    check_bench_dir(parent);  // the swap is on a disk that takes O_DIRECT, not tmpfs
  }
  const CpuInfo cpu = cpu_info();
  const Clock::time_point start = Clock::now();
  std::fprintf(text, "strata bench checksum: xxh3-64 per %s block (strata.checksum); %s, %d CPUs in the affinity "
               "mask, load average %.2f at the start\n",
               format_bytes(plan.block).c_str(), cpu.model_name.c_str(), cpu.logical_cores_in_affinity_mask,
               load_average());
  if (disk) std::fprintf(text, "  disk: %s, %s\n", parent.c_str(), describe_mount(parent).c_str());
  std::fflush(text);

  if (has_part(plan, "hash")) {
    const offload::HostBuffer src = offload::HostBuffer::allocate(plan.size, "the hash's buffer");
    const offload::HostBuffer dst = offload::HostBuffer::allocate(plan.size, "the memcpy's target");
    fill_random(src.data(), plan.size);
    std::memset(dst.data(), 1, plan.size);  // first touch
    std::fprintf(text, "\nhash: %s in %s blocks, %d round(s) of hash then memcpy; GB/s = 1e9 bytes of the buffer "
                 "per second, medians\n%8s %10s %12s %8s\n",
                 format_bytes(plan.size).c_str(), format_bytes(plan.block).c_str(), o.reps, "threads", "hash GB/s",
                 "memcpy GB/s", "ratio");
    for (int threads : plan.threads) {
      if (stop.received() != 0) return;
      const HashCell c = measure_hash(plan, threads, o.reps, src, dst);
      std::fprintf(text, "%8d %10.2f %12.2f %8.2f\n", c.threads, c.hash, c.memcpy, c.ratio);
      std::fflush(text);
      if (o.json) print_json(hash_json(plan, c, o.reps));
    }
  }

  std::unique_ptr<ScratchFolder> scratch;
  if (disk) scratch = std::make_unique<ScratchFolder>(parent, "checksum");

  if (has_part(plan, "swap") && stop.received() == 0) {
    const std::string dir = scratch->file("swap");
    std::error_code ec;
    fs::create_directory(dir, ec);
    if (ec) throw system_error(ec.value(), "mkdir", dir);
    std::fprintf(text, "\nswap: SwapSpace round trips (write every extent, wait, read every extent, wait), "
                 "checksum off and on in alternating order, %d round(s) after one untimed each\n", o.reps);
    const SwapCell c = measure_swap(plan, o.reps, dir, text);
    std::fprintf(text, "%-9s %10s %10s %10s\n", "checksum", "trip ms", "write GB/s", "read GB/s");
    const double bytes = static_cast<double>(plan.size);
    for (const auto& [name, side] : {std::pair{"off", &c.off}, std::pair{"on", &c.on}}) {
      std::fprintf(text, "%-9s %10.1f %10.3f %10.3f\n", name, median(side->round_trip_ms),
                   bytes / median(side->write_ms) / 1e6, bytes / median(side->read_ms) / 1e6);
    }
    std::fprintf(text, "swap: a round trip with checksums takes %.2fx as long as without (%+.1f ms for %s)\n",
                 c.ratio, c.on_ms - c.off_ms, format_bytes(plan.size).c_str());
    std::fflush(text);
    if (o.json) print_json(swap_json(plan, c, o.reps));
  }

  if (has_part(plan, "step") && stop.received() == 0) {
    std::fprintf(text, "\nstep: %s, micro-batch %d x %d tokens, %s, ZeRO stage %d, parameters and optimizer states "
                 "on NVMe, device %s; %d steps per run (the first %d warm up) x %d round(s), checksum off and on in alternating order\n",
                 o.model.empty() ? o.preset.c_str() : o.model.c_str(), o.batch, o.seq_len, o.dtype.c_str(), kStage,
                 o.device.c_str(), o.steps, kWarmupSteps, o.rounds);
    std::fflush(text);
    StepCell c;
    measure_step(o, *scratch, stop, c);
    if (stop.received() != 0) return;
    if (c.error.empty()) {
      std::fprintf(text, "step: %.1f ms without checksums, %.1f ms with: %.3fx (%+.1f ms per step); the swap moves "
                   "%s per step (read + written), all of it hashed\n",
                   c.off, c.on, c.ratio, c.on - c.off, format_bytes(static_cast<std::uint64_t>(c.bytes)).c_str());
      std::fprintf(text, "step: CPU time per run (user + system, %d steps and the start): %.2f s without, %.2f s "
                   "with: %.3fx (%+.1f CPU ms per step)\n",
                   o.steps, c.off_cpu, c.on_cpu, c.cpu_ratio, (c.on_cpu - c.off_cpu) * 1e3 / o.steps);
    } else {
      std::fprintf(text, "step: error: %s\n", c.error.c_str());
    }
    std::fflush(text);
    if (o.json) print_json(step_json(o, c));
  }
  std::fprintf(text, "%.0f s in all, load average %.2f at the end\n", seconds_since(start), load_average());
}

}  // namespace

void bench_checksum(const ChecksumBenchOptions& o) {
  const Plan plan = parse_plan(o);  // bad flags fail before anything runs
  if (has_part(plan, "step")) child_model(o, kWarmupSteps, fmt::format("the first {} are warm-up", kWarmupSteps));
  run_until_signal([&](const train::StopSignals& stop) { run_bench(o, plan, stop); });
}

}  // namespace strata::tools
