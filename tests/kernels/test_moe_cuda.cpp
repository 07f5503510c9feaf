// The CUDA q/k RMSNorm (kernels/cuda/ops.h) and mixture-of-experts ops (kernels/cuda/moe.h)
// against their host twins (kernels/host/{qk_norm,moe}.h, the oracle), for every dtype and shapes
// that are multiples of nothing (N 13, E 7, k 3, C 37, hs 37) as well as model-sized ones
// (Qwen3-8B's 32 / 8 heads of 128; Mixtral's 8 experts, 2 per token; Qwen3-MoE's 128, 8 per
// token; a sort of 2 million pairs).
//
// Inputs are random, rounded to the dtype once, and fed to both sides. Outputs in the storage
// dtype: check() of cuda_test_util.h with tol_for(dtype); fp32 statistics (rstd, probs, weights,
// prob_sum, dweights): kStatTol. Overwritten outputs start from NaN (or 0xEE bytes),
// accumulated ones from random values.
// Bit for bit:
//   - the router's picks (random logits have no near-ties; exact ties go to the lower index);
//   - moe_sort's offsets, order and position; moe_gather's rows; combine_bwd's dy (one exact
//     product rounded once on both sides); qk_rmsnorm's HF roundings from the CUDA rstd; v
//     untouched; in place == out of place;
//   - determinism: every op run twice from the same inputs gives the same bits.
//
// Exits 77 (skipped) where no GPU can be used (main_cuda_or_skip.cpp).
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "kernels/cuda/moe.h"
#include "kernels/cuda/ops.h"
#include "kernels/host/matmul.h"
#include "kernels/host/moe.h"
#include "kernels/host/qk_norm.h"
#include "tests/kernels/cuda_test_util.h"

namespace strata {
namespace {

namespace host = kernels::host;
namespace dev = kernels::cuda;

using namespace test;  // tests/kernels/cuda_test_util.h
using Vec = std::vector<float>;
using Ints = std::vector<std::int32_t>;

constexpr float kEps = 1e-6f;

Bytes nan_bytes(DType t, std::size_t n) { return to_bytes(Vec(n, std::numeric_limits<float>::quiet_NaN()), t); }
Bytes f32_bytes(const Vec& v) { return to_bytes(v, DType::f32); }
float round_to(float x, DType t) { return to_floats(to_bytes(Vec{x}, t), t)[0]; }
Ints to_ints(const Bytes& b) {
  Ints v(b.size() / 4);
  if (!v.empty()) std::memcpy(v.data(), b.data(), b.size());
  return v;
}

// ---- q/k RMSNorm ----------------------------------------------------------------------------

TEST(MoeOpsCuda, QkRmsNorm) {
  struct Shape { long long N; int NH, NKV, hs; };
  const Shape shapes[] = {{1, 1, 1, 1}, {13, 4, 2, 37}, {77, 16, 8, 128}, {1024, 32, 8, 128}, {4099, 2, 1, 64}};
  Stream stream;
  for (DType t : kAllDTypes)
    for (const Shape& s : shapes) {
      const std::string shape = std::string(dtype_name(t)) + " N=" + std::to_string(s.N) + " NH=" +
                                std::to_string(s.NH) + " NKV=" + std::to_string(s.NKV) + " hs=" + std::to_string(s.hs);
      const int row = (s.NH + 2 * s.NKV) * s.hs, heads = s.NH + s.NKV;
      const std::size_t n = static_cast<std::size_t>(s.N) * row, nr = static_cast<std::size_t>(s.N) * heads;
      const Bytes x = random_bytes(t, n, 1, -2.0f, 3.0f), wq = random_bytes(t, s.hs, 2, 0.5f, 1.5f),
                  wk = random_bytes(t, s.hs, 3, 0.5f, 1.5f);
      Bytes out(x.size());
      Vec rstd(nr);
      host::qk_rmsnorm_fwd(out.data(), rstd.data(), x.data(), wq.data(), wk.data(), s.N, s.NH, s.NKV, s.hs, kEps, t);
      DeviceBuffer d_x(x), d_wq(wq), d_wk(wk), d_out(nan_bytes(t, n), 64), d_rstd(nr * 4, 64);
      dev::qk_rmsnorm_fwd(d_out.get(), d_rstd.as<float>(), d_x.get(), d_wq.get(), d_wk.get(), s.N, s.NH, s.NKV,
                          s.hs, kEps, t, stream.s);
      const Bytes got = d_out.download(), got_rstd = d_rstd.download();
      check("qk_rmsnorm_fwd out " + shape, got, out, t, tol_for(t));
      check("qk_rmsnorm_fwd rstd " + shape, got_rstd, f32_bytes(rstd), DType::f32, kStatTol);
      EXPECT_TRUE(d_out.guard_intact() && d_rstd.guard_intact()) << shape;
      // HF's roundings from the CUDA rstd, and v copied, bit for bit.
      {
        const Vec xf = to_floats(x, t), qf = to_floats(wq, t), kf = to_floats(wk, t), y = to_floats(got, t);
        const Vec rs = to_floats(got_rstd, DType::f32);
        std::size_t mismatches = 0;
        for (long long r = 0; r < s.N; ++r)
          for (int h = 0; h < s.NH + 2 * s.NKV; ++h)
            for (int c = 0; c < s.hs; ++c) {
              const std::size_t i = static_cast<std::size_t>(r) * row + static_cast<std::size_t>(h) * s.hs + c;
              const float want = h >= heads ? xf[i]
                                            : round_to((h < s.NH ? qf[c] : kf[c]) *
                                                           round_to(xf[i] * rs[r * heads + h], t), t);
              if (std::memcmp(&y[i], &want, 4) != 0) ++mismatches;
            }
        EXPECT_EQ(mismatches, 0u) << "qk_rmsnorm_fwd HF roundings / v " << shape;
      }
      // In place: the same bits.
      DeviceBuffer d_inplace(x);
      dev::qk_rmsnorm_fwd(d_inplace.get(), nullptr, d_inplace.get(), d_wq.get(), d_wk.get(), s.N, s.NH, s.NKV,
                          s.hs, kEps, t, stream.s);
      EXPECT_EQ(d_inplace.download(), got) << "qk_rmsnorm_fwd in place " << shape;

      // Backward in place from the host rstd; weight gradients accumulate onto random values.
      const Bytes dy = random_bytes(t, n, 4), dq0 = random_bytes(t, s.hs, 5), dk0 = random_bytes(t, s.hs, 6);
      Bytes dx = dy, dq = dq0, dk = dk0;
      host::qk_rmsnorm_bwd(dx.data(), dq.data(), dk.data(), x.data(), wq.data(), wk.data(), rstd.data(), s.N, s.NH,
                           s.NKV, s.hs, t);
      DeviceBuffer d_dx(dy), d_dq(dq0), d_dk(dk0), d_hrstd(f32_bytes(rstd));
      const auto run_bwd = [&](bool weights) {
        d_dx.upload(dy);
        d_dq.upload(dq0);
        d_dk.upload(dk0);
        dev::qk_rmsnorm_bwd(d_dx.get(), weights ? d_dq.get() : nullptr, weights ? d_dk.get() : nullptr, d_x.get(),
                            d_wq.get(), d_wk.get(), d_hrstd.as<float>(), s.N, s.NH, s.NKV, s.hs, t, stream.s);
        return std::vector<Bytes>{d_dx.download(), d_dq.download(), d_dk.download()};
      };
      const auto g = run_bwd(true);
      check("qk_rmsnorm_bwd dqkv " + shape, g[0], dx, t, tol_for(t));
      check("qk_rmsnorm_bwd dq_weight " + shape, g[1], dq, t, tol_for(t));
      check("qk_rmsnorm_bwd dk_weight " + shape, g[2], dk, t, tol_for(t));
      EXPECT_EQ(run_bwd(true), g) << "qk_rmsnorm_bwd not deterministic " << shape;
      const auto no_w = run_bwd(false);
      EXPECT_EQ(no_w[0], g[0]) << "qk_rmsnorm_bwd dqkv without weight gradients " << shape;
      EXPECT_EQ(no_w[1], dq0) << "qk_rmsnorm_bwd wrote a null dq_weight's buffer " << shape;
      // v's gradient untouched.
      const std::size_t es = dtype_size(t);
      std::size_t v_changed = 0;
      for (long long r = 0; r < s.N; ++r) {
        const std::size_t off = (static_cast<std::size_t>(r) * row + static_cast<std::size_t>(heads) * s.hs) * es;
        if (std::memcmp(g[0].data() + off, dy.data() + off, static_cast<std::size_t>(s.NKV) * s.hs * es) != 0)
          ++v_changed;
      }
      EXPECT_EQ(v_changed, 0u) << "qk_rmsnorm_bwd changed v " << shape;
    }
}

// ---- router ---------------------------------------------------------------------------------

struct Route {
  long long N;
  int E, k;
};
std::string route_name(const char* op, DType t, const Route& r, bool renorm) {
  return std::string(op) + " " + std::string(dtype_name(t)) + " N=" + std::to_string(r.N) +
         " E=" + std::to_string(r.E) + " k=" + std::to_string(r.k) + (renorm ? " renorm" : "");
}

TEST(MoeOpsCuda, Router) {
  const Route routes[] = {{13, 7, 3}, {1, 1, 1}, {5, 4, 4}, {4099, 8, 2}, {1024, 128, 8}, {77, 60, 4}};
  Stream stream;
  for (DType t : kAllDTypes)
    for (const Route& r : routes)
      for (bool renorm : {false, true}) {
        const std::size_t ne = static_cast<std::size_t>(r.N) * r.E, nk = static_cast<std::size_t>(r.N) * r.k;
        const Bytes logits = random_bytes(t, ne, 10, -4.0f, 4.0f);
        Vec probs(ne), weights(nk), prob_sum(r.E);
        Ints idx(nk);
        host::moe_router_fwd(probs.data(), idx.data(), weights.data(), prob_sum.data(), logits.data(), r.N, r.E, r.k,
                             renorm, t);
        DeviceBuffer d_logits(logits), d_probs(ne * 4, 64), d_idx(nk * 4, 64), d_w(nk * 4, 64),
            d_sum(nan_bytes(DType::f32, r.E), 64);
        const auto run = [&] {
          dev::moe_router_fwd(d_probs.as<float>(), d_idx.as<std::int32_t>(), d_w.as<float>(), d_sum.as<float>(),
                              d_logits.get(), r.N, r.E, r.k, renorm, t, stream.s);
          return std::vector<Bytes>{d_probs.download(), d_idx.download(), d_w.download(), d_sum.download()};
        };
        const auto got = run();
        check(route_name("router probs", t, r, renorm), got[0], f32_bytes(probs), DType::f32, kStatTol);
        EXPECT_EQ(to_ints(got[1]), idx) << route_name("router idx", t, r, renorm);
        check(route_name("router weights", t, r, renorm), got[2], f32_bytes(weights), DType::f32, kStatTol);
        check(route_name("router prob_sum", t, r, renorm), got[3], f32_bytes(prob_sum), DType::f32, kStatTol);
        EXPECT_TRUE(d_probs.guard_intact() && d_idx.guard_intact() && d_w.guard_intact() && d_sum.guard_intact());
        EXPECT_EQ(run(), got) << route_name("router_fwd not deterministic", t, r, renorm);

        // Backward from the host's probs and picks, daux null and not.
        const Vec dw = random_floats(nk, 11), daux = random_floats(r.E, 12);
        DeviceBuffer d_hprobs(f32_bytes(probs)), d_hidx(as_bytes(idx)), d_dw(f32_bytes(dw)), d_daux(f32_bytes(daux));
        for (bool aux : {false, true}) {
          Bytes dlogits(logits.size());
          host::moe_router_bwd(dlogits.data(), dw.data(), probs.data(), idx.data(), aux ? daux.data() : nullptr, r.N,
                               r.E, r.k, renorm, t);
          DeviceBuffer d_dlogits(nan_bytes(t, ne), 64);
          const auto run_bwd = [&] {
            dev::moe_router_bwd(d_dlogits.get(), d_dw.as<float>(), d_hprobs.as<float>(), d_hidx.as<std::int32_t>(),
                                aux ? d_daux.as<float>() : nullptr, r.N, r.E, r.k, renorm, t, stream.s);
            return d_dlogits.download();
          };
          const Bytes g = run_bwd();
          check(route_name(aux ? "router_bwd +daux" : "router_bwd", t, r, renorm), g, dlogits, t, tol_for(t));
          EXPECT_TRUE(d_dlogits.guard_intact());
          EXPECT_EQ(run_bwd(), g) << route_name("router_bwd not deterministic", t, r, renorm);
        }
      }
}

TEST(MoeOpsCuda, RouterTiesGoToTheLowerExpert) {
  constexpr int E = 7, k = 3;
  const Vec rows = {0, 0, 0, 0, 0, 0, 0, 1, 3, 3, 0, 3, -1, 2, -1, 2, 0.5, 2, 0.5, 0.5, 0, 0, 0, 0, 0, 0, 0, 5};
  const Ints want = {0, 1, 2, 1, 2, 4, 1, 3, 2, 6, 0, 1};
  Stream stream;
  for (DType t : kAllDTypes) {
    DeviceBuffer d_logits(to_bytes(rows, t)), d_probs(rows.size() * 4), d_idx(4 * k * 4), d_w(4 * k * 4);
    dev::moe_router_fwd(d_probs.as<float>(), d_idx.as<std::int32_t>(), d_w.as<float>(), nullptr, d_logits.get(), 4,
                        E, k, true, t, stream.s);
    EXPECT_EQ(to_ints(d_idx.download()), want) << dtype_name(t);
  }
}

// ---- sort, gather, combine, scatter ---------------------------------------------------------

Ints random_picks(const Route& r, std::uint32_t seed) {  // k distinct experts per token
  std::mt19937 rng(seed);
  Ints idx, perm(r.E);
  for (long long n = 0; n < r.N; ++n) {
    std::iota(perm.begin(), perm.end(), 0);
    for (int j = 0; j < r.k; ++j) std::swap(perm[j], perm[j + rng() % (r.E - j)]);
    idx.insert(idx.end(), perm.begin(), perm.begin() + r.k);
  }
  return idx;
}

TEST(MoeOpsCuda, SortGatherCombineScatter) {
  struct Case { Route r; int C; };
  const Case cases[] = {{{13, 7, 3}, 37}, {{1, 1, 1}, 1}, {{5, 4, 4}, 96}, {{4099, 8, 2}, 4096},
                        {{1024, 128, 8}, 2048}, {{262144, 64, 8}, 0}};  // the last: sort only, 2M pairs
  Stream stream;
  for (const Case& cs : cases) {
    const Route& r = cs.r;
    const std::size_t nk = static_cast<std::size_t>(r.N) * r.k;
    const Ints idx = random_picks(r, 20);
    Ints offsets(r.E + 1), order(nk), position(nk);
    host::moe_sort(offsets.data(), order.data(), position.data(), idx.data(), r.N, r.E, r.k);
    DeviceBuffer d_idx(as_bytes(idx)), d_off((r.E + 1) * 4, 64), d_order(nk * 4, 64), d_pos(nk * 4, 64);
    const auto run_sort = [&] {
      dev::moe_sort(d_off.as<std::int32_t>(), d_order.as<std::int32_t>(), d_pos.as<std::int32_t>(),
                    d_idx.as<std::int32_t>(), r.N, r.E, r.k, stream.s);
      return std::vector<Bytes>{d_off.download(), d_order.download(), d_pos.download()};
    };
    const auto sorted = run_sort();
    const std::string sname = route_name("moe_sort", DType::f32, r, false);
    EXPECT_EQ(to_ints(sorted[0]), offsets) << sname;
    EXPECT_EQ(to_ints(sorted[1]), order) << sname;
    EXPECT_EQ(to_ints(sorted[2]), position) << sname;
    EXPECT_TRUE(d_off.guard_intact() && d_order.guard_intact() && d_pos.guard_intact()) << sname;
    EXPECT_EQ(run_sort(), sorted) << sname << " not deterministic";
    if (cs.C == 0) continue;

    const int C = cs.C;
    const Vec w = random_floats(nk, 21, 0.0f, 1.0f);
    DeviceBuffer d_w(f32_bytes(w));
    for (DType t : kAllDTypes) {
      const std::string name = route_name("", t, r, false) + " C=" + std::to_string(C);
      const std::size_t es = dtype_size(t);
      const Bytes x = random_bytes(t, static_cast<std::size_t>(r.N) * C, 22), y = random_bytes(t, nk * C, 23),
                  dout = random_bytes(t, static_cast<std::size_t>(r.N) * C, 24),
                  dinp0 = random_bytes(t, static_cast<std::size_t>(r.N) * C, 25);
      Bytes xs(nk * C * es), out(x.size()), dy(y.size()), dinp = dinp0;
      Vec dw(nk);
      host::moe_gather(xs.data(), x.data(), order.data(), r.N, r.k, C, t);
      host::moe_combine_fwd(out.data(), y.data(), w.data(), position.data(), r.N, r.k, C, t);
      host::moe_combine_bwd(dy.data(), dw.data(), dout.data(), y.data(), w.data(), position.data(), r.N, r.k, C, t);
      host::moe_scatter_add(dinp.data(), y.data(), position.data(), r.N, r.k, C, t);

      DeviceBuffer d_x(x), d_y(y), d_dout(dout), d_xs(Bytes(xs.size(), 0xEE), 64),
          d_out(nan_bytes(t, x.size() / es), 64),
          d_dy(nan_bytes(t, nk * C), 64), d_dw(nan_bytes(DType::f32, nk), 64), d_dinp(dinp0, 64);
      const auto run = [&] {
        d_dinp.upload(dinp0);
        dev::moe_gather(d_xs.get(), d_x.get(), d_order.as<std::int32_t>(), r.N, r.k, C, t, stream.s);
        dev::moe_combine_fwd(d_out.get(), d_y.get(), d_w.as<float>(), d_pos.as<std::int32_t>(), r.N, r.k, C, t,
                             stream.s);
        dev::moe_combine_bwd(d_dy.get(), d_dw.as<float>(), d_dout.get(), d_y.get(), d_w.as<float>(),
                             d_pos.as<std::int32_t>(), r.N, r.k, C, t, stream.s);
        dev::moe_scatter_add(d_dinp.get(), d_y.get(), d_pos.as<std::int32_t>(), r.N, r.k, C, t, stream.s);
        return std::vector<Bytes>{d_xs.download(), d_out.download(), d_dy.download(), d_dw.download(),
                                  d_dinp.download()};
      };
      const auto got = run();
      EXPECT_EQ(got[0], xs) << "moe_gather" << name;
      check("moe_combine_fwd out" + name, got[1], out, t, tol_for(t));
      EXPECT_EQ(got[2], dy) << "moe_combine_bwd dy" << name;
      check("moe_combine_bwd dweights" + name, got[3], f32_bytes(dw), DType::f32, kStatTol);
      check("moe_scatter_add dinp" + name, got[4], dinp, t, tol_for(t));
      EXPECT_TRUE(d_xs.guard_intact() && d_out.guard_intact() && d_dy.guard_intact() && d_dw.guard_intact() &&
                  d_dinp.guard_intact())
          << name;
      EXPECT_EQ(run(), got) << "not deterministic" << name;
    }
  }
}

// Where each expert's rows start once random picks are sorted by expert: (E + 1) offsets.
Ints sorted_offsets(const Route& r, std::uint32_t seed) {
  const Ints idx = random_picks(r, seed);
  Ints offsets(r.E + 1), order(idx.size()), position(idx.size());
  host::moe_sort(offsets.data(), order.data(), position.data(), idx.data(), r.N, r.E, r.k);
  return offsets;
}

// The experts' grouped matmul (dev::matmul_grouped_fwd, Note [Grouped expert matmuls]) against
// the host's (each group's rows by matmul_fwd): routed rows sorted by expert, every other expert
// without a weight (its rows keep their bytes), shapes of Mixtral (8 experts, 2 per token) and
// Qwen3-30B-A3B (128, 8; narrower than its 2048 x 1536 to keep 128 experts' weights small) at
// decoding and prefill row counts, and odd ones.
// A grouped call cuBLAS declines (per-group GEMMs instead) is reported, not failed; one whose
// matrices do not all start on 16 bytes (C = 37, OC = 29) must not be tried. 256 experts with
// rows make more pointers (3 per expert) than one launch of the pointer upload carries.
TEST(MoeOpsCuda, GroupedExpertMatmul) {
  struct Case { Route r; int C, OC; };
  const Case cases[] = {{{13, 7, 3}, 37, 29}, {{1, 8, 2}, 256, 512}, {{1, 128, 8}, 512, 384},
                        {{64, 128, 8}, 384, 512}, {{300, 8, 2}, 96, 64}, {{256, 256, 8}, 64, 32}};
  Stream stream;
  std::uint64_t declined = 0;
  for (const Case& cs : cases) {
    const Route& r = cs.r;
    const std::size_t nk = static_cast<std::size_t>(r.N) * r.k;
    const Ints offsets = sorted_offsets(r, 30);
    for (DType t : kAllDTypes) {
      const std::size_t es = dtype_size(t);
      const std::string name = route_name("matmul_grouped_fwd", t, r, false) + " C=" + std::to_string(cs.C) +
                               " OC=" + std::to_string(cs.OC);
      const Bytes x = random_bytes(t, nk * cs.C, 31), out0 = random_bytes(t, nk * cs.OC, 32);
      std::vector<Bytes> w;
      std::vector<DeviceBuffer> d_w;
      std::vector<const void*> host_w, dev_w;
      for (int e = 0; e < r.E; ++e) {
        const bool skipped = e % 3 == 1;  // as an expert run elsewhere: no weight, rows untouched
        w.push_back(random_bytes(t, static_cast<std::size_t>(cs.OC) * cs.C, 40 + static_cast<std::uint32_t>(e), -0.1f,
                                 0.1f));
        d_w.emplace_back(w.back());
        host_w.push_back(skipped ? nullptr : w.back().data());
        dev_w.push_back(skipped ? nullptr : d_w.back().get());
      }
      Bytes out = out0;
      host::matmul_grouped_fwd(out.data(), x.data(), host_w.data(), offsets.data(), r.E, cs.C, cs.OC, t);
      DeviceBuffer d_x(x), d_out(out0, 64);
      // Whether every expert's rows start on 16 bytes (the buffers themselves do: cudaMalloc).
      bool on16 = true;
      for (int e = 0; e < r.E; ++e) {
        if (dev_w[static_cast<std::size_t>(e)] == nullptr || offsets[e + 1] == offsets[e]) continue;
        const std::size_t first = static_cast<std::size_t>(offsets[e]);
        on16 = on16 && first * cs.C * es % 16 == 0 && first * cs.OC * es % 16 == 0;
      }
      const std::uint64_t before = dev::matmul_grouped_declined_count();
      dev::matmul_grouped_fwd(d_out.get(), d_x.get(), dev_w.data(), offsets.data(), r.E, cs.C, cs.OC, t, stream.s);
      const Bytes got = d_out.download();
      const std::uint64_t alone = dev::matmul_grouped_declined_count() - before;
      if (on16) {
        declined += alone;
      } else {
        EXPECT_EQ(alone, 1u) << name << ": a matrix off 16 bytes must take the per-group GEMMs";
      }
      check(name, got, out, t, tol_for(t));
      for (int e = 0; e < r.E; ++e) {
        if (host_w[static_cast<std::size_t>(e)] != nullptr) continue;
        const std::size_t a = static_cast<std::size_t>(offsets[e]) * cs.OC * es,
                          b = static_cast<std::size_t>(offsets[e + 1]) * cs.OC * es;
        EXPECT_TRUE(std::equal(got.begin() + static_cast<std::ptrdiff_t>(a), got.begin() + static_cast<std::ptrdiff_t>(b),
                               out0.begin() + static_cast<std::ptrdiff_t>(a)))
            << name << ": the rows of expert " << e << " (no weight) were written";
      }
      EXPECT_TRUE(d_out.guard_intact()) << name;
    }
  }
  std::printf("matmul_grouped_fwd: cuBLAS declined the grouped call %llu times (per-group GEMMs instead; "
              "cases off 16 bytes not counted)\n",
              static_cast<unsigned long long>(declined));
}

// Zero rows launch nothing and touch nothing, except moe_sort's offsets (zeroed).
TEST(MoeOpsCuda, ZeroRowsAndBadConfigs) {
  Stream stream;
  dev::qk_rmsnorm_fwd(nullptr, nullptr, nullptr, nullptr, nullptr, 0, 32, 8, 128, kEps, DType::bf16, stream.s);
  dev::qk_rmsnorm_bwd(nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, 0, 32, 8, 128, DType::bf16,
                      stream.s);
  dev::moe_router_fwd(nullptr, nullptr, nullptr, nullptr, nullptr, 0, 8, 2, true, DType::bf16, stream.s);
  dev::moe_router_bwd(nullptr, nullptr, nullptr, nullptr, nullptr, 0, 8, 2, true, DType::bf16, stream.s);
  dev::moe_gather(nullptr, nullptr, nullptr, 0, 2, 4096, DType::bf16, stream.s);
  dev::moe_combine_fwd(nullptr, nullptr, nullptr, nullptr, 0, 2, 4096, DType::bf16, stream.s);
  dev::moe_combine_bwd(nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, 0, 2, 4096, DType::bf16, stream.s);
  dev::moe_scatter_add(nullptr, nullptr, nullptr, 0, 2, 4096, DType::bf16, stream.s);
  DeviceBuffer d_off(to_bytes(Vec(9, 1.0f), DType::f32));
  dev::moe_sort(d_off.as<std::int32_t>(), nullptr, nullptr, nullptr, 0, 8, 2, stream.s);
  EXPECT_EQ(to_ints(d_off.download()), Ints(9, 0));
  EXPECT_THROW(dev::moe_router_fwd(nullptr, nullptr, nullptr, nullptr, nullptr, 1, 4, 5, true, DType::f32, stream.s),
               Error);
  EXPECT_THROW(dev::moe_sort(d_off.as<std::int32_t>(), nullptr, nullptr, nullptr, 0, 8, 0, stream.s), Error);
  EXPECT_THROW(dev::qk_rmsnorm_fwd(nullptr, nullptr, nullptr, nullptr, nullptr, 1, 0, 8, 128, kEps, DType::f32,
                                   stream.s),
               Error);
  CUDA_CHECK(cudaStreamSynchronize(stream.s));
}

}  // namespace
}  // namespace strata
