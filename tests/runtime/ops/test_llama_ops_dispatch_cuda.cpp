// runtime/ops's LLaMA-family ops (rmsnorm, rope, swiglu) on the CUDA backend against the host
// backend, through the Stream API only: the CUDA branch of each op reaches its launcher with
// the arguments in order. Tolerances of test_kernels_cuda.cpp (norm-wise: fp32 1e-4, bf16
// 1.5e-2, fp16 3e-3; rstd 1e-4). Exits 77 (skipped) where no GPU is usable.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "llama_ops_sequence.h"

namespace strata::runtime::llama_test {
namespace {

double norm_rel(const Bytes& got, const Bytes& want, DType t) {
  const std::size_t n = want.size() / dtype_size(t);
  std::vector<float> g(n), w(n);
  convert(got.data(), t, g.data(), DType::f32, n);
  convert(want.data(), t, w.data(), DType::f32, n);
  double d2 = 0, w2 = 0;
  for (std::size_t i = 0; i < n; ++i) {
    d2 += (double{g[i]} - w[i]) * (double{g[i]} - w[i]);
    w2 += double{w[i]} * w[i];
  }
  return std::sqrt(d2 / w2);  // NaN fails every <= below
}

TEST(LlamaOpsDispatchCuda, CudaBackendTracksTheHostBackend) {
  for (DType t : {DType::f32, DType::bf16, DType::f16}) {
    const Inputs in(t);
    auto host = device::Device::create({.kind = "host", .memory_bytes = 16 << 20});
    auto cuda = device::Device::create({.kind = "cuda", .memory_bytes = 16 << 20});
    auto hs = host->create_stream("compute");
    auto cs = cuda->create_stream("compute");
    const Outputs want = run_sequence(*host, *hs, in), got = run_sequence(*cuda, *cs, in);
    const double tol = t == DType::f32 ? 1e-4 : (t == DType::bf16 ? 1.5e-2 : 3e-3);
    const struct {
      const char* name;
      const Bytes& got;
      const Bytes& want;
      DType dtype;
      double tol;
    } rows[] = {{"rmsnorm out", got.out, want.out, t, tol},
                {"rmsnorm rstd", got.rstd, want.rstd, DType::f32, 1e-4},
                {"rmsnorm dinp", got.dinp, want.dinp, t, tol},
                {"rmsnorm dweight", got.dw, want.dw, t, tol},
                {"rope qkv", got.qkv, want.qkv, t, tol},
                {"rope dqkv", got.dqkv, want.dqkv, t, tol},
                {"swiglu out", got.swi_out, want.swi_out, t, tol},
                {"swiglu dgate_up", got.dgate_up, want.dgate_up, t, tol}};
    for (const auto& r : rows) {
      ASSERT_EQ(r.got.size(), r.want.size()) << r.name;
      const double e = norm_rel(r.got, r.want, r.dtype);
      std::printf("  %s %-16s cuda vs host: norm_rel %.2e (tol %.0e)\n",
                  std::string(dtype_name(t)).c_str(), r.name, e, r.tol);
      EXPECT_LE(e, r.tol) << r.name << " " << dtype_name(t);
    }
  }
}

}  // namespace
}  // namespace strata::runtime::llama_test
