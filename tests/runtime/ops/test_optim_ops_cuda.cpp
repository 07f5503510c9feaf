// runtime/ops/optim_ops.h on the CUDA backend against the host backend (which runs cpu_adam):
// the ZeRO engine's optimizer sequence for a device-resident state, through the Stream API only
// (device_scratch, the copies of the results to host memory):
//   acc = 0; acc += g1 (bf16); acc += g2 (bf16); acc += g3 (f32)
//   norm of acc * 1/1024, finite check; Adam / AdamW steps with params_out bf16 / f16 or none;
//   then an Inf in acc: the finite check says 0
// Grad ops: identical bits. Adam: at most 1 ulp per element (kernels/cuda/adamw.h's contract;
// expected 0, and printed).
// Exits 77 (skipped) where no GPU is usable.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "cpu_adam/adam.h"
#include "runtime/device/device.h"
#include "runtime/ops/optim_ops.h"

namespace strata::runtime {
namespace {

// Odd: 50 chunks of 4096 and a partial one, with a tail that is not a multiple of 16.
constexpr std::size_t kN = 50 * 4096 + 1237;

std::vector<float> random_floats(std::size_t n, std::uint32_t seed, float lo, float hi) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

std::vector<unsigned char> to_dtype(const std::vector<float>& v, DType t) {
  std::vector<unsigned char> out(v.size() * dtype_size(t));
  convert(v.data(), DType::f32, out.data(), t, v.size());
  return out;
}

struct Outcome {
  std::vector<float> acc;
  double sq_norm = -1.0;
  int finite = -1;
  int finite_after_inf = -1;
  std::vector<float> params, exp_avg, exp_avg_sq;
  std::vector<std::uint16_t> params_out;
};

// The sequence on one backend. out_dtype f32 = no params_out.
Outcome run(const std::string& kind, cpu_adam::AdamMode mode, DType out_dtype) {
  auto device = device::Device::create({.kind = kind, .memory_bytes = 256 << 20});
  auto s = device->create_stream("optim");
  const std::size_t n = kN;
  const std::vector<unsigned char> g1 = to_dtype(random_floats(n, 1, -3.0f, 3.0f), DType::bf16);
  const std::vector<unsigned char> g2 = to_dtype(random_floats(n, 2, -0.5f, 0.5f), DType::bf16);
  const std::vector<float> g3 = random_floats(n, 3, -1e-3f, 1e-3f);
  const std::vector<float> params0 = random_floats(n, 4, -1.0f, 1.0f);

  device::DeviceBuffer acc = device->allocate(n * 4, "acc");
  device::DeviceBuffer grad16 = device->allocate(n * 2, "grad16");
  device::DeviceBuffer grad32 = device->allocate(n * 4, "grad32");
  device::DeviceBuffer params = device->allocate(n * 4, "params");
  device::DeviceBuffer m = device->allocate(n * 4, "exp_avg");
  device::DeviceBuffer v = device->allocate(n * 4, "exp_avg_sq");
  device::DeviceBuffer out16 = device->allocate(n * 2, "params_out");
  device::DeviceBuffer scratch = device->allocate(ops::optim_scratch_bytes(n), "scratch");

  Outcome o;
  s->memset_async(acc.data(), 0, n * 4);
  s->copy_async(grad16.data(), g1.data(), n * 2);
  ops::accumulate_grads(*s, acc.as<float>(), grad16.data(), DType::bf16, n, 0);
  s->copy_async(grad16.data(), g2.data(), n * 2);
  ops::accumulate_grads(*s, acc.as<float>(), grad16.data(), DType::bf16, n, 0);
  s->copy_async(grad32.data(), g3.data(), n * 4);
  ops::accumulate_grads(*s, acc.as<float>(), grad32.data(), DType::f32, n, 0);
  ops::grad_sq_norm(*s, acc.as<float>(), n, 1.0f / 1024.0f, &o.sq_norm, scratch.data(), 0);
  ops::all_finite(*s, acc.as<float>(), n, &o.finite, scratch.data(), 0);

  s->copy_async(params.data(), params0.data(), n * 4);
  s->memset_async(m.data(), 0, n * 4);
  s->memset_async(v.data(), 0, n * 4);
  cpu_adam::AdamHyper hyper;
  hyper.lr = 1e-2f;
  hyper.weight_decay = 0.1f;
  hyper.mode = mode;
  cpu_adam::AdamShard shard;
  shard.params = params.as<float>();
  shard.grads = acc.data();
  shard.grad_dtype = DType::f32;
  shard.exp_avg = m.as<float>();
  shard.exp_avg_sq = v.as<float>();
  shard.numel = n;
  if (out_dtype != DType::f32) {
    shard.params_out = out16.data();
    shard.out_dtype = out_dtype;
  }
  for (std::int64_t step = 1; step <= 3; ++step)
    ops::adam_step(*s, hyper, step, shard, 0.5f / static_cast<float>(step), 0);

  o.acc.resize(n);
  o.params.resize(n);
  o.exp_avg.resize(n);
  o.exp_avg_sq.resize(n);
  o.params_out.resize(n);
  s->copy_async(o.acc.data(), acc.data(), n * 4);
  s->copy_async(o.params.data(), params.data(), n * 4);
  s->copy_async(o.exp_avg.data(), m.data(), n * 4);
  s->copy_async(o.exp_avg_sq.data(), v.data(), n * 4);
  if (out_dtype != DType::f32) s->copy_async(o.params_out.data(), out16.data(), n * 2);

  const float inf = std::numeric_limits<float>::infinity();
  s->copy_async(acc.as<float>() + n - 1, &inf, 4);
  ops::all_finite(*s, acc.as<float>(), n, &o.finite_after_inf, scratch.data(), 0);
  s->synchronize();
  return o;
}

std::uint32_t bits(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

std::uint64_t bits(double d) {
  std::uint64_t u;
  std::memcpy(&u, &d, 8);
  return u;
}

// Distance in representable floats (same sign assumed near equality; 0 when equal bits).
std::int64_t ulps(float a, float b) {
  if (bits(a) == bits(b)) return 0;
  auto key = [](float x) {
    const std::int64_t u = bits(x);
    return (u & 0x80000000) ? -(u & 0x7FFFFFFF) : u;
  };
  return std::llabs(key(a) - key(b));
}

std::int64_t ulps16(std::uint16_t a, std::uint16_t b) {
  auto key = [](std::uint16_t x) -> std::int64_t { return (x & 0x8000) ? -(x & 0x7FFF) : x; };
  return std::llabs(key(a) - key(b));
}

std::int64_t max_ulps(const std::vector<float>& a, const std::vector<float>& b) {
  std::int64_t worst = 0;
  for (std::size_t i = 0; i < a.size(); ++i) worst = std::max(worst, ulps(a[i], b[i]));
  return worst;
}

TEST(OptimOpsCuda, SameResultsAsTheHostBackend) {
  struct Case {
    cpu_adam::AdamMode mode;
    DType out;
  };
  for (const Case c : {Case{cpu_adam::AdamMode::adamw, DType::bf16},
                       Case{cpu_adam::AdamMode::adam, DType::f16},
                       Case{cpu_adam::AdamMode::adamw, DType::f32}}) {
    SCOPED_TRACE(testing::Message() << (c.mode == cpu_adam::AdamMode::adamw ? "adamw" : "adam")
                                    << " params_out " << dtype_name(c.out));
    const Outcome host = run("host", c.mode, c.out);
    const Outcome cuda = run("cuda", c.mode, c.out);

    ASSERT_EQ(std::memcmp(host.acc.data(), cuda.acc.data(), kN * 4), 0) << "accumulate_grads";
    EXPECT_GT(host.sq_norm, 0.0);
    EXPECT_EQ(bits(cuda.sq_norm), bits(host.sq_norm))
        << "grad_sq_norm: cuda " << cuda.sq_norm << " host " << host.sq_norm;
    EXPECT_EQ(host.finite, 1);
    EXPECT_EQ(cuda.finite, 1);
    EXPECT_EQ(host.finite_after_inf, 0);
    EXPECT_EQ(cuda.finite_after_inf, 0);

    const std::int64_t p = max_ulps(host.params, cuda.params);
    const std::int64_t m = max_ulps(host.exp_avg, cuda.exp_avg);
    const std::int64_t v = max_ulps(host.exp_avg_sq, cuda.exp_avg_sq);
    std::int64_t o = 0;
    if (c.out != DType::f32)
      for (std::size_t i = 0; i < kN; ++i)
        o = std::max(o, ulps16(host.params_out[i], cuda.params_out[i]));
    std::printf("adam steps: max ulp params %lld exp_avg %lld exp_avg_sq %lld params_out %lld\n",
                static_cast<long long>(p), static_cast<long long>(m), static_cast<long long>(v),
                static_cast<long long>(o));
    EXPECT_LE(p, 1);
    EXPECT_LE(m, 1);
    EXPECT_LE(v, 1);
    EXPECT_LE(o, 1);
  }
}

// Bad hyper-parameters throw from the call itself on CUDA (from synchronize() on the host).
TEST(OptimOpsCuda, BadHyperParametersThrow) {
  auto device = device::Device::create({.kind = "cuda", .memory_bytes = 64 << 20});
  auto s = device->create_stream("optim");
  device::DeviceBuffer buf = device->allocate(4 * 16, "buf");
  cpu_adam::AdamHyper hyper;
  hyper.beta1 = 1.0f;
  cpu_adam::AdamShard shard;
  shard.params = buf.as<float>();
  shard.grads = buf.data();
  shard.exp_avg = buf.as<float>();
  shard.exp_avg_sq = buf.as<float>();
  shard.numel = 16;
  EXPECT_THROW(ops::adam_step(*s, hyper, 1, shard, 1.0f, 0), Error);
  s->synchronize();
}

}  // namespace
}  // namespace strata::runtime
