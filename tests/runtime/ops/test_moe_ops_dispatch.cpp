// runtime/ops's q/k RMSNorm and mixture-of-experts ops on the host backend: each enqueued op gives
// the bits of the host kernel called directly (the arguments reach it in order) and runs inside
// its OpScope (an OpProfiler counts it once under its name), for every dtype.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "kernels/host/moe.h"
#include "kernels/host/qk_norm.h"
#include "runtime/device/device.h"
#include "runtime/ops/op_profiler.h"
#include "runtime/ops/ops.h"

namespace strata::runtime {
namespace {

namespace kh = kernels::host;
using Bytes = std::vector<unsigned char>;

// 13 tokens of width 37, 7 experts, 3 per token; q/k heads 4 and 2 of size 24.
constexpr int kN = 13, kC = 37, kE = 7, kK = 3, kNH = 4, kNKV = 2, kHs = 24;
constexpr int kRow = (kNH + 2 * kNKV) * kHs, kPairs = kN * kK;
constexpr float kEps = 1e-6f;

Bytes random_bytes(DType t, std::size_t n, std::uint32_t seed, float lo = -1, float hi = 1) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  Bytes out(n * dtype_size(t));
  convert(v.data(), DType::f32, out.data(), t, n);
  return out;
}

// Every input and output of the sequence, as host bytes.
struct Data {
  Bytes qkv, wq, wk, qk_out, rstd, dqkv, dwq, dwk;                  // q/k RMSNorm
  Bytes logits, probs, idx, weights, prob_sum, daux, dlogits;       // router
  Bytes offsets, order, position;                                   // sort
  Bytes x, xs, out, dout, dy, dweights, dinp;                       // gather, combine, scatter
};

Data inputs(DType t) {
  Data d;
  d.qkv = random_bytes(t, kN * kRow, 1, -2, 3);
  d.wq = random_bytes(t, kHs, 2, 0.5f, 1.5f);
  d.wk = random_bytes(t, kHs, 3, 0.5f, 1.5f);
  d.qk_out = Bytes(d.qkv.size());
  d.rstd = Bytes(kN * (kNH + kNKV) * 4);
  d.dqkv = random_bytes(t, kN * kRow, 4);
  d.dwq = random_bytes(t, kHs, 5);
  d.dwk = random_bytes(t, kHs, 6);
  d.logits = random_bytes(t, kN * kE, 7, -3, 3);
  d.probs = Bytes(kN * kE * 4);
  d.idx = Bytes(kPairs * 4);
  d.weights = Bytes(kPairs * 4);
  d.prob_sum = Bytes(kE * 4);
  d.daux = random_bytes(DType::f32, kE, 8);
  d.dlogits = Bytes(d.logits.size());
  d.offsets = Bytes((kE + 1) * 4);
  d.order = Bytes(kPairs * 4);
  d.position = Bytes(kPairs * 4);
  d.x = random_bytes(t, kN * kC, 9);
  d.xs = Bytes(kPairs * kC * dtype_size(t));
  d.out = Bytes(d.x.size());
  d.dout = random_bytes(t, kN * kC, 10);
  d.dy = Bytes(d.xs.size());
  d.dweights = Bytes(kPairs * 4);
  d.dinp = random_bytes(t, kN * kC, 11);
  return d;
}

template <typename T>
T* as(Bytes& b) { return reinterpret_cast<T*>(b.data()); }

// The sequence of a MoE layer's forward and backward (the experts left out: their outputs are
// the gathered rows) on the host kernels directly. `d` holds the inputs; outputs overwrite.
void run_direct(Data& d, DType t) {
  kh::qk_rmsnorm_fwd(d.qk_out.data(), as<float>(d.rstd), d.qkv.data(), d.wq.data(), d.wk.data(), kN, kNH, kNKV,
                     kHs, kEps, t);
  kh::qk_rmsnorm_bwd(d.dqkv.data(), d.dwq.data(), d.dwk.data(), d.qkv.data(), d.wq.data(), d.wk.data(),
                     as<float>(d.rstd), kN, kNH, kNKV, kHs, t);
  kh::moe_router_fwd(as<float>(d.probs), as<std::int32_t>(d.idx), as<float>(d.weights), as<float>(d.prob_sum),
                     d.logits.data(), kN, kE, kK, true, t);
  kh::moe_sort(as<std::int32_t>(d.offsets), as<std::int32_t>(d.order), as<std::int32_t>(d.position),
               as<std::int32_t>(d.idx), kN, kE, kK);
  kh::moe_gather(d.xs.data(), d.x.data(), as<std::int32_t>(d.order), kN, kK, kC, t);
  kh::moe_combine_fwd(d.out.data(), d.xs.data(), as<float>(d.weights), as<std::int32_t>(d.position), kN, kK, kC, t);
  kh::moe_combine_bwd(d.dy.data(), as<float>(d.dweights), d.dout.data(), d.xs.data(), as<float>(d.weights),
                      as<std::int32_t>(d.position), kN, kK, kC, t);
  kh::moe_scatter_add(d.dinp.data(), d.dy.data(), as<std::int32_t>(d.position), kN, kK, kC, t);
  kh::moe_router_bwd(d.dlogits.data(), as<float>(d.dweights), as<float>(d.probs), as<std::int32_t>(d.idx),
                     as<float>(d.daux), kN, kE, kK, true, t);
}

// The same through runtime/ops on a stream: every buffer copied to device memory and back.
void run_ops(device::Device& device, device::Stream& s, Data& d, DType t) {
  std::vector<Bytes*> all = {&d.qkv, &d.wq, &d.wk, &d.qk_out, &d.rstd, &d.dqkv, &d.dwq, &d.dwk,
                             &d.logits, &d.probs, &d.idx, &d.weights, &d.prob_sum, &d.daux, &d.dlogits,
                             &d.offsets, &d.order, &d.position, &d.x, &d.xs, &d.out, &d.dout, &d.dy,
                             &d.dweights, &d.dinp};
  std::vector<device::DeviceBuffer> bufs;
  for (Bytes* b : all) {
    bufs.push_back(device.allocate(b->size(), "moe test"));
    s.copy_async(bufs.back().data(), b->data(), b->size());
  }
  const auto dev = [&](const Bytes& b) {
    for (std::size_t i = 0; i < all.size(); ++i)
      if (all[i] == &b) return bufs[i].data();
    return static_cast<void*>(nullptr);
  };
  const auto f32 = [&](const Bytes& b) { return static_cast<float*>(dev(b)); };
  const auto i32 = [&](const Bytes& b) { return static_cast<std::int32_t*>(dev(b)); };
  ops::qk_rmsnorm_fwd(s, dev(d.qk_out), f32(d.rstd), dev(d.qkv), dev(d.wq), dev(d.wk), kN, kNH, kNKV, kHs, kEps, t);
  ops::qk_rmsnorm_bwd(s, dev(d.dqkv), dev(d.dwq), dev(d.dwk), dev(d.qkv), dev(d.wq), dev(d.wk), f32(d.rstd), kN, kNH,
                      kNKV, kHs, t);
  ops::moe_router_fwd(s, f32(d.probs), i32(d.idx), f32(d.weights), f32(d.prob_sum), dev(d.logits), kN, kE, kK, true,
                      t);
  ops::moe_sort(s, i32(d.offsets), i32(d.order), i32(d.position), i32(d.idx), kN, kE, kK);
  ops::moe_gather(s, dev(d.xs), dev(d.x), i32(d.order), kN, kK, kC, t);
  ops::moe_combine_fwd(s, dev(d.out), dev(d.xs), f32(d.weights), i32(d.position), kN, kK, kC, t);
  ops::moe_combine_bwd(s, dev(d.dy), f32(d.dweights), dev(d.dout), dev(d.xs), f32(d.weights), i32(d.position), kN,
                       kK, kC, t);
  ops::moe_scatter_add(s, dev(d.dinp), dev(d.dy), i32(d.position), kN, kK, kC, t);
  ops::moe_router_bwd(s, dev(d.dlogits), f32(d.dweights), f32(d.probs), i32(d.idx), f32(d.daux), kN, kE, kK, true, t);
  for (std::size_t i = 0; i < all.size(); ++i) s.copy_async(all[i]->data(), bufs[i].data(), all[i]->size());
  s.synchronize();
}

TEST(MoeOpsDispatch, HostBackendGivesTheHostKernelsBits) {
  for (DType t : {DType::f32, DType::bf16, DType::f16}) {
    SCOPED_TRACE(std::string(dtype_name(t)));
    const Data in = inputs(t);
    Data want = in, got = in;
    run_direct(want, t);
    auto device = device::Device::create({.kind = "host", .memory_bytes = 16 << 20});
    auto stream = device->create_stream("compute");
    ops::OpProfiler profiler(*device, *stream);
    run_ops(*device, *stream, got, t);

    EXPECT_TRUE(got.qk_out == want.qk_out) << "qk_rmsnorm out";
    EXPECT_TRUE(got.rstd == want.rstd) << "qk_rmsnorm rstd";
    EXPECT_TRUE(got.dqkv == want.dqkv) << "qk_rmsnorm dqkv";
    EXPECT_TRUE(got.dwq == want.dwq && got.dwk == want.dwk) << "qk_rmsnorm weight gradients";
    EXPECT_TRUE(got.probs == want.probs && got.idx == want.idx && got.weights == want.weights &&
                got.prob_sum == want.prob_sum)
        << "moe_router_fwd";
    EXPECT_TRUE(got.offsets == want.offsets && got.order == want.order && got.position == want.position)
        << "moe_sort";
    EXPECT_TRUE(got.xs == want.xs) << "moe_gather";
    EXPECT_TRUE(got.out == want.out) << "moe_combine_fwd";
    EXPECT_TRUE(got.dy == want.dy && got.dweights == want.dweights) << "moe_combine_bwd";
    EXPECT_TRUE(got.dinp == want.dinp) << "moe_scatter_add";
    EXPECT_TRUE(got.dlogits == want.dlogits) << "moe_router_bwd";
    EXPECT_FALSE(want.dinp == in.dinp) << "scatter_add did nothing";
    EXPECT_FALSE(want.dqkv == in.dqkv) << "qk_rmsnorm_bwd did nothing";

    std::vector<std::string> names;
    for (const ops::OpTime& op : profiler.collect()) {
      EXPECT_EQ(op.count, 1) << op.op;
      names.push_back(op.op);
    }
    std::sort(names.begin(), names.end());
    EXPECT_EQ(names, (std::vector<std::string>{"moe_combine_bwd", "moe_combine_fwd", "moe_gather", "moe_router_bwd",
                                               "moe_router_fwd", "moe_scatter_add", "moe_sort", "qk_rmsnorm_bwd",
                                               "qk_rmsnorm_fwd"}));
  }
}

}  // namespace
}  // namespace strata::runtime
