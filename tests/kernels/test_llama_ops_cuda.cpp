// The CUDA LLaMA-family ops (kernels/cuda/ops.h: rmsnorm, rope, swiglu) against their host
// twins (kernels/host/{rmsnorm,rope,swiglu}.h, the oracle), for every dtype and shapes that are
// multiples of nothing (N 77, C 96, ...) as well as model-sized ones (N 1024 x C 4096; head sizes
// 24, 64 and 128 with grouped-query heads).
//
// Inputs are random, rounded to the dtype once, and fed to both sides. Each output in fp32:
//   norm_rel = ||cuda - host||_2 / ||host||_2   asserted <= tol(dtype)
//   max_abs  = max |cuda - host|                asserted <= 10 tol(dtype) max |host|
// tol: fp32 1e-4, bf16 1.5e-2, fp16 3e-3 (test_kernels_cuda.cpp's); rstd (fp32) 1e-4.
// Gradients that accumulate (+=) start from random values, overwritten ones from NaN.
// Bit-level checks where the two sides do the same fp32 operations:
//   - RMSNorm's HF roundings: out == rnd(w * rnd(x * rstd)) from the CUDA rstd, bit for bit;
//   - RMSNorm's dweight from one row (a single exact product): the host's bits;
//   - RoPE leaves v untouched, bit for bit;
//   - determinism: every op run twice from the same inputs gives the same bits.
//
// Exits 77 (skipped) where no GPU can be used (main_cuda_or_skip.cpp).
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "kernels/cuda/ops.h"
#include "kernels/host/rmsnorm.h"
#include "kernels/host/rope.h"
#include "kernels/host/swiglu.h"
#include "tests/kernels/cuda_test_util.h"

namespace strata {
namespace {

namespace host = kernels::host;
namespace dev = kernels::cuda;

using namespace test;  // tests/kernels/cuda_test_util.h
using Vec = std::vector<float>;

constexpr float kEps = 1e-5f;

// ---- data (besides cuda_test_util.h's) ----------------------------------------------------

Bytes nan_bytes(DType t, std::size_t n) {
  return to_bytes(Vec(n, std::numeric_limits<float>::quiet_NaN()), t);
}
Bytes f32_bytes(const Vec& v) { return to_bytes(v, DType::f32); }
float round_to(float x, DType t) { return to_floats(to_bytes(Vec{x}, t), t)[0]; }

std::string label(const char* op, DType t, const std::string& shape, const char* output) {
  return std::string(op) + " " + std::string(dtype_name(t)) + " " + shape + " " + output;
}

// ---- RMSNorm --------------------------------------------------------------------------------

TEST(LlamaOpsCuda, RmsNorm) {
  struct Shape { long long N; int C; };
  const Shape shapes[] = {{1, 1}, {7, 13}, {77, 96}, {1024, 4096}, {4099, 100}};
  Stream stream;
  for (DType t : kAllDTypes)
    for (const Shape& s : shapes) {
      const std::string shape = "N=" + std::to_string(s.N) + " C=" + std::to_string(s.C);
      const std::size_t n = static_cast<std::size_t>(s.N) * s.C;
      const Bytes inp = random_bytes(t, n, 1, -2.0f, 3.0f), w = random_bytes(t, s.C, 2, 0.5f, 1.5f);
      Bytes out(n * dtype_size(t));
      Vec rstd(static_cast<std::size_t>(s.N));
      host::rmsnorm_fwd(out.data(), rstd.data(), inp.data(), w.data(), s.N, s.C, kEps, t);
      DeviceBuffer d_inp(inp), d_w(w), d_out(nan_bytes(t, n)), d_rstd(rstd.size() * 4);
      dev::rmsnorm_fwd(d_out.get(), d_rstd.as<float>(), d_inp.get(), d_w.get(), s.N, s.C, kEps, t,
                       stream.s);
      const Bytes got_out = d_out.download(), got_rstd = d_rstd.download();
      check(label("rmsnorm_fwd", t, shape, "out"), got_out, out, t, tol_for(t));
      check(label("rmsnorm_fwd", t, shape, "rstd"), got_rstd, f32_bytes(rstd), DType::f32, kStatTol);

      // HF's roundings, bit for bit from the CUDA rstd: out = rnd(w * rnd(x * rstd)).
      {
        const Vec x = to_floats(inp, t), wf = to_floats(w, t), y = to_floats(got_out, t);
        const Vec rs = to_floats(got_rstd, DType::f32);
        std::size_t mismatches = 0;
        for (long long r = 0; r < s.N; ++r)
          for (int c = 0; c < s.C; ++c) {
            const std::size_t i = static_cast<std::size_t>(r) * s.C + c;
            if (y[i] != round_to(wf[c] * round_to(x[i] * rs[r], t), t)) ++mismatches;
          }
        EXPECT_EQ(mismatches, 0u) << label("rmsnorm_fwd", t, shape, "HF roundings");
      }

      // Forward without rstd: the same out.
      DeviceBuffer d_out2(n * dtype_size(t));
      dev::rmsnorm_fwd(d_out2.get(), nullptr, d_inp.get(), d_w.get(), s.N, s.C, kEps, t, stream.s);
      EXPECT_EQ(d_out2.download(), got_out) << "rmsnorm_fwd without rstd " << shape;

      // Backward from the host's rstd; both gradients accumulate onto random values.
      const Bytes dout = random_bytes(t, n, 3);
      const Bytes dinp0 = random_bytes(t, n, 4), dw0 = random_bytes(t, s.C, 5);
      Bytes dinp = dinp0, dw = dw0;
      host::rmsnorm_bwd(dinp.data(), dw.data(), dout.data(), inp.data(), w.data(), rstd.data(), s.N,
                        s.C, t);
      DeviceBuffer d_dout(dout), d_hrstd(f32_bytes(rstd)), d_dinp(dinp0), d_dw(dw0);
      const auto run_bwd = [&] {
        d_dinp.upload(dinp0);
        d_dw.upload(dw0);
        dev::rmsnorm_bwd(d_dinp.get(), d_dw.get(), d_dout.get(), d_inp.get(), d_w.get(),
                         d_hrstd.as<float>(), s.N, s.C, t, stream.s);
        return std::make_pair(d_dinp.download(), d_dw.download());
      };
      const auto [got_dinp, got_dw] = run_bwd();
      check(label("rmsnorm_bwd", t, shape, "dinp"), got_dinp, dinp, t, tol_for(t));
      check(label("rmsnorm_bwd", t, shape, "dweight"), got_dw, dw, t, tol_for(t));
      const auto [again_dinp, again_dw] = run_bwd();
      EXPECT_EQ(again_dinp, got_dinp) << "rmsnorm_bwd dinp not deterministic " << shape;
      EXPECT_EQ(again_dw, got_dw) << "rmsnorm_bwd dweight not deterministic " << shape;

      // Null gradients are skipped: dweight alone, then dinp alone, give the same bits.
      d_dinp.upload(dinp0);
      d_dw.upload(dw0);
      dev::rmsnorm_bwd(nullptr, d_dw.get(), d_dout.get(), d_inp.get(), d_w.get(),
                       d_hrstd.as<float>(), s.N, s.C, t, stream.s);
      EXPECT_EQ(d_dinp.download(), dinp0) << "rmsnorm_bwd wrote a null dinp's buffer " << shape;
      EXPECT_EQ(d_dw.download(), got_dw) << shape;
      dev::rmsnorm_bwd(d_dinp.get(), nullptr, d_dout.get(), d_inp.get(), d_w.get(),
                       d_hrstd.as<float>(), s.N, s.C, t, stream.s);
      EXPECT_EQ(d_dinp.download(), got_dinp) << shape;
    }
}

// One row from zero: dweight = rnd(dout * rnd(x * rstd)), one exact product on both sides, so
// the CUDA bits are the host's (which test_llama_ops_host checks against the formula).
TEST(LlamaOpsCuda, RmsNormWeightGradientOfOneRowIsTheHostBits) {
  constexpr int kC = 4096;
  Stream stream;
  for (DType t : kAllDTypes) {
    const Bytes inp = random_bytes(t, kC, 6, -2.0f, 3.0f), w = random_bytes(t, kC, 7, 0.5f, 1.5f);
    const Bytes dout = random_bytes(t, kC, 8), zero = to_bytes(Vec(kC, 0.0f), t);
    Vec rstd(1);
    Bytes out(inp.size()), dw = zero;
    host::rmsnorm_fwd(out.data(), rstd.data(), inp.data(), w.data(), 1, kC, kEps, t);
    host::rmsnorm_bwd(nullptr, dw.data(), dout.data(), inp.data(), w.data(), rstd.data(), 1, kC, t);
    DeviceBuffer d_inp(inp), d_w(w), d_dout(dout), d_rstd(f32_bytes(rstd)), d_dw(zero);
    dev::rmsnorm_bwd(nullptr, d_dw.get(), d_dout.get(), d_inp.get(), d_w.get(), d_rstd.as<float>(),
                     1, kC, t, stream.s);
    EXPECT_EQ(d_dw.download(), dw) << dtype_name(t);
  }
}

// ---- RoPE -----------------------------------------------------------------------------------

TEST(LlamaOpsCuda, Rope) {
  struct Shape { int B, T, NH, NKV, hs, pos_offset; bool llama3; };
  const Shape shapes[] = {
      {1, 1, 1, 1, 2, 0, false},      {2, 77, 6, 2, 24, 3, false},   // GQA, hs 24
      {3, 50, 12, 12, 64, 1000, false},                              // MHA, hs 64
      {2, 77, 32, 8, 128, 5, true},                                  // Llama 3.1 8B heads
      {1, 17, 4, 1, 128, 100000, true},                              // MQA, far positions
  };
  const host::RopeLlama3Scaling llama31{8.0, 1.0, 4.0, 8192.0};
  Stream stream;
  for (DType t : kAllDTypes)
    for (const Shape& s : shapes) {
      const std::string shape = "B=" + std::to_string(s.B) + " T=" + std::to_string(s.T) +
                                " NH=" + std::to_string(s.NH) + " NKV=" + std::to_string(s.NKV) +
                                " hs=" + std::to_string(s.hs) + " off=" + std::to_string(s.pos_offset);
      const Vec inv_freq = host::rope_inv_freq(s.hs, s.llama3 ? 500000.0 : 10000.0,
                                               s.llama3 ? &llama31 : nullptr);
      const std::size_t row = static_cast<std::size_t>(s.NH + 2 * s.NKV) * s.hs;
      const std::size_t qk = static_cast<std::size_t>(s.NH + s.NKV) * s.hs;
      const std::size_t n = static_cast<std::size_t>(s.B) * s.T * row;
      const Bytes qkv0 = random_bytes(t, n, 10, -2.0f, 2.0f), dqkv0 = random_bytes(t, n, 11);
      Bytes qkv = qkv0, dqkv = dqkv0;
      host::rope_fwd(qkv.data(), s.B, s.T, s.NH, s.NKV, s.hs, s.pos_offset, inv_freq.data(), t);
      host::rope_bwd(dqkv.data(), s.B, s.T, s.NH, s.NKV, s.hs, s.pos_offset, inv_freq.data(), t);
      DeviceBuffer d_freq(f32_bytes(inv_freq)), d_qkv(qkv0), d_dqkv(dqkv0);
      const auto run = [&] {
        d_qkv.upload(qkv0);
        d_dqkv.upload(dqkv0);
        dev::rope_fwd(d_qkv.get(), s.B, s.T, s.NH, s.NKV, s.hs, s.pos_offset, d_freq.as<float>(), t,
                      stream.s);
        dev::rope_bwd(d_dqkv.get(), s.B, s.T, s.NH, s.NKV, s.hs, s.pos_offset, d_freq.as<float>(),
                      t, stream.s);
        return std::make_pair(d_qkv.download(), d_dqkv.download());
      };
      const auto [got_qkv, got_dqkv] = run();
      check(label("rope_fwd", t, shape, "qkv"), got_qkv, qkv, t, tol_for(t));
      check(label("rope_bwd", t, shape, "dqkv"), got_dqkv, dqkv, t, tol_for(t));
      // v untouched, bit for bit (checked on the raw bytes of each token's v part).
      const std::size_t es = dtype_size(t);
      std::size_t v_changed = 0;
      for (std::size_t tok = 0; tok < static_cast<std::size_t>(s.B) * s.T; ++tok) {
        const std::size_t off = (tok * row + qk) * es, len = (row - qk) * es;
        if (std::memcmp(got_qkv.data() + off, qkv0.data() + off, len) != 0) ++v_changed;
        if (std::memcmp(got_dqkv.data() + off, dqkv0.data() + off, len) != 0) ++v_changed;
      }
      EXPECT_EQ(v_changed, 0u) << "rope changed v " << shape;
      const auto [again_qkv, again_dqkv] = run();
      EXPECT_EQ(again_qkv, got_qkv) << "rope_fwd not deterministic " << shape;
      EXPECT_EQ(again_dqkv, got_dqkv) << "rope_bwd not deterministic " << shape;
    }
}

TEST(LlamaOpsCuda, RopeRejectsBadHeads) {
  Stream stream;
  DeviceBuffer d(1024), f(64);
  EXPECT_THROW(dev::rope_fwd(d.get(), 1, 1, 6, 4, 8, 0, f.as<float>(), DType::f32, stream.s), Error);
  EXPECT_THROW(dev::rope_bwd(d.get(), 1, 1, 2, 2, 7, 0, f.as<float>(), DType::f32, stream.s), Error);
}

// ---- SwiGLU ---------------------------------------------------------------------------------

TEST(LlamaOpsCuda, Swiglu) {
  struct Shape { long long N; int F; };
  const Shape shapes[] = {{1, 1}, {77, 96}, {33, 2731}, {1024, 4096}};
  Stream stream;
  for (DType t : kAllDTypes)
    for (const Shape& s : shapes) {
      const std::string shape = "N=" + std::to_string(s.N) + " F=" + std::to_string(s.F);
      const std::size_t n = static_cast<std::size_t>(s.N) * s.F;
      const Bytes gu = random_bytes(t, 2 * n, 20, -6.0f, 6.0f), dout = random_bytes(t, n, 21);
      Bytes out(n * dtype_size(t)), dgu(2 * n * dtype_size(t));
      host::swiglu_fwd(out.data(), gu.data(), s.N, s.F, t);
      host::swiglu_bwd(dgu.data(), gu.data(), dout.data(), s.N, s.F, t);
      DeviceBuffer d_gu(gu), d_dout(dout), d_out(nan_bytes(t, n)), d_dgu(nan_bytes(t, 2 * n));
      const auto run = [&] {
        dev::swiglu_fwd(d_out.get(), d_gu.get(), s.N, s.F, t, stream.s);
        dev::swiglu_bwd(d_dgu.get(), d_gu.get(), d_dout.get(), s.N, s.F, t, stream.s);
        return std::make_pair(d_out.download(), d_dgu.download());
      };
      const auto [got_out, got_dgu] = run();
      check(label("swiglu_fwd", t, shape, "out"), got_out, out, t, tol_for(t));
      check(label("swiglu_bwd", t, shape, "dgate_up"), got_dgu, dgu, t, tol_for(t));
      const auto [again_out, again_dgu] = run();
      EXPECT_EQ(again_out, got_out) << "swiglu_fwd not deterministic " << shape;
      EXPECT_EQ(again_dgu, got_dgu) << "swiglu_bwd not deterministic " << shape;
      // In place over gate_up: the out-of-place bits.
      DeviceBuffer d_inplace(gu);
      dev::swiglu_bwd(d_inplace.get(), d_inplace.get(), d_dout.get(), s.N, s.F, t, stream.s);
      EXPECT_EQ(d_inplace.download(), got_dgu) << "swiglu_bwd in place " << shape;
    }
}

// Zero-size inputs launch nothing and touch nothing.
TEST(LlamaOpsCuda, ZeroSizesAreNoOps) {
  Stream stream;
  dev::rmsnorm_fwd(nullptr, nullptr, nullptr, nullptr, 0, 4096, kEps, DType::bf16, stream.s);
  dev::rmsnorm_bwd(nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, 0, 4096, DType::bf16,
                   stream.s);
  dev::rope_fwd(nullptr, 0, 64, 32, 8, 128, 0, nullptr, DType::bf16, stream.s);
  dev::rope_bwd(nullptr, 2, 0, 32, 8, 128, 0, nullptr, DType::bf16, stream.s);
  dev::swiglu_fwd(nullptr, nullptr, 0, 14336, DType::bf16, stream.s);
  dev::swiglu_bwd(nullptr, nullptr, nullptr, 0, 14336, DType::bf16, stream.s);
  CUDA_CHECK(cudaStreamSynchronize(stream.s));
}

}  // namespace
}  // namespace strata
