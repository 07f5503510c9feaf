#pragma once
// Test helpers for cpu_adam: the SIMD levels this CPU has, a shard with guard elements around
// it at a chosen misalignment, random data, and an independent float64 reference of one step.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "core/cpu_features.h"
#include "core/dtype.h"
#include "cpu_adam/adam.h"

namespace strata::cpu_adam::test {

inline std::vector<SimdLevel> levels_to_test() {
  std::vector<SimdLevel> out;
  for (int i = 0; i <= static_cast<int>(detected_simd()); ++i) out.push_back(static_cast<SimdLevel>(i));
  return out;
}

inline std::uint32_t bits(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline float from_bits(std::uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// Elements before and after a shard, filled with a pattern the kernels must not touch.
constexpr std::size_t kGuard = 19;
constexpr std::uint32_t kGuardBits = 0x7FC0DEAD;  // a NaN: any read of it would poison a sum

// Owns the buffers of one shard of `numel` elements starting `offset` elements (1..3 makes
// every array misaligned) after kGuard guard elements.
struct ShardBuffers {
  std::size_t numel = 0;
  std::size_t offset = 0;
  DType grad_dtype = DType::f32;
  bool has_out = false;
  DType out_dtype = DType::bf16;
  std::vector<float> params, exp_avg, exp_avg_sq;  // (kGuard + offset + numel + kGuard,)
  std::vector<unsigned char> grads;                 // the same count, in grad_dtype
  std::vector<std::uint16_t> out;                   // the same count, when has_out

  ShardBuffers(std::size_t n, std::size_t off, DType grad, bool with_out, DType out_type)
      : numel(n), offset(off), grad_dtype(grad), has_out(with_out), out_dtype(out_type) {
    const std::size_t total = kGuard + off + n + kGuard;
    const float guard = from_bits(kGuardBits);
    params.assign(total, guard);
    exp_avg.assign(total, guard);
    exp_avg_sq.assign(total, guard);
    grads.assign(total * dtype_size(grad), 0xAB);
    if (with_out) out.assign(total, 0xBEEF);
  }
  std::size_t first() const { return kGuard + offset; }

  float* p() { return params.data() + first(); }
  float* m() { return exp_avg.data() + first(); }
  float* v() { return exp_avg_sq.data() + first(); }
  void* g() { return grads.data() + first() * dtype_size(grad_dtype); }
  std::uint16_t* o() { return has_out ? out.data() + first() : nullptr; }

  AdamShard shard() {
    AdamShard s;
    s.params = p();
    s.grads = g();
    s.grad_dtype = grad_dtype;
    s.exp_avg = m();
    s.exp_avg_sq = v();
    s.numel = numel;
    s.params_out = o();
    s.out_dtype = out_dtype;
    return s;
  }

  // Grad i as the fp32 value the kernel sees (bf16/fp16 widen exactly).
  float grad(std::size_t i) const {
    const unsigned char* base = grads.data() + (first() + i) * dtype_size(grad_dtype);
    if (grad_dtype == DType::f32) {
      float f;
      std::memcpy(&f, base, 4);
      return f;
    }
    std::uint16_t h;
    std::memcpy(&h, base, 2);
    return grad_dtype == DType::bf16 ? bf16_to_fp32(h) : fp16_to_fp32(h);
  }
  void set_grad(std::size_t i, float value) {
    unsigned char* base = grads.data() + (first() + i) * dtype_size(grad_dtype);
    if (grad_dtype == DType::f32) {
      std::memcpy(base, &value, 4);
      return;
    }
    const std::uint16_t h =
        grad_dtype == DType::bf16 ? fp32_to_bf16(value) : fp32_to_fp16(value);
    std::memcpy(base, &h, 2);
  }

  // Random params ~ N(0, param_sigma), grads ~ N(0, grad_sigma), zero moments.
  void fill(std::uint32_t seed, float param_sigma, float grad_sigma) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> pd(0.0f, param_sigma), gd(0.0f, grad_sigma);
    for (std::size_t i = 0; i < numel; ++i) {
      p()[i] = pd(rng);
      m()[i] = 0.0f;
      v()[i] = 0.0f;
      set_grad(i, gd(rng));
    }
  }
  void new_grads(std::uint32_t seed, float grad_sigma) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> gd(0.0f, grad_sigma);
    for (std::size_t i = 0; i < numel; ++i) set_grad(i, gd(rng));
  }

  // True when no guard element changed.
  bool guards_intact() const {
    auto intact_f = [&](const std::vector<float>& a) {
      for (std::size_t i = 0; i < a.size(); ++i) {
        if (i >= first() && i < first() + numel) continue;
        if (bits(a[i]) != kGuardBits) return false;
      }
      return true;
    };
    if (!intact_f(params) || !intact_f(exp_avg) || !intact_f(exp_avg_sq)) return false;
    if (has_out) {
      for (std::size_t i = 0; i < out.size(); ++i)
        if ((i < first() || i >= first() + numel) && out[i] != 0xBEEF) return false;
    }
    return true;
  }
};

// One element's step in float64, with the per-step scalars computed here from the hyper-
// parameters (not taken from the code under test), plus the magnitudes the error bound scales
// with: for each result, the sum of the absolute values of the terms it is made of (what a
// rounding error in any of them is proportional to).
struct RefElement {
  double p, m, v;        // the step's results
  double mag_p, mag_m, mag_v;
};

class ReferenceStep {
 public:
  ReferenceStep(const AdamHyper& h, std::int64_t t, double grad_scale)
      : h_(h),
        grad_scale_(grad_scale),
        bc1_(h.bias_correction ? 1.0 - std::pow(double{h.beta1}, static_cast<double>(t)) : 1.0),
        bc2_(h.bias_correction ? 1.0 - std::pow(double{h.beta2}, static_cast<double>(t)) : 1.0) {}

  RefElement operator()(double p0, double g_raw, double m0, double v0) const {
    const double lr = h_.lr, b1 = h_.beta1, b2 = h_.beta2, eps = h_.eps, wd = h_.weight_decay;
    double g = g_raw * grad_scale_;
    double mag_g = std::fabs(g);
    double p = p0;
    if (wd != 0.0 && h_.mode == AdamMode::adam) {
      g += wd * p0;
      mag_g += std::fabs(wd * p0);
    }
    if (wd != 0.0 && h_.mode == AdamMode::adamw) p *= 1.0 - lr * wd;
    RefElement r{};
    r.m = b1 * m0 + (1.0 - b1) * g;
    r.v = b2 * v0 + (1.0 - b2) * g * g;
    r.mag_m = b1 * std::fabs(m0) + (1.0 - b1) * mag_g;
    r.mag_v = b2 * v0 + (1.0 - b2) * mag_g * mag_g;
    const double denom = std::sqrt(r.v) / std::sqrt(bc2_) + eps;
    const double step_size = lr / bc1_;
    const double update = step_size * r.m / denom;
    r.p = p - update;
    // v's error (relative to mag_v) reaches the update through sqrt(v) as mag_v / v.
    const double v_amplification = r.v > 0.0 ? r.mag_v / r.v : 1.0;
    r.mag_p = std::fabs(p) + step_size * r.mag_m / denom + std::fabs(update) * v_amplification;
    return r;
  }

 private:
  AdamHyper h_;
  double grad_scale_;
  double bc1_;  // 1 - beta1^t
  double bc2_;  // 1 - beta2^t
};

}  // namespace strata::cpu_adam::test
