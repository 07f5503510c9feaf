// strata bench adam: the CPU Adam step (cpu_adam/adam.h) against the memory system.
//
// The step streams every array once: it reads params, grads, exp_avg, exp_avg_sq and writes
// params, exp_avg, exp_avg_sq (and, in the bf16 mode, the updated params in bf16). Its limit is
// a kernel with that access pattern and almost no arithmetic (the "reference" rows), run in the
// same process on the same buffers, threads and partition; the ratio step / reference is what
// to compare across machines. Effective GB/s counts the bytes the math must move:
//   fp32 grads:                 read p g m v (4+4+4+4) + write p m v (4+4+4)          = 28 B/param
//   bf16 grads + bf16 params:   read p g m v (4+2+4+4) + write p m v (4+4+4) + out 2  = 28 B/param
// The machines these run on are shared and noisy, so each cell runs `reps` rounds, interleaved
// (reference, scalar, avx2, ..., reference, scalar, ...) after one untimed round, and reports
// the median. torch.optim.AdamW(foreach=True) runs in a subprocess (tools/bench/adam_torch.py)
// on the same sizes and threads, when Debian's python3-torch is installed.
#include <omp.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/cpu_features.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/units.h"
#include "cpu_adam/adam.h"
#include "tools/bench/bench.h"
#include "tools/bench/bench_children.h"  // load_average
#include "tools/bench/bench_scripts.h"

namespace strata::tools {
namespace {

constexpr std::size_t kTargetParams = std::size_t{256} << 20;  // the targets docs/benchmarks.md states: 256M params
constexpr double kTargetVsLimit = 0.90;                          // best >= 0.90 x reference
constexpr double kTargetVsTorch = 8.0;                           // best >= 8 x torch AdamW

// ---- command-line lists -------------------------------------------------------------------

std::optional<std::size_t> parse_uint(std::string_view text) {
  std::size_t value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc{} || end != text.data() + text.size()) return std::nullopt;
  return value;
}

// "16M" = 16 * 2^20 (so that 256M fp32 params are exactly 1 GiB); K and G likewise; plain digits.
std::size_t parse_count(std::string_view text) {
  std::size_t shift = 0;
  if (!text.empty()) {
    switch (text.back()) {
      case 'K': case 'k': shift = 10; break;
      case 'M': case 'm': shift = 20; break;
      case 'G': case 'g': shift = 30; break;
      default: break;
    }
  }
  const auto digits = parse_uint(shift != 0 ? text.substr(0, text.size() - 1) : text);
  if (!digits || *digits == 0 || *digits > (std::size_t{1} << 40) >> shift) {
    throw Error(fmt::format("'{}' is not a parameter count", text), "--params",
                "give positive counts such as 1000000, 64K, 16M or 1G, comma-separated");
  }
  return *digits << shift;
}

std::string format_count(std::size_t n) {
  if (n % (std::size_t{1} << 30) == 0) return fmt::format("{}G", n >> 30);
  if (n % (std::size_t{1} << 20) == 0) return fmt::format("{}M", n >> 20);
  if (n % (std::size_t{1} << 10) == 0) return fmt::format("{}K", n >> 10);
  return std::to_string(n);
}

// "1,all", "1..all", "1,2,4": sorted, without duplicates. `all` = the affinity mask's CPUs.
std::vector<int> parse_threads(std::string_view text, int all) {
  auto one = [&](std::string_view item) {
    if (item == "all") return all;
    const auto n = parse_uint(item);
    if (!n || *n == 0 || *n > 4096) {
      throw Error(fmt::format("'{}' is not a thread count", item), "--threads",
                  "give counts such as 1,2,all or a range such as 1..all");
    }
    return static_cast<int>(*n);
  };
  std::vector<int> out;
  for (const std::string& item : split_list(text)) {
    const std::size_t dots = item.find("..");
    if (dots == std::string::npos) {
      out.push_back(one(item));
      continue;
    }
    const int lo = one(std::string_view(item).substr(0, dots));
    const int hi = one(std::string_view(item).substr(dots + 2));
    for (int t = lo; t <= hi; ++t) out.push_back(t);
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  if (out.empty()) throw Error("no thread count given", "--threads", "e.g. --threads 1,all");
  return out;
}

// fp32: fp32 grads, no half-precision output. bf16: bf16 grads and a bf16 copy of the params.
std::vector<DType> parse_grads(std::string_view text) {
  std::vector<DType> out;
  for (const std::string& item : split_list(text)) {
    const DType d = parse_dtype(item);  // throws for an unknown name
    if (d == DType::f16) {
      throw Error("the fp16 grad mode is not benchmarked", "--grad", "use fp32 and/or bf16");
    }
    if (std::find(out.begin(), out.end(), d) == out.end()) out.push_back(d);
  }
  if (out.empty()) throw Error("no grad mode given", "--grad", "e.g. --grad fp32,bf16");
  return out;
}

// ---- buffers --------------------------------------------------------------------------------

// Anonymous memory, untouched until the benchmark's threads first write it (so that each page
// lands on the NUMA node of the thread that updates it), with transparent huge pages asked for
// so that TLB misses are the same small cost for every kernel. The data starts `offset` bytes
// into the mapping (see Arrays). Owned; unmapped on destruction.
class Buffer {
 public:
  Buffer(std::size_t bytes, std::size_t offset) : bytes_(bytes == 0 ? 0 : bytes + offset) {
    if (bytes_ == 0) return;
    void* p = mmap(nullptr, bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
      throw system_error(errno, "mmap", format_bytes(bytes_) + " for a benchmark buffer",
                         "use smaller --params");
    }
    (void)madvise(p, bytes_, MADV_HUGEPAGE);  // a hint: fine to be refused
    base_ = p;
    data_ = static_cast<char*>(p) + offset;
  }
  ~Buffer() {
    if (base_ != nullptr) munmap(base_, bytes_);
  }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  template <typename T>
  T* as() const { return static_cast<T*>(data_); }

 private:
  std::size_t bytes_;
  void* base_ = nullptr;
  void* data_ = nullptr;
};

// Note [Array placement]: large mappings start on page (with THP, 2 MiB) boundaries, so arrays
// allocated one by one sit at the same offset modulo 2 MiB, and element i of all seven streams
// falls into the same cache sets and DRAM banks. On the dev machine that costs 2 to 3x, to the
// limit kernel as much as to the step (docs/benchmarks.md). Array k therefore starts
// k * kStaggerBytes into its mapping (one page and one cache line apart); --aligned measures
// the unstaggered placement.
constexpr std::size_t kStaggerBytes = 4096 + 64;

// The arrays of one shard: the fp32 state, and grads / output in the modes asked for.
struct Arrays {
  Arrays(std::size_t n, bool fp32_mode, bool bf16_mode, bool aligned)
      : numel(n), p(n * 4, at(0, aligned)), m(n * 4, at(1, aligned)), v(n * 4, at(2, aligned)),
        g32(fp32_mode ? n * 4 : 0, at(3, aligned)), g16(bf16_mode ? n * 2 : 0, at(4, aligned)),
        out16(bf16_mode ? n * 2 : 0, at(5, aligned)) {}
  static std::size_t at(std::size_t k, bool aligned) { return aligned ? 0 : k * kStaggerBytes; }
  std::size_t numel;
  Buffer p, m, v, g32, g16, out16;
};

// Thread `t` of `threads` owns [begin, end): contiguous runs of ceil(n / threads) elements
// rounded up to a multiple of 16, in order: the partition of adam_step for shards of 64K
// elements and more (cpu_adam/parallel_impl.h), so that every kernel here reads and writes the
// pages its thread first touched.
std::pair<std::size_t, std::size_t> chunk(std::size_t n, int t, int threads) {
  const auto parts = static_cast<std::size_t>(threads);
  const std::size_t per = ((n + parts - 1) / parts + 15) / 16 * 16;
  const std::size_t begin = std::min(n, per * static_cast<std::size_t>(t));
  return {begin, std::min(n, begin + per)};
}

// First touch, by the threads (and partition) that will run the kernels. Finite values in the
// ranges training sees; no zeros or subnormals that a kernel could take a shortcut on.
void first_touch(Arrays& a, int threads) {
  float* p = a.p.as<float>();
  float* m = a.m.as<float>();
  float* v = a.v.as<float>();
  float* g32 = a.g32.as<float>();
  std::uint16_t* g16 = a.g16.as<std::uint16_t>();
  std::uint16_t* out16 = a.out16.as<std::uint16_t>();
  const std::size_t n = a.numel;
#pragma omp parallel num_threads(threads)
  {
    const auto [begin, end] = chunk(n, omp_get_thread_num(), omp_get_num_threads());
    for (std::size_t i = begin; i < end; ++i) {
      const auto h = static_cast<std::uint32_t>(i * 2654435761u);
      const float u = static_cast<float>(h >> 8) * (1.0f / 16777216.0f);  // [0, 1)
      const float g = (u < 0.5f ? -1.0f : 1.0f) * (0.01f + u);            // +-[0.01, 1.01)
      p[i] = 2.0f * u - 1.0f;
      m[i] = 0.1f * g;
      v[i] = 0.001f * g * g;
      if (g32 != nullptr) g32[i] = g;
      if (g16 != nullptr) g16[i] = fp32_to_bf16(g);
      if (out16 != nullptr) out16[i] = 0;
    }
  }
}

// ---- the reference kernel: the step's access pattern, minimal arithmetic -------------------

// p += g*c; m = a*m + b*g; v = a2*v + b2*g*g (stays positive and bounded over many calls, so
// that the Adam step sharing these buffers never meets a NaN); bf16 mode: g widened from bf16,
// the output the top half of the new p. A handful of vector ops per element: memory-bound.
template <bool kBf16>
[[gnu::always_inline]] inline void reference_loop(float* __restrict p, float* __restrict m,
                                                  float* __restrict v, const float* __restrict g32,
                                                  const std::uint16_t* __restrict g16,
                                                  std::uint16_t* __restrict out16, std::size_t begin,
                                                  std::size_t end) {
  for (std::size_t i = begin; i < end; ++i) {
    const float g = kBf16 ? bf16_to_fp32(g16[i]) : g32[i];
    const float np = p[i] + g * -1e-7f;
    p[i] = np;
    m[i] = 0.9f * m[i] + 0.1f * g;
    v[i] = 0.999f * v[i] + 0.001f * g * g;
    if constexpr (kBf16) out16[i] = static_cast<std::uint16_t>(detail::float_bits(np) >> 16);
  }
}
template <bool kBf16>
[[gnu::always_inline]] inline void reference_body(const Arrays& a, std::size_t begin,
                                                  std::size_t end) {
  reference_loop<kBf16>(a.p.as<float>(), a.m.as<float>(), a.v.as<float>(), a.g32.as<const float>(),
                        a.g16.as<const std::uint16_t>(), a.out16.as<std::uint16_t>(), begin, end);
}

using RangeFn = void (*)(const Arrays&, std::size_t, std::size_t);

// Compiled for each ISA (the same loop, vectorized by the compiler) and chosen at run time like
// the Adam variants: this file stays baseline x86-64.
template <bool kBf16>
void reference_baseline(const Arrays& a, std::size_t begin, std::size_t end) {
  reference_body<kBf16>(a, begin, end);
}
#if defined(__x86_64__)
template <bool kBf16>
[[gnu::target("avx2,fma,f16c")]] void reference_avx2(const Arrays& a, std::size_t begin,
                                                       std::size_t end) {
  reference_body<kBf16>(a, begin, end);
}
template <bool kBf16>
[[gnu::target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")]] void reference_avx512(
    const Arrays& a, std::size_t begin, std::size_t end) {
  reference_body<kBf16>(a, begin, end);
}
#endif

RangeFn reference_for(SimdLevel simd, bool bf16) {
#if defined(__x86_64__)
  if (simd >= SimdLevel::avx512) return bf16 ? reference_avx512<true> : reference_avx512<false>;
  if (simd >= SimdLevel::avx2) return bf16 ? reference_avx2<true> : reference_avx2<false>;
#endif
  return bf16 ? reference_baseline<true> : reference_baseline<false>;
}

void run_reference(RangeFn fn, const Arrays& a, int threads) {
#pragma omp parallel num_threads(threads)
  {
    const auto [begin, end] = chunk(a.numel, omp_get_thread_num(), omp_get_num_threads());
    fn(a, begin, end);
  }
}

// ---- measuring ------------------------------------------------------------------------------

struct Cell {
  std::string kernel;  // reference | scalar | avx2 | avx512 | avx512_bf16 | torch
  DType grad;
  std::size_t params;
  int threads;
  std::vector<double> seconds;  // one per timed round
  double median_s = 0;
  bool best = false;            // the best Adam variant of this CPU (what the engine runs)
};

double median(std::vector<double> xs) {
  std::sort(xs.begin(), xs.end());
  const std::size_t k = xs.size() / 2;
  return xs.size() % 2 == 1 ? xs[k] : 0.5 * (xs[k - 1] + xs[k]);
}

std::size_t bytes_per_param(DType grad) {
  const std::size_t read = 4 + dtype_size(grad) + 4 + 4;  // p, g, m, v
  const std::size_t write = 4 + 4 + 4;                    // p, m, v
  return read + write + (grad == DType::f32 ? 0 : 2);     // + the half-precision params out
}

// Rounds per cell when --reps is not given: 7 at 256M params (about a minute of the default
// run on 2 cores, torch included), more for smaller cells, which are shorter and noisier.
int default_reps(std::size_t params) {
  const std::size_t scaled = 7 * kTargetParams / params;
  return static_cast<int>(std::clamp<std::size_t>(scaled | 1, 7, 25));
}

double seconds_of(const std::function<void()>& fn) {
  const auto t0 = std::chrono::steady_clock::now();
  fn();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

class Report {
 public:
  explicit Report(bool json) : json_(json), text_(json ? stderr : stdout) {}

  std::FILE* text() const { return text_; }

  void header() const {
    std::fprintf(text_, "%-12s %-5s %7s %7s %11s %9s %7s %8s\n", "kernel", "grad", "params",
                 "threads", "Mparams/s", "GB/s", "ratio", "spread");
  }

  // Records a finished cell and prints it; `limit` is the reference cell it is measured against.
  void add(Cell cell, const Cell* limit) {
    cell.median_s = median(cell.seconds);
    const double mparams = cell.params / cell.median_s / 1e6;
    const double gbps = double(bytes_per_param(cell.grad)) * cell.params / cell.median_s / 1e9;
    const double ratio = limit != nullptr ? limit->median_s / cell.median_s : 0.0;
    const auto [lo, hi] = std::minmax_element(cell.seconds.begin(), cell.seconds.end());
    const double spread = (*hi - *lo) / cell.median_s;  // (slowest - fastest) / median
    std::fprintf(text_, "%-12s %-5s %7s %7d %11.0f %9.2f %7s %7.0f%%\n", cell.kernel.c_str(),
                 std::string(dtype_name(cell.grad)).c_str(), format_count(cell.params).c_str(),
                 cell.threads, mparams, gbps,
                 limit != nullptr ? fmt::format("{:.2f}", ratio).c_str() : "-", spread * 100);
    std::fflush(text_);
    if (json_) {
      nlohmann::json j = {{"kernel", cell.kernel},
                          {"grad_dtype", std::string(dtype_name(cell.grad))},
                          {"params", cell.params},
                          {"threads", cell.threads},
                          {"mparams_per_s", mparams},
                          {"gbps", gbps},
                          {"ratio_to_limit", limit != nullptr ? nlohmann::json(ratio) : nlohmann::json()},
                          {"bytes_per_param", bytes_per_param(cell.grad)},
                          {"median_s", cell.median_s},
                          {"min_s", *lo},
                          {"max_s", *hi},
                          {"reps", cell.seconds.size()}};
      if (cell.kernel != "reference" && cell.kernel != "torch") j["best"] = cell.best;
      std::printf("%s\n", j.dump().c_str());
      std::fflush(stdout);
    }
    cells_[{cell.kernel, cell.grad, cell.params, cell.threads}] = std::move(cell);
  }

  const Cell* find(const std::string& kernel, DType grad, std::size_t params, int threads) const {
    const auto it = cells_.find({kernel, grad, params, threads});
    return it == cells_.end() ? nullptr : &it->second;
  }

 private:
  bool json_;
  std::FILE* text_;
  std::map<std::tuple<std::string, DType, std::size_t, int>, Cell> cells_;
};

// One (size, threads, grad mode): every kernel, interleaved round by round, one untimed round
// first. The Adam step runs as AdamW with typical hyper-parameters and a growing step counter.
void measure_cell(Report& report, Arrays& a, DType grad, int threads, int reps,
                  const std::vector<SimdLevel>& levels) {
  const bool bf16 = grad == DType::bf16;
  struct Kernel {
    std::string name;
    std::function<void()> run;
    std::vector<double> seconds;
  };
  std::vector<Kernel> kernels;
  const RangeFn reference = reference_for(detected_simd(), bf16);
  kernels.push_back({"reference", [&a, reference, threads] { run_reference(reference, a, threads); }, {}});

  cpu_adam::AdamHyper hyper;
  hyper.lr = 1e-3f;
  hyper.weight_decay = 0.01f;
  hyper.mode = cpu_adam::AdamMode::adamw;
  cpu_adam::AdamShard shard;
  shard.params = a.p.as<float>();
  shard.grads = bf16 ? static_cast<const void*>(a.g16.as<std::uint16_t>()) : a.g32.as<float>();
  shard.grad_dtype = grad;
  shard.exp_avg = a.m.as<float>();
  shard.exp_avg_sq = a.v.as<float>();
  shard.numel = a.numel;
  shard.params_out = bf16 ? a.out16.as<std::uint16_t>() : nullptr;
  shard.out_dtype = DType::bf16;
  auto step = std::make_shared<std::int64_t>(0);
  for (SimdLevel level : levels) {
    kernels.push_back({std::string(simd_name(level)),
                       [=] { cpu_adam::adam_step(level, threads, hyper, ++*step, shard, 1.0f); }, {}});
  }

  for (int round = -1; round < reps; ++round) {
    for (Kernel& k : kernels) {
      const double s = seconds_of(k.run);
      if (round >= 0) k.seconds.push_back(s);
    }
  }
  report.add({kernels[0].name, grad, a.numel, threads, kernels[0].seconds}, nullptr);
  const Cell* limit = report.find("reference", grad, a.numel, threads);
  for (std::size_t i = 1; i < kernels.size(); ++i) {
    report.add({kernels[i].name, grad, a.numel, threads, kernels[i].seconds, 0.0,
                i + 1 == kernels.size()},
               limit);
  }
}

// ---- torch.optim.AdamW, in a subprocess -----------------------------------------------------

// Runs the script for one size; records its cells against the reference cells of this run.
// Returns false (after saying why in one line) when torch is not there.
bool measure_torch(Report& report, const AdamBenchOptions& options, std::size_t params,
                   const std::vector<int>& threads, const std::vector<DType>& grads, int reps) {
  std::FILE* text = report.text();
  if (access(options.python.c_str(), X_OK) != 0) {
    std::fprintf(text, "torch: %s not found; torch.optim.AdamW skipped\n", options.python.c_str());
    return false;
  }
  const auto script = find_bench_script("adam_torch.py", options.torch_script);
  if (!script) {
    if (!options.torch_script.empty()) {
      std::fprintf(text, "torch: --torch-script %s not found; skipped\n", options.torch_script.c_str());
    } else {
      std::fprintf(text, "torch: tools/bench/adam_torch.py not found next to the binary or in %s; "
                   "skipped (give --torch-script)\n", "the source tree");
    }
    return false;
  }
  std::string thread_list, grad_list;
  for (int t : threads) thread_list += (thread_list.empty() ? "" : ",") + std::to_string(t);
  for (DType g : grads) grad_list += (grad_list.empty() ? "" : ",") + std::string(dtype_name(g));
  const std::string command = fmt::format(
      "{} {} --params {} --threads {} --grad {} --reps {}", shell_quote(options.python),
      shell_quote(script->string()), params, thread_list, grad_list, reps);
  std::fflush(nullptr);
  std::FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) throw system_error(errno, "popen", command);
  char* line = nullptr;
  std::size_t capacity = 0;
  ssize_t length = 0;
  std::string version, error;
  while ((length = getline(&line, &capacity, pipe)) > 0) {
    const auto j = nlohmann::json::parse(std::string_view(line, length), nullptr, false);
    if (j.is_discarded() || !j.is_object()) continue;  // not ours: ignore
    if (j.contains("error")) {
      error = j["error"].get<std::string>();
      continue;
    }
    if (j.contains("torch")) {
      version = j["torch"].get<std::string>();
      std::fprintf(text, "torch %s (python %s), torch.optim.AdamW(foreach=True):\n", version.c_str(),
                   j.value("python", "?").c_str());
      continue;
    }
    Cell cell{"torch", parse_dtype(j.at("grad_dtype").get<std::string>()),
              j.at("params").get<std::size_t>(), j.at("threads").get<int>(),
              j.at("seconds").get<std::vector<double>>()};
    if (cell.seconds.empty()) continue;
    const Cell* limit = report.find("reference", cell.grad, cell.params, cell.threads);
    report.add(std::move(cell), limit);
  }
  std::free(line);
  const int status = pclose(pipe);
  if (status == -1) throw system_error(errno, "pclose", command);
  const int rc = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  if (rc == 3) {
    std::fprintf(text, "torch: %s; torch.optim.AdamW skipped (Debian: apt-get install "
                 "python3-torch)\n", error.empty() ? "not importable" : error.c_str());
    return false;
  }
  if (rc != 0) {
    std::fprintf(text, "torch: %s exited with status %d; its cells may be missing\n",
                 script->string().c_str(), rc);
  }
  return !version.empty();
}

// ---- the targets (docs/benchmarks.md) ---------------------------------------------------------

void print_targets(const Report& report, const std::vector<DType>& grads, int all_threads,
                   SimdLevel best) {
  std::FILE* text = report.text();
  const std::string best_name(simd_name(best));
  bool any = false;
  auto line = [&](const char* what, double value, double target, DType grad) {
    std::fprintf(text, "target %-26s %-4s 256M params, %d threads: %6.2f (>= %.2f) %s\n", what,
                 std::string(dtype_name(grad)).c_str(), all_threads, value, target,
                 value >= target ? "PASS" : "BELOW");
    any = true;
  };
  for (DType grad : grads) {
    const Cell* adam = report.find(best_name, grad, kTargetParams, all_threads);
    const Cell* limit = report.find("reference", grad, kTargetParams, all_threads);
    const Cell* torch = report.find("torch", grad, kTargetParams, all_threads);
    if (adam == nullptr || limit == nullptr) continue;
    line(fmt::format("{} / reference", best_name).c_str(), limit->median_s / adam->median_s,
         kTargetVsLimit, grad);
    if (torch != nullptr) {
      line(fmt::format("{} / torch AdamW", best_name).c_str(), torch->median_s / adam->median_s,
           kTargetVsTorch, grad);
    }
  }
  if (!any) {
    std::fprintf(text, "targets: not evaluated (they are set at 256M params and all %d threads, "
                 "which this run did not measure)\n", all_threads);
  }
}

}  // namespace

void bench_adam(const AdamBenchOptions& options) {
  const CpuInfo cpu = cpu_info();
  const int all = std::max(1, cpu.logical_cores_in_affinity_mask);
  std::vector<std::size_t> sizes;
  for (const std::string& item : split_list(options.params)) sizes.push_back(parse_count(item));
  if (sizes.empty()) throw Error("no parameter count given", "--params", "e.g. --params 16M,256M");
  const std::vector<int> threads = parse_threads(options.threads, all);
  const std::vector<DType> grads = parse_grads(options.grads);
  const bool fp32_mode = std::find(grads.begin(), grads.end(), DType::f32) != grads.end();
  const bool bf16_mode = std::find(grads.begin(), grads.end(), DType::bf16) != grads.end();

  const double load = load_average();
  // Every Adam variant this CPU runs, scalar first; the last is the best (what the engine picks: active_simd()).
  const SimdLevel best = detected_simd();
  std::vector<SimdLevel> levels;
  for (int l = 0; l <= static_cast<int>(best); ++l) levels.push_back(static_cast<SimdLevel>(l));

  Report report(options.json);
  std::FILE* text = report.text();
  std::fprintf(text,
               "strata bench adam: %s, %d CPUs in the affinity mask, SIMD %s, load average %.2f "
               "at the start\n  AdamW step; ratio = reference time / kernel time (reference: the "
               "same access pattern, minimal math); medians of interleaved rounds; spread = "
               "(slowest - fastest) / median; arrays %s\n",
               cpu.model_name.c_str(), all, std::string(simd_name(best)).c_str(), load,
               options.aligned ? "ALIGNED (--aligned: same offset modulo 2 MiB)"
                               : "staggered by 4 KiB + 64 B");
  for (DType g : grads) {
    std::fprintf(text, "  %s mode: %zu bytes/param%s\n", std::string(dtype_name(g)).c_str(),
                 bytes_per_param(g),
                 g == DType::f32 ? " (read p g m v 16, write p m v 12)"
                                 : " (read p g m v 14, write p m v 12 + bf16 params out 2)");
  }
  if (!options.torch) std::fprintf(text, "torch: skipped (--no-torch)\n");
  report.header();

  bool torch_ok = options.torch;
  for (std::size_t n : sizes) {
    const int reps = options.reps > 0 ? options.reps : default_reps(n);
    for (int t : threads) {
      // Fresh buffers per thread count, first-touched by exactly these threads, and freed
      // before torch allocates its own.
      Arrays arrays(n, fp32_mode, bf16_mode, options.aligned);
      first_touch(arrays, t);
      for (DType g : grads) measure_cell(report, arrays, g, t, reps, levels);
    }
    if (torch_ok) torch_ok = measure_torch(report, options, n, threads, grads, reps);
  }
  print_targets(report, grads, all, best);
}

}  // namespace strata::tools
