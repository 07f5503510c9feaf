// reduce_in_order: the host reduction behind the mpi backend's reduce-scatter and all-reduce.
//
// Works on blocks of kBlock elements with an fp32 accumulator on the stack, chunk after chunk,
// so that each element is still combined in chunk order 0, 1, ..., n-1 while the inner loops
// stay simple enough to vectorize.
#include <algorithm>
#include <cmath>
#include <cstdint>

#include "core/dtype.h"
#include "core/error.h"
#include "runtime/comm/comm_impl.h"

namespace strata::runtime::comm {
namespace {

constexpr std::size_t kBlock = 2048;  // 8 KiB of fp32 accumulator: stays in L1

// max that keeps a NaN from either side: an overflow flag must never be lost.
inline float max_nan(float acc, float x) { return (x > acc || std::isnan(x)) ? x : acc; }

void combine(float* acc, const float* x, std::size_t n, ReduceOp op) {
  if (op == ReduceOp::sum) {
    for (std::size_t i = 0; i < n; ++i) acc[i] += x[i];
  } else {
    for (std::size_t i = 0; i < n; ++i) acc[i] = max_nan(acc[i], x[i]);
  }
}

}  // namespace

void reduce_in_order(const void* chunks, std::size_t n, std::size_t count, DType dtype, ReduceOp op,
                     void* out) {
  STRATA_ASSERT(n >= 1, "reduce_in_order needs at least one chunk");
  const std::size_t elem = dtype_size(dtype);
  const auto* base = static_cast<const unsigned char*>(chunks);
  auto* dst = static_cast<unsigned char*>(out);
  float acc[kBlock];
  float widened[kBlock];
  for (std::size_t begin = 0; begin < count; begin += kBlock) {
    const std::size_t len = std::min(kBlock, count - begin);
    // acc = chunk 0; acc = op(acc, chunk k) for k = 1 .. n-1, each widened exactly to fp32.
    convert(base + begin * elem, dtype, acc, DType::f32, len);
    for (std::size_t k = 1; k < n; ++k) {
      const unsigned char* src = base + (k * count + begin) * elem;
      convert(src, dtype, widened, DType::f32, len);  // a plain copy for fp32
      combine(acc, widened, len, op);
    }
    convert(acc, DType::f32, dst + begin * elem, dtype, len);  // the one rounding (RNE)
  }
}

}  // namespace strata::runtime::comm
