#include "core/dtype.h"

#include <cctype>
#include <cstring>

#include <fmt/format.h>

#include "core/dtype_impl.h"
#include "core/error.h"

namespace strata {
namespace {

bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(a[i])) != static_cast<unsigned char>(b[i]))
      return false;
  }
  return true;
}

// ---- scalar kernels: the reference every SIMD variant must match bit for bit -----------------
// Elements are read and written with memcpy: the void* API allows any byte address, and on
// x86 a memcpy of 2 or 4 bytes is a plain (unaligned) move.

template <typename Src, typename Dst, Dst (*kConvert)(Src)>
void scalar_loop(const void* src, void* dst, std::size_t n) {
  const auto* s = static_cast<const unsigned char*>(src);
  auto* d = static_cast<unsigned char*>(dst);
  for (std::size_t i = 0; i < n; ++i) {
    Src in;
    std::memcpy(&in, s + i * sizeof(Src), sizeof(Src));
    const Dst out = kConvert(in);
    std::memcpy(d + i * sizeof(Dst), &out, sizeof(Dst));
  }
}

// The fp16 <-> bf16 conversions go through fp32, which holds both exactly: one rounding.
std::uint16_t fp16_bits_to_bf16(std::uint16_t h) { return fp32_to_bf16(fp16_to_fp32(h)); }
std::uint16_t bf16_bits_to_fp16(std::uint16_t h) { return fp32_to_fp16(bf16_to_fp32(h)); }

// Non-inline wrappers, so the template arguments name functions of this file.
std::uint16_t scalar_fp32_to_bf16(float f) { return fp32_to_bf16(f); }
float scalar_bf16_to_fp32(std::uint16_t h) { return bf16_to_fp32(h); }
std::uint16_t scalar_fp32_to_fp16(float f) { return fp32_to_fp16(f); }
float scalar_fp16_to_fp32(std::uint16_t h) { return fp16_to_fp32(h); }

constexpr detail::ConvertKernels kScalarKernels = {
    scalar_loop<float, std::uint16_t, scalar_fp32_to_bf16>,
    scalar_loop<std::uint16_t, float, scalar_bf16_to_fp32>,
    scalar_loop<float, std::uint16_t, scalar_fp32_to_fp16>,
    scalar_loop<std::uint16_t, float, scalar_fp16_to_fp32>,
    scalar_loop<std::uint16_t, std::uint16_t, fp16_bits_to_bf16>,
    scalar_loop<std::uint16_t, std::uint16_t, bf16_bits_to_fp16>,
};

const detail::ConvertKernels& kernels_for(SimdLevel level) {
#if defined(STRATA_X86_SIMD)
  switch (level) {
    case SimdLevel::scalar: return kScalarKernels;
    case SimdLevel::avx2: return detail::avx2_convert_kernels();
    case SimdLevel::avx512:
    case SimdLevel::avx512_bf16: return detail::avx512_convert_kernels();
  }
#endif
  return kScalarKernels;
}

detail::ConvertFn pick(const detail::ConvertKernels& k, DType from, DType to) {
  switch (from) {
    case DType::f32: return to == DType::bf16 ? k.fp32_to_bf16 : k.fp32_to_fp16;
    case DType::f16: return to == DType::f32 ? k.fp16_to_fp32 : k.fp16_to_bf16;
    case DType::bf16: return to == DType::f32 ? k.bf16_to_fp32 : k.bf16_to_fp16;
  }
  STRATA_ASSERT(false, "invalid DType");
}

void run(const detail::ConvertKernels& k, const void* src, DType src_dtype, void* dst,
         DType dst_dtype, std::size_t n) {
  if (n == 0) return;
  STRATA_ASSERT(src != nullptr && dst != nullptr);
  if (src_dtype == dst_dtype) {
    if (src != dst) std::memmove(dst, src, n * dtype_size(src_dtype));
    return;
  }
  pick(k, src_dtype, dst_dtype)(src, dst, n);
}

// Resolved once: active_simd() may throw (bad STRATA_SIMD), then the next call retries.
const detail::ConvertKernels& active_kernels() {
  static const detail::ConvertKernels& k = kernels_for(active_simd());
  return k;
}

}  // namespace

namespace detail {
const ConvertKernels& scalar_convert_kernels() { return kScalarKernels; }
}  // namespace detail

std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::f32: return "fp32";
    case DType::f16: return "fp16";
    case DType::bf16: return "bf16";
  }
  STRATA_ASSERT(false, "invalid DType");
}

DType parse_dtype(std::string_view text) {
  for (std::string_view name : {"fp32", "float32", "f32"})
    if (iequals(text, name)) return DType::f32;
  for (std::string_view name : {"fp16", "float16", "half", "f16"})
    if (iequals(text, name)) return DType::f16;
  for (std::string_view name : {"bf16", "bfloat16"})
    if (iequals(text, name)) return DType::bf16;
  throw Error(fmt::format("unknown dtype '{}'", text), "dtype",
              "use fp32 (float32, f32), fp16 (float16, half, f16) or bf16 (bfloat16)");
}

void convert(const void* src, DType src_dtype, void* dst, DType dst_dtype, std::size_t n) {
  run(active_kernels(), src, src_dtype, dst, dst_dtype, n);
}

void convert_with(SimdLevel level, const void* src, DType src_dtype, void* dst,
                  DType dst_dtype, std::size_t n) {
  STRATA_ASSERT(level <= detected_simd(), "this CPU does not support the requested SIMD level");
  run(kernels_for(level), src, src_dtype, dst, dst_dtype, n);
}

void fp32_to_bf16(const float* src, std::uint16_t* dst, std::size_t n) {
  convert(src, DType::f32, dst, DType::bf16, n);
}
void bf16_to_fp32(const std::uint16_t* src, float* dst, std::size_t n) {
  convert(src, DType::bf16, dst, DType::f32, n);
}
void fp32_to_fp16(const float* src, std::uint16_t* dst, std::size_t n) {
  convert(src, DType::f32, dst, DType::f16, n);
}
void fp16_to_fp32(const std::uint16_t* src, float* dst, std::size_t n) {
  convert(src, DType::f16, dst, DType::f32, n);
}
void fp16_to_bf16(const std::uint16_t* src, std::uint16_t* dst, std::size_t n) {
  convert(src, DType::f16, dst, DType::bf16, n);
}
void bf16_to_fp16(const std::uint16_t* src, std::uint16_t* dst, std::size_t n) {
  convert(src, DType::bf16, dst, DType::f16, n);
}

}  // namespace strata
