// The limits `python -m strata.bench` measures in the same run, as `strata bench adam` does:
// a kernel with the Adam step's memory traffic (read params, grads, exp_avg, exp_avg_sq; write
// params, exp_avg, exp_avg_sq) and almost no arithmetic, on the same threads. What the step
// cannot beat, so its ratio to this says how close to memory bandwidth it runs.
#include <omp.h>

#include <nanobind/nanobind.h>

#include "cpu_adam/adam.h"
#include "tensor_view.h"

namespace nb = nanobind;

namespace strata::py {
namespace {

void reference_kernel(MutArray params, AnyArray grads, MutArray exp_avg, MutArray exp_avg_sq,
                      int threads) {
  const TensorView p = float_view(params, "params");
  const TensorView g = float_view(grads, "grads");
  const TensorView m = float_view(exp_avg, "exp_avg");
  const TensorView v = float_view(exp_avg_sq, "exp_avg_sq");
  require_dtype(p, DType::f32, "params");
  require_dtype(g, DType::f32, "grads");
  require_same_numel(g, p, "grads", "params");
  require_same_numel(m, p, "exp_avg", "params");
  require_same_numel(v, p, "exp_avg_sq", "params");
  float* pp = reinterpret_cast<float*>(p.data);
  const float* gp = reinterpret_cast<const float*>(g.data);
  float* mp = reinterpret_cast<float*>(m.data);
  float* vp = reinterpret_cast<float*>(v.data);
  const auto n = static_cast<std::int64_t>(p.numel);
  const int team = threads > 0 ? threads : omp_get_num_procs();
  nb::gil_scoped_release release;
  // Contiguous blocks per thread, like cpu_adam's partition, so each thread streams its range.
#pragma omp parallel for schedule(static) num_threads(team)
  for (std::int64_t i = 0; i < n; ++i) {
    const float gi = gp[i];
    mp[i] = mp[i] + gi;
    vp[i] = vp[i] + gi;
    pp[i] = pp[i] - gi;
  }
}

}  // namespace

void bind_bench(nb::module_& m) {
  m.def("reference_kernel", &reference_kernel, nb::arg("params"), nb::arg("grads"),
        nb::arg("exp_avg"), nb::arg("exp_avg_sq"), nb::arg("threads") = 0,
        "The Adam step's memory traffic with no arithmetic to speak of: the bench's limit.");
}

}  // namespace strata::py
