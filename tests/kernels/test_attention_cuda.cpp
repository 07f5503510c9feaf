// The CUDA attention (kernels/cuda/ops.h: attention_fwd, attention_bwd, attention_decode)
// against the host oracle (kernels/host/attention.h), with grouped-query heads.
//
// Cases: dtype bf16, fp16, fp32 x head size 64, 128 (the tensor-core flash kernels for bf16 /
// fp16) and 32 (the fp32 CUDA-core kernels for every dtype) x T in {1, 17, 64, 200, 513} (one
// row, below a tile, exactly one tile, tiles plus a ragged tail, 8 tiles plus one row) x
// (NH, NKV) in {(4, 4), (8, 2), (6, 1)} (MHA, groups of 4, multi-query), B = 2.
// Inputs are random, rounded to the dtype once and fed to both sides. The forward's out and
// lse are compared; the backward runs on the host's out and lse (so it is tested on its own)
// and its dq, dk and dv parts are compared separately (a broken dk is not hidden by a good dq).
//
// Tolerances, relative to max |host| of each output, asserted on both the largest absolute
// difference and the norm-wise relative error (||cuda - host|| / ||host||):
//   bf16 2e-2, fp16 5e-3: both sides compute in fp32 from the same rounded inputs; the flash
//     kernels also round P (and dS in the backward) to the storage type before the next mma
//     (relative error <= 2^-9 for bf16, 2^-11 for fp16 per element, random in sign, so a few
//     units of 2^-9 / 2^-11 on a sum) and each output is rounded once (<= 2^-9 / 2^-11 of it).
//     That is ~4e-3 / ~1e-3 at worst: the tolerances leave 5x, and a wrong mask, scale, head
//     mapping or a missed tile is off by O(1).
//   fp32 1e-4: the same fp32 operations in another summation order (~1e-6 measured on the
//     fp32 kernels before this test).
//   lse (fp32 whatever the storage type) 1e-4: the scores are exact-product fp32 sums on both
//     sides.
// Output buffers (out, lse, dqkv) are followed by 64 rows of guard bytes that must stay as
// they were (the flash kernels' last tiles run up to 63 rows past T; those rows must not be
// written), and the forward without lse must give the same out.
// Also: GPT-2 small's shape (T 1024, 12 heads of 64) in bf16 and fp16; the same bits on a second
// run (forward and backward); attention_kernel() says flash
// exactly for bf16 / fp16 with head size 64 or 128; decoding with GQA caches; NH % NKV != 0 is
// a strata::Error. Exits 77 (skipped) where no GPU can be used (main_cuda_or_skip.cpp).
//
// STRATA_ATTENTION_REDUCED=1 runs the head-size tests on a reduced set (bf16, T in {17, 200},
// (NH, NKV) = (8, 2); head size 32 runs nothing): one case below a tile and one with a ragged
// tail for each flash kernel, so compute-sanitizer's memcheck and racecheck (tens of times
// slower) finish in seconds (scripts/gpu/run.sh's sanitizer stage).
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstdio>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "kernels/cuda/ops.h"
#include "kernels/host/attention.h"
#include "tests/kernels/cuda_test_util.h"

namespace strata {
namespace {

namespace host = kernels::host;
namespace dev = kernels::cuda;
using namespace test;  // tests/kernels/cuda_test_util.h

constexpr double kLseTol = 1e-4;

struct Shape {
  int B, T, NH, NKV, hs;
  std::size_t tokens() const { return static_cast<std::size_t>(B) * T; }
  std::size_t row() const { return static_cast<std::size_t>(NH + 2 * NKV) * hs; }
  std::size_t out_row() const { return static_cast<std::size_t>(NH) * hs; }
  std::string str() const {
    return "B=" + std::to_string(B) + " T=" + std::to_string(T) + " NH=" + std::to_string(NH) +
           " NKV=" + std::to_string(NKV) + " hs=" + std::to_string(hs);
  }
};

// Columns [col, col + width) of every row of a (rows, row) array of floats.
std::vector<float> columns(const std::vector<float>& x, std::size_t row, std::size_t col,
                           std::size_t width) {
  std::vector<float> out;
  for (std::size_t r = 0; r < x.size() / row; ++r)
    out.insert(out.end(), x.begin() + static_cast<long>(r * row + col),
               x.begin() + static_cast<long>(r * row + col + width));
  return out;
}

// The scale is at least kMinScale per element: where the host's output is all zeros (dq and dk
// at T = 1, where dS = P (dP - D) is exactly 0 on the host and ~1e-8 on the device, whose dP and
// D sum in different orders) the comparison is absolute, against the O(1) values of the test.
constexpr double kMinScale = 1e-2;
void expect_close(const std::string& what, const std::vector<float>& got, const std::vector<float>& want,
                  double tol) {
  expect_attention_close(what, got, want, tol, kMinScale);
}

// One case: forward (out, lse) and backward (dq, dk, dv) against the host; each twice on the
// device, the same bits asserted.
void run_case(DType t, const Shape& s, Stream& stream) {
  const std::string name = std::string(dtype_name(t)) + " " + s.str();
  SCOPED_TRACE(name);
  const std::size_t es = dtype_size(t);
  const std::size_t n_qkv = s.tokens() * s.row(), n_out = s.tokens() * s.out_row();
  const std::size_t n_stat = static_cast<std::size_t>(s.B) * s.NH * s.T;
  const auto seed = static_cast<std::uint32_t>(s.T * 131 + s.NH * 17 + s.NKV * 5 + s.hs);
  const Bytes qkv = random_bytes(t, n_qkv, seed, -2.0f, 2.0f);
  const Bytes dout = random_bytes(t, n_out, seed + 1, -1.0f, 1.0f);

  Bytes out(n_out * es), dqkv(n_qkv * es);
  std::vector<float> lse(n_stat);
  host::attention_fwd(out.data(), lse.data(), qkv.data(), s.B, s.T, s.NH, s.NKV, s.hs, t);
  host::attention_bwd(dqkv.data(), dout.data(), qkv.data(), out.data(), lse.data(), s.B, s.T,
                      s.NH, s.NKV, s.hs, t);

  // Guards of a tile of rows (64) past the last token: the flash kernels' last tiles run past T.
  const std::size_t out_guard = 64 * s.out_row() * es, qkv_guard = 64 * s.row() * es,
                    lse_guard = 64 * 4;
  DeviceBuffer d_qkv(qkv), d_out(n_out * es, out_guard), d_lse(n_stat * 4, lse_guard),
      d_out2(n_out * es), d_lse2(n_stat * 4), d_out3(n_out * es, out_guard);
  dev::attention_fwd(d_out.get(), d_lse.as<float>(), d_qkv.get(), s.B, s.T, s.NH, s.NKV, s.hs, t,
                     stream.s);
  dev::attention_fwd(d_out2.get(), d_lse2.as<float>(), d_qkv.get(), s.B, s.T, s.NH, s.NKV, s.hs, t,
                     stream.s);
  const Bytes got_out = d_out.download(), got_lse = d_lse.download();
  std::vector<float> got_lse_f(n_stat);
  std::copy_n(reinterpret_cast<const float*>(got_lse.data()), n_stat, got_lse_f.begin());
  std::printf("%s\n", name.c_str());
  expect_close("fwd out", to_floats(got_out, t), to_floats(out, t), attention_tol(t));
  expect_close("fwd lse", got_lse_f, lse, kLseTol);
  EXPECT_TRUE(d_out2.download() == got_out) << "attention_fwd out is not deterministic";
  EXPECT_TRUE(d_lse2.download() == got_lse) << "attention_fwd lse is not deterministic";
  EXPECT_TRUE(d_out.guard_intact()) << "attention_fwd wrote past the end of out";
  EXPECT_TRUE(d_lse.guard_intact()) << "attention_fwd wrote past the end of lse";
  // Without lse: the same out.
  dev::attention_fwd(d_out3.get(), nullptr, d_qkv.get(), s.B, s.T, s.NH, s.NKV, s.hs, t, stream.s);
  EXPECT_TRUE(d_out3.download() == got_out) << "attention_fwd without lse differs";
  EXPECT_TRUE(d_out3.guard_intact()) << "attention_fwd (no lse) wrote past the end of out";

  // Backward from the host's out and lse; dqkv starts from garbage (it is overwritten).
  Bytes host_lse(n_stat * 4);
  std::copy_n(reinterpret_cast<const unsigned char*>(lse.data()), host_lse.size(), host_lse.begin());
  DeviceBuffer d_dout(dout), d_hout(out), d_hlse(host_lse),
      d_dqkv(random_bytes(t, n_qkv, seed + 2, -9.0f, 9.0f), qkv_guard), d_dqkv2(n_qkv * es);
  dev::attention_bwd(d_dqkv.get(), d_dout.get(), d_qkv.get(), d_hout.get(), d_hlse.as<float>(),
                     s.B, s.T, s.NH, s.NKV, s.hs, t, stream.s);
  dev::attention_bwd(d_dqkv2.get(), d_dout.get(), d_qkv.get(), d_hout.get(), d_hlse.as<float>(),
                     s.B, s.T, s.NH, s.NKV, s.hs, t, stream.s);
  const Bytes got_dqkv = d_dqkv.download();
  const std::vector<float> g = to_floats(got_dqkv, t), w = to_floats(dqkv, t);
  const std::size_t q_w = s.out_row(), kv_w = static_cast<std::size_t>(s.NKV) * s.hs;
  expect_close("bwd dq", columns(g, s.row(), 0, q_w), columns(w, s.row(), 0, q_w),
               attention_tol(t));
  expect_close("bwd dk", columns(g, s.row(), q_w, kv_w), columns(w, s.row(), q_w, kv_w),
               attention_tol(t));
  expect_close("bwd dv", columns(g, s.row(), q_w + kv_w, kv_w),
               columns(w, s.row(), q_w + kv_w, kv_w), attention_tol(t));
  EXPECT_TRUE(d_dqkv2.download() == got_dqkv) << "attention_bwd is not deterministic";
  EXPECT_TRUE(d_dqkv.guard_intact()) << "attention_bwd wrote past the end of dqkv";
}

constexpr DType kDTypes[] = {DType::bf16, DType::f16, DType::f32};
constexpr int kTs[] = {1, 17, 64, 200, 513};
constexpr std::pair<int, int> kHeads[] = {{4, 4}, {8, 2}, {6, 1}};

bool reduced_cases() {
  const char* v = std::getenv("STRATA_ATTENTION_REDUCED");
  return v != nullptr && std::string(v) == "1";
}

void run_head_size(int hs) {
  Stream stream;
  if (reduced_cases()) {
    if (hs != 64 && hs != 128) return;
    for (int T : {17, 200}) run_case(DType::bf16, Shape{2, T, 8, 2, hs}, stream);
    return;
  }
  for (DType t : kDTypes)
    for (int T : kTs)
      for (const auto& [NH, NKV] : kHeads) run_case(t, Shape{2, T, NH, NKV, hs}, stream);
}

TEST(AttentionCuda, KernelChoice) {
  for (DType t : {DType::bf16, DType::f16}) {
    EXPECT_EQ(dev::attention_kernel(t, 64), dev::AttentionKernel::flash_tensor_core);
    EXPECT_EQ(dev::attention_kernel(t, 128), dev::AttentionKernel::flash_tensor_core);
    for (int hs : {32, 80, 96, 256})
      EXPECT_EQ(dev::attention_kernel(t, hs), dev::AttentionKernel::fp32_cuda_core) << hs;
  }
  for (int hs : {32, 64, 128})
    EXPECT_EQ(dev::attention_kernel(DType::f32, hs), dev::AttentionKernel::fp32_cuda_core) << hs;
}

// The tensor-core kernels (bf16, fp16) and the fp32 kernels (fp32).
TEST(AttentionCuda, HeadSize64MatchesHost) { run_head_size(64); }
TEST(AttentionCuda, HeadSize128MatchesHost) { run_head_size(128); }
// The fp32 CUDA-core kernels for every dtype.
TEST(AttentionCuda, HeadSize32MatchesHost) { run_head_size(32); }

// GPT-2 small's attention at full length: 16 query tiles, deep in the double-buffered loops.
TEST(AttentionCuda, Gpt2ShapeMatchesHost) {
  Stream stream;
  for (DType t : {DType::bf16, DType::f16}) run_case(t, Shape{1, 1024, 12, 12, 64}, stream);
}

TEST(AttentionCuda, DecodeWithGroupedHeads) {
  struct Case { int B, T_new, past, max_T, NH, NKV, hs; };
  const Case cases[] = {{2, 1, 17, 20, 8, 2, 64}, {2, 5, 9, 16, 6, 1, 128}, {1, 37, 0, 40, 4, 4, 32}};
  Stream stream;
  for (DType t : kDTypes)
    for (const Case& c : cases) {
      SCOPED_TRACE(std::string(dtype_name(t)) + " T_new " + std::to_string(c.T_new) + " past " +
                   std::to_string(c.past) + " NH " + std::to_string(c.NH) + " NKV " +
                   std::to_string(c.NKV));
      const std::size_t es = dtype_size(t);
      const std::size_t row = static_cast<std::size_t>(c.NH + 2 * c.NKV) * c.hs;
      const std::size_t n_out = static_cast<std::size_t>(c.B) * c.T_new * c.NH * c.hs;
      const std::size_t n_cache = static_cast<std::size_t>(c.B) * c.max_T * c.NKV * c.hs;
      const Bytes qkv = random_bytes(t, static_cast<std::size_t>(c.B) * c.T_new * row, 41, -2, 2);
      Bytes k_cache = random_bytes(t, n_cache, 42, -2, 2), v_cache = random_bytes(t, n_cache, 43, -2, 2);
      DeviceBuffer d_qkv(qkv), d_k(k_cache), d_v(v_cache), d_out(n_out * es);
      Bytes out(n_out * es);
      host::attention_decode(out.data(), k_cache.data(), v_cache.data(), qkv.data(), c.B, c.T_new,
                             c.past, c.max_T, c.NH, c.NKV, c.hs, t);
      dev::attention_decode(d_out.get(), d_k.get(), d_v.get(), d_qkv.get(), c.B, c.T_new, c.past,
                            c.max_T, c.NH, c.NKV, c.hs, t, stream.s);
      expect_close("decode out", to_floats(d_out.download(), t), to_floats(out, t),
                   attention_tol(t));
      EXPECT_TRUE(d_k.download() == k_cache) << "k_cache differs from the host's";
      EXPECT_TRUE(d_v.download() == v_cache) << "v_cache differs from the host's";
    }
}

TEST(AttentionCuda, HeadsNotAMultipleIsAnError) {
  Stream stream;
  DeviceBuffer d(1 << 16);
  EXPECT_THROW(
      dev::attention_fwd(d.get(), d.as<float>(), d.get(), 1, 4, 6, 4, 64, DType::bf16, stream.s),
      Error);
  EXPECT_THROW(dev::attention_bwd(d.get(), d.get(), d.get(), d.get(), d.as<float>(), 1, 4, 6, 4, 64,
                                  DType::bf16, stream.s),
               Error);
  EXPECT_THROW(dev::attention_decode(d.get(), d.get(), d.get(), d.get(), 1, 1, 0, 4, 6, 4, 64,
                                     DType::bf16, stream.s),
               Error);
}

}  // namespace
}  // namespace strata
