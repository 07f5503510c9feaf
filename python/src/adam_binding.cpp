// strata._strata's optimizer kernels: cpu_adam's Adam step and gradient helpers on tensors
// handed over by DLPack. The Python side (strata/optim.py, strata/offload.py) keeps the
// states and the step count; this file only checks the tensors and releases the GIL, so that
// backward (or another Python thread) runs while strata's OpenMP threads update.
#include <nanobind/nanobind.h>
#include <nanobind/stl/optional.h>

#include <cmath>

#include <fmt/format.h>

#include "core/cpu_features.h"
#include "core/error.h"
#include "cpu_adam/adam.h"
#include "cpu_adam/grad_ops.h"
#include "tensor_view.h"

namespace nb = nanobind;

namespace strata::py {
namespace {

// The per-step scalars from double hyper-parameters, as torch.optim.Adam / AdamW computes
// them (Python floats are doubles; each scalar reaches the fp32 kernel rounded once): 1 - beta2
// from the double beta2, not from its float (which would differ by 1.3e-5 relative at 0.999).
cpu_adam::AdamScalars torch_scalars(double lr, double beta1, double beta2, double eps,
                                    double weight_decay, bool adamw, bool bias_correction,
                                    std::int64_t step, double grad_scale) {
  auto bad = [](const char* field, double value, const char* rule) {
    return Error(fmt::format("Adam hyper-parameter {} = {} is invalid: it must be {}", field,
                             value, rule),
                 fmt::format("optimizer hyper-parameter '{}'", field),
                 "fix the optimizer's arguments or its param group");
  };
  if (!(std::isfinite(lr) && lr >= 0)) throw bad("lr", lr, "finite and >= 0");
  if (!(beta1 >= 0 && beta1 < 1)) throw bad("beta1", beta1, "in [0, 1)");
  if (!(beta2 >= 0 && beta2 < 1)) throw bad("beta2", beta2, "in [0, 1)");
  if (!(std::isfinite(eps) && eps > 0)) throw bad("eps", eps, "finite and > 0");
  if (!(std::isfinite(weight_decay) && weight_decay >= 0))
    throw bad("weight_decay", weight_decay, "finite and >= 0");
  if (step < 1) throw Error(fmt::format("step {} is below 1", step), "adam_step", "steps count from 1");
  double step_size = lr;
  double bc2_sqrt = 1.0;
  if (bias_correction) {
    const auto t = static_cast<double>(step);
    step_size = lr / (1.0 - std::pow(beta1, t));
    bc2_sqrt = std::sqrt(1.0 - std::pow(beta2, t));
  }
  cpu_adam::AdamScalars s{};
  s.grad_scale = static_cast<float>(grad_scale);
  s.beta1 = static_cast<float>(beta1);
  s.one_minus_beta1 = static_cast<float>(1.0 - beta1);
  s.beta2 = static_cast<float>(beta2);
  s.one_minus_beta2 = static_cast<float>(1.0 - beta2);
  s.step_size = static_cast<float>(step_size);
  s.bc2_sqrt = static_cast<float>(bc2_sqrt);
  s.eps = static_cast<float>(eps);
  s.has_l2 = !adamw && weight_decay != 0.0;
  s.l2 = s.has_l2 ? static_cast<float>(weight_decay) : 0.0f;
  s.has_decay = adamw && weight_decay != 0.0;
  s.decay = s.has_decay ? static_cast<float>(1.0 - lr * weight_decay) : 1.0f;
  return s;
}

void adam_step_py(MutArray params, AnyArray grads, MutArray exp_avg, MutArray exp_avg_sq,
                  std::int64_t step, double lr, double beta1, double beta2, double eps,
                  double weight_decay, bool adamw, bool bias_correction, double grad_scale,
                  int threads, std::optional<MutArray> params_out) {
  const TensorView p = float_view(params, "params");
  const TensorView g = float_view(grads, "grads");
  const TensorView m = float_view(exp_avg, "exp_avg");
  const TensorView v = float_view(exp_avg_sq, "exp_avg_sq");
  require_dtype(p, DType::f32, "params (the fp32 master weights)");
  require_dtype(m, DType::f32, "exp_avg");
  require_dtype(v, DType::f32, "exp_avg_sq");
  require_same_numel(g, p, "grads", "params");
  require_same_numel(m, p, "exp_avg", "params");
  require_same_numel(v, p, "exp_avg_sq", "params");
  if (threads < 0) throw Error("threads is negative", "adam_step", "pass 0 for every CPU");
  // Before anything is written: nothing half-updated.
  const cpu_adam::AdamScalars scalars = torch_scalars(lr, beta1, beta2, eps, weight_decay, adamw,
                                                      bias_correction, step, grad_scale);
  cpu_adam::AdamShard shard;
  shard.params = reinterpret_cast<float*>(p.data);
  shard.grads = g.data;
  shard.grad_dtype = *g.dtype;
  shard.exp_avg = reinterpret_cast<float*>(m.data);
  shard.exp_avg_sq = reinterpret_cast<float*>(v.data);
  shard.numel = p.numel;
  if (params_out) {
    const TensorView o = float_view(*params_out, "params_out");
    if (o.dtype == DType::f32) {
      throw Error("params_out is float32", "adam_step",
                  "params_out is for bf16 / fp16 copies; leave it out for fp32 parameters");
    }
    require_same_numel(o, p, "params_out", "params");
    shard.params_out = o.data;
    shard.out_dtype = *o.dtype;
  }
  if (p.numel == 0) return;
  nb::gil_scoped_release release;
  cpu_adam::adam_step(active_simd(), threads, scalars, shard);
}

double grad_sq_norm_py(AnyArray grads, float scale, int threads) {
  const TensorView g = float_view(grads, "grads");
  nb::gil_scoped_release release;
  return cpu_adam::grad_sq_norm(active_simd(), threads, g.data, *g.dtype, g.numel, scale);
}

bool all_finite_py(AnyArray grads, int threads) {
  const TensorView g = float_view(grads, "grads");
  nb::gil_scoped_release release;
  return cpu_adam::all_finite(active_simd(), threads, g.data, *g.dtype, g.numel);
}

// acc = grads (first) or acc += grads, in fp32 whatever the grads' dtype.
void accumulate_py(MutArray acc, AnyArray grads, bool first, int threads) {
  const TensorView a = float_view(acc, "accumulator");
  const TensorView g = float_view(grads, "grads");
  require_dtype(a, DType::f32, "accumulator");
  require_same_numel(g, a, "grads", "accumulator");
  nb::gil_scoped_release release;
  float* dst = reinterpret_cast<float*>(a.data);
  if (first) {
    cpu_adam::store_first_grads(active_simd(), threads, dst, g.data, *g.dtype, g.numel);
  } else {
    cpu_adam::accumulate_grads(active_simd(), threads, dst, g.data, *g.dtype, g.numel);
  }
}

// dst = src converted (fp32 <-> bf16 / fp16, round to nearest even), or copied (same dtype).
void convert_py(MutArray dst, AnyArray src) {
  const TensorView d = float_view(dst, "dst");
  const TensorView s = float_view(src, "src");
  require_same_numel(s, d, "src", "dst");
  nb::gil_scoped_release release;
  convert(s.data, *s.dtype, d.data, *d.dtype, s.numel);
}

}  // namespace

void bind_adam(nb::module_& m) {
  m.def("adam_step", &adam_step_py, nb::arg("params"), nb::arg("grads"), nb::arg("exp_avg"),
        nb::arg("exp_avg_sq"), nb::arg("step"), nb::arg("lr"), nb::arg("beta1"),
        nb::arg("beta2"), nb::arg("eps"), nb::arg("weight_decay"), nb::arg("adamw"),
        nb::arg("bias_correction"), nb::arg("grad_scale") = 1.0, nb::arg("threads") = 0,
        nb::arg("params_out") = nb::none(),
        "One Adam/AdamW step of cpu_adam on contiguous host tensors (fp32 params and states; "
        "grads fp32/bf16/fp16; optional bf16/fp16 copy of the new params). Releases the GIL.");
  m.def("grad_sq_norm", &grad_sq_norm_py, nb::arg("grads"), nb::arg("scale") = 1.0f,
        nb::arg("threads") = 0, "Squared L2 norm of grads * scale in double, deterministic.");
  m.def("all_finite", &all_finite_py, nb::arg("grads"), nb::arg("threads") = 0);
  m.def("accumulate", &accumulate_py, nb::arg("acc"), nb::arg("grads"), nb::arg("first"),
        nb::arg("threads") = 0, "acc = grads (first) or acc += grads, in fp32.");
  m.def("convert", &convert_py, nb::arg("dst"), nb::arg("src"),
        "dst = src, converted between fp32 / bf16 / fp16 with round-to-nearest-even.");
}

}  // namespace strata::py
