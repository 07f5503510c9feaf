// runtime/ops's LLaMA-family ops (rmsnorm, rope, swiglu) on the host backend: each enqueued op
// gives the bits of the host kernel called directly (the arguments reach it in order), runs
// inside its OpScope (an OpProfiler counts it once under its name), for every dtype.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "kernels/host/rmsnorm.h"
#include "kernels/host/rope.h"
#include "kernels/host/swiglu.h"
#include "llama_ops_sequence.h"
#include "runtime/ops/op_profiler.h"

namespace strata::runtime::llama_test {
namespace {

namespace kh = kernels::host;

TEST(LlamaOpsDispatch, HostBackendGivesTheHostKernelsBits) {
  for (DType t : {DType::f32, DType::bf16, DType::f16}) {
    SCOPED_TRACE(std::string(dtype_name(t)));
    const Inputs in(t);
    auto device = device::Device::create({.kind = "host", .memory_bytes = 16 << 20});
    auto stream = device->create_stream("compute");
    ops::OpProfiler profiler(*device, *stream);
    const Outputs got = run_sequence(*device, *stream, in);

    Outputs want{Bytes(in.x.size()), Bytes(kN * 4), in.dinp0, in.dw0, in.qkv, in.dqkv,
                 Bytes(in.dswi.size()), Bytes(in.gate_up.size())};
    auto* rstd = reinterpret_cast<float*>(want.rstd.data());
    kh::rmsnorm_fwd(want.out.data(), rstd, in.x.data(), in.w.data(), kN, kC, kEps, t);
    kh::rmsnorm_bwd(want.dinp.data(), want.dw.data(), in.dout.data(), in.x.data(), in.w.data(),
                    rstd, kN, kC, t);
    kh::rope_fwd(want.qkv.data(), kB, kT, kNH, kNKV, kHs, kPos, in.inv_freq.data(), t);
    kh::rope_bwd(want.dqkv.data(), kB, kT, kNH, kNKV, kHs, kPos, in.inv_freq.data(), t);
    kh::swiglu_fwd(want.swi_out.data(), in.gate_up.data(), kN, kF, t);
    kh::swiglu_bwd(want.dgate_up.data(), in.gate_up.data(), in.dswi.data(), kN, kF, t);
    EXPECT_TRUE(got.out == want.out) << "rmsnorm out";
    EXPECT_TRUE(got.rstd == want.rstd) << "rmsnorm rstd";
    EXPECT_TRUE(got.dinp == want.dinp) << "rmsnorm dinp";
    EXPECT_TRUE(got.dw == want.dw) << "rmsnorm dweight";
    EXPECT_TRUE(got.qkv == want.qkv) << "rope qkv";
    EXPECT_TRUE(got.dqkv == want.dqkv) << "rope dqkv";
    EXPECT_TRUE(got.swi_out == want.swi_out) << "swiglu out";
    EXPECT_TRUE(got.dgate_up == want.dgate_up) << "swiglu dgate_up";
    EXPECT_FALSE(got.qkv == in.qkv) << "rope did nothing";

    std::vector<std::string> names;
    for (const ops::OpTime& op : profiler.collect()) {
      EXPECT_EQ(op.count, 1) << op.op;
      names.push_back(op.op);
    }
    std::sort(names.begin(), names.end());
    EXPECT_EQ(names, (std::vector<std::string>{"rmsnorm_bwd", "rmsnorm_fwd", "rope_bwd",
                                               "rope_fwd", "swiglu_bwd", "swiglu_fwd"}));
  }
}

}  // namespace
}  // namespace strata::runtime::llama_test
