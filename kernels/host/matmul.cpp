#include "kernels/host/matmul.h"

#include <cblas.h>

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <memory>
#include <vector>

#include "kernels/host/cast.h"
#include "kernels/host/elementwise.h"
#include "kernels/host/kernel_impl.h"
#include "kernels/host/matmul_rows.h"

namespace strata::kernels::host {
namespace {

using detail::add_to_row;
using detail::as_f32;
using detail::load_row;

constexpr int kColumnBlock = 64;  // output channels per work item of the dbias sum

// An fp32 destination for a result in `dtype`: `dst` itself when it is fp32, else a buffer
// (holding dst's current values when `keep` is set, for accumulation) to be stored back.
struct F32Out {
  F32Out(void* dst, DType dtype, std::size_t n, bool keep) : dst_(dst), dtype_(dtype), n_(n) {
    if (dtype == DType::f32) {
      ptr = static_cast<float*>(dst);
    } else {
      buf_.resize(n);
      if (keep) cast(dst, dtype, buf_.data(), DType::f32, n);
      ptr = buf_.data();
    }
  }
  void store() {
    if (dtype_ != DType::f32) cast(buf_.data(), DType::f32, dst_, dtype_, n_);
  }
  float* ptr = nullptr;

 private:
  void* dst_;
  DType dtype_;
  std::size_t n_;
  std::vector<float> buf_;
};

// Note [Weights widened in panels]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// sgemm multiplies fp32, so a bf16 / fp16 weight (or weight gradient) is widened first. It was
// widened whole into a fresh zero-filled vector at every call: twice the weight's bytes
// allocated, zeroed, faulted in and written before sgemm read them again. Now the buffer is not
// zero-filled, and for few rows (fewer than kPanelMaxRows) the weight is widened a panel of
// output channels at a time into a buffer of kPanelBytes that stays in cache, each panel
// multiplied before the next is widened. Panels need enough channels for sgemm to run well (at
// least kPanelMinChannels: C up to 4096); wider rows and more rows widen the whole weight once.
// Measured on the dev VM (2 vCPUs; bf16, medians of 5 calls against the old whole widening, a
// throwaway harness linking the kernels; docs/benchmarks.md has the table).
constexpr std::size_t kPanelBytes = std::size_t{1} << 20;
constexpr std::size_t kPanelMinChannels = 64;
constexpr std::int64_t kPanelMaxRows = 128;

// Output channels per widened panel of a weight of OC rows of C values, for N input rows.
int panel_channels(std::int64_t N, int C, int OC) {
  const std::size_t row = static_cast<std::size_t>(std::max(C, 1)) * sizeof(float);
  const std::size_t by_bytes = kPanelBytes / row;
  if (N >= kPanelMaxRows || by_bytes < kPanelMinChannels) return OC;
  return static_cast<int>(std::min(by_bytes, static_cast<std::size_t>(OC)));
}

// A panel's fp32 buffer: none for an fp32 weight (its rows are read where they lie and the
// "panel" is the whole weight) or when no weight is read (`used` false), else `channels` rows
// of C floats, not zero-filled.
struct Panels {
  Panels(std::int64_t N, int C, int OC, DType dtype, bool used = true)
      : channels(dtype == DType::f32 ? OC : panel_channels(N, C, OC)),
        buf(dtype == DType::f32 || !used
                ? nullptr
                : new float[static_cast<std::size_t>(channels) * static_cast<std::size_t>(C)]) {}
  int channels;
  std::unique_ptr<float[]> buf;
};

// Byte offset of row `first` of a (rows, C) matrix stored in dtype.
std::size_t row_offset(DType dtype, int first, int C) {
  return static_cast<std::size_t>(first) * static_cast<std::size_t>(C) * dtype_size(dtype);
}

// The rows [first, first + count) of a (rows, C) matrix stored in dtype, as fp32: where they lie
// when fp32, else widened into `buf`.
const float* rows_f32(const void* base, DType dtype, int first, int count, int C, float* buf) {
  const auto* at = static_cast<const std::byte*>(base) + row_offset(dtype, first, C);
  if (dtype == DType::f32) return reinterpret_cast<const float*>(at);
  cast(at, dtype, buf, DType::f32, static_cast<std::size_t>(count) * static_cast<std::size_t>(C));
  return buf;
}

}  // namespace

void matmul_fwd(void* out, const void* inp, const void* weight, const void* bias,
                std::int64_t N, int C, int OC, DType dtype) {
  if (N == 0 || OC == 0) return;
  if (matmul_takes_rows(N, dtype)) {  // Note [Few-row matmuls] in matmul_rows.cpp
    matmul_rows_fwd(out, inp, weight, bias, N, C, OC, dtype);
    return;
  }
  const auto OCs = static_cast<std::size_t>(OC);
  std::vector<float> tmp_inp;
  const float* x = as_f32(inp, dtype, static_cast<std::size_t>(N) * static_cast<std::size_t>(C), tmp_inp);
  F32Out y(out, dtype, static_cast<std::size_t>(N) * OCs, false);
  float beta = 0.0f;
  if (bias != nullptr) {
    // out = bias + inp @ W^T: every row starts as the bias, and sgemm adds (beta = 1).
    std::vector<float> b(OCs);
    load_row(bias, dtype, 0, OCs, b.data());
#pragma omp parallel for schedule(static)
    for (std::int64_t n = 0; n < N; ++n) {
      std::copy(b.begin(), b.end(), y.ptr + static_cast<std::size_t>(n) * OCs);
    }
    beta = 1.0f;
  }
  // (N, C) x (OC, C)^T -> (N, OC), row-major; a bf16 / fp16 weight in panels of output channels
  // (Note [Weights widened in panels]).
  const Panels panels(N, C, OC, dtype);
  for (int oc0 = 0; oc0 < OC; oc0 += panels.channels) {
    const int p = std::min(panels.channels, OC - oc0);
    const float* w = rows_f32(weight, dtype, oc0, p, C, panels.buf.get());
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<blasint>(N), p, C, 1.0f, x, C, w, C, beta,
                y.ptr + oc0, OC);
  }
  y.store();
}

void matmul_grouped_fwd(void* out, const void* inp, const void* const* weights, const std::int32_t* offsets,
                        int groups, int C, int OC, DType dtype) {
  const std::size_t es = dtype_size(dtype);
  for (int g = 0; g < groups; ++g) {
    const std::int64_t first = offsets[g], rows = offsets[g + 1] - offsets[g];
    if (rows == 0 || weights[g] == nullptr) continue;
    matmul_fwd(static_cast<std::byte*>(out) + static_cast<std::size_t>(first) * static_cast<std::size_t>(OC) * es,
               static_cast<const std::byte*>(inp) + static_cast<std::size_t>(first) * static_cast<std::size_t>(C) * es,
               weights[g], nullptr, rows, C, OC, dtype);
  }
}

void matmul_bwd(void* dinp, void* dweight, void* dbias, const void* dout, const void* inp,
                const void* weight, std::int64_t N, int C, int OC, DType dtype) {
  if (N == 0) return;
  const auto Ns = static_cast<std::size_t>(N);
  const auto Cs = static_cast<std::size_t>(C);
  const auto OCs = static_cast<std::size_t>(OC);
  if (OC == 0) {  // nothing to sum: dinp is zero, dweight and dbias have no elements
    if (dinp != nullptr) std::memset(dinp, 0, Ns * Cs * dtype_size(dtype));
    return;
  }
  std::vector<float> tmp_dout, tmp_inp;
  const float* dy = as_f32(dout, dtype, Ns * OCs, tmp_dout);
  // A bf16 / fp16 weight and weight gradient in panels of output channels
  // (Note [Weights widened in panels]).
  const Panels panels(N, C, OC, dtype, dinp != nullptr || dweight != nullptr);
  if (dinp != nullptr) {
    // dinp (N, C) = dout (N, OC) x W (OC, C): the panels' products summed into dinp.
    F32Out dx(dinp, dtype, Ns * Cs, false);
    for (int oc0 = 0; oc0 < OC; oc0 += panels.channels) {
      const int p = std::min(panels.channels, OC - oc0);
      const float* w = rows_f32(weight, dtype, oc0, p, C, panels.buf.get());
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<blasint>(N), C, p, 1.0f, dy + oc0, OC, w,
                  C, oc0 == 0 ? 0.0f : 1.0f, dx.ptr, C);
    }
    dx.store();
  }
  if (dweight != nullptr) {
    // dweight (OC, C) += dout^T (OC, N) x inp (N, C), a panel of dweight's rows at a time
    // (widened, accumulated, stored back).
    const float* x = as_f32(inp, dtype, Ns * Cs, tmp_inp);
    for (int oc0 = 0; oc0 < OC; oc0 += panels.channels) {
      const int p = std::min(panels.channels, OC - oc0);
      // dweight is writable: rows_f32 only reads it (and returns it, or the buffer, for sgemm).
      auto* dw = const_cast<float*>(rows_f32(dweight, dtype, oc0, p, C, panels.buf.get()));
      cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, p, C, static_cast<blasint>(N), 1.0f, dy + oc0, OC, x, C,
                  1.0f, dw, C);
      if (dtype != DType::f32) {
        cast(dw, DType::f32, static_cast<std::byte*>(dweight) + row_offset(dtype, oc0, C), dtype,
             static_cast<std::size_t>(p) * Cs);
      }
    }
  }
  if (dbias != nullptr) {
    // dbias[o] += sum over n of dout[n, o]: blocks of columns, rows in order (deterministic).
    const int blocks = (OC + kColumnBlock - 1) / kColumnBlock;
#pragma omp parallel
    {
      float acc[kColumnBlock];
#pragma omp for schedule(static)
      for (int blk = 0; blk < blocks; ++blk) {
        const auto o0 = static_cast<std::size_t>(blk) * kColumnBlock;
        const std::size_t len = std::min<std::size_t>(kColumnBlock, OCs - o0);
        std::fill(acc, acc + kColumnBlock, 0.0f);
        for (std::size_t n = 0; n < Ns; ++n) {
          const float* row = dy + n * OCs + o0;
          for (std::size_t o = 0; o < len; ++o) acc[o] += row[o];
        }
        float old[kColumnBlock];
        add_to_row(acc, dbias, dtype, o0, len, old);
      }
    }
  }
}

void matmul_bias_gelu_fwd(void* out, void* pre, const void* inp, const void* weight,
                          const void* bias, std::int64_t N, int C, int OC, DType dtype) {
  matmul_fwd(pre, inp, weight, bias, N, C, OC, dtype);
  gelu_fwd(out, pre, N * OC, dtype);
}

void matmul_bwd_dgelu(void* dpre, void* dpre_bias, void* dweight, void* dbias, const void* dout,
                      const void* inp, const void* pre, const void* weight, std::int64_t N, int C,
                      int OC, DType dtype) {
  matmul_bwd(dpre, dweight, dbias, dout, inp, weight, N, C, OC, dtype);
  gelu_bwd(dpre, pre, dpre, N * C, dtype);
  // dpre_bias += column sums of dpre: matmul_bwd's dbias path, dpre as an (N, C) output.
  if (dpre_bias != nullptr)
    matmul_bwd(nullptr, nullptr, dpre_bias, dpre, nullptr, nullptr, N, 0, C, dtype);
}

}  // namespace strata::kernels::host
