// strata bench attention: the causal attention op (runtime/ops: attention_fwd + attention_bwd)
// at one shape on a device, against a GEMM of the same FLOPs measured in the same run.
//
// FLOPs, the usual count for causal attention (FlashAttention-2 paper): the forward's two
// matmuls (S = Q K^T, O = P V) over the T (T + 1) / 2 visible (query, key) pairs, 4 B NH hs
// T (T + 1) / 2; the backward 2.5 times that (dV, dP, dS Q, dS K, and S recomputed), so
// fwd + bwd = 3.5 x the forward. Our backward recomputes S and dP once more in a second kernel
// (the price of no atomics); those FLOPs are not counted: the rate is the useful one.
// The limit: matmul_fwd (cuBLAS on CUDA) of (B T, NH hs) x (NH hs, OC), OC chosen so that it has
// the fwd + bwd FLOPs, on the same stream; ratio = attention TFLOPS / GEMM TFLOPS.
// Times: medians of --steps after one warm-up, each op synchronized on its own.
//
// --decode-past P (bench_decode): attention_decode of one new token per row after P cached
// positions (B rows), the step a served model takes per layer. It is a pass over the caches:
// the rate is the key/value bytes it must read, 2 B (P + 1) NKV hs bytes-per-element, per
// second; the limit is a device-to-device copy of as many bytes on the same stream (stream
// copy_async), counted as read + written bytes per second, the device's usable memory
// bandwidth; ratio = decode GB/s / copy GB/s. Small shapes are launch-bound, not bandwidth-bound.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <random>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/dtype.h"
#include "core/error.h"
#include "core/units.h"
#include "runtime/ops/ops.h"
#include "tools/bench/bench.h"

namespace strata::tools {
namespace {

using Clock = std::chrono::steady_clock;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// Median seconds of f() over `reps` runs after one warm-up, the stream synchronized each time.
template <typename F>
double time_op(runtime::device::Stream& stream, int reps, F&& f) {
  f();
  stream.synchronize();
  std::vector<double> s;
  for (int i = 0; i < reps; ++i) {
    const auto t0 = Clock::now();
    f();
    stream.synchronize();
    s.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
  }
  return median(s);
}

void bench_decode(const AttentionBenchOptions& o, DType dtype, int NKV) {
  const int B = o.batch, past = o.decode_past, NH = o.heads, hs = o.head_size, max_T = past + 1;
  const std::uint64_t es = dtype_size(dtype);
  const std::uint64_t row = static_cast<std::uint64_t>(NH + 2 * NKV) * static_cast<std::uint64_t>(hs);
  const std::uint64_t C = static_cast<std::uint64_t>(NH) * static_cast<std::uint64_t>(hs);
  const std::uint64_t cache_bytes =
      static_cast<std::uint64_t>(B) * max_T * NKV * static_cast<std::uint64_t>(hs) * es;  // each
  const std::uint64_t kv_read = 2 * cache_bytes;  // every position of both caches, once
  runtime::device::DeviceOptions device_options = resolve_device_options(o.device);
  if (o.device.device_memory.empty())
    device_options.memory_bytes = 2 * cache_bytes + 2 * kv_read + B * (row + C) * es + (64ull << 20);
  auto device = runtime::device::Device::create(device_options);
  auto stream = device->create_stream("compute");
  std::fprintf(stderr, "strata bench attention: decoding B=%d past=%d NH=%d NKV=%d hs=%d %s on %s\n",
               B, past, NH, NKV, hs, std::string(dtype_name(dtype)).c_str(), device->name().c_str());

  double decode_s = 0, copy_s = 0;
  {
    runtime::device::DeviceBuffer qkv = device->allocate(B * row * es, "qkv");
    runtime::device::DeviceBuffer out = device->allocate(B * C * es, "out");
    runtime::device::DeviceBuffer k_cache = device->allocate(cache_bytes, "k cache");
    runtime::device::DeviceBuffer v_cache = device->allocate(cache_bytes, "v cache");
    std::mt19937 rng(7);
    std::uniform_real_distribution<float> dist(-2.0f, 2.0f);
    std::vector<float> f(B * row);
    for (float& x : f) x = dist(rng);
    std::vector<unsigned char> host_qkv(f.size() * es);
    convert(f.data(), DType::f32, host_qkv.data(), dtype, f.size());
    stream->copy_async(qkv.data(), host_qkv.data(), host_qkv.size());
    stream->memset_async(k_cache.data(), 0, cache_bytes);  // any values will do
    stream->memset_async(v_cache.data(), 0, cache_bytes);
    stream->synchronize();
    decode_s = time_op(*stream, o.steps, [&] {
      runtime::ops::attention_decode(*stream, out.data(), k_cache.data(), v_cache.data(), qkv.data(),
                                     B, 1, past, max_T, NH, NKV, hs, dtype);
    });
  }
  {
    runtime::device::DeviceBuffer src = device->allocate(kv_read, "copy source");
    runtime::device::DeviceBuffer dst = device->allocate(kv_read, "copy destination");
    stream->memset_async(src.data(), 0, kv_read);
    copy_s = time_op(*stream, o.steps, [&] { stream->copy_async(dst.data(), src.data(), kv_read); });
  }
  const double gbps = static_cast<double>(kv_read) / decode_s / 1e9;
  const double copy_gbps = 2.0 * static_cast<double>(kv_read) / copy_s / 1e9;
  if (o.json) {
    nlohmann::ordered_json j;
    j["device"] = device->name();
    j["dtype"] = std::string(dtype_name(dtype));
    j["batch"] = B;
    j["decode_past"] = past;
    j["heads"] = NH;
    j["kv_heads"] = NKV;
    j["head_size"] = hs;
    j["decode_ms"] = decode_s * 1e3;
    j["kv_bytes"] = kv_read;
    j["kv_gbps"] = gbps;
    j["copy_gbps"] = copy_gbps;
    j["ratio_to_copy"] = gbps / copy_gbps;
    std::printf("%s\n", j.dump().c_str());
  } else {
    std::printf("attention decode %.3f ms: %.4g GB/s of keys and values (%.4g MB); a "
                "device-to-device copy of as many bytes %.4g GB/s (read + write); ratio %.3g\n",
                decode_s * 1e3, gbps, static_cast<double>(kv_read) / 1e6, copy_gbps,
                gbps / copy_gbps);
  }
}

}  // namespace

void bench_attention(const AttentionBenchOptions& o) {
  const DType dtype = parse_dtype(o.dtype);
  const int B = o.batch, T = o.seq_len, NH = o.heads, hs = o.head_size;
  const int NKV = o.kv_heads > 0 ? o.kv_heads : NH;
  if (NH % NKV != 0)
    throw Error("--heads (" + std::to_string(NH) + ") must be a multiple of --kv-heads (" +
                std::to_string(NKV) + ")");
  if (o.decode_past > 0) {
    bench_decode(o, dtype, NKV);
    return;
  }
  const std::uint64_t es = dtype_size(dtype);
  const std::uint64_t BT = static_cast<std::uint64_t>(B) * static_cast<std::uint64_t>(T);
  const std::uint64_t row = static_cast<std::uint64_t>(NH + 2 * NKV) * static_cast<std::uint64_t>(hs);
  const std::uint64_t C = static_cast<std::uint64_t>(NH) * static_cast<std::uint64_t>(hs);
  const double pairs = static_cast<double>(T) * (T + 1) / 2.0;
  const double fwd_flops = 4.0 * B * NH * static_cast<double>(hs) * pairs;
  const double total_flops = 3.5 * fwd_flops;
  // The GEMM with the same FLOPs: (BT, C) x (C, OC), OC a multiple of 64.
  const auto oc_exact = total_flops / (2.0 * static_cast<double>(BT) * static_cast<double>(C));
  const std::uint64_t OC = std::max<std::uint64_t>(64, (static_cast<std::uint64_t>(oc_exact) + 63) / 64 * 64);
  const std::uint64_t attn_bytes = (2 * BT * row + 3 * BT * C) * es + 2 * BT * NH * 4;
  const std::uint64_t gemm_bytes = (BT * C + OC * C + BT * OC) * es;

  runtime::device::DeviceOptions device_options = resolve_device_options(o.device);
  if (o.device.device_memory.empty())
    device_options.memory_bytes = std::max(attn_bytes, gemm_bytes) + (64ull << 20);
  auto device = runtime::device::Device::create(device_options);
  auto stream = device->create_stream("compute");
  std::fprintf(stderr, "strata bench attention: B=%d T=%d NH=%d NKV=%d hs=%d %s on %s\n", B, T, NH,
               NKV, hs, std::string(dtype_name(dtype)).c_str(), device->name().c_str());

  double fwd_s = 0, bwd_s = 0, gemm_s = 0;
  {
    runtime::device::DeviceBuffer qkv = device->allocate(BT * row * es, "qkv");
    runtime::device::DeviceBuffer out = device->allocate(BT * C * es, "out");
    runtime::device::DeviceBuffer dout = device->allocate(BT * C * es, "dout");
    runtime::device::DeviceBuffer dqkv = device->allocate(BT * row * es, "dqkv");
    runtime::device::DeviceBuffer lse = device->allocate(BT * NH * 4, "lse");
    std::mt19937 rng(7);
    std::uniform_real_distribution<float> dist(-2.0f, 2.0f);
    std::vector<float> f(BT * row);
    for (float& x : f) x = dist(rng);
    std::vector<unsigned char> host_qkv(f.size() * es), host_dout(BT * C * es);
    convert(f.data(), DType::f32, host_qkv.data(), dtype, f.size());
    convert(f.data(), DType::f32, host_dout.data(), dtype, BT * C);  // any values will do
    stream->copy_async(qkv.data(), host_qkv.data(), host_qkv.size());
    stream->copy_async(dout.data(), host_dout.data(), host_dout.size());
    stream->synchronize();
    auto* lse_f = static_cast<float*>(lse.data());
    fwd_s = time_op(*stream, o.steps, [&] {
      runtime::ops::attention_fwd(*stream, out.data(), lse_f, qkv.data(), B, T, NH, NKV, hs, dtype);
    });
    bwd_s = time_op(*stream, o.steps, [&] {
      runtime::ops::attention_bwd(*stream, dqkv.data(), dout.data(), qkv.data(), out.data(), lse_f,
                                  B, T, NH, NKV, hs, dtype);
    });
  }
  {
    runtime::device::DeviceBuffer x = device->allocate(BT * C * es, "gemm input");
    runtime::device::DeviceBuffer w = device->allocate(OC * C * es, "gemm weight");
    runtime::device::DeviceBuffer y = device->allocate(BT * OC * es, "gemm output");
    for (runtime::device::DeviceBuffer* b : {&x, &w, &y}) stream->memset_async(b->data(), 0, b->bytes());
    gemm_s = time_op(*stream, o.steps, [&] {
      runtime::ops::matmul_fwd(*stream, y.data(), x.data(), w.data(), nullptr,
                               static_cast<std::int64_t>(BT), static_cast<int>(C),
                               static_cast<int>(OC), dtype);
    });
  }
  const double tflops = total_flops / (fwd_s + bwd_s) / 1e12;
  const double gemm_tflops = 2.0 * static_cast<double>(BT) * static_cast<double>(C) *
                             static_cast<double>(OC) / gemm_s / 1e12;
  if (o.json) {
    nlohmann::ordered_json j;
    j["device"] = device->name();
    j["dtype"] = std::string(dtype_name(dtype));
    j["batch"] = B;
    j["seq_len"] = T;
    j["heads"] = NH;
    j["kv_heads"] = NKV;
    j["head_size"] = hs;
    j["fwd_ms"] = fwd_s * 1e3;
    j["bwd_ms"] = bwd_s * 1e3;
    j["tflops"] = tflops;
    j["fwd_tflops"] = fwd_flops / fwd_s / 1e12;
    j["bwd_tflops"] = 2.5 * fwd_flops / bwd_s / 1e12;
    j["gemm_tflops"] = gemm_tflops;
    j["ratio_to_gemm"] = tflops / gemm_tflops;
    std::printf("%s\n", j.dump().c_str());
  } else {
    std::printf("attention fwd %.3f ms (%.3g TFLOPS), bwd %.3f ms (%.3g TFLOPS): fwd+bwd %.3g "
                "TFLOPS; a GEMM of the same FLOPs (%llu x %llu x %llu) %.3g TFLOPS; ratio %.3g\n",
                fwd_s * 1e3, fwd_flops / fwd_s / 1e12, bwd_s * 1e3, 2.5 * fwd_flops / bwd_s / 1e12,
                tflops, static_cast<unsigned long long>(BT), static_cast<unsigned long long>(C),
                static_cast<unsigned long long>(OC), gemm_tflops, tflops / gemm_tflops);
  }
}

}  // namespace strata::tools
