// strata bench machine: the rates a placement's step time depends on, measured on this machine as
// a run would use it, written as a machine profile (runtime/estimate/machine_profile.h) for
// `strata estimate --profile`.
//
// Each measurement runs its unit of work once untimed, then again until --seconds have passed
// (at least once), and keeps the median rate:
//   cpu adam     cpu_adam::adam_step (the engine's SIMD level) on a 16Mi-element fp32 shard
//                (params, fp32 grads, exp_avg, exp_avg_sq: 256 MiB) with the run's threads
//                (strata.cpu_threads); elements/s, and as GB/s of its 28 bytes per element. The
//                four arrays lie at the same offset modulo 2 MiB, as the tier store's separate
//                allocations do (not staggered: bench adam's Note [Array placement] shows the
//                difference);
//   memory       a 256 MiB copy, split over the same threads; bytes read + bytes written per s;
//   h2d, d2h     128 MiB between a pinned host buffer (Device::pin_host, as the tiers pin theirs)
//                and the device arena, Stream::copy_async on streams named as the engine's;
//   disk         the I/O engine (offload/aio_engine.h, io_uring, O_DIRECT) writing then reading
//                back a file in --dir at the config's aio.block_size x aio.queue_depth
//                (measure_disk_rates, bench_nvme_disk.h): one 64 MiB pass (the warm-up), then one
//                sized so that the slower direction takes about --seconds;
//   gemm         runtime/ops' matmul_fwd (the op the model's layers run) at n x n x n in the
//                dtype; 2 n^3 flops. n = 4096 on cuda, 2048 on host;
//   cpu matmul   kernels/host's matmul_fwd on this thread over (4096, 2048) weights in host
//                memory in the dtype, a different one each run out of 256 MiB of them (a
//                mixture's cold expert computed on the host where it lives,
//                runtime/estimate/cpu_experts.h): at 1 row as weight bytes per second, at
//                kMatmulFewRows (16) rows as flops per second;
//   step         a resident training step of a reference model (bytes-30m, B 2, T 128 on host;
//                gpt2, B 8, T 512 on cuda): zero the grads, forward, backward, and AdamW on
//                device-resident states (runtime/ops' adam_step, as the engine updates a
//                device-tier module; fp32 master weights and bf16 params out in bf16), in model
//                flops per second. Model flops per token: 6 N + 12 L C T (N parameters, L
//                layers, C width, T tokens per sequence: the matmuls of forward and backward,
//                attention counted as if unmasked; bench gpt's count), so the optimizer's and
//                the elementwise ops' time lowers the rate but adds no flops.
// The table goes to stdout (stderr with --json, which prints the profile); the profile is
// always written to --out.
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "core/cpu_features.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/units.h"
#include "cpu_adam/adam.h"
#include "kernels/host/matmul.h"
#include "kernels/host/matmul_rows.h"
#include "models/model_parts.h"
#include "models/registry.h"
#include "offload/host_buffer.h"
#include "runtime/config/config.h"
#include "runtime/estimate/machine_profile.h"
#include "runtime/ops/ops.h"
#include "runtime/ops/optim_ops.h"
#include "runtime/params/resident_params.h"
#include "runtime/tiers/io_options.h"
#include "tools/bench/bench.h"
#include "tools/bench/bench_children.h"  // ScratchFolder
#include "tools/bench/bench_nvme_disk.h"

namespace strata::tools {
namespace {

using Clock = std::chrono::steady_clock;
using runtime::device::Device;
using runtime::device::DeviceBuffer;
using runtime::device::Stream;

constexpr std::size_t kAdamElements = std::size_t{16} << 20;
constexpr std::size_t kAdamBytesPerElement = 28;  // read p g m v, write p m v (bench adam's count)
constexpr std::size_t kMemoryBytes = 256 * kMiB;
constexpr std::size_t kCopyBytes = 128 * kMiB;
constexpr std::uint64_t kDiskProbeBytes = 64 * kMiB;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// `work` units per second of `run`: one untimed run, then timed runs until `seconds` have passed
// (at least one); the median.
double median_rate(double seconds, double work, const std::function<void()>& run) {
  run();
  std::vector<double> rates;
  const Clock::time_point start = Clock::now();
  do {
    const Clock::time_point t0 = Clock::now();
    run();
    rates.push_back(work / seconds_since(t0));
  } while (seconds_since(start) < seconds);
  std::sort(rates.begin(), rates.end());
  const std::size_t n = rates.size();
  return n % 2 == 1 ? rates[n / 2] : 0.5 * (rates[n / 2 - 1] + rates[n / 2]);
}

// A host buffer pinned through the device's hook for as long as it lives (cudaHostRegister on
// cuda, nothing on host), as the pinned pool pins its buffers.
class PinnedBuffer {
 public:
  PinnedBuffer(Device& device, std::size_t bytes, std::string_view what)
      : device_(device), buffer_(offload::HostBuffer::allocate(bytes, what)) {
    std::memset(buffer_.data(), 1, bytes);  // touched before it is pinned, as the pool does
    device_.pin_host(buffer_.data(), bytes);
  }
  ~PinnedBuffer() { device_.unpin_host(buffer_.data()); }
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;
  std::byte* data() const { return buffer_.data(); }

 private:
  Device& device_;
  offload::HostBuffer buffer_;
};

// The readable table: one row per rate as it is measured.
class Table {
 public:
  explicit Table(std::FILE* out) : out_(out) {}
  void row(const char* what, const std::string& rate, const std::string& how) {
    std::fprintf(out_, "  %-11s %20s   %s\n", what, rate.c_str(), how.c_str());
    std::fflush(out_);
  }

 private:
  std::FILE* out_;
};

std::string gbps(double bytes_per_s) { return fmt::format("{:.2f} GB/s", bytes_per_s / 1e9); }
std::string tflops(double flops_per_s) { return fmt::format("{:.3f} TFLOPS", flops_per_s / 1e12); }

double measure_cpu_adam(double seconds, int threads) {
  const std::size_t n = kAdamElements;
  const offload::HostBuffer arrays = offload::HostBuffer::allocate(4 * n * sizeof(float), "the CPU Adam shard");
  auto* p = reinterpret_cast<float*>(arrays.data());
  float* g = p + n;
  float* m = g + n;
  float* v = m + n;
  for (float* a : {p, g, m, v}) cpu_adam::first_touch_zeroed(a, n, threads);
  for (std::size_t i = 0; i < n; ++i) g[i] = 1e-3f * static_cast<float>(static_cast<int>(i % 17) - 8);
  cpu_adam::AdamHyper hyper;
  hyper.weight_decay = 0.01f;
  cpu_adam::AdamShard shard;
  shard.params = p;
  shard.grads = g;
  shard.exp_avg = m;
  shard.exp_avg_sq = v;
  shard.numel = n;
  std::int64_t step = 0;
  return median_rate(seconds, static_cast<double>(n),
                     [&] { cpu_adam::adam_step(active_simd(), threads, hyper, ++step, shard, 1.0f); });
}

double measure_memory(double seconds, int threads) {
  const offload::HostBuffer src = offload::HostBuffer::allocate(kMemoryBytes, "the memory copy's source");
  const offload::HostBuffer dst = offload::HostBuffer::allocate(kMemoryBytes, "the memory copy's target");
  const std::size_t piece = kMemoryBytes / static_cast<std::size_t>(threads);
  auto copy = [&](int value) {
#pragma omp parallel for num_threads(threads) schedule(static)
    for (int t = 0; t < threads; ++t) {
      const std::size_t begin = static_cast<std::size_t>(t) * piece;
      const std::size_t bytes = t + 1 == threads ? kMemoryBytes - begin : piece;
      if (value >= 0) {
        std::memset(src.data() + begin, value, bytes);  // first touch, by the copying thread
        std::memset(dst.data() + begin, value, bytes);
      } else {
        std::memcpy(dst.data() + begin, src.data() + begin, bytes);
      }
    }
  };
  copy(1);
  return median_rate(seconds, 2.0 * kMemoryBytes, [&] { copy(-1); });
}

struct CopyRates {
  double h2d = 0, d2h = 0;
};

CopyRates measure_copies(double seconds, Device& device) {
  const PinnedBuffer host(device, kCopyBytes, "the H2D/D2H pinned buffer");
  const DeviceBuffer dev = device.allocate(kCopyBytes, "the H2D/D2H device buffer");
  const std::unique_ptr<Stream> h2d = device.create_stream("h2d");
  const std::unique_ptr<Stream> d2h = device.create_stream("d2h");
  CopyRates rates;
  rates.h2d = median_rate(seconds, kCopyBytes, [&] {
    h2d->copy_async(dev.data(), host.data(), kCopyBytes);
    h2d->synchronize();
  });
  rates.d2h = median_rate(seconds, kCopyBytes, [&] {
    d2h->copy_async(host.data(), dev.data(), kCopyBytes);
    d2h->synchronize();
  });
  return rates;
}

DiskRates measure_disk(double seconds, const offload::AioOptions& aio, const std::string& dir, std::FILE* text) {
  const ScratchFolder scratch(dir, "machine");
  const std::string path = scratch.file("disk.bin");
  DiskRates probe = measure_disk_rates(aio, path, kDiskProbeBytes, true);
  const double slower = std::min(probe.write_gbps, probe.read_gbps) * 1e9;
  const auto wanted = static_cast<std::uint64_t>(slower * seconds) / (8 * kMiB) * (8 * kMiB);
  if (wanted <= kDiskProbeBytes) return probe;
  const std::uint64_t bytes = resolve_bench_size(std::to_string(std::min<std::uint64_t>(wanted, 16 * kGiB)), dir, text);
  return measure_disk_rates(aio, path, bytes, true);
}

double measure_gemm(double seconds, Device& device, Stream& stream, int n, DType dtype) {
  const std::size_t elems = static_cast<std::size_t>(n) * static_cast<std::size_t>(n);
  const std::size_t bytes = elems * dtype_size(dtype);
  const DeviceBuffer x = device.allocate(bytes, "the GEMM's input");
  const DeviceBuffer w = device.allocate(bytes, "the GEMM's weight");
  const DeviceBuffer y = device.allocate(bytes, "the GEMM's output");
  {
    // Random operands: a GPU multiplying zeros draws less power and runs faster than on real data.
    std::vector<float> host(elems);
    std::mt19937 rng(11);
    std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
    for (float& f : host) f = uniform(rng);
    models::copy_to_device(stream, x.data(), dtype, host.data(), elems);
    models::copy_to_device(stream, w.data(), dtype, host.data(), elems);
    stream.synchronize();
  }
  return median_rate(seconds, 2.0 * n * n * static_cast<double>(n), [&] {
    runtime::ops::matmul_fwd(stream, y.data(), x.data(), w.data(), nullptr, n, n, n, dtype);
    stream.synchronize();
  });
}

struct CpuMatmulRates {
  double bytes_per_s = 0;  // at 1 row: the weight's bytes
  double flops_per_s = 0;  // at kMatmulFewRows rows
};

CpuMatmulRates measure_cpu_matmul(double seconds, DType dtype) {
  constexpr int kOut = 4096, kIn = 2048;
  constexpr std::int64_t kRows = kernels::host::kMatmulFewRows;
  constexpr std::size_t kColdBytes = 256 * kMiB;  // weights to cycle through: past any L3
  const std::size_t es = dtype_size(dtype);
  const std::size_t weight_elems = static_cast<std::size_t>(kOut) * kIn;
  const std::size_t weight_bytes = weight_elems * es;
  const std::size_t copies = std::max<std::size_t>(1, kColdBytes / weight_bytes);
  std::vector<std::byte> weights(copies * weight_bytes), x(static_cast<std::size_t>(kRows) * kIn * es),
      y(static_cast<std::size_t>(kRows) * kOut * es);
  {
    std::vector<float> values(weight_elems);
    std::mt19937 rng(13);
    std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
    for (float& f : values) f = uniform(rng);
    for (std::size_t c = 0; c < copies; ++c) {
      convert(values.data(), DType::f32, weights.data() + c * weight_bytes, dtype, weight_elems);
    }
    convert(values.data(), DType::f32, x.data(), dtype, static_cast<std::size_t>(kRows) * kIn);
  }
  std::size_t next = 0;  // each run reads the next weight: from memory, as a cold expert is
  auto run = [&](std::int64_t rows) {
    kernels::host::matmul_fwd(y.data(), x.data(), weights.data() + next * weight_bytes, nullptr, rows, kIn, kOut, dtype);
    next = (next + 1) % copies;
  };
  CpuMatmulRates r;
  r.bytes_per_s = median_rate(seconds / 2, static_cast<double>(weight_bytes), [&] { run(1); });
  r.flops_per_s = median_rate(seconds / 2, 2.0 * kRows * static_cast<double>(weight_elems), [&] { run(kRows); });
  return r;
}

struct StepShape {
  std::string preset;
  int batch = 0;
  int seq_len = 0;
};

// Model flops per second of the resident training step (the header's count).
double measure_step(double seconds, Device& device, Stream& stream, const models::ModelSpec& spec,
                    const StepShape& shape, DType dtype, int threads) {
  const models::ModelLayout layout = spec.layout();
  const int B = shape.batch, T = shape.seq_len;
  runtime::params::ResidentParams params(device, layout.module_numels(), layout.module_names(), dtype, true);
  // Per module: exp_avg and exp_avg_sq, and in bf16 the fp32 master weights (the params are the
  // bf16 copy the update writes).
  std::vector<DeviceBuffer> states;
  std::vector<cpu_adam::AdamShard> shards(layout.modules.size());
  for (std::size_t m = 0; m < layout.modules.size(); ++m) {
    const std::size_t numel = layout.modules[m].numel;
    std::vector<float> host(numel);
    spec.init_module(layout.modules[m], 1234, host.data());
    void* p = params.params(static_cast<int>(m));
    models::copy_to_device(stream, p, dtype, host.data(), numel);
    cpu_adam::AdamShard& s = shards[m];
    s.numel = numel;
    s.grads = params.grads(static_cast<int>(m));
    s.grad_dtype = dtype;
    for (float** state : {&s.exp_avg, &s.exp_avg_sq}) {
      states.push_back(device.allocate(numel * sizeof(float), "an optimizer state"));
      stream.memset_async(states.back().data(), 0, numel * sizeof(float));
      *state = static_cast<float*>(states.back().data());
    }
    if (dtype == DType::f32) {
      s.params = static_cast<float*>(p);
    } else {
      states.push_back(device.allocate(numel * sizeof(float), "the fp32 master weights"));
      s.params = static_cast<float*>(states.back().data());
      models::copy_to_device(stream, s.params, DType::f32, host.data(), numel);
      s.params_out = p;
      s.out_dtype = dtype;
    }
    stream.synchronize();  // `host` goes away
  }
  const std::unique_ptr<models::Model> model = spec.make_model({.dtype = dtype}, device, stream, params);
  const std::size_t BT = static_cast<std::size_t>(B) * static_cast<std::size_t>(T);
  std::mt19937 rng(7);
  std::vector<std::int32_t> inputs(BT), targets(BT);
  for (auto* tokens : {&inputs, &targets}) {
    for (auto& t : *tokens) t = static_cast<std::int32_t>(rng() % static_cast<unsigned>(spec.vocab_size()));
  }
  cpu_adam::AdamHyper hyper;
  hyper.weight_decay = 0.01f;
  std::int64_t step = 0;
  const int layers = static_cast<int>(layout.modules.size()) - 2;  // embedding, blocks, head
  const double flops = runtime::estimate::model_step_flops(static_cast<double>(spec.num_params()), layers,
                                                           spec.hidden_size(), T, static_cast<double>(BT), false);
  return median_rate(seconds, flops, [&] {
    params.zero_grads(stream);
    model->forward(inputs.data(), targets.data(), B, T, true);
    model->backward();
    ++step;
    for (const cpu_adam::AdamShard& s : shards) runtime::ops::adam_step(stream, hyper, step, s, 1.0f, threads);
    stream.synchronize();
  });
}

// The widths of the step points, their shape, and the model of one (2 GPT-2 blocks).
std::vector<int> step_point_widths(bool cuda) {
  return cuda ? std::vector<int>{768, 1024, 1536, 2048} : std::vector<int>{128, 256, 512, 1024};
}
StepShape step_point_shape(bool cuda) { return {"", cuda ? 8 : 4, cuda ? 1024 : 128}; }
std::string step_point_config_json(int hidden, const StepShape& shape) {
  return fmt::format(R"({{"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "vocab_size": 256,
                         "n_positions": {}, "n_embd": {}, "n_layer": 2, "n_head": {}, "layer_norm_epsilon": 1e-5}})",
                     shape.seq_len, hidden, hidden / 64);
}
models::ModelSpecPtr step_point_model(int hidden, const StepShape& shape) {
  return models::model_from_json(step_point_config_json(hidden, shape), "a step point's config");
}

// Model flops per second of `strata train`'s resident step (stage 0, nothing offloaded) of the
// width's model: a child of this binary, as bench step runs its cells, so the rate includes
// what the engine adds to the model's own work (the fp32 gradient accumulation, the loss
// reduction, metrics). The median of kTimedSteps steps after the warm-up.
constexpr int kTimedSteps = 3;
double measure_trained_step(const std::string& self, const ScratchFolder& scratch, int hidden, const StepShape& shape,
                            const std::string& dtype_text, bool cuda, bool verbose) {
  const models::ModelSpecPtr spec = step_point_model(hidden, shape);
  TrainChildOptions child;
  child.model = scratch.file(fmt::format("width-{}.json", hidden));
  {
    std::ofstream out(child.model);
    out << step_point_config_json(hidden, shape) << "\n";
    if (!out) throw Error("cannot write a step point's model config", child.model, "give --dir a writable folder");
  }
  child.batch = shape.batch;
  child.seq_len = shape.seq_len;
  child.dtype = dtype_text;
  child.steps = kWarmupSteps + kTimedSteps;
  child.device = cuda ? "cuda" : "host";
  child.verbose = verbose;
  if (!cuda) {  // the host arena: every state on it, the activations, and room
    const std::uint64_t bytes = spec->layout().total_numel() * 24 +
                                spec->activation_bytes({.dtype = DType::f32}, shape.batch, shape.seq_len) + 64 * kMiB;
    child.device_memory = std::to_string(bytes);
  }
  const std::string config = scratch.file(fmt::format("width-{}-config.json", hidden));
  write_config(config, cell_config(child, "device", 0, ""));
  const ChildRun run = run_train_child(self, child, config, training_text(child, scratch),
                                       scratch.file(fmt::format("width-{}.jsonl", hidden)), {}, kWarmupSteps + 1,
                                       child.steps);
  if (!run.error.empty()) {
    throw Error(fmt::format("the resident step at width {} failed: {}", hidden, run.error), "strata bench machine",
                "run it with --verbose to see the child's output");
  }
  std::vector<double> ms;
  for (const Json& r : run.rows) ms.push_back(number(r, "step_ms"));
  const double flops = runtime::estimate::model_step_flops(static_cast<double>(spec->num_params()), 2, hidden,
                                                           shape.seq_len, static_cast<double>(shape.batch) * shape.seq_len,
                                                           false);
  return flops / (median(ms) / 1e3);
}

}  // namespace

void bench_machine(const MachineBenchOptions& o) {
  if (!(o.seconds > 0) || !std::isfinite(o.seconds)) {
    throw Error(fmt::format("--seconds {} is not a positive time", o.seconds), "--seconds", "e.g. --seconds 5");
  }
  // The run's settings: the config's (DeepSpeed's defaults without one).
  runtime::config::Config config;
  if (!o.device.config_path.empty()) config = runtime::config::load_config_file(o.device.config_path).config;
  const offload::AioOptions aio = runtime::tiers::aio_options(config);
  const int threads = config.strata.cpu_threads != 0 ? static_cast<int>(config.strata.cpu_threads)
                                                     : std::max(1, cpu_info().logical_cores_in_affinity_mask);
  // Check the disk folder first: a bad --dir fails before a minute of measuring.
  const std::string dir = resolve_bench_dir(o.dir);
  check_bench_dir(dir);

  runtime::device::DeviceOptions device_options = resolve_device_options(o.device);
  device_options.host_threads = threads;
  const bool want_cuda = device_options.kind == "cuda";
  // Sized by the largest phase at 4 bytes an element (the fp32 step, the fp32 GEMM) plus slack,
  // unless --device-memory says otherwise.
  std::unique_ptr<Device> device;
  StepShape shape;
  models::ModelSpecPtr spec;
  auto plan_step = [&](bool cuda) {
    shape = cuda ? StepShape{"gpt2", 8, 512} : StepShape{"bytes-30m", 2, 128};
    if (!o.step_preset.empty()) shape.preset = o.step_preset;
    spec = models::model_preset(shape.preset);
    shape.seq_len = std::min(shape.seq_len, spec->max_positions());
  };
  plan_step(want_cuda);
  auto arena_bytes = [&](bool cuda) {
    const std::uint64_t gemm = 3ull * (cuda ? 4096 : 2048) * (cuda ? 4096 : 2048) * 4;
    auto step_bytes = [](const models::ModelSpec& s, int B, int T) {
      return s.layout().total_numel() * 20 +  // p g m v + master
             s.activation_bytes({.dtype = DType::f32}, B, T);
    };
    const StepShape widest = step_point_shape(cuda);
    const std::uint64_t step =
        std::max(step_bytes(*spec, shape.batch, shape.seq_len),
                 step_bytes(*step_point_model(step_point_widths(cuda).back(), widest), widest.batch, widest.seq_len));
    return std::max<std::uint64_t>({gemm, step, kCopyBytes}) + 256 * kMiB;
  };
  if (o.device.device_memory.empty()) device_options.memory_bytes = arena_bytes(want_cuda);
  device = Device::create(device_options);
  const bool cuda = device->backend() == runtime::device::Backend::cuda;
  if (cuda != want_cuda) {  // "auto" picked the other backend: its reference model and arena
    plan_step(cuda);
    if (o.device.device_memory.empty()) {
      device.reset();
      device_options.kind = cuda ? "cuda" : "host";
      device_options.memory_bytes = arena_bytes(cuda);
      device = Device::create(device_options);
    }
  }
  std::string dtype_text = o.dtype;
  if (dtype_text == "auto") {
    const bool bf16 = o.device.config_path.empty() ? cuda : config.bf16.enabled.value_or(false);
    dtype_text = bf16 ? "bf16" : "fp32";
  }
  if (dtype_text != "bf16" && dtype_text != "fp32") {
    throw Error("--dtype " + dtype_text + " is not bf16 or fp32", "--dtype", "give --dtype bf16, fp32 or auto");
  }
  const DType dtype = parse_dtype(dtype_text);
  const int gemm_n = cuda ? 4096 : 2048;
  std::unique_ptr<Stream> compute = device->create_stream("compute");

  runtime::estimate::MachineProfile p;
  p.backend = std::string(runtime::device::backend_name(device->backend()));
  p.device_name = device->name();
  p.dtype = dtype_text;
  p.threads = threads;
  p.disk_block_bytes = aio.block_size;
  p.disk_queue_depth = static_cast<int>(aio.queue_depth);
  p.disk_dir = dir;

  std::FILE* text = o.json ? stderr : stdout;
  std::fprintf(text,
               "strata bench machine: %s (%s), %s, %d CPU threads (%s), %s\n"
               "  disk: %s, %s; aio.block_size %s x aio.queue_depth %u; median over %.3g s per rate\n",
               p.device_name.c_str(), p.backend.c_str(), p.dtype.c_str(), threads,
               std::string(simd_name(active_simd())).c_str(), cpu_info().model_name.c_str(), dir.c_str(),
               describe_mount(dir).c_str(), format_bytes(aio.block_size).c_str(), aio.queue_depth, o.seconds);
  Table table(text);
  p.cpu_adam_elements_per_s = measure_cpu_adam(o.seconds, threads);
  p.memory_bytes_per_s = measure_memory(o.seconds, threads);
  table.row("cpu adam",
            fmt::format("{:.1f} M elements/s", p.cpu_adam_elements_per_s / 1e6),
            fmt::format("16Mi fp32 elements, {:.2f} GB/s at 28 B each = {:.2f} x the memory copy",
                        p.cpu_adam_elements_per_s * kAdamBytesPerElement / 1e9,
                        p.cpu_adam_elements_per_s * kAdamBytesPerElement / p.memory_bytes_per_s));
  table.row("memory", gbps(p.memory_bytes_per_s), "256 MiB memcpy, read + write bytes");
  const CopyRates copies = measure_copies(o.seconds, *device);
  p.h2d_bytes_per_s = copies.h2d;
  p.d2h_bytes_per_s = copies.d2h;
  table.row("h2d", gbps(p.h2d_bytes_per_s), "128 MiB, pinned host -> device");
  table.row("d2h", gbps(p.d2h_bytes_per_s), "128 MiB, device -> pinned host");
  const DiskRates disk = measure_disk(o.seconds, aio, dir, text);
  p.disk_write_bytes_per_s = disk.write_gbps * 1e9;
  p.disk_read_bytes_per_s = disk.read_gbps * 1e9;
  table.row("disk write", gbps(p.disk_write_bytes_per_s), "O_DIRECT io_uring, then fdatasync");
  table.row("disk read", gbps(p.disk_read_bytes_per_s), "O_DIRECT io_uring");
  p.gemm_flops_per_s = measure_gemm(o.seconds, *device, *compute, gemm_n, dtype);
  table.row("gemm", tflops(p.gemm_flops_per_s), fmt::format("matmul_fwd {0} x {0} x {0}, {1}", gemm_n, p.dtype));
  const CpuMatmulRates cpu_matmul = measure_cpu_matmul(o.seconds, dtype);
  p.cpu_matmul_bytes_per_s = cpu_matmul.bytes_per_s;
  p.cpu_matmul_flops_per_s = cpu_matmul.flops_per_s;
  table.row("cpu matmul", gbps(p.cpu_matmul_bytes_per_s),
            fmt::format("host matmul_fwd, 1 row over 4096 x 2048 {} weights from memory; {} at {} rows",
                        p.dtype, tflops(p.cpu_matmul_flops_per_s), kernels::host::kMatmulFewRows));
  p.step_flops_per_s = measure_step(o.seconds, *device, *compute, *spec, shape, dtype, threads);
  table.row("step", tflops(p.step_flops_per_s),
            fmt::format("{} B {} T {}: fwd + bwd + AdamW, model flops; {:.2f} x the gemm", shape.preset,
                        shape.batch, shape.seq_len, p.step_flops_per_s / p.gemm_flops_per_s));

  // The trainer's step at several widths (2 blocks, vocabulary 256): what the step model
  // interpolates. Children of this binary, after this process's device is gone (one device each).
  compute.reset();
  device.reset();
  const ScratchFolder scratch(dir, "machine");
  const std::string self = self_executable();
  for (const int hidden : step_point_widths(cuda)) {
    const StepShape point_shape = step_point_shape(cuda);
    const double rate = measure_trained_step(self, scratch, hidden, point_shape, dtype_text, cuda, o.verbose);
    p.step_points.push_back({hidden, 2, point_shape.batch, point_shape.seq_len, rate});
    table.row(fmt::format("step C={}", hidden).c_str(), tflops(rate),
              fmt::format("strata train, resident: GPT-2, 2 blocks of width {}, B {} T {}", hidden, point_shape.batch,
                          point_shape.seq_len));
  }

  runtime::estimate::write_machine_profile(p, o.out);
  std::fprintf(text, "wrote %s\n", o.out.c_str());
  if (o.json) std::printf("%s", runtime::estimate::machine_profile_json(p).c_str());
}

}  // namespace strata::tools
