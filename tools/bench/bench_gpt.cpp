// strata bench gpt: one GPT-2 training micro-step (forward + backward) on a device, against
// the device's own GEMM rate measured in the same run.
//
// The step: parameters and gradients resident on the device (runtime::ResidentParams), the
// model of models/gpt, one micro-batch of random tokens; the time from the first op enqueued to
// the last gradient done, median of --steps after one warm-up. Model FLOPs per token are
// 6 N + 12 L C T (PaLM's count: the matmuls of forward and backward, attention included as if
// unmasked); TFLOPS = FLOPs per token x tokens / time. The limit: the model's largest GEMM
// (the MLP's c_fc, (B*T, C) x (C, 4C)) forward and backward through the same op layer on the
// same stream; ratio = model TFLOPS / GEMM TFLOPS, i.e. how close the whole step comes to
// running nothing but its biggest matmul at full speed.
//
// --profile: one more step, after the timed ones, with every op of runtime/ops bracketed by
// timing events (runtime/ops/op_profiler.h); the table gives each op kind's total time, its
// share of the profiled step's wall time, and its count. What the ops do not cover (copies,
// memsets, gaps between ops) is the "other" row.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <optional>
#include <random>
#include <string>

#include <omp.h>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/units.h"
#include "models/gpt/gpt_spec.h"
#include "models/model_parts.h"
#include "models/registry.h"
#include "runtime/ops/op_profiler.h"
#include "runtime/ops/ops.h"
#include "runtime/params/resident_params.h"
#include "tools/bench/bench.h"
#include "tools/bench/bench_scripts.h"

namespace strata::tools {
namespace {

using Clock = std::chrono::steady_clock;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// PyTorch's fwd+bwd of the same model and batch shape (tools/bench/gpt_torch.py); the median
// step in ms, or nullopt after saying why on stderr.
std::optional<double> torch_step_ms(const GptBenchOptions& o, const models::GptConfig& c,
                                    bool cuda, int threads) {
  if (access(o.python.c_str(), X_OK) != 0) {
    std::fprintf(stderr, "torch: %s not found; skipped\n", o.python.c_str());
    return std::nullopt;
  }
  const auto script = find_bench_script("gpt_torch.py");
  const auto reference = source_folder("tests/reference");
  if (!script || !reference) {
    std::fprintf(stderr, "torch: tools/bench/gpt_torch.py or tests/reference not found; skipped\n");
    return std::nullopt;
  }
  const std::string command = fmt::format(
      "{} {} --vocab-size {} --n-positions {} --n-embd {} --n-layer {} --n-head {} --batch {} "
      "--seq-len {} --steps {} --threads {} --dtype {} --device {} --reference-dir {}",
      shell_quote(o.python), shell_quote(script->string()), c.vocab_size, c.n_positions, c.n_embd,
      c.n_layer, c.n_head, o.batch, o.seq_len, o.steps, threads, o.dtype == "bf16" ? "bf16" : "fp32",
      cuda ? "cuda" : "cpu", shell_quote(reference->string()));
  std::fflush(nullptr);
  std::FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) {
    std::fprintf(stderr, "torch: cannot start %s; skipped\n", o.python.c_str());
    return std::nullopt;
  }
  std::string out;
  char buf[4096];
  while (std::fgets(buf, sizeof buf, pipe) != nullptr) out += buf;
  pclose(pipe);
  const auto j = nlohmann::json::parse(out, nullptr, false);
  if (j.is_discarded() || !j.is_object() || !j.contains("step_ms")) {
    std::fprintf(stderr, "torch: %s; skipped\n",
                 j.is_object() && j.contains("error") ? j["error"].get<std::string>().c_str()
                                                      : "no result from gpt_torch.py");
    return std::nullopt;
  }
  std::fprintf(stderr, "torch %s, %s (%d threads, %s): fwd+bwd of the same shapes\n",
               j.value("torch", "?").c_str(), j.value("model", "?").c_str(), j.value("threads", 0),
               cuda ? "cuda" : "cpu");
  return median(j["step_ms"].get<std::vector<double>>());
}

// The --profile table: op kinds by total time, then what no op covers.
void print_profile(const std::vector<runtime::ops::OpTime>& profile, double step_ms) {
  std::printf("profiled step %.2f ms (events around every op)\n", step_ms);
  std::printf("  %-20s %10s %7s %7s\n", "op", "ms", "share", "count");
  double covered = 0;
  for (const runtime::ops::OpTime& t : profile) {
    std::printf("  %-20s %10.3f %6.1f%% %7d\n", t.op.c_str(), t.ms, 100.0 * t.ms / step_ms, t.count);
    covered += t.ms;
  }
  const double other = std::max(0.0, step_ms - covered);
  std::printf("  %-20s %10.3f %6.1f%%\n", "other", other, 100.0 * other / step_ms);
}

}  // namespace

void bench_gpt(const GptBenchOptions& o) {
  const models::ModelSpecPtr spec = o.model.empty() ? models::model_preset(o.preset) : models::model_from_path(o.model);
  const DType dtype = parse_dtype(o.dtype);
  const int B = o.batch, T = o.seq_len;
  if (T > spec->max_positions()) {
    throw Error(fmt::format("--seq-len {} is longer than the model's longest sequence ({} {})", T,
                            spec->max_positions_key(), spec->max_positions()));
  }
  const models::ModelLayout layout = spec->layout();
  const std::uint64_t es = dtype_size(dtype);
  const std::uint64_t BT = static_cast<std::uint64_t>(B) * static_cast<std::uint64_t>(T);
  const std::uint64_t C = static_cast<std::uint64_t>(spec->hidden_size());
  const std::uint64_t params_bytes = 2 * layout.total_numel() * es;  // params + grads
  const std::uint64_t act_bytes =
      spec->activation_bytes({.dtype = dtype, .checkpointing = o.checkpointing}, B, T);
  const std::uint64_t gemm_bytes = (BT * C + 4 * C * C + BT * 4 * C) * es * 2;
  runtime::device::DeviceOptions device_options = resolve_device_options(o.device);
  if (o.device.device_memory.empty()) {
    // Without --device-memory the arena is sized to what the step needs (the host "device"
    // would otherwise default to 512 MiB, a stand-in for a small GPU).
    device_options.memory_bytes = params_bytes + std::max(act_bytes, gemm_bytes) + (64ull << 20);
  }
  auto device = runtime::device::Device::create(device_options);
  auto stream = device->create_stream("compute");

  std::fprintf(stderr,
               "strata bench gpt: %s (%lld params), B=%d T=%d %s%s on %s; params+grads %s, "
               "activations %s\n",
               o.model.empty() ? o.preset.c_str() : o.model.c_str(),
               static_cast<long long>(spec->num_params()), B, T,
               std::string(dtype_name(dtype)).c_str(), o.checkpointing ? " checkpointed" : "",
               device->name().c_str(), format_bytes(params_bytes).c_str(),
               format_bytes(act_bytes).c_str());

  double step_ms = 0, gemm_tflops = 0, profiled_ms = 0;
  std::vector<float> losses;  // every step's, the warm-up's included
  std::vector<runtime::ops::OpTime> profile;
  {
    runtime::params::ResidentParams params(*device, layout.module_numels(), layout.module_names(), dtype,
                                   true);
    for (std::size_t m = 0; m < layout.modules.size(); ++m) {
      std::vector<float> host(layout.modules[m].numel);
      spec->init_module(layout.modules[m], 1234, host.data());
      models::copy_to_device(*stream, params.params(static_cast<int>(m)), dtype, host.data(),
                             host.size());
    }
    const std::unique_ptr<models::Model> model_ptr =
        spec->make_model({.dtype = dtype, .checkpointing = o.checkpointing}, *device, *stream, params);
    models::Model& model = *model_ptr;
    std::mt19937 rng(7);
    std::vector<std::int32_t> in(BT), tg(BT);
    for (auto& x : in) x = static_cast<std::int32_t>(rng() % static_cast<unsigned>(spec->vocab_size()));
    for (auto& x : tg) x = static_cast<std::int32_t>(rng() % static_cast<unsigned>(spec->vocab_size()));
    std::vector<double> times;
    for (int s = 0; s <= o.steps; ++s) {
      const auto t0 = Clock::now();
      params.zero_grads(*stream);
      const float loss = model.forward(in.data(), tg.data(), B, T, true);
      model.backward();
      stream->synchronize();
      const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
      std::fprintf(stderr, "  step %d: %.1f ms, loss %.4f%s\n", s, ms, loss, s == 0 ? " (warm-up)" : "");
      if (s > 0) times.push_back(ms);
      losses.push_back(loss);
    }
    // The same inputs every step and no update: a loss that is not finite is a kernel that is
    // wrong at this shape, and its speed means nothing.
    if (!std::all_of(losses.begin(), losses.end(), [](float l) { return std::isfinite(l); })) {
      std::string list;
      for (float l : losses) list += fmt::format("{}{}", list.empty() ? "" : ", ", l);
      throw Error(fmt::format("bench gpt: a loss is not finite (losses {})", list), device->name(),
                  "run the kernel tests of this device (ctest -L cuda) to find the op");
    }
    step_ms = median(times);
    if (o.profile) {
      runtime::ops::OpProfiler profiler(*device, *stream);
      const auto t0 = Clock::now();
      params.zero_grads(*stream);
      model.forward(in.data(), tg.data(), B, T, true);
      model.backward();
      stream->synchronize();
      profiled_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
      profile = profiler.collect();
    }
  }
  {
    // The limit, after the model's memory is back in the arena.
    runtime::device::DeviceBuffer x = device->allocate(BT * C * es, "gemm input");
    runtime::device::DeviceBuffer w = device->allocate(4 * C * C * es, "gemm weight");
    runtime::device::DeviceBuffer y = device->allocate(BT * 4 * C * es, "gemm output");
    runtime::device::DeviceBuffer dx = device->allocate(BT * C * es, "gemm dinput");
    runtime::device::DeviceBuffer dw = device->allocate(4 * C * C * es, "gemm dweight");
    for (runtime::device::DeviceBuffer* b : {&x, &w, &y, &dx, &dw}) stream->memset_async(b->data(), 0, b->bytes());
    const auto N = static_cast<std::int64_t>(BT);
    const int c = spec->hidden_size();
    auto gemm_round = [&] {
      runtime::ops::matmul_fwd(*stream, y.data(), x.data(), w.data(), nullptr, N, c, 4 * c, dtype);
      runtime::ops::matmul_bwd(*stream, dx.data(), dw.data(), nullptr, y.data(), x.data(), w.data(),
                               N, c, 4 * c, dtype);
    };
    gemm_round();  // warm-up
    stream->synchronize();
    std::vector<double> times;
    for (int s = 0; s < std::max(3, o.steps); ++s) {
      const auto t0 = Clock::now();
      gemm_round();
      stream->synchronize();
      times.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
    }
    const double flops = 6.0 * static_cast<double>(BT) * static_cast<double>(C) * 4.0 * static_cast<double>(C);
    gemm_tflops = flops / median(times) / 1e12;
  }

  std::optional<double> torch_ms;
  if (o.torch) {
    if (const auto* gpt = dynamic_cast<const models::GptSpec*>(spec.get())) {
      torch_ms = torch_step_ms(o, gpt->config(), device->backend() == runtime::device::Backend::cuda,
                               omp_get_max_threads());
    } else {
      std::fprintf(stderr, "torch: gpt_torch.py builds GPT-2 models only; skipped for %s\n",
                   spec->architecture().c_str());
    }
  }

  const double layers = static_cast<double>(layout.modules.size() - 2);
  const double flops_per_token = 6.0 * static_cast<double>(spec->num_params()) + 12.0 * layers * static_cast<double>(C) * T;
  const double tokens_per_s = static_cast<double>(BT) / (step_ms / 1e3);
  const double tflops = flops_per_token * tokens_per_s / 1e12;
  const double ratio = tflops / gemm_tflops;
  if (o.json) {
    nlohmann::ordered_json j;
    j["model"] = o.model.empty() ? o.preset : o.model;
    j["params"] = spec->num_params();
    j["device"] = device->name();
    j["dtype"] = std::string(dtype_name(dtype));
    j["batch"] = B;
    j["seq_len"] = T;
    j["checkpointing"] = o.checkpointing;
    j["step_ms"] = step_ms;
    j["losses"] = losses;
    j["tokens_per_s"] = tokens_per_s;
    j["tflops"] = tflops;
    j["gemm_tflops"] = gemm_tflops;
    j["ratio_to_gemm"] = ratio;
    if (torch_ms) {
      j["torch_step_ms"] = *torch_ms;
      j["speedup_vs_torch"] = *torch_ms / step_ms;
    }
    if (o.profile) {
      j["profiled_step_ms"] = profiled_ms;
      nlohmann::ordered_json rows = nlohmann::ordered_json::array();
      for (const runtime::ops::OpTime& t : profile) {
        rows.push_back({{"op", t.op}, {"count", t.count}, {"ms", t.ms}, {"share", t.ms / profiled_ms}});
      }
      j["profile"] = rows;
    }
    std::printf("%s\n", j.dump().c_str());
  } else {
    std::printf("fwd+bwd %.1f ms (median of %d), %.0f tokens/s, %.3f TFLOPS; the c_fc GEMM alone "
                "%.3f TFLOPS; ratio %.2f\n",
                step_ms, o.steps, tokens_per_s, tflops, gemm_tflops, ratio);
    if (torch_ms) {
      std::printf("torch fwd+bwd %.1f ms: strata is %.2fx torch's speed\n", *torch_ms,
                  *torch_ms / step_ms);
    }
    if (o.profile) print_profile(profile, profiled_ms);
  }
}

}  // namespace strata::tools
