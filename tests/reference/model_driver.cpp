// model_reference_driver: a strata model of any family (models/registry.h) on the host backend,
// driven by gpt_vs_torch.py and llama_vs_torch.py, which run the same model in PyTorch
// (gpt2_torch.py, llama_torch.py) and compare.
//
//   model_reference_driver --config CONFIG.json --weights W.safetensors --batch BATCH.safetensors
//       --steps S --lr LR --weight-decay WD --beta1 B1 --beta2 B2 --eps EPS
//       --out OUT.safetensors [--checkpointing] [--dtype fp32|bf16|fp16]
//
// CONFIG: an HF config.json of any supported architecture. W: its HF weights (F32/BF16/F16). BATCH: "inputs"
// and "targets", I32 (B, T). The run: forward at the initial weights (mean cross-entropy over
// all B*T tokens), backward, then S AdamW steps (torch.optim.AdamW semantics, one group with
// every parameter, fp32 master weights in host memory, the CPU Adam of cpu_adam/), each on the
// same batch, and a last forward. OUT (F32): "logits" (B, T, V) of the first forward;
// "losses" (S + 1) with losses[i] the loss after i updates; "grad.<name>" every parameter's
// gradient at the initial weights and "param.<name>" every parameter after S steps, both in
// HF's layout and names (no prefix). Exit 0, or 1 with the error on stderr.
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "core/error.h"
#include "cpu_adam/adam.h"
#include "models/hf_weights.h"
#include "models/registry.h"
#include "models/model_parts.h"
#include "models/io/safetensors.h"
#include "runtime/device/device.h"
#include "runtime/params/resident_params.h"

namespace {

using namespace strata;
using namespace strata::models;

struct Args {
  std::string config, weights, batch, out, dtype = "fp32";
  int steps = 5;
  float lr = 1e-3f, weight_decay = 0.0f, beta1 = 0.9f, beta2 = 0.999f, eps = 1e-8f;
  bool checkpointing = false;
};

std::vector<std::int32_t> read_tokens(const SafetensorsFile& file, const char* name, int* B,
                                      int* T) {
  const TensorInfo* info = file.find(name);
  if (info == nullptr || info->dtype != TensorDType::i32 || info->shape.size() != 2) {
    throw Error(fmt::format("the batch needs \"{}\" as I32 (B, T)", name), file.path());
  }
  *B = static_cast<int>(info->shape[0]);
  *T = static_cast<int>(info->shape[1]);
  std::vector<std::int32_t> tokens(info->numel);
  std::memcpy(tokens.data(), file.bytes(*info).data(), info->numel * sizeof(std::int32_t));
  return tokens;
}

int run(const Args& a) {
  const ModelSpecPtr spec = model_from_path(a.config);
  const DType dtype = parse_dtype(a.dtype);
  const HfWeightsReader reader(a.weights, *spec);
  const ModelLayout& layout = reader.layout();
  const SafetensorsFile batch = SafetensorsFile::open(a.batch);
  int B = 0, T = 0, B2 = 0, T2 = 0;
  const auto inputs = read_tokens(batch, "inputs", &B, &T);
  const auto targets = read_tokens(batch, "targets", &B2, &T2);
  if (B != B2 || T != T2) throw Error("inputs and targets differ in shape", a.batch);

  auto device = runtime::device::Device::create({.kind = "host", .memory_bytes = 2ull << 30});
  auto stream = device->create_stream("compute");
  runtime::params::ResidentParams params(*device, layout.module_numels(), layout.module_names(), dtype,
                                 true);
  const std::size_t M = layout.modules.size();
  std::vector<std::vector<float>> master(M), grads(M), exp_avg(M), exp_avg_sq(M), grads0(M);
  for (std::size_t m = 0; m < M; ++m) {
    const std::size_t n = layout.modules[m].numel;
    master[m].resize(n);
    grads[m].resize(n);
    exp_avg[m].assign(n, 0.0f);
    exp_avg_sq[m].assign(n, 0.0f);
    reader.read_module(static_cast<int>(m), master[m].data());
    copy_to_device(*stream, params.params(static_cast<int>(m)), dtype, master[m].data(), n);
  }
  const std::unique_ptr<Model> model_ptr =
      spec->make_model({.dtype = dtype, .checkpointing = a.checkpointing}, *device, *stream, params);
  Model& model = *model_ptr;

  // The CPU Adam as the engine drives it: adam_step with the 1-based step, the best variant
  // of this CPU, the threads of the affinity mask.
  const cpu_adam::AdamHyper hyper{.lr = a.lr, .beta1 = a.beta1, .beta2 = a.beta2, .eps = a.eps,
                                  .weight_decay = a.weight_decay,
                                  .mode = cpu_adam::AdamMode::adamw};
  std::vector<float> logits(static_cast<std::size_t>(B) * static_cast<std::size_t>(T) *
                            static_cast<std::size_t>(spec->vocab_size()));
  std::vector<float> losses;
  for (int step = 0; step < a.steps; ++step) {
    params.zero_grads(*stream);
    losses.push_back(model.forward(inputs.data(), targets.data(), B, T, true,
                                   step == 0 ? logits.data() : nullptr));
    model.backward();
    stream->synchronize();
    for (std::size_t m = 0; m < M; ++m) {
      const auto mi = static_cast<int>(m);
      copy_from_device(*stream, grads[m].data(), params.grads(mi), dtype, grads[m].size());
      if (step == 0) grads0[m] = grads[m];
      cpu_adam::adam_step(active_simd(), 0, hyper, step + 1,
                          {.params = master[m].data(), .grads = grads[m].data(),
                           .grad_dtype = DType::f32, .exp_avg = exp_avg[m].data(),
                           .exp_avg_sq = exp_avg_sq[m].data(), .numel = master[m].size()},
                          1.0f);
      copy_to_device(*stream, params.params(mi), dtype, master[m].data(), master[m].size());
    }
  }
  // A training forward: its loss is the training loss (with a mixture of experts' load-balancing
  // term when the config asks, as the torch side's), where an evaluation forward's is the
  // cross-entropy alone (models/model.h).
  losses.push_back(model.forward(inputs.data(), targets.data(), B, T, true,
                                 a.steps == 0 ? logits.data() : nullptr));
  if (a.steps == 0) {  // gradients at the initial weights still wanted
    params.zero_grads(*stream);
    model.forward(inputs.data(), targets.data(), B, T, true);
    model.backward();
    stream->synchronize();
    for (std::size_t m = 0; m < M; ++m) {
      grads0[m].resize(master[m].size());
      copy_from_device(*stream, grads0[m].data(), params.grads(static_cast<int>(m)), dtype,
                       grads0[m].size());
    }
  }

  SafetensorsWriter out;
  std::vector<std::vector<float>> keep;  // the writer borrows until write()
  out.add("logits", TensorDType::f32, {B, T, spec->vocab_size()}, logits.data());
  out.add("losses", TensorDType::f32, {static_cast<std::int64_t>(losses.size())}, losses.data());
  for (std::size_t m = 0; m < M; ++m) {
    for (const TensorSlot& t : layout.modules[m].tensors) {
      std::vector<std::int64_t> shape = t.shape;
      if (t.hf_transposed) std::swap(shape[0], shape[1]);
      keep.push_back(to_hf_layout(t, grads0[m].data()));
      out.add("grad." + t.name, TensorDType::f32, shape, keep.back().data());
      keep.push_back(to_hf_layout(t, master[m].data()));
      out.add("param." + t.name, TensorDType::f32, shape, keep.back().data());
    }
  }
  out.write(a.out);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  CLI::App app("a strata model for the PyTorch comparisons (tests/reference/*_vs_torch.py)");
  app.add_option("--config", a.config)->required();
  app.add_option("--weights", a.weights)->required();
  app.add_option("--batch", a.batch)->required();
  app.add_option("--out", a.out)->required();
  app.add_option("--steps", a.steps)->check(CLI::NonNegativeNumber);
  app.add_option("--lr", a.lr);
  app.add_option("--weight-decay", a.weight_decay);
  app.add_option("--beta1", a.beta1);
  app.add_option("--beta2", a.beta2);
  app.add_option("--eps", a.eps);
  app.add_option("--dtype", a.dtype);
  app.add_flag("--checkpointing", a.checkpointing);
  CLI11_PARSE(app, argc, argv);
  try {
    return run(a);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "model_reference_driver: %s\n", e.what());
    return 1;
  }
}
