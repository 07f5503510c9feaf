// The CUDA decoding attention (kernels/cuda/ops.h: attention_decode) against the host oracle
// (kernels/host/attention.h), through each of its kernels (ops.h: attention_decode_kernel):
//   - the split-KV kernel (kernels/cuda/attention_decode.cu) for T_new <= 16: dtype bf16, fp16,
//     fp32 x head size 64, 128, 80 x (NH, NKV) in {(8, 2), (4, 4)} x B in {1, 3} x past in
//     {0, 1, 37, 1000} x T_new in {1, 5}. past 1000 runs several splits and the combine kernel
//     (4 at bf16 hs 128, 8 at fp32), past <= 37 one split written directly; T_new 5 with (8, 2)
//     is 20 query rows per key/value head, three row blocks of 8;
//   - odd shapes: head size 32 (half the lanes own no dims) and 256 (2 warps a block in bf16,
//     one in fp32), multi-query with 32 query heads (4 row blocks; 20 at T_new 5), a 5000-long
//     cache (18 splits), T_new 16, and past 2300 with T_new 5, where the last split holds only
//     positions that the first row blocks do not see (their partials are empty: m = -inf);
//   - prefill, T_new 40 over past in {0, 37, 1000}: the flash forward over the caches for bf16 /
//     fp16 at head size 64 and 128, the fp32 forward for fp32 and head size 80;
//   - caches 2 bytes off 16-byte alignment: the fp32 forward.
// Inputs are random, rounded to the dtype once and given to both sides; the caches start random
// (positions >= past too: the append overwrites [past, past + T_new), the rest must stay). Each
// case checks out (tolerances as in test_attention_cuda.cpp: bf16 2e-2, fp16 5e-3, fp32 1e-4 of
// max |host|, max-abs and norm-wise; the split kernel does not round P, the flash one does), the
// caches bit for bit against the host's, the bytes after out untouched, and the same bits from a
// second call.
//
// STRATA_ATTENTION_REDUCED=1 runs a short list (for compute-sanitizer): bf16 and fp32, head
// size 64 and 80, (8, 2), B 3, past 0 and 1000, T_new 1 and 5, one flash prefill, one
// misaligned case. Exits 77 (skipped) where no GPU can be used (main_cuda_or_skip.cpp).
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
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
using Path = dev::AttentionDecodeKernel;

bool reduced() {
  const char* v = std::getenv("STRATA_ATTENTION_REDUCED");
  return v != nullptr && std::strcmp(v, "1") == 0;
}


const char* path_name(Path p) {
  switch (p) {
    case Path::split_kv: return "split_kv";
    case Path::flash_tensor_core: return "flash";
    case Path::fp32_cuda_core: return "fp32";
  }
  return "?";
}

struct Case {
  DType t;
  int B, T_new, past, NH, NKV, hs;
  std::size_t cache_offset = 0;  // bytes: the caches start this far into their buffers
  int max_T() const { return past + T_new + 3; }  // 3 positions after the new ones: untouched
  std::string str() const {
    return std::string(dtype_name(t)) + " B=" + std::to_string(B) + " T_new=" +
           std::to_string(T_new) + " past=" + std::to_string(past) + " NH=" + std::to_string(NH) +
           " NKV=" + std::to_string(NKV) + " hs=" + std::to_string(hs) +
           (cache_offset != 0 ? " cache+" + std::to_string(cache_offset) + "B" : "");
  }
};

void run_case(const Case& c, Path expected, Stream& stream) {
  SCOPED_TRACE(c.str());
  if (c.cache_offset == 0) {
    ASSERT_EQ(dev::attention_decode_kernel(c.t, c.hs, c.T_new), expected) << path_name(expected);
  }
  const std::size_t es = dtype_size(c.t);
  const std::size_t row = static_cast<std::size_t>(c.NH + 2 * c.NKV) * c.hs;
  const std::size_t n_qkv = static_cast<std::size_t>(c.B) * c.T_new * row;
  const std::size_t n_out = static_cast<std::size_t>(c.B) * c.T_new * c.NH * c.hs;
  const std::size_t n_cache = static_cast<std::size_t>(c.B) * c.max_T() * c.NKV * c.hs;
  const auto seed = static_cast<std::uint32_t>(c.past * 7919 + c.T_new * 131 + c.NH * 17 +
                                               c.NKV * 5 + c.hs + c.B * 3 + static_cast<int>(c.t));
  const Bytes qkv = random_bytes(c.t, n_qkv, seed, -2.0f, 2.0f);
  const Bytes k0 = random_bytes(c.t, n_cache, seed + 1, -2.0f, 2.0f);
  const Bytes v0 = random_bytes(c.t, n_cache, seed + 2, -2.0f, 2.0f);

  Bytes out(n_out * es), k_host = k0, v_host = v0;
  host::attention_decode(out.data(), k_host.data(), v_host.data(), qkv.data(), c.B, c.T_new,
                         c.past, c.max_T(), c.NH, c.NKV, c.hs, c.t);

  const std::size_t cache_bytes = n_cache * es, off = c.cache_offset;
  const std::size_t out_guard = 64 * static_cast<std::size_t>(c.NH) * c.hs * es;
  DeviceBuffer d_qkv(qkv), d_k(cache_bytes + off), d_v(cache_bytes + off),
      d_out(n_out * es, out_guard), d_out2(n_out * es);
  d_k.upload(k0.data(), cache_bytes, off);
  d_v.upload(v0.data(), cache_bytes, off);
  void* k_cache = d_k.as<unsigned char>(off);
  void* v_cache = d_v.as<unsigned char>(off);
  dev::attention_decode(d_out.get(), k_cache, v_cache, d_qkv.get(), c.B, c.T_new, c.past,
                        c.max_T(), c.NH, c.NKV, c.hs, c.t, stream.s);
  // Again on the caches it just appended to: it writes the same keys and values again.
  dev::attention_decode(d_out2.get(), k_cache, v_cache, d_qkv.get(), c.B, c.T_new, c.past,
                        c.max_T(), c.NH, c.NKV, c.hs, c.t, stream.s);
  stream.sync();

  const Bytes got = d_out.download();
  // No floor on the scale (min_scale ~0): decode outputs are O(1) averages of V, never all zeros.
  expect_attention_close(c.str() + " " + path_name(expected), to_floats(got, c.t), to_floats(out, c.t),
                         attention_tol(c.t), /*min_scale=*/1e-30);
  EXPECT_TRUE(d_out2.download() == got) << "attention_decode is not deterministic";
  EXPECT_TRUE(d_out.guard_intact()) << "attention_decode wrote past the end of out";
  Bytes k_dev(cache_bytes), v_dev(cache_bytes);
  d_k.download(k_dev.data(), cache_bytes, off);
  d_v.download(v_dev.data(), cache_bytes, off);
  EXPECT_TRUE(k_dev == k_host) << "k_cache differs from the host's";
  EXPECT_TRUE(v_dev == v_host) << "v_cache differs from the host's";
}

constexpr DType kDTypes[] = {DType::bf16, DType::f16, DType::f32};
constexpr DType kReducedDTypes[] = {DType::bf16, DType::f32};

TEST(AttentionDecodeCuda, KernelChoice) {
  for (DType t : kDTypes) {
    for (int hs : {32, 64, 80, 128, 256})
      for (int T_new : {1, 5, 16})
        EXPECT_EQ(dev::attention_decode_kernel(t, hs, T_new), Path::split_kv) << hs << " " << T_new;
    EXPECT_EQ(dev::attention_decode_kernel(t, 80, 17), Path::fp32_cuda_core);
  }
  for (DType t : {DType::bf16, DType::f16})
    for (int hs : {64, 128}) {
      EXPECT_EQ(dev::attention_decode_kernel(t, hs, 17), Path::flash_tensor_core) << hs;
      EXPECT_EQ(dev::attention_decode_kernel(t, hs, 1024), Path::flash_tensor_core) << hs;
    }
  EXPECT_EQ(dev::attention_decode_kernel(DType::f32, 64, 17), Path::fp32_cuda_core);
  // Head rows not a whole number of 16-byte copies: the fp32 forward.
  EXPECT_EQ(dev::attention_decode_kernel(DType::bf16, 36, 1), Path::fp32_cuda_core);
  EXPECT_EQ(dev::attention_decode_kernel(DType::f32, 30, 1), Path::fp32_cuda_core);
}

// The split kernel over the grid of the top of the file.
TEST(AttentionDecodeCuda, SplitKvMatchesHost) {
  Stream stream;
  const bool r = reduced();
  std::vector<DType> dtypes(std::begin(kDTypes), std::end(kDTypes));
  std::vector<int> head_sizes{64, 128, 80}, batches{1, 3}, pasts{0, 1, 37, 1000};
  std::vector<std::pair<int, int>> heads{{8, 2}, {4, 4}};
  if (r) {
    dtypes.assign(std::begin(kReducedDTypes), std::end(kReducedDTypes));
    head_sizes = {64, 80};
    batches = {3};
    pasts = {0, 1000};
    heads = {{8, 2}};
  }
  for (DType t : dtypes)
    for (int hs : head_sizes)
      for (const auto& [NH, NKV] : heads)
        for (int B : batches)
          for (int past : pasts)
            for (int T_new : {1, 5})
              run_case(Case{t, B, T_new, past, NH, NKV, hs}, Path::split_kv, stream);
}

TEST(AttentionDecodeCuda, SplitKvOddShapesMatchHost) {
  if (reduced()) GTEST_SKIP() << "STRATA_ATTENTION_REDUCED=1";
  Stream stream;
  for (DType t : kDTypes) {
    for (int hs : {32, 256})
      for (int T_new : {1, 5}) run_case(Case{t, 2, T_new, 300, 8, 2, hs}, Path::split_kv, stream);
    for (int T_new : {1, 5}) run_case(Case{t, 2, T_new, 500, 32, 1, 64}, Path::split_kv, stream);
    run_case(Case{t, 1, 1, 5000, 8, 2, 128}, Path::split_kv, stream);
    run_case(Case{t, 2, 16, 90, 4, 4, 64}, Path::split_kv, stream);
    run_case(Case{t, 1, 5, 2300, 8, 2, 64}, Path::split_kv, stream);
  }
}

// T_new > 16: the flash forward over the caches (bf16 / fp16, hs 64 / 128) or the fp32 one.
TEST(AttentionDecodeCuda, PrefillMatchesHost) {
  Stream stream;
  if (reduced()) {
    run_case(Case{DType::bf16, 2, 40, 37, 8, 2, 64}, Path::flash_tensor_core, stream);
    return;
  }
  for (int past : {0, 37, 1000}) {
    for (DType t : {DType::bf16, DType::f16})
      for (int hs : {64, 128})
        for (const auto& [NH, NKV] : {std::pair{8, 2}, std::pair{4, 4}})
          run_case(Case{t, 2, 40, past, NH, NKV, hs}, Path::flash_tensor_core, stream);
    run_case(Case{DType::f32, 2, 40, past, 8, 2, 64}, Path::fp32_cuda_core, stream);
    run_case(Case{DType::bf16, 2, 40, past, 8, 2, 80}, Path::fp32_cuda_core, stream);
  }
}

// Caches 2 bytes off 16-byte alignment (bf16 / fp16 elements stay aligned): the fp32 forward,
// same results.
TEST(AttentionDecodeCuda, MisalignedCachesMatchHost) {
  Stream stream;
  for (DType t : {DType::bf16, DType::f16}) {
    Case c{t, 2, 1, 100, 8, 2, 64};
    c.cache_offset = 2;
    run_case(c, Path::fp32_cuda_core, stream);
    if (reduced()) break;
  }
}

}  // namespace
}  // namespace strata
