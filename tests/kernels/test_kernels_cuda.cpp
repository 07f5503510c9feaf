// Every CUDA GPT op (kernels/cuda/ops.h) against its host twin (kernels/host/*.h, the oracle),
// and the CUDA AdamW (kernels/cuda/adamw.h) against the CPU Adam (cpu_adam/adam.h).
//
// Inputs are random, rounded to the dtype once, and fed to both sides, so the two differ only
// by summation order and the final rounding. Each output is compared in fp32:
//   norm_rel = ||cuda - host||_2 / ||host||_2   asserted <= tol(dtype)
//   max_abs  = max |cuda - host|                asserted <= 10 tol(dtype) max |host|
//   max_rel  = max |cuda - host| / |host| over elements with |host| >= 1e-3 max |host| (shown)
// tol: fp32 1e-4, bf16 1.5e-2, fp16 3e-3 (about two ulps of the storage type norm-wise);
// fp32 statistics (mean, rstd, lse, losses) 1e-4 whatever the storage type (same inputs, fp32
// math on both sides). Gradients that accumulate (+=) start from random values, outputs that
// are overwritten from garbage. A table of every comparison is printed at the end.
//
// AdamW: the same operations in the same order without FMA on both sides, so the CUDA result
// is expected to be bit-identical; asserted: at most 1 ulp on params, exp_avg, exp_avg_sq and
// params_out, over several steps, adam and adamw modes, f32 / bf16 / f16 grads.
//
// Exits 77 (skipped) where no GPU can be used.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "cpu_adam/adam.h"
#include "kernels/cuda/adamw.h"
#include "kernels/cuda/ops.h"
#include "kernels/host/attention.h"
#include "kernels/host/cross_entropy.h"
#include "kernels/host/elementwise.h"
#include "kernels/host/embedding.h"
#include "kernels/host/layernorm.h"
#include "kernels/host/matmul.h"
#include "tests/kernels/cuda_test_util.h"

namespace strata {
namespace {

namespace host = kernels::host;
namespace dev = kernels::cuda;

using namespace test;  // tests/kernels/cuda_test_util.h

// ---- comparison and the report --------------------------------------------------------------

struct Row {
  std::string op, dtype, shape, output;
  double max_abs, max_rel, norm_rel, tol;
};
std::vector<Row>& report() {
  static std::vector<Row> rows;
  return rows;
}

// Compares got against want (both in storage t), records a report row, asserts the tolerance.
void check_recorded(const std::string& op, const std::string& shape, DType op_dtype,
                    const char* output, const Bytes& got, const Bytes& want, DType t, double tol) {
  SCOPED_TRACE(op + " " + std::string(dtype_name(op_dtype)) + " " + shape + " " + output);
  ASSERT_EQ(got.size(), want.size());
  const std::vector<float> g = to_floats(got, t), w = to_floats(want, t);
  double max_abs = 0, max_w = 0, diff2 = 0, want2 = 0, max_rel = 0;
  for (float x : w) max_w = std::max(max_w, std::fabs(static_cast<double>(x)));
  bool nan = false;
  for (std::size_t i = 0; i < g.size(); ++i) {
    const double d = std::fabs(static_cast<double>(g[i]) - w[i]);
    if (std::isnan(d) && !(std::isnan(g[i]) && std::isnan(w[i]))) nan = true;
    if (std::isnan(d)) continue;
    max_abs = std::max(max_abs, d);
    diff2 += d * d;
    want2 += static_cast<double>(w[i]) * w[i];
    if (std::fabs(w[i]) >= 1e-3 * max_w && w[i] != 0.0f) max_rel = std::max(max_rel, d / std::fabs(w[i]));
  }
  const double norm_rel = want2 > 0 ? std::sqrt(diff2 / want2) : std::sqrt(diff2);
  report().push_back(Row{op, std::string(dtype_name(op_dtype)), shape, output, max_abs, max_rel,
                         norm_rel, tol});
  EXPECT_FALSE(nan) << "NaN on one side only";
  EXPECT_LE(norm_rel, tol);
  EXPECT_LE(max_abs, 10 * tol * std::max(max_w, 1e-30));
}

void check_out(const std::string& op, const std::string& shape, DType t, const char* output,
               const Bytes& got, const Bytes& want) {
  check_recorded(op, shape, t, output, got, want, t, tol_for(t));
}
void check_stat(const std::string& op, const std::string& shape, DType t, const char* output,
                const Bytes& got, const Bytes& want) {
  check_recorded(op, shape, t, output, got, want, DType::f32, kStatTol);
}

std::string dims(std::initializer_list<std::pair<const char*, long long>> kv) {
  std::string s;
  for (const auto& [k, v] : kv) s += (s.empty() ? "" : " ") + std::string(k) + "=" + std::to_string(v);
  return s;
}

// ---- embedding ------------------------------------------------------------------------------

TEST(KernelsCuda, Embedding) {
  struct Shape { int B, T, C, V, npos, pos_offset; };
  const Shape shapes[] = {{1, 1, 1, 1, 1, 0}, {2, 5, 7, 11, 9, 3}, {3, 17, 70, 5, 20, 2},
                          {4, 64, 768, 1000, 64, 0}};
  Stream stream;
  for (DType t : kAllDTypes) {
    for (const Shape& s : shapes) {
      const std::string shape = dims({{"B", s.B}, {"T", s.T}, {"C", s.C}, {"V", s.V}, {"off", s.pos_offset}});
      const std::size_t n = static_cast<std::size_t>(s.B) * s.T * s.C;
      const auto tokens = random_tokens(static_cast<std::size_t>(s.B) * s.T, s.V, 7 + s.C);
      const Bytes wte = random_bytes(t, static_cast<std::size_t>(s.V) * s.C, 1);
      const Bytes wpe = random_bytes(t, static_cast<std::size_t>(s.npos) * s.C, 2);
      Bytes out(n * dtype_size(t));
      host::embedding_fwd(out.data(), tokens.data(), wte.data(), wpe.data(), s.B, s.T, s.C,
                          s.pos_offset, t);
      DeviceBuffer d_tok(as_bytes(tokens)), d_wte(wte), d_wpe(wpe), d_out(out.size());
      dev::embedding_fwd(d_out.get(), d_tok.as<std::int32_t>(), d_wte.get(), d_wpe.get(), s.B, s.T,
                         s.C, s.pos_offset, t, stream.s);
      check_out("embedding_fwd", shape, t, "out", d_out.download(), out);

      // Backward: dwte, dwpe accumulate onto random values.
      const Bytes dout = random_bytes(t, n, 3);
      Bytes dwte = random_bytes(t, wte.size() / dtype_size(t), 4);
      Bytes dwpe = random_bytes(t, static_cast<std::size_t>(s.T) * s.C, 5);
      DeviceBuffer d_dout(dout), d_dwte(dwte), d_dwpe(dwpe);
      host::embedding_bwd(dwte.data(), dwpe.data(), dout.data(), tokens.data(), s.B, s.T, s.C, t);
      dev::embedding_bwd(d_dwte.get(), d_dwpe.get(), d_dout.get(), d_tok.as<std::int32_t>(), s.B,
                         s.T, s.C, t, stream.s);
      const Bytes got_dwte = d_dwte.download();
      check_out("embedding_bwd", shape, t, "dwte", got_dwte, dwte);
      check_out("embedding_bwd", shape, t, "dwpe", d_dwpe.download(), dwpe);

      // Deterministic: the same start gives the same bits.
      const Bytes start = random_bytes(t, wte.size() / dtype_size(t), 4);
      DeviceBuffer d_again(start);
      dev::embedding_bwd(d_again.get(), nullptr, d_dout.get(), d_tok.as<std::int32_t>(), s.B, s.T,
                         s.C, t, stream.s);
      EXPECT_EQ(d_again.download(), got_dwte) << "embedding_bwd is not deterministic";
    }
  }
}

// ---- layernorm ------------------------------------------------------------------------------

TEST(KernelsCuda, LayerNorm) {
  struct Shape { long long N; int C; };
  const Shape shapes[] = {{1, 1}, {7, 13}, {37, 768}, {129, 1600}, {4099, 100}};
  constexpr float kEps = 1e-5f;
  Stream stream;
  for (DType t : kAllDTypes) {
    for (const Shape& s : shapes) {
      const std::string shape = dims({{"N", s.N}, {"C", s.C}});
      const std::size_t n = static_cast<std::size_t>(s.N) * s.C;
      const Bytes inp = random_bytes(t, n, 11, -2.0f, 3.0f);
      const Bytes w = random_bytes(t, s.C, 12, 0.5f, 1.5f), bias = random_bytes(t, s.C, 13);
      Bytes out(n * dtype_size(t)), mean(s.N * 4), rstd(s.N * 4);
      host::layernorm_fwd(out.data(), reinterpret_cast<float*>(mean.data()),
                          reinterpret_cast<float*>(rstd.data()), inp.data(), w.data(), bias.data(),
                          s.N, s.C, kEps, t);
      DeviceBuffer d_inp(inp), d_w(w), d_b(bias), d_out(out.size()), d_mean(mean.size()),
          d_rstd(rstd.size());
      dev::layernorm_fwd(d_out.get(), d_mean.as<float>(), d_rstd.as<float>(), d_inp.get(),
                         d_w.get(), d_b.get(), s.N, s.C, kEps, t, stream.s);
      check_out("layernorm_fwd", shape, t, "out", d_out.download(), out);
      check_stat("layernorm_fwd", shape, t, "mean", d_mean.download(), mean);
      check_stat("layernorm_fwd", shape, t, "rstd", d_rstd.download(), rstd);

      // Backward from the host's statistics; every gradient accumulates.
      const Bytes dout = random_bytes(t, n, 14);
      Bytes dinp = random_bytes(t, n, 15), dw = random_bytes(t, s.C, 16),
            db = random_bytes(t, s.C, 17);
      DeviceBuffer d_dout(dout), d_dinp(dinp), d_dw(dw), d_db(db), d_hmean(mean), d_hrstd(rstd);
      host::layernorm_bwd(dinp.data(), dw.data(), db.data(), dout.data(), inp.data(), w.data(),
                          reinterpret_cast<const float*>(mean.data()),
                          reinterpret_cast<const float*>(rstd.data()), s.N, s.C, t);
      dev::layernorm_bwd(d_dinp.get(), d_dw.get(), d_db.get(), d_dout.get(), d_inp.get(), d_w.get(),
                         d_hmean.as<float>(), d_hrstd.as<float>(), s.N, s.C, t, stream.s);
      check_out("layernorm_bwd", shape, t, "dinp", d_dinp.download(), dinp);
      check_out("layernorm_bwd", shape, t, "dweight", d_dw.download(), dw);
      check_out("layernorm_bwd", shape, t, "dbias", d_db.download(), db);
    }
  }
}

// ---- matmul ---------------------------------------------------------------------------------

TEST(KernelsCuda, Matmul) {
  struct Shape { long long N; int C, OC; bool bias; };
  const Shape shapes[] = {{1, 1, 1, true},       {7, 13, 5, true},       {37, 70, 131, false},
                          {64, 768, 2304, true}, {65, 129, 1001, true}};
  Stream stream;
  for (DType t : kAllDTypes) {
    for (const Shape& s : shapes) {
      const std::string shape = dims({{"N", s.N}, {"C", s.C}, {"OC", s.OC}, {"bias", s.bias}});
      const std::size_t n_in = static_cast<std::size_t>(s.N) * s.C;
      const std::size_t n_out = static_cast<std::size_t>(s.N) * s.OC;
      const std::size_t n_w = static_cast<std::size_t>(s.OC) * s.C;
      const Bytes inp = random_bytes(t, n_in, 21), w = random_bytes(t, n_w, 22),
                  bias = random_bytes(t, s.OC, 23);
      Bytes out(n_out * dtype_size(t));
      host::matmul_fwd(out.data(), inp.data(), w.data(), s.bias ? bias.data() : nullptr, s.N, s.C,
                       s.OC, t);
      DeviceBuffer d_inp(inp), d_w(w), d_bias(bias), d_out(random_bytes(t, n_out, 24));
      dev::matmul_fwd(d_out.get(), d_inp.get(), d_w.get(), s.bias ? d_bias.get() : nullptr, s.N,
                      s.C, s.OC, t, stream.s);
      check_out("matmul_fwd", shape, t, "out", d_out.download(), out);

      // dinp is overwritten (starts from garbage), dweight and dbias accumulate.
      const Bytes dout = random_bytes(t, n_out, 25);
      Bytes dinp = random_bytes(t, n_in, 26), dw = random_bytes(t, n_w, 27),
            db = random_bytes(t, s.OC, 28);
      DeviceBuffer d_dout(dout), d_dinp(random_bytes(t, n_in, 29)), d_dw(dw), d_db(db);
      host::matmul_bwd(dinp.data(), dw.data(), s.bias ? db.data() : nullptr, dout.data(),
                       inp.data(), w.data(), s.N, s.C, s.OC, t);
      dev::matmul_bwd(d_dinp.get(), d_dw.get(), s.bias ? d_db.get() : nullptr, d_dout.get(),
                      d_inp.get(), d_w.get(), s.N, s.C, s.OC, t, stream.s);
      check_out("matmul_bwd", shape, t, "dinp", d_dinp.download(), dinp);
      check_out("matmul_bwd", shape, t, "dweight", d_dw.download(), dw);
      if (s.bias) check_out("matmul_bwd", shape, t, "dbias", d_db.download(), db);
    }
  }
}

// ---- attention ------------------------------------------------------------------------------

TEST(KernelsCuda, Attention) {
  struct Shape { int B, T, C, NH; };
  // Head sizes 6, 6, 20, 64, 64, 128, 200, 256; T odd, not powers of 2, across tile edges.
  const Shape shapes[] = {{1, 1, 6, 1},    {2, 7, 12, 2},     {2, 33, 40, 2},  {1, 65, 128, 2},
                          {2, 100, 192, 3}, {1, 129, 384, 3}, {1, 37, 200, 1}, {1, 40, 256, 1}};
  Stream stream;
  for (DType t : kAllDTypes) {
    for (const Shape& s : shapes) {
      const std::string shape = dims({{"B", s.B}, {"T", s.T}, {"C", s.C}, {"NH", s.NH}});
      const std::size_t n = static_cast<std::size_t>(s.B) * s.T * s.C;
      const std::size_t n_stat = static_cast<std::size_t>(s.B) * s.NH * s.T;
      const Bytes qkv = random_bytes(t, 3 * n, 31, -2.0f, 2.0f);
      Bytes out(n * dtype_size(t)), lse(n_stat * 4);
      host::attention_fwd(out.data(), reinterpret_cast<float*>(lse.data()), qkv.data(), s.B, s.T,
                          s.NH, s.NH, s.C / s.NH, t);
      DeviceBuffer d_qkv(qkv), d_out(out.size()), d_lse(lse.size());
      dev::attention_fwd(d_out.get(), d_lse.as<float>(), d_qkv.get(), s.B, s.T, s.NH, s.NH, s.C / s.NH, t,
                         stream.s);
      check_out("attention_fwd", shape, t, "out", d_out.download(), out);
      check_stat("attention_fwd", shape, t, "lse", d_lse.download(), lse);

      // Backward from the host's out and lse; dqkv is overwritten (starts from garbage).
      const Bytes dout = random_bytes(t, n, 32);
      Bytes dqkv(3 * n * dtype_size(t));
      host::attention_bwd(dqkv.data(), dout.data(), qkv.data(), out.data(),
                          reinterpret_cast<const float*>(lse.data()), s.B, s.T, s.NH, s.NH,
                          s.C / s.NH, t);
      DeviceBuffer d_dout(dout), d_hout(out), d_hlse(lse), d_dqkv(random_bytes(t, 3 * n, 33));
      dev::attention_bwd(d_dqkv.get(), d_dout.get(), d_qkv.get(), d_hout.get(),
                         d_hlse.as<float>(), s.B, s.T, s.NH, s.NH, s.C / s.NH, t, stream.s);
      const Bytes got = d_dqkv.download();
      check_out("attention_bwd", shape, t, "dqkv", got, dqkv);
      DeviceBuffer d_again(dqkv.size());
      dev::attention_bwd(d_again.get(), d_dout.get(), d_qkv.get(), d_hout.get(),
                         d_hlse.as<float>(), s.B, s.T, s.NH, s.NH, s.C / s.NH, t, stream.s);
      EXPECT_EQ(d_again.download(), got) << "attention_bwd is not deterministic";
    }
  }
}

TEST(KernelsCuda, AttentionDecode) {
  struct Shape { int B, T_new, past, max_T, C, NH; };
  const Shape shapes[] = {{1, 1, 0, 1, 6, 1},     {2, 1, 17, 20, 40, 2},  {2, 5, 9, 16, 128, 2},
                          {1, 3, 60, 64, 192, 3}, {2, 37, 0, 40, 64, 1}, {1, 2, 70, 80, 256, 1}};
  Stream stream;
  for (DType t : kAllDTypes) {
    for (const Shape& s : shapes) {
      const std::string shape = dims({{"B", s.B}, {"T_new", s.T_new}, {"past", s.past},
                                      {"max_T", s.max_T}, {"C", s.C}, {"NH", s.NH}});
      const std::size_t n = static_cast<std::size_t>(s.B) * s.T_new * s.C;
      const std::size_t n_cache = static_cast<std::size_t>(s.B) * s.max_T * s.C;
      const Bytes qkv = random_bytes(t, 3 * n, 41, -2.0f, 2.0f);
      // The cache's first `past` positions act as earlier tokens; the rest is garbage that must
      // be overwritten (positions [past, past + T_new)) or left alone.
      Bytes k_cache = random_bytes(t, n_cache, 42, -2.0f, 2.0f);
      Bytes v_cache = random_bytes(t, n_cache, 43, -2.0f, 2.0f);
      DeviceBuffer d_qkv(qkv), d_k(k_cache), d_v(v_cache), d_out(n * dtype_size(t));
      Bytes out(n * dtype_size(t));
      host::attention_decode(out.data(), k_cache.data(), v_cache.data(), qkv.data(), s.B, s.T_new,
                             s.past, s.max_T, s.NH, s.NH, s.C / s.NH, t);
      dev::attention_decode(d_out.get(), d_k.get(), d_v.get(), d_qkv.get(), s.B, s.T_new, s.past,
                            s.max_T, s.NH, s.NH, s.C / s.NH, t, stream.s);
      check_out("attention_decode", shape, t, "out", d_out.download(), out);
      EXPECT_EQ(d_k.download(), k_cache) << shape << ": k_cache differs from the host's";
      EXPECT_EQ(d_v.download(), v_cache) << shape << ": v_cache differs from the host's";
    }
  }
}

// ---- element-wise ---------------------------------------------------------------------------

TEST(KernelsCuda, GeluAndResidual) {
  const long long sizes[] = {1, 1000, 1000003};
  Stream stream;
  for (DType t : kAllDTypes) {
    for (long long n : sizes) {
      const std::string shape = dims({{"n", n}});
      const auto un = static_cast<std::size_t>(n);
      const Bytes x = random_bytes(t, un, 51, -5.0f, 5.0f), dout = random_bytes(t, un, 52);
      Bytes y(x.size()), dx(x.size()), sum(x.size());
      host::gelu_fwd(y.data(), x.data(), n, t);
      host::gelu_bwd(dx.data(), x.data(), dout.data(), n, t);
      host::residual_fwd(sum.data(), x.data(), dout.data(), n, t);

      DeviceBuffer d_x(x), d_dout(dout), d_y(y.size()), d_dx(dx.size()), d_sum(sum.size());
      dev::gelu_fwd(d_y.get(), d_x.get(), n, t, stream.s);
      dev::gelu_bwd(d_dx.get(), d_x.get(), d_dout.get(), n, t, stream.s);
      dev::residual_fwd(d_sum.get(), d_x.get(), d_dout.get(), n, t, stream.s);
      check_out("gelu_fwd", shape, t, "out", d_y.download(), y);
      check_out("gelu_bwd", shape, t, "dinp", d_dx.download(), dx);
      check_out("residual_fwd", shape, t, "out", d_sum.download(), sum);

      // In place: out aliases inp (gelu), dinp aliases dout, out aliases a (residual).
      DeviceBuffer d_x2(x), d_dout2(dout), d_a(x);
      dev::gelu_fwd(d_x2.get(), d_x2.get(), n, t, stream.s);
      dev::gelu_bwd(d_dout2.get(), d_x.get(), d_dout2.get(), n, t, stream.s);
      dev::residual_fwd(d_a.get(), d_a.get(), d_dout.get(), n, t, stream.s);
      check_out("gelu_fwd (in place)", shape, t, "out", d_x2.download(), y);
      check_out("gelu_bwd (in place)", shape, t, "dinp", d_dout2.download(), dx);
      check_out("residual_fwd (in place)", shape, t, "out", d_a.download(), sum);
    }
  }
}

// ---- softmax + cross-entropy ----------------------------------------------------------------

TEST(KernelsCuda, SoftmaxCrossEntropy) {
  // ld > V: rows of a padded LM head; the padding holds random values that must be ignored, and
  // gets a zero gradient.
  struct Shape { long long N; int V; int ld; };
  const Shape shapes[] = {{1, 1, 1},         {3, 11, 11},   {37, 37, 37}, {8, 50257, 50257},
                          {65, 1000, 1000}, {5, 11, 16},    {8, 50257, 50304}};
  Stream stream;
  for (DType t : kAllDTypes) {
    for (const Shape& s : shapes) {
      const std::string shape = dims({{"N", s.N}, {"V", s.V}, {"ld", s.ld}});
      const std::size_t n = static_cast<std::size_t>(s.N) * s.ld;
      const Bytes logits = random_bytes(t, n, 61, -8.0f, 8.0f);
      const auto targets = random_tokens(static_cast<std::size_t>(s.N), s.V, 62);
      const float dloss = 1.0f / static_cast<float>(s.N);
      Bytes losses(s.N * 4), dlogits(logits.size());
      host::softmax_xent_fwd(reinterpret_cast<float*>(losses.data()), logits.data(),
                             targets.data(), s.N, s.V, s.ld, t);
      host::softmax_xent_bwd(dlogits.data(), logits.data(), targets.data(), s.N, s.V, s.ld, dloss, t);

      DeviceBuffer d_logits(logits), d_tgt(as_bytes(targets)), d_losses(losses.size()),
          d_dlogits(dlogits.size());
      dev::softmax_xent_fwd(d_losses.as<float>(), d_logits.get(), d_tgt.as<std::int32_t>(), s.N,
                            s.V, s.ld, t, stream.s);
      dev::softmax_xent_bwd(d_dlogits.get(), d_logits.get(), d_tgt.as<std::int32_t>(), s.N, s.V,
                            s.ld, dloss, t, stream.s);
      check_stat("softmax_xent_fwd", shape, t, "losses", d_losses.download(), losses);
      check_out("softmax_xent_bwd", shape, t, "dlogits", d_dlogits.download(), dlogits);
      // In place: dlogits aliases logits.
      dev::softmax_xent_bwd(d_logits.get(), d_logits.get(), d_tgt.as<std::int32_t>(), s.N, s.V,
                            s.ld, dloss, t, stream.s);
      check_out("softmax_xent_bwd (in place)", shape, t, "dlogits", d_logits.download(), dlogits);
    }
  }
}

// ---- AdamW ----------------------------------------------------------------------------------

// Distance in ulps between two floats of the same sign class (monotonic integer mapping).
std::int64_t ulp_distance(float a, float b) {
  auto key = [](float f) {
    std::int32_t i;
    std::memcpy(&i, &f, 4);
    return i < 0 ? static_cast<std::int64_t>(INT32_MIN) - i : static_cast<std::int64_t>(i);
  };
  return std::llabs(key(a) - key(b));
}
std::int64_t ulp_distance16(std::uint16_t a, std::uint16_t b, DType t) {
  const float fa = t == DType::bf16 ? bf16_to_fp32(a) : fp16_to_fp32(a);
  const float fb = t == DType::bf16 ? bf16_to_fp32(b) : fp16_to_fp32(b);
  if (fa == fb) return 0;
  auto key = [](std::uint16_t h) {
    return (h & 0x8000u) ? -static_cast<std::int64_t>(h & 0x7FFFu) : static_cast<std::int64_t>(h);
  };
  return std::llabs(key(a) - key(b));
}

template <typename T>
std::vector<T> download_as(const DeviceBuffer& d) {
  const Bytes b = d.download();
  std::vector<T> out(b.size() / sizeof(T));
  if (!b.empty()) std::memcpy(out.data(), b.data(), b.size());
  return out;
}

template <typename T>
Bytes bytes_of(const std::vector<T>& v) {
  Bytes b(v.size() * sizeof(T));
  if (!b.empty()) std::memcpy(b.data(), v.data(), b.size());
  return b;
}

// cpu_adam::adam_scalars as the CUDA launcher takes them (what runtime/ops/optim_ops.cpp does).
dev::AdamwScalars adamw_scalars(const cpu_adam::AdamHyper& hyper, std::int64_t step,
                                float grad_scale) {
  const cpu_adam::AdamScalars c = cpu_adam::adam_scalars(hyper, step, grad_scale);
  return {c.grad_scale, c.beta1, c.one_minus_beta1, c.beta2,  c.one_minus_beta2, c.step_size,
          c.bc2_sqrt,   c.eps,   c.l2,              c.decay, c.has_l2,          c.has_decay};
}

TEST(KernelsCuda, AdamwMatchesCpuAdam) {
  constexpr int kSteps = 4;
  constexpr std::int64_t kMaxUlp = 1;
  const std::size_t sizes[] = {1, 1000, 100003};
  Stream stream;
  for (cpu_adam::AdamMode mode : {cpu_adam::AdamMode::adamw, cpu_adam::AdamMode::adam}) {
    for (DType grad_t : kAllDTypes) {
      for (std::size_t n : sizes) {
        for (bool bias_correction : {true, false}) {
          const DType out_t = grad_t == DType::f16 ? DType::f16 : DType::bf16;
          const bool with_out = n != 1000;
          SCOPED_TRACE(testing::Message()
                       << (mode == cpu_adam::AdamMode::adamw ? "adamw" : "adam") << " grads "
                       << dtype_name(grad_t) << " n=" << n << " bias_correction=" << bias_correction);
          cpu_adam::AdamHyper hyper;
          hyper.lr = 3e-3f;
          hyper.weight_decay = 0.05f;
          hyper.mode = mode;
          hyper.bias_correction = bias_correction;
          constexpr float kGradScale = 0.5f;

          std::vector<float> params = random_floats(n, 71, -1.0f, 1.0f);
          std::vector<float> m(n, 0.0f), v(n, 0.0f);
          std::vector<std::uint16_t> out16(n, 0);
          DeviceBuffer d_p(bytes_of(params)), d_m(bytes_of(m)), d_v(bytes_of(v)),
              d_out(n * 2);
          std::int64_t worst_p = 0, worst_m = 0, worst_v = 0, worst_out = 0;
          for (int step = 1; step <= kSteps; ++step) {
            const Bytes grads = random_bytes(grad_t, n, 100 + step, -0.1f, 0.1f);
            cpu_adam::AdamShard shard;
            shard.params = params.data();
            shard.grads = grads.data();
            shard.grad_dtype = grad_t;
            shard.exp_avg = m.data();
            shard.exp_avg_sq = v.data();
            shard.numel = n;
            shard.params_out = with_out ? out16.data() : nullptr;
            shard.out_dtype = out_t;
            cpu_adam::adam_step(SimdLevel::scalar, 1, hyper, step, shard, kGradScale);

            DeviceBuffer d_g(grads);
            dev::adamw(d_p.as<float>(), d_g.get(), grad_t, d_m.as<float>(), d_v.as<float>(), n,
                       adamw_scalars(hyper, step, kGradScale), with_out ? d_out.get() : nullptr,
                       out_t, stream.s);
            const auto gp = download_as<float>(d_p), gm = download_as<float>(d_m),
                       gv = download_as<float>(d_v);
            const auto go = download_as<std::uint16_t>(d_out);
            for (std::size_t i = 0; i < n; ++i) {
              worst_p = std::max(worst_p, ulp_distance(gp[i], params[i]));
              worst_m = std::max(worst_m, ulp_distance(gm[i], m[i]));
              worst_v = std::max(worst_v, ulp_distance(gv[i], v[i]));
              if (with_out) worst_out = std::max(worst_out, ulp_distance16(go[i], out16[i], out_t));
            }
          }
          std::printf("adamw %-5s grads %-4s n=%-6zu bc=%d: max ulp params %lld, exp_avg %lld, "
                      "exp_avg_sq %lld, params_out %lld\n",
                      mode == cpu_adam::AdamMode::adamw ? "adamw" : "adam", std::string(dtype_name(grad_t)).c_str(), n,
                      bias_correction ? 1 : 0, static_cast<long long>(worst_p),
                      static_cast<long long>(worst_m), static_cast<long long>(worst_v),
                      static_cast<long long>(worst_out));
          EXPECT_LE(worst_p, kMaxUlp);
          EXPECT_LE(worst_m, kMaxUlp);
          EXPECT_LE(worst_v, kMaxUlp);
          EXPECT_LE(worst_out, kMaxUlp);
        }
      }
    }
  }
}

// The hyper-parameters and the step are checked where the scalars are computed
// (cpu_adam::adam_scalars; test_adam); the launcher checks the dtypes.
TEST(KernelsCuda, AdamwRejectsBadArguments) {
  Stream stream;
  DeviceBuffer d(64);
  const dev::AdamwScalars s = adamw_scalars(cpu_adam::AdamHyper{}, 1, 1.0f);
  EXPECT_THROW(dev::adamw(d.as<float>(), d.get(), static_cast<DType>(9), d.as<float>(),
                          d.as<float>(), 1, s, nullptr, DType::bf16, stream.s),
               Error);
  EXPECT_THROW(dev::adamw(d.as<float>(), d.get(), DType::f32, d.as<float>(), d.as<float>(), 1, s,
                          d.get(), DType::f32, stream.s),
               Error);
}

// Zero-size inputs launch nothing and touch nothing.
TEST(KernelsCuda, ZeroSizesAreNoOps) {
  Stream stream;
  dev::gelu_fwd(nullptr, nullptr, 0, DType::bf16, stream.s);
  dev::residual_fwd(nullptr, nullptr, nullptr, 0, DType::f32, stream.s);
  dev::layernorm_fwd(nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, 0, 768, 1e-5f,
                     DType::f32, stream.s);
  dev::softmax_xent_fwd(nullptr, nullptr, nullptr, 0, 50257, 50304, DType::f32, stream.s);
  dev::attention_fwd(nullptr, nullptr, nullptr, 0, 64, 12, 12, 64, DType::bf16, stream.s);
  dev::embedding_bwd(nullptr, nullptr, nullptr, nullptr, 0, 64, 768, DType::f32, stream.s);
  dev::matmul_fwd(nullptr, nullptr, nullptr, nullptr, 0, 768, 2304, DType::f32, stream.s);
  stream.sync();
}

void print_report() {
  if (report().empty()) return;
  std::printf("\n%-28s %-5s %-52s %-8s %10s %10s %10s %8s\n", "op", "dtype", "shape", "output",
              "max_abs", "max_rel", "norm_rel", "tol");
  for (const Row& r : report())
    std::printf("%-28s %-5s %-52s %-8s %10.3e %10.3e %10.3e %8.1e%s\n", r.op.c_str(),
                r.dtype.c_str(), r.shape.c_str(), r.output.c_str(), r.max_abs, r.max_rel,
                r.norm_rel, r.tol, r.norm_rel <= r.tol ? "" : "  FAIL");
}

// The per-op error table, printed once every test has run (main_cuda_or_skip.cpp is the main).
class ReportEnvironment : public testing::Environment {
 public:
  void TearDown() override { print_report(); }
};
[[maybe_unused]] testing::Environment* const kReport =
    testing::AddGlobalTestEnvironment(new ReportEnvironment);

}  // namespace
}  // namespace strata
