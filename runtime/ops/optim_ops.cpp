#include "runtime/ops/optim_ops.h"

#include "core/cpu_features.h"
#include "core/error.h"
#include "cpu_adam/grad_ops.h"

namespace strata::runtime::ops {
namespace {

void require_host(const Stream& s, const char* op) {
  if (s.native_handle() != nullptr) {
    throw Error(std::string("the optimizer op ") + op + " has no CUDA kernel yet",
                "zero_optimization.offload_optimizer.device",
                "keep the optimizer states on the host: set offload_optimizer.device to \"cpu\" or "
                "\"nvme\" (and ratio 1)");
  }
}

}  // namespace

void accumulate_grads(Stream& s, float* acc, const void* x, DType dtype, std::size_t n, int threads) {
  require_host(s, "accumulate_grads");
  s.host_task([=] { cpu_adam::accumulate_grads(active_simd(), threads, acc, x, dtype, n); },
              "accumulate grads");
}

void grad_sq_norm(Stream& s, const float* x, std::size_t n, float scale, double* out, int threads) {
  require_host(s, "grad_sq_norm");
  s.host_task([=] { *out = cpu_adam::grad_sq_norm(active_simd(), threads, x, DType::f32, n, scale); },
              "grad norm");
}

void all_finite(Stream& s, const float* x, std::size_t n, bool* out, int threads) {
  require_host(s, "all_finite");
  s.host_task([=] { *out = cpu_adam::all_finite(active_simd(), threads, x, DType::f32, n); },
              "finite check");
}

void adam_step(Stream& s, const cpu_adam::AdamHyper& hyper, std::int64_t step,
               const cpu_adam::AdamShard& shard, float grad_scale, int threads) {
  require_host(s, "adam_step");
  s.host_task([=] { cpu_adam::adam_step(active_simd(), threads, hyper, step, shard, grad_scale); },
              "adam");
}

}  // namespace strata::runtime::ops
