// Scaffolding shared by the CUDA kernel tests (tests/kernels/test_*_cuda.cpp): device memory and
// a stream that free themselves, the random inputs every test derives from a seed, and the
// tolerance check of an output against its host twin.
//
// Everything is `inline` (a test uses only part of it). The inputs must not change: a test's
// seeds produce the same values through these helpers as through the per-file copies they
// replace (std::mt19937, std::uniform_real_distribution<float> / uniform_int_distribution<int>).
#pragma once

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"

namespace strata::test {

using Bytes = std::vector<unsigned char>;

// The storage dtypes every op is tested in.
inline constexpr DType kAllDTypes[] = {DType::f32, DType::bf16, DType::f16};

// ---- device memory and streams --------------------------------------------------------------

// The byte every guard byte is set to (DeviceBuffer's `guard`).
inline constexpr unsigned char kGuardByte = 0xA5;

// Device memory of `bytes`, owned (cudaFree on destruction), optionally followed by `guard`
// bytes set to kGuardByte: an output buffer's guard must be intact after a kernel (no element
// past the end written).
//
// Uploads are complete on return: a copy from pageable memory may return before its DMA lands,
// and the ops run on non-blocking streams that the legacy default stream does not order, so
// upload() waits for the device before (no kernel still using the buffer) and after the copy.
// download() waits for the device first.
class DeviceBuffer {
 public:
  explicit DeviceBuffer(std::size_t bytes, std::size_t guard = 0) : bytes_(bytes), guard_(guard) {
    CUDA_CHECK(cudaMalloc(&ptr_, std::max<std::size_t>(bytes + guard, 1)));
    if (guard > 0)
      CUDA_CHECK(cudaMemset(static_cast<unsigned char*>(ptr_) + bytes, kGuardByte, guard));
  }
  explicit DeviceBuffer(const Bytes& host, std::size_t guard = 0)
      : DeviceBuffer(host.size(), guard) {
    upload(host);
  }
  ~DeviceBuffer() {
    if (ptr_ != nullptr) cudaFree(ptr_);
  }
  DeviceBuffer(DeviceBuffer&& o) noexcept
      : ptr_(std::exchange(o.ptr_, nullptr)), bytes_(o.bytes_), guard_(o.guard_) {}
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(DeviceBuffer&&) = delete;

  void* get() const { return ptr_; }
  // The memory `byte_offset` bytes in, as T* (misaligned on purpose in some tests).
  template <typename T>
  T* as(std::size_t byte_offset = 0) const {
    return reinterpret_cast<T*>(static_cast<unsigned char*>(ptr_) + byte_offset);
  }
  std::size_t bytes() const { return bytes_; }

  // Replaces the whole contents (host.size() must be bytes()).
  void upload(const Bytes& host) {
    ASSERT_EQ(host.size(), bytes_);
    upload(host.data(), host.size());
  }
  // Copies `bytes` from src to `byte_offset` bytes in.
  void upload(const void* src, std::size_t bytes, std::size_t byte_offset = 0) {
    ASSERT_LE(byte_offset + bytes, bytes_);
    CUDA_CHECK(cudaDeviceSynchronize());
    if (bytes > 0)
      CUDA_CHECK(cudaMemcpy(as<unsigned char>(byte_offset), src, bytes, cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaDeviceSynchronize());
  }
  Bytes download() const {
    Bytes out(bytes_);
    download(out.data(), bytes_);
    return out;
  }
  // Copies `bytes` from `byte_offset` bytes in to dst.
  void download(void* dst, std::size_t bytes, std::size_t byte_offset = 0) const {
    ASSERT_LE(byte_offset + bytes, bytes_ + guard_);
    CUDA_CHECK(cudaDeviceSynchronize());
    if (bytes > 0)
      CUDA_CHECK(cudaMemcpy(dst, as<unsigned char>(byte_offset), bytes, cudaMemcpyDeviceToHost));
  }
  // True when every guard byte still holds kGuardByte.
  bool guard_intact() const {
    Bytes g(guard_);
    CUDA_CHECK(cudaDeviceSynchronize());
    if (guard_ > 0)
      CUDA_CHECK(cudaMemcpy(g.data(), static_cast<unsigned char*>(ptr_) + bytes_, guard_,
                            cudaMemcpyDeviceToHost));
    return std::all_of(g.begin(), g.end(), [](unsigned char x) { return x == kGuardByte; });
  }

 private:
  void* ptr_ = nullptr;
  std::size_t bytes_;
  std::size_t guard_;
};

// A non-blocking stream, owned.
struct Stream {
  Stream() { CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking)); }
  ~Stream() { cudaStreamDestroy(s); }
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  void sync() const { CUDA_CHECK(cudaStreamSynchronize(s)); }
  cudaStream_t s = nullptr;
};

// ---- data -----------------------------------------------------------------------------------

// n floats uniform in [lo, hi) from std::mt19937(seed).
inline std::vector<float> random_floats(std::size_t n, std::uint32_t seed, float lo = -1.0f,
                                        float hi = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

inline Bytes to_bytes(const std::vector<float>& v, DType t) {
  Bytes out(v.size() * dtype_size(t));
  convert(v.data(), DType::f32, out.data(), t, v.size());
  return out;
}

inline std::vector<float> to_floats(const Bytes& b, DType t) {
  std::vector<float> out(b.size() / dtype_size(t));
  convert(b.data(), t, out.data(), DType::f32, out.size());
  return out;
}

// n random elements in dtype t, uniform in [lo, hi) before rounding.
inline Bytes random_bytes(DType t, std::size_t n, std::uint32_t seed, float lo = -1.0f,
                          float hi = 1.0f) {
  return to_bytes(random_floats(n, seed, lo, hi), t);
}

// n token ids uniform in [0, V) from std::mt19937(seed).
inline std::vector<std::int32_t> random_tokens(std::size_t n, int V, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> dist(0, V - 1);
  std::vector<std::int32_t> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

inline Bytes as_bytes(const std::vector<std::int32_t>& v) {
  Bytes out(v.size() * 4);
  if (!v.empty()) std::memcpy(out.data(), v.data(), out.size());
  return out;
}

// ---- comparison -----------------------------------------------------------------------------

// An output against its host twin from the same rounded inputs: about two ulps of the storage
// type norm-wise (the summation orders differ, the final rounding is the same).
inline double tol_for(DType t) {
  switch (t) {
    case DType::f32: return 1e-4;
    case DType::bf16: return 1.5e-2;
    case DType::f16: return 3e-3;
  }
  return 0.0;
}
// fp32 statistics (mean, rstd, lse, losses) whatever the storage type: fp32 math on both sides.
inline constexpr double kStatTol = 1e-4;

// got against want (both in storage t), in fp32; prints one line and asserts
//   no NaN on either side,
//   norm_rel = ||got - want||_2 / ||want||_2 <= tol,
//   max_abs  = max |got - want|              <= 10 tol max |want|.
inline void check(const std::string& what, const Bytes& got, const Bytes& want, DType t,
                  double tol) {
  SCOPED_TRACE(what);
  ASSERT_EQ(got.size(), want.size());
  const std::vector<float> g = to_floats(got, t), w = to_floats(want, t);
  double max_abs = 0, max_w = 0, diff2 = 0, want2 = 0;
  bool nan = false;
  for (std::size_t i = 0; i < g.size(); ++i) {
    max_w = std::max(max_w, std::fabs(static_cast<double>(w[i])));
    const double d = std::fabs(static_cast<double>(g[i]) - w[i]);
    if (std::isnan(d)) {
      nan = true;
      continue;
    }
    max_abs = std::max(max_abs, d);
    diff2 += d * d;
    want2 += static_cast<double>(w[i]) * w[i];
  }
  const double norm_rel = want2 > 0 ? std::sqrt(diff2 / want2) : std::sqrt(diff2);
  std::printf("  %-62s norm_rel %.3e  max_abs %.3e  tol %.1e%s\n", what.c_str(), norm_rel,
              max_abs, tol, norm_rel <= tol && !nan ? "" : "  FAIL");
  EXPECT_FALSE(nan) << "NaN";
  EXPECT_LE(norm_rel, tol);
  EXPECT_LE(max_abs, 10 * tol * std::max(max_w, 1e-30));
}

// Attention outputs (test_attention_cuda.cpp's header says why): the flash kernels round P (and
// dS) to the storage type, so looser than tol_for.
inline double attention_tol(DType t) {
  switch (t) {
    case DType::f32: return 1e-4;
    case DType::bf16: return 2e-2;
    case DType::f16: return 5e-3;
  }
  return 0.0;
}

// An attention output against the host's: asserts max |got - want| <= tol max |want| and
// ||got - want|| <= tol ||want||, the scales at least min_scale per element (see the callers), and
// no NaN; prints both ratios.
inline void expect_attention_close(const std::string& what, const std::vector<float>& got,
                                   const std::vector<float>& want, double tol, double min_scale) {
  ASSERT_EQ(got.size(), want.size()) << what;
  double max_abs = 0, max_w = 0, d2 = 0, w2 = 0;
  bool nan = false;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double d = std::fabs(static_cast<double>(got[i]) - want[i]);
    if (std::isnan(d)) {
      nan = true;
    } else {
      max_abs = std::max(max_abs, d);
      d2 += d * d;
    }
    max_w = std::max(max_w, std::fabs(static_cast<double>(want[i])));
    w2 += static_cast<double>(want[i]) * want[i];
  }
  const double rel_max = max_abs / std::max(max_w, min_scale);
  const double rel_norm =
      std::sqrt(d2) / std::max(std::sqrt(w2), min_scale * std::sqrt(static_cast<double>(got.size())));
  std::printf("  %-64s max_abs/max %.2e  norm_rel %.2e  tol %.0e%s\n", what.c_str(), rel_max, rel_norm, tol,
              rel_max <= tol && rel_norm <= tol && !nan ? "" : "  FAIL");
  EXPECT_FALSE(nan) << what << ": NaN";
  EXPECT_LE(rel_max, tol) << what;
  EXPECT_LE(rel_norm, tol) << what;
}

}  // namespace strata::test
