#pragma once
// `--moe-cpu-experts auto`: whether a mixture's expert that lives in pinned host memory is
// computed faster on the CPU, where it is, than copied to the device and computed there, by a
// machine profile's rates (machine_profile.h; `strata bench machine` measures them). As the
// number of rows routed to the expert grows the copy stays the same and the CPU's work grows, so
// the answer is a row count: an expert with at most that many rows runs on the CPU.
//
// For an expert of W weight bytes and n elements (2n flops per row), rows of width `hidden` of
// e bytes each:
//   copy        W / h2d                                  (the device's compute is not counted)
//   cpu(r)      max(W / cpu_matmul_bytes, 2 n r / cpu_matmul_flops)
//               + r hidden e / d2h + r hidden e / h2d
//               (the weight read once at one row, each row's flops at kMatmulFewRows rows; the
//               row goes to the host and its output comes back)
// and the answer is the largest r with cpu(r) < copy, 0 when even one row loses, and at most
// kernels/host/matmul_rows.h's kMatmulFewRows: past it the host matmul goes to sgemm (bf16 /
// fp16 after widening the weight), which these rates do not describe (nor fp32 from
// kMatmulFewRowsPortableF32 + 1 rows on a CPU without AVX2, where the profile's 16-row rate is
// sgemm's).
#include <cstdint>

#include "runtime/estimate/machine_profile.h"

namespace strata::runtime::estimate {

// Throws strata::Error naming the key when the profile lacks the CPU matmul rates (a profile
// written before them: measure again).
std::int64_t cpu_expert_max_rows(const MachineProfile& profile, std::uint64_t expert_numel, int hidden,
                                 std::uint64_t elem_bytes);

}  // namespace strata::runtime::estimate
