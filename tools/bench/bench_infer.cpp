// strata bench infer: decoding tokens/s of a model served by the inference engine
// (infer/server.h), per placement of its parameters (device: everything resident; cpu / nvme:
// what does not fit the device budget streamed from pinned host memory / NVMe) and batch size,
// against the bound of the bytes it streams: a decoding step cannot beat the time its host ->
// device bytes take at the pinned H2D rate, nor its NVMe bytes at the disk's read rate, both
// measured in the same run (the disk's as one sequential read of the cell's own NVMe data, up to
// 4 GiB of it, right before and right after each nvme cell). vs_bound = tokens/s / (batch / that time). The bytes are those the
// step needs: a mixture's lookahead (--moe-prefetch on) fetches guesses the router may not
// confirm, reported apart (unused_*_bytes_per_step) and left out of the bound.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/units.h"
#include "infer/sampler.h"
#include "infer/server.h"
#include "models/hf_weights.h"
#include "models/registry.h"
#include "offload/host_buffer.h"
#include "runtime/tiers/tier.h"
#include "runtime/tiers/tier_store.h"
#include "tools/bench/bench.h"
#include "tools/bench/bench_children.h"
#include "tools/bench/bench_nvme_disk.h"
#include "tools/bench/bench_scripts.h"

namespace strata::tools {
namespace {

using Clock = std::chrono::steady_clock;

struct Cell {
  std::string placement;
  int batch = 0;
  double prefill_ms = 0;         // the prompts' prefill (one pass, untimed trace: the first)
  double prefill_tokens_per_s = 0;
  double step_ms = 0;            // median decoding step
  double tokens_per_s = 0;       // batch / step
  double h2d_bytes_per_step = 0;
  double nvme_bytes_per_step = 0;
  double unused_h2d_bytes_per_step = 0;   // of h2d_bytes_per_step: fetched ahead, never acquired
  double unused_nvme_bytes_per_step = 0;  // of nvme_bytes_per_step: the same
  double bound_tokens_per_s = 0;  // 0: nothing streamed (no bound from the links)
  // An nvme cell's disk read limit: one sequential read of its own NVMe data right before and
  // right after its timed steps (this VM's disk swings 2x between minutes and serves a file just
  // written faster than older data); the bound takes the faster: the ratio errs low.
  double disk_gbps_before = 0, disk_gbps_after = 0;
  double expert_hit_rate = -1;    // a mixture's timed steps: expert acquires found on the device (-1: no experts)
  double expert_host_share = -1;  // and of all routed experts, those computed on the host (--moe-cpu-experts)
  int resident = 0, modules = 0;
  std::string error;
  double accelerate_tokens_per_s = 0;  // the peer on the same model, batch and budget (cpu cells)
  std::string accelerate_error;
};


// The largest regular file under `dir` (the NVMe tier's swap.bin in its per-run folder); empty
// when every file is empty (a model the device holds whole leaves nothing on the disk).
std::string largest_file_under(const std::string& dir) {
  std::string best;
  std::uintmax_t best_size = 0;
  for (const auto& entry : std::filesystem::recursive_directory_iterator(dir)) {
    if (entry.is_regular_file() && entry.file_size() > best_size) {
      best = entry.path().string();
      best_size = entry.file_size();
    }
  }
  return best;
}

Json cell_config(const std::string& placement, const std::string& nvme_path, const InferBenchOptions& o) {
  // The training keys mean nothing here, but the resolver wants a batch size.
  Json c = {{"train_micro_batch_size_per_gpu", 1}};
  if (placement != "device") {
    Json param = {{"device", placement}, {"buffer_count", o.slots}};
    if (placement == "nvme") param["nvme_path"] = nvme_path;
    c["zero_optimization"] = {{"stage", 3}, {"offload_param", param}};
  }
  return c;
}

// Pinned host -> device bytes/s with the server's device: the best of 5 copies of 64 MiB, or of
// half the device memory left when that is less (at least 1 MiB).
double h2d_rate(infer::Server& server) {
  const runtime::device::ArenaStats arena = server.device().memory_stats();
  const std::uint64_t free_bytes = arena.budget_bytes - arena.current_bytes;
  const std::size_t kBytes = static_cast<std::size_t>(
      std::max<std::uint64_t>(kMiB, std::min<std::uint64_t>(64 * kMiB, free_bytes / 2 / kMiB * kMiB)));
  offload::HostBuffer host = server.engine().tiers().pinned().allocate(kBytes, "the H2D limit's buffer");
  runtime::device::DeviceBuffer dev = server.device().allocate(kBytes, "the H2D limit's buffer");
  runtime::device::Stream& s = server.compute();
  double best = 0;
  for (int i = 0; i < 5; ++i) {
    const auto t0 = Clock::now();
    s.copy_async(dev.data(), host.data(), kBytes);
    s.synchronize();
    const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
    best = std::max(best, static_cast<double>(kBytes) / secs);
  }
  return best;
}

// transformers + Accelerate's offloaded decoding of the same model, batch and device budget
// (tools/bench/infer_peers.py), as a child; its tokens/s, or an error saying why not.
void run_accelerate_peer(const InferBenchOptions& o, const models::ModelSpec& spec, const ScratchFolder& scratch,
                         bool cuda, int batch, Cell& cell) {
  const auto script = find_bench_script("infer_peers.py", o.peer_script);
  if (!script) {
    cell.accelerate_error = "tools/bench/infer_peers.py not found";
    return;
  }
  const std::string dir = scratch.file("peer-model");
  std::filesystem::create_directories(dir);
  {
    std::FILE* f = std::fopen((dir + "/config.json").c_str(), "w");
    if (f == nullptr) throw Error("cannot write " + dir + "/config.json");
    std::fputs(spec.to_json().c_str(), f);
    std::fclose(f);
  }
  const std::string python = !o.python.empty() ? o.python : cuda ? "python3" : "/usr/bin/python3";
  const std::string log = scratch.file("peer.log");
  const std::string command = fmt::format(
      "{} {} --config-dir {} --batch {} --prompt-len {} --steps {} --dtype {} --device-memory {} --device {} "
      "</dev/null 2>{}",
      shell_quote(python), shell_quote(script->string()), shell_quote(dir), batch, o.prompt_len, o.steps,
      o.dtype == "auto" ? (cuda ? "bf16" : "fp32") : o.dtype,
      shell_quote(o.device.device_memory.empty() ? "4GiB" : o.device.device_memory), cuda ? "cuda" : "cpu",
      shell_quote(log));
  std::fflush(nullptr);
  std::FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) {
    cell.accelerate_error = "cannot start " + python;
    return;
  }
  std::string out;
  char buf[4096];
  while (std::fgets(buf, sizeof buf, pipe) != nullptr) out += buf;
  pclose(pipe);
  Json result;
  std::istringstream in(out);
  for (std::string line; std::getline(in, line);) {
    Json j = Json::parse(line, nullptr, false);
    if (!j.is_discarded() && j.is_object() && j.contains("peer")) result = std::move(j);
  }
  if (!result.is_object()) {
    cell.accelerate_error = "no result from infer_peers.py (see " + log + ")";
  } else if (!result.value("ok", false)) {
    cell.accelerate_error = result.value("error", std::string("failed"));
  } else {
    cell.accelerate_tokens_per_s = result.value("tokens_per_s", 0.0);
  }
}

}  // namespace

void bench_infer(const InferBenchOptions& o) {
  const models::ModelSpecPtr spec = o.model.empty() ? models::model_preset(o.preset) : models::model_from_path(o.model);
  const std::vector<std::string> placements = parse_placements(o.placements);
  std::vector<int> batches;  // 0: "auto", the largest the server's rule fits
  for (const std::string& b : split_list(o.batches)) {
    if (b == "auto") {
      batches.push_back(0);
      continue;
    }
    try {
      batches.push_back(std::stoi(b));
    } catch (const std::exception&) {
      throw Error("--batches: " + b + " is not a number or auto", "--batches");
    }
    if (batches.back() < 1) throw Error("--batches: " + b + " must be positive", "--batches");
  }
  if (o.prompt_len < 1 || o.steps < 2) throw Error("--prompt-len must be >= 1 and --steps >= 2", "--steps");
  const int max_T = o.prompt_len + o.steps + 1;
  if (max_T > spec->max_positions()) {
    throw Error(fmt::format("--prompt-len + --steps = {} is longer than the model's {} ({})", max_T - 1,
                            spec->max_positions_key(), spec->max_positions()),
                "--prompt-len");
  }
  const std::string weights = models::has_hf_weights(o.model) ? o.model : std::string();
  std::error_code ec;
  const bool nvme = std::find(placements.begin(), placements.end(), "nvme") != placements.end();
  const std::string parent = resolve_bench_dir(o.dir);
  if (nvme) check_bench_dir(parent);
  ScratchFolder scratch(parent, "infer");
  const std::string nvme_path = scratch.file("nvme");
  std::filesystem::create_directory(nvme_path, ec);
  std::FILE* text = o.json ? stderr : stdout;
  std::fprintf(text, "strata bench infer: %s (%s), prompts of %d tokens, %d decoding steps timed (after one), "
               "placements %s, batches %s%s\n",
               o.model.empty() ? o.preset.c_str() : o.model.c_str(), spec->describe().c_str(), o.prompt_len, o.steps,
               o.placements.c_str(), o.batches.c_str(),
               o.device.device_memory.empty() ? "" : (", device memory " + o.device.device_memory).c_str());

  double h2d_gbps = 0;
  std::string device_name;
  std::vector<Cell> cells;
  for (const std::string& placement : placements) {
    for (int requested : batches) {
      int batch = requested;
      Cell cell;
      cell.placement = placement;
      cell.batch = batch;
      try {
        // The server lives in this block: its pinned host memory and device memory are given back
        // before the peer starts, which needs as much host memory again (a 30 B model's weights).
        bool cuda = false;
        {
          // "auto": the server sizes the batch (a quarter of the device for the KV cache), given up
          // to 256 prompts.
          infer::ServerSetup setup;
          setup.spec = spec;
          const Json config = cell_config(placement, nvme_path, o);
          const std::string config_path = scratch.file(placement + ".json");
          {
            std::FILE* f = std::fopen(config_path.c_str(), "w");
            if (f == nullptr) throw Error("cannot write " + config_path);
            std::fputs(config.dump(1).c_str(), f);
            std::fclose(f);
          }
          setup.config = infer::inference_config(config_path, *spec);
          setup.device = resolve_device_options(o.device);
          if (placement == "device") setup.device.memory_bytes = 0;  // the backend's default: hold everything
          setup.dtype = o.dtype;
          setup.batch = batch;
          setup.prompts = batch > 0 ? static_cast<std::size_t>(batch) : 256;
          setup.prompt_T = o.prompt_len;
          setup.max_T = max_T;
          setup.weights = weights;
          if (placement != "device" && !o.quantize.empty() && o.quantize != "none") {
            setup.quant.bits = o.quantize == "int8" ? 8 : o.quantize == "int4" ? 4 : -1;
            if (setup.quant.bits < 0) throw Error("--quantize " + o.quantize + " is not int8 or int4", "--quantize");
          }
          setup.seed = 1;
          setup.expert_cache_mb = o.moe_expert_cache_mb;
          setup.moe_lookahead = o.moe_prefetch == "on";
          setup.moe_fetch_every_expert = o.moe_fetch == "all";
          setup.moe_cpu_experts = o.moe_cpu_experts;
          setup.profile_path = o.profile_path;
          infer::Server server(std::move(setup), /*verbose=*/false);
          batch = server.batch();
          cell.batch = batch;
          cell.resident = server.engine().resident_modules();
          if (device_name.empty()) device_name = server.device().name();
          cell.modules = server.engine().module_count();
          if (h2d_gbps == 0) h2d_gbps = h2d_rate(server) / 1e9;
          // One sequential read of the cell's own NVMe data (the tier's swap file, its first 4 GiB),
          // with the cell's I/O options: the disk's rate for the bytes the steps read. 0 when
          // nothing is on the disk (every module resident).
          auto disk_limit = [&] {
            const std::string data = largest_file_under(nvme_path);
            return data.empty() ? 0.0 : measure_file_read_rate(run_aio_options(config, *spec), data, 4 * kGiB);
          };
          // B random prompts, a prefill, one untimed step (the first along a recorded trace), then
          // the timed steps (greedy).
          const int V = spec->vocab_size();
          std::mt19937 rng(7);
          std::vector<std::int32_t> prompts(static_cast<std::size_t>(batch) * static_cast<std::size_t>(o.prompt_len));
          for (auto& t : prompts) t = static_cast<std::int32_t>(rng() % static_cast<unsigned>(V));
          std::vector<int> lengths(static_cast<std::size_t>(batch), o.prompt_len);
          models::KvCache cache = server.model().make_kv_cache(batch, max_T, server.kv_cache_options());
          std::vector<float> logits(static_cast<std::size_t>(batch) * static_cast<std::size_t>(V));
          std::vector<std::int32_t> next(static_cast<std::size_t>(batch));
          const infer::Sampler greedy({});
          auto pick = [&] {
            for (int b = 0; b < batch; ++b) {
              next[static_cast<std::size_t>(b)] = greedy.sample(
                  std::span<const float>(logits.data() + static_cast<std::size_t>(b) * static_cast<std::size_t>(V),
                                         static_cast<std::size_t>(V)),
                  {static_cast<std::uint64_t>(b), 0});
            }
          };
          runtime::zero::InferenceEngine& engine = server.engine();
          const auto p0 = Clock::now();
          engine.begin_pass();
          server.model().prefill(cache, prompts.data(), lengths.data(), batch, o.prompt_len, logits.data());
          engine.end_pass();
          cell.prefill_ms = std::chrono::duration<double, std::milli>(Clock::now() - p0).count();
          cell.prefill_tokens_per_s = 1e3 * batch * o.prompt_len / cell.prefill_ms;
          pick();
          if (placement == "nvme") cell.disk_gbps_before = disk_limit();
          std::vector<double> ms;
          runtime::zero::EngineCounters before{};
          for (int step = 0; step <= o.steps; ++step) {
            if (step == 1) before = engine.counters();
            const auto t0 = Clock::now();
            engine.begin_pass();
            server.model().forward_decode(cache, next.data(), batch, 1, logits.data());
            engine.end_pass();
            if (step > 0) ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
            pick();
          }
          const runtime::zero::EngineCounters after = engine.counters();
          if (placement == "nvme") cell.disk_gbps_after = disk_limit();
          const double disk_gbps = std::max(cell.disk_gbps_before, cell.disk_gbps_after);
          cell.step_ms = median(ms);
          cell.tokens_per_s = 1e3 * batch / cell.step_ms;
          cell.h2d_bytes_per_step = static_cast<double>(after.h2d_bytes - before.h2d_bytes) / o.steps;
          cell.nvme_bytes_per_step = static_cast<double>(after.nvme_read_bytes - before.nvme_read_bytes) / o.steps;
          const std::uint64_t hits = after.expert_hits - before.expert_hits;
          const std::uint64_t misses = after.expert_misses - before.expert_misses;
          const std::uint64_t on_host = after.expert_host - before.expert_host;
          if (hits + misses > 0) cell.expert_hit_rate = static_cast<double>(hits) / static_cast<double>(hits + misses);
          if (hits + misses + on_host > 0) {
            cell.expert_host_share = static_cast<double>(on_host) / static_cast<double>(hits + misses + on_host);
          }
          cell.unused_h2d_bytes_per_step =
              static_cast<double>(after.unused_h2d_bytes - before.unused_h2d_bytes) / o.steps;
          cell.unused_nvme_bytes_per_step =
              static_cast<double>(after.unused_read_bytes - before.unused_read_bytes) / o.steps;
          const double needed_h2d = cell.h2d_bytes_per_step - cell.unused_h2d_bytes_per_step;
          const double needed_nvme = cell.nvme_bytes_per_step - cell.unused_nvme_bytes_per_step;
          double bound_s = 0;
          if (h2d_gbps > 0) bound_s = std::max(bound_s, needed_h2d / (h2d_gbps * 1e9));
          if (disk_gbps > 0) bound_s = std::max(bound_s, needed_nvme / (disk_gbps * 1e9));
          cell.bound_tokens_per_s = bound_s > 0 ? batch / bound_s : 0;
          cuda = server.device().backend() == runtime::device::Backend::cuda;
        }
        if (o.peers && placement == "cpu") run_accelerate_peer(o, *spec, scratch, cuda, batch, cell);
      } catch (const Error& e) {
        cell.error = e.what();
      }
      std::fprintf(text, "  %-6s batch %-4d %s\n", placement.c_str(), batch,
                   cell.error.empty()
                       ? fmt::format("prefill {:9.1f} tokens/s; decode {:9.2f} ms/step {:10.1f} tokens/s  streamed {}/step (nvme {}), {} of {} modules "
                                     "resident{}{}{}{}",
                                     cell.prefill_tokens_per_s, cell.step_ms, cell.tokens_per_s,
                                     format_bytes(static_cast<std::uint64_t>(cell.h2d_bytes_per_step)),
                                     format_bytes(static_cast<std::uint64_t>(cell.nvme_bytes_per_step)), cell.resident,
                                     cell.modules,
                                     cell.bound_tokens_per_s > 0
                                         ? fmt::format("; bound {:.1f} tokens/s, {:.2f} of it", cell.bound_tokens_per_s,
                                                       cell.tokens_per_s / cell.bound_tokens_per_s)
                                         : std::string(),
                                     cell.expert_hit_rate >= 0
                                         ? fmt::format("; experts on the device {:.1f}%", 100.0 * cell.expert_hit_rate)
                                         : std::string(),
                                     cell.expert_host_share > 0
                                         ? fmt::format("; {:.1f}% of experts on the host", 100.0 * cell.expert_host_share)
                                         : std::string(),
                                     cell.unused_h2d_bytes_per_step + cell.unused_nvme_bytes_per_step > 0
                                         ? fmt::format("; fetched ahead and not used {}/step",
                                                       format_bytes(static_cast<std::uint64_t>(std::max(
                                                           cell.unused_h2d_bytes_per_step,
                                                           cell.unused_nvme_bytes_per_step))))
                                         : std::string())
                             .c_str()
                       : ("error: " + cell.error).c_str());
      if (cell.accelerate_tokens_per_s > 0) {
        std::fprintf(text, "         transformers%s, same model and batch: %.1f tokens/s (strata %.2fx)\n",
                     device_name == "host" ? " on the CPU (no offload: the host backend)"
                                           : " + Accelerate offload within the same device budget",
                     cell.accelerate_tokens_per_s, cell.tokens_per_s / cell.accelerate_tokens_per_s);
      } else if (!cell.accelerate_error.empty()) {
        std::fprintf(text, "         transformers + Accelerate: %s\n", cell.accelerate_error.c_str());
      }
      cells.push_back(cell);
    }
  }
  std::string disk_limits;
  for (const Cell& c : cells) {
    if (c.disk_gbps_before > 0) {
      disk_limits += fmt::format("{}{} batch {} {:.2f} / {:.2f}", disk_limits.empty() ? "" : ", ", c.placement, c.batch,
                                 c.disk_gbps_before, c.disk_gbps_after);
    }
  }
  std::fprintf(text, "limits: pinned H2D %.2f GB/s%s\n", h2d_gbps,
               disk_limits.empty() ? ""
                                   : ("; disk read GB/s before / after each cell (the bound takes the faster): " +
                                      disk_limits).c_str());
  if (!o.json) return;
  for (const Cell& c : cells) {
    Json j = {{"device", device_name},
              {"model", o.model.empty() ? o.preset : o.model},
              {"placement", c.placement},
              {"weights", runtime::tiers::tier_key(runtime::tiers::placement_tier(*placement_word(c.placement)))},
              {"quantize", c.placement != "device" && !o.quantize.empty() ? o.quantize : "none"},
              {"batch", c.batch},
              {"prompt_len", o.prompt_len},
              {"h2d_gbps", h2d_gbps},
              {"disk_read_gbps", std::max(c.disk_gbps_before, c.disk_gbps_after)}};
    if (c.disk_gbps_before > 0) {
      j["disk_read_gbps_before"] = c.disk_gbps_before;
      j["disk_read_gbps_after"] = c.disk_gbps_after;
    }
    if (!c.error.empty()) {
      j["error"] = c.error;
    } else {
      j["prefill_ms"] = c.prefill_ms;
      j["prefill_tokens_per_s"] = c.prefill_tokens_per_s;
      j["step_ms"] = c.step_ms;
      j["tokens_per_s"] = c.tokens_per_s;
      j["h2d_bytes_per_step"] = c.h2d_bytes_per_step;
      j["nvme_bytes_per_step"] = c.nvme_bytes_per_step;
      j["unused_h2d_bytes_per_step"] = c.unused_h2d_bytes_per_step;
      j["unused_nvme_bytes_per_step"] = c.unused_nvme_bytes_per_step;
      j["resident_modules"] = c.resident;
      if (c.expert_hit_rate >= 0) j["expert_hit_rate"] = c.expert_hit_rate;
      if (c.expert_host_share >= 0) {  // a mixture of experts, and the flags that shape its traffic
        j["expert_host_share"] = c.expert_host_share;
        j["moe_expert_cache_mb"] = o.moe_expert_cache_mb;
        j["moe_prefetch"] = o.moe_prefetch;
        j["moe_fetch"] = o.moe_fetch;
        j["moe_cpu_experts"] = o.moe_cpu_experts;
      }
      j["modules"] = c.modules;
      if (c.accelerate_tokens_per_s > 0) j["accelerate_tokens_per_s"] = c.accelerate_tokens_per_s;
      if (!c.accelerate_error.empty()) j["accelerate_error"] = c.accelerate_error;
      if (c.bound_tokens_per_s > 0) {
        j["bound_tokens_per_s"] = c.bound_tokens_per_s;
        j["vs_bound"] = c.tokens_per_s / c.bound_tokens_per_s;
      }
    }
    std::printf("%s\n", j.dump().c_str());
  }
}

}  // namespace strata::tools
