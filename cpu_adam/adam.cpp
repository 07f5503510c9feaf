// The Adam step: the per-step scalars (adam_scalars), the choice of variant, and the split of a shard over
// OpenMP threads and cache-sized tiles. The element update itself is in the variant files
// (adam_scalar.cpp, adam_avx2.cpp, adam_avx512*.cpp).
#include <cmath>
#include <cstdint>
#include <cstring>
#include <thread>

#include <fmt/format.h>

#include "core/error.h"
#include "cpu_adam/adam.h"
#include "cpu_adam/adam_impl.h"
#include "cpu_adam/parallel_impl.h"

namespace strata::cpu_adam {
namespace {

using detail::AdamSpan;
using detail::GradKind;
using detail::OutKind;

// Elements per tile: 8192 parameters touch 8192 * 28 B = 224 KiB (fp32 grads), which stays
// in L2 while a tile is worked on. Each thread walks its part tile by tile, in order.
constexpr std::size_t kTileNumel = 8192;

detail::AdamSpanFn span_fn(SimdLevel simd) {
  STRATA_ASSERT(simd <= detected_simd(), "SIMD level above what this CPU supports");
#if defined(STRATA_X86_SIMD)
  switch (simd) {
    case SimdLevel::scalar: return detail::adam_span_scalar;
    case SimdLevel::avx2: return detail::adam_span_avx2;
    case SimdLevel::avx512: return detail::adam_span_avx512;
    case SimdLevel::avx512_bf16: return detail::adam_span_avx512_bf16;
  }
#endif
  return detail::adam_span_scalar;
}

GradKind grad_kind(DType dtype) {
  switch (dtype) {
    case DType::f32: return GradKind::f32;
    case DType::bf16: return GradKind::bf16;
    case DType::f16: return GradKind::f16;
  }
  STRATA_ASSERT(false, "AdamShard::grad_dtype is not a DType");
}

OutKind out_kind(const AdamShard& shard) {
  if (shard.params_out == nullptr) return OutKind::none;
  STRATA_ASSERT(shard.out_dtype == DType::bf16 || shard.out_dtype == DType::f16,
                "AdamShard::out_dtype must be bf16 or f16");
  return shard.out_dtype == DType::bf16 ? OutKind::bf16 : OutKind::f16;
}

// The span of elements [begin, end) of a shard.
AdamSpan sub_span(const AdamSpan& all, std::size_t begin, std::size_t end) {
  const std::size_t grad_bytes = all.grad == GradKind::f32 ? 4 : 2;
  AdamSpan s = all;
  s.params += begin;
  s.grads = static_cast<const unsigned char*>(all.grads) + grad_bytes * begin;
  s.exp_avg += begin;
  s.exp_avg_sq += begin;
  s.params_in += begin;
  s.exp_avg_in += begin;
  s.exp_avg_sq_in += begin;
  if (all.out != OutKind::none) s.params_out = static_cast<unsigned char*>(all.params_out) + 2 * begin;
  s.numel = end - begin;
  return s;
}

[[noreturn]] void bad_hyper(const char* field, float value, const char* rule) {
  throw Error(fmt::format("Adam hyper-parameter {} = {} is invalid: it must be {}", field, value,
                          rule),
              fmt::format("optimizer hyper-parameter '{}'", field),
              "fix the optimizer section of the config (or the checkpoint it was loaded from)");
}

}  // namespace

namespace detail {

int resolve_threads(int threads) {
  STRATA_ASSERT(threads >= 0, "thread count must be >= 0 (0 = the CPUs of the affinity mask)");
  if (threads > 0) return threads;
  static const int affinity = [] {
    const int n = cpu_info().logical_cores_in_affinity_mask;
    if (n > 0) return n;
    const unsigned hw = std::thread::hardware_concurrency();
    return hw > 0 ? static_cast<int>(hw) : 1;
  }();
  return affinity;
}

}  // namespace detail

void check_hyper(const AdamHyper& h) {
  if (!(std::isfinite(h.lr) && h.lr >= 0.0f)) bad_hyper("lr", h.lr, "finite and >= 0");
  if (!(h.beta1 >= 0.0f && h.beta1 < 1.0f)) bad_hyper("beta1", h.beta1, "in [0, 1)");
  if (!(h.beta2 >= 0.0f && h.beta2 < 1.0f)) bad_hyper("beta2", h.beta2, "in [0, 1)");
  if (!(std::isfinite(h.eps) && h.eps > 0.0f)) bad_hyper("eps", h.eps, "finite and > 0");
  if (!(std::isfinite(h.weight_decay) && h.weight_decay >= 0.0f))
    bad_hyper("weight_decay", h.weight_decay, "finite and >= 0");
  if (h.mode != AdamMode::adam && h.mode != AdamMode::adamw)
    throw Error("Adam mode is neither adam nor adamw", "optimizer hyper-parameter 'mode'");
}

// Computed in double, cast to float once: the order of torch.optim.Adam(W)'s step
// (step_size = lr / bias_correction1; denom = sqrt(v) / sqrt(bias_correction2) + eps).
AdamScalars adam_scalars(const AdamHyper& h, std::int64_t step, float grad_scale) {
  check_hyper(h);
  if (step < 1)
    throw Error(fmt::format("Adam step {} is invalid: steps are 1-based", step),
                "cpu_adam::adam_scalars", "count optimizer steps from 1");
  const double lr = h.lr, beta1 = h.beta1, beta2 = h.beta2, wd = h.weight_decay;
  double step_size = lr;
  double bc2_sqrt = 1.0;
  if (h.bias_correction) {
    const auto t = static_cast<double>(step);
    step_size = lr / (1.0 - std::pow(beta1, t));
    bc2_sqrt = std::sqrt(1.0 - std::pow(beta2, t));
  }
  AdamScalars s{};
  s.grad_scale = grad_scale;
  s.beta1 = h.beta1;
  s.one_minus_beta1 = static_cast<float>(1.0 - beta1);
  s.beta2 = h.beta2;
  s.one_minus_beta2 = static_cast<float>(1.0 - beta2);
  s.step_size = static_cast<float>(step_size);
  s.bc2_sqrt = static_cast<float>(bc2_sqrt);
  s.eps = h.eps;
  s.has_l2 = h.mode == AdamMode::adam && h.weight_decay != 0.0f;
  s.l2 = s.has_l2 ? h.weight_decay : 0.0f;
  s.has_decay = h.mode == AdamMode::adamw && h.weight_decay != 0.0f;
  s.decay = s.has_decay ? static_cast<float>(1.0 - lr * wd) : 1.0f;
  return s;
}

void adam_step(SimdLevel simd, int threads, const AdamHyper& hyper, std::int64_t step,
               const AdamShard& shard, float grad_scale) {
  check_hyper(hyper);
  STRATA_ASSERT(step >= 1, "adam_step: the step is 1-based");
  adam_step(simd, threads, adam_scalars(hyper, step, grad_scale), shard);
}

void adam_step(SimdLevel simd, int threads, const AdamScalars& scalars, const AdamShard& shard) {
  const detail::AdamSpanFn fn = span_fn(simd);
  const GradKind grad = grad_kind(shard.grad_dtype);
  const OutKind out = out_kind(shard);
  if (shard.numel == 0) return;
  STRATA_ASSERT(shard.params != nullptr && shard.grads != nullptr && shard.exp_avg != nullptr &&
                    shard.exp_avg_sq != nullptr,
                "AdamShard with numel > 0 has a null pointer");

  const AdamSpan all = {shard.params,
                        shard.grads,
                        shard.exp_avg,
                        shard.exp_avg_sq,
                        shard.params_in != nullptr ? shard.params_in : shard.params,
                        shard.exp_avg_in != nullptr ? shard.exp_avg_in : shard.exp_avg,
                        shard.exp_avg_sq_in != nullptr ? shard.exp_avg_sq_in : shard.exp_avg_sq,
                        shard.params_out,
                        shard.numel,
                        grad,
                        out};
  const int parts = detail::part_count(shard.numel, detail::resolve_threads(threads));
  detail::for_each_part(parts, [&](int part) {
    const detail::Range r = detail::part_range(shard.numel, parts, part);
    for (std::size_t t = r.begin; t < r.end; t += kTileNumel)
      fn(scalars, sub_span(all, t, std::min(r.end, t + kTileNumel)));
  });
}

void first_touch(float* p, std::size_t n, int threads) {
  if (n == 0) return;
  STRATA_ASSERT(p != nullptr, "first_touch: null pointer with n > 0");
  const int parts = detail::part_count(n, detail::resolve_threads(threads));
  detail::for_each_part(parts, [&](int part) {
    const detail::Range r = detail::part_range(n, parts, part);
    if (r.end > r.begin) std::memset(p + r.begin, 0, (r.end - r.begin) * sizeof(float));
  });
}

void copy_partitioned(const float* src, void* dst, DType dst_dtype, std::size_t n, int threads) {
  if (n == 0) return;
  STRATA_ASSERT(src != nullptr && dst != nullptr, "copy_partitioned: null pointer with n > 0");
  const std::size_t ds = dtype_size(dst_dtype);
  const int parts = detail::part_count(n, detail::resolve_threads(threads));
  detail::for_each_part(parts, [&](int part) {
    const detail::Range r = detail::part_range(n, parts, part);
    if (r.end <= r.begin) return;
    void* out = static_cast<std::byte*>(dst) + r.begin * ds;
    if (dst_dtype == DType::f32) {
      std::memcpy(out, src + r.begin, (r.end - r.begin) * sizeof(float));
    } else {
      convert(src + r.begin, DType::f32, out, dst_dtype, r.end - r.begin);
    }
  });
}

void first_touch_zeroed(float* p, std::size_t n, int threads) {
  if (n == 0) return;
  STRATA_ASSERT(p != nullptr, "first_touch_zeroed: null pointer with n > 0");
  constexpr std::uintptr_t kPageBytes = 4096;
  const int parts = detail::part_count(n, detail::resolve_threads(threads));
  detail::for_each_part(parts, [&](int part) {
    const detail::Range r = detail::part_range(n, parts, part);
    if (r.end <= r.begin) return;
    // The part whose range holds a page's first byte touches that page; the first part also
    // touches the page it starts in.
    auto* bytes = reinterpret_cast<volatile unsigned char*>(p);
    const auto base = reinterpret_cast<std::uintptr_t>(p);
    std::uintptr_t at = base + r.begin * sizeof(float);
    const std::uintptr_t end = base + r.end * sizeof(float);
    if (part == 0) bytes[0] = 0;
    at = (at + kPageBytes - 1) / kPageBytes * kPageBytes;
    for (; at < end; at += kPageBytes) bytes[at - base] = 0;
  });
}

}  // namespace strata::cpu_adam
