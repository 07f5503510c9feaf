#pragma once
// Internal to kernels/host: reading and writing rows of any storage dtype as fp32.
//
// Every host op computes in fp32: a row in bf16 / fp16 is widened (exactly) into a float
// buffer, and a result is rounded once, to nearest even, when it is stored.
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "core/dtype.h"
#include "kernels/host/cast.h"

namespace strata::kernels::host::detail {

// dst[i] = src[offset + i] as fp32, i < n.
inline void load_row(const void* src, DType dtype, std::size_t offset, std::size_t n, float* dst) {
  switch (dtype) {
    case DType::f32: std::memcpy(dst, static_cast<const float*>(src) + offset, n * sizeof(float)); return;
    case DType::bf16: {
      const auto* s = static_cast<const std::uint16_t*>(src) + offset;
      for (std::size_t i = 0; i < n; ++i) dst[i] = bf16_to_fp32(s[i]);
      return;
    }
    case DType::f16: {
      const auto* s = static_cast<const std::uint16_t*>(src) + offset;
      for (std::size_t i = 0; i < n; ++i) dst[i] = fp16_to_fp32(s[i]);
      return;
    }
  }
}

// dst[offset + i] = src[i] rounded to dtype, i < n.
inline void store_row(const float* src, void* dst, DType dtype, std::size_t offset, std::size_t n) {
  switch (dtype) {
    case DType::f32: std::memcpy(static_cast<float*>(dst) + offset, src, n * sizeof(float)); return;
    case DType::bf16: {
      auto* d = static_cast<std::uint16_t*>(dst) + offset;
      for (std::size_t i = 0; i < n; ++i) d[i] = fp32_to_bf16(src[i]);
      return;
    }
    case DType::f16: {
      auto* d = static_cast<std::uint16_t*>(dst) + offset;
      for (std::size_t i = 0; i < n; ++i) d[i] = fp32_to_fp16(src[i]);
      return;
    }
  }
}

// dst[offset + i] += add[i], i < n: dst widened to fp32 into tmp (n floats), one fp32 addition,
// one rounding to dtype when stored. How the ops add a step's column sums to a gradient.
inline void add_to_row(const float* add, void* dst, DType dtype, std::size_t offset,
                       std::size_t n, float* tmp) {
  load_row(dst, dtype, offset, n, tmp);
  for (std::size_t i = 0; i < n; ++i) tmp[i] += add[i];
  store_row(tmp, dst, dtype, offset, n);
}

// x rounded to dtype (nearest even) and widened back: the value dtype would store.
inline float round_to(float x, DType dtype) {
  switch (dtype) {
    case DType::f32: return x;
    case DType::bf16: return bf16_to_fp32(fp32_to_bf16(x));
    case DType::f16: return fp16_to_fp32(fp32_to_fp16(x));
  }
  return x;
}

// The whole array as fp32: a view of `src` when it already is, else a widened copy in `tmp`.
template <typename Vec>
const float* as_f32(const void* src, DType dtype, std::size_t n, Vec& tmp) {
  if (dtype == DType::f32) return static_cast<const float*>(src);
  tmp.resize(n);
  cast(src, dtype, tmp.data(), DType::f32, n);  // OpenMP for large arrays
  return tmp.data();
}

}  // namespace strata::kernels::host::detail
