#pragma once
// Test helper of test_llama_ops_dispatch{,_cuda}.cpp: the LLaMA-family ops of runtime/ops/ops.h
// run once each on a stream of a device of the given kind, through the Stream API only (inputs
// copied into device buffers, results copied back).
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "kernels/host/rope.h"
#include "runtime/device/device.h"
#include "runtime/ops/ops.h"

namespace strata::runtime::llama_test {

using Bytes = std::vector<unsigned char>;

// Shapes: RMSNorm and SwiGLU on 77 rows of 96; RoPE on 2 x 13 tokens of GQA heads (6 query
// heads, 2 key/value heads, head size 24) from position 4.
constexpr int kN = 77, kC = 96, kF = 96, kB = 2, kT = 13, kNH = 6, kNKV = 2, kHs = 24, kPos = 4;
constexpr std::size_t kQkv = static_cast<std::size_t>(kB) * kT * (kNH + 2 * kNKV) * kHs;
constexpr float kEps = 1e-6f;

inline Bytes random_bytes(DType t, std::size_t n, std::uint32_t seed, float lo = -1, float hi = 1) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  Bytes out(n * dtype_size(t));
  convert(v.data(), DType::f32, out.data(), t, n);
  return out;
}

struct Inputs {
  DType dtype;
  Bytes x, w, dout, dinp0, dw0;  // RMSNorm
  Bytes qkv, dqkv;               // RoPE
  Bytes gate_up, dswi;           // SwiGLU
  std::vector<float> inv_freq;
  explicit Inputs(DType t)
      : dtype(t), x(random_bytes(t, kN * kC, 1, -2, 3)), w(random_bytes(t, kC, 2, 0.5f, 1.5f)),
        dout(random_bytes(t, kN * kC, 3)), dinp0(random_bytes(t, kN * kC, 4)),
        dw0(random_bytes(t, kC, 5)), qkv(random_bytes(t, kQkv, 6, -2, 2)),
        dqkv(random_bytes(t, kQkv, 7)), gate_up(random_bytes(t, kN * 2 * kF, 8, -5, 5)),
        dswi(random_bytes(t, kN * kF, 9)), inv_freq(kernels::host::rope_inv_freq(kHs, 1e6)) {}
};

struct Outputs {
  Bytes out, rstd, dinp, dw, qkv, dqkv, swi_out, dgate_up;
};

inline Outputs run_sequence(device::Device& device, device::Stream& s, const Inputs& in) {
  const auto buf = [&](const Bytes& host, const char* what) {
    device::DeviceBuffer b = device.allocate(host.size(), what);
    s.copy_async(b.data(), host.data(), host.size());
    return b;
  };
  const std::size_t es = dtype_size(in.dtype);
  device::DeviceBuffer x = buf(in.x, "x"), w = buf(in.w, "w"), dout = buf(in.dout, "dout"),
                       dinp = buf(in.dinp0, "dinp"), dw = buf(in.dw0, "dw"),
                       qkv = buf(in.qkv, "qkv"), dqkv = buf(in.dqkv, "dqkv"),
                       gu = buf(in.gate_up, "gate_up"), dswi = buf(in.dswi, "dswi");
  Bytes freq_bytes(in.inv_freq.size() * 4);
  convert(in.inv_freq.data(), DType::f32, freq_bytes.data(), DType::f32, in.inv_freq.size());
  device::DeviceBuffer freq = buf(freq_bytes, "inv_freq");
  device::DeviceBuffer out = device.allocate(in.x.size(), "out");
  device::DeviceBuffer rstd = device.allocate(kN * 4, "rstd");
  device::DeviceBuffer swi_out = device.allocate(kN * kF * es, "swiglu out");
  device::DeviceBuffer dgu = device.allocate(in.gate_up.size(), "dgate_up");

  ops::rmsnorm_fwd(s, out.data(), rstd.as<float>(), x.data(), w.data(), kN, kC, kEps, in.dtype);
  ops::rmsnorm_bwd(s, dinp.data(), dw.data(), dout.data(), x.data(), w.data(), rstd.as<float>(),
                   kN, kC, in.dtype);
  ops::rope_fwd(s, qkv.data(), kB, kT, kNH, kNKV, kHs, kPos, freq.as<float>(), in.dtype);
  ops::rope_bwd(s, dqkv.data(), kB, kT, kNH, kNKV, kHs, kPos, freq.as<float>(), in.dtype);
  ops::swiglu_fwd(s, swi_out.data(), gu.data(), kN, kF, in.dtype);
  ops::swiglu_bwd(s, dgu.data(), gu.data(), dswi.data(), kN, kF, in.dtype);

  Outputs o{Bytes(in.x.size()),     Bytes(kN * 4),         Bytes(in.x.size()),
            Bytes(in.w.size()),     Bytes(in.qkv.size()),  Bytes(in.qkv.size()),
            Bytes(kN * kF * es),    Bytes(in.gate_up.size())};
  s.copy_async(o.out.data(), out.data(), o.out.size());
  s.copy_async(o.rstd.data(), rstd.data(), o.rstd.size());
  s.copy_async(o.dinp.data(), dinp.data(), o.dinp.size());
  s.copy_async(o.dw.data(), dw.data(), o.dw.size());
  s.copy_async(o.qkv.data(), qkv.data(), o.qkv.size());
  s.copy_async(o.dqkv.data(), dqkv.data(), o.dqkv.size());
  s.copy_async(o.swi_out.data(), swi_out.data(), o.swi_out.size());
  s.copy_async(o.dgate_up.data(), dgu.data(), o.dgate_up.size());
  s.synchronize();
  return o;
}

}  // namespace strata::runtime::llama_test
