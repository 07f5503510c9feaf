#pragma once
// Internal to kernels/cuda: storage types and their fp32 conversions, dtype dispatch, warp and
// block reductions, grid sizing and stream-ordered scratch memory. Included only by .cu files.
//
// Storage is float, __nv_bfloat16 or __half; arithmetic is always fp32. Narrowing rounds to
// nearest even (__float2bfloat16_rn / __float2half_rn); widening is exact.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>

#include "core/dtype.h"
#include "core/error.h"

namespace strata::kernels::cuda::detail {

// ---- element types --------------------------------------------------------------------------

__device__ __forceinline__ float to_f32(float x) { return x; }
__device__ __forceinline__ float to_f32(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ __forceinline__ float to_f32(__half x) { return __half2float(x); }

template <typename T>
__device__ __forceinline__ T from_f32(float x);
template <>
__device__ __forceinline__ float from_f32<float>(float x) { return x; }
template <>
__device__ __forceinline__ __nv_bfloat16 from_f32<__nv_bfloat16>(float x) {
  return __float2bfloat16_rn(x);
}
template <>
__device__ __forceinline__ __half from_f32<__half>(float x) { return __float2half_rn(x); }

template <typename T>
struct Tag { using type = T; };

// Calls f(Tag<T>{}) with T the storage type of dtype:
//   dispatch_dtype(dtype, [&](auto tag) { using T = typename decltype(tag)::type; ... });
template <typename F>
void dispatch_dtype(DType dtype, F&& f) {
  switch (dtype) {
    case DType::f32: f(Tag<float>{}); return;
    case DType::bf16: f(Tag<__nv_bfloat16>{}); return;
    case DType::f16: f(Tag<__half>{}); return;
  }
  STRATA_ASSERT(false, "kernels::cuda: dtype is not a DType");
}

// ---- reductions -----------------------------------------------------------------------------

constexpr unsigned kFullMask = 0xFFFFFFFFu;

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(kFullMask, v, offset);
  return v;
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1)
    v = fmaxf(v, __shfl_xor_sync(kFullMask, v, offset));
  return v;
}

// Sum over the block, returned to every thread. blockDim.x is a multiple of 32 (<= 1024) and
// every thread of the block calls it; scratch holds 32 floats of shared memory. Ends with a
// barrier, so scratch may be reused by the next call. The order of the additions is fixed by
// the block size: deterministic.
__device__ __forceinline__ float block_sum(float v, float* scratch) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int warps = blockDim.x / 32;
  v = warp_sum(v);
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  float r = lane < warps ? scratch[lane] : 0.0f;
  r = warp_sum(r);
  __syncthreads();
  return r;
}

// The same for the maximum.
__device__ __forceinline__ float block_max(float v, float* scratch) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int warps = blockDim.x / 32;
  v = warp_max(v);
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  float r = lane < warps ? scratch[lane] : -INFINITY;
  r = warp_max(r);
  __syncthreads();
  return r;
}

// ---- launch helpers -------------------------------------------------------------------------

// Enough blocks to fill every SM of an H100/H200 several times over; grid-stride loops cover
// the rest, so a grid never grows with n.
constexpr std::int64_t kMaxGridStrideBlocks = 4096;

// Blocks for a grid-stride loop over n items with `threads` per block (n > 0).
inline unsigned grid_stride_blocks(std::int64_t n, int threads) {
  const std::int64_t blocks = (n + threads - 1) / threads;
  return static_cast<unsigned>(std::min(blocks, kMaxGridStrideBlocks));
}

inline std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }

// Largest grid.x a launch may use.
constexpr std::int64_t kMaxGridX = 2147483647;
// Largest grid.y / grid.z.
constexpr std::int64_t kMaxGridYZ = 65535;

// Blocks of `rows_per_block` rows for a one-warp-per-row kernel over N rows (N > 0); `op` names
// the op in the assertion.
inline unsigned row_blocks(std::int64_t N, int rows_per_block, const char* op) {
  const std::int64_t blocks = ceil_div(N, rows_per_block);
  STRATA_ASSERT(blocks <= kMaxGridX, std::string(op) + ": too many rows");
  return static_cast<unsigned>(blocks);
}

// The N rows of a column sum cut into `chunks` contiguous ranges of `rows_per_chunk` (the last
// may be shorter), one per grid.y of the partial-sum kernel: about 64 rows per chunk (8 per
// thread with 8 threads along the rows), at most 1024 chunks. The chunks' partials are added
// in chunk order, so the sums depend on N only. N > 0.
struct RowChunks {
  std::int64_t rows_per_chunk;
  int chunks;
};
inline RowChunks row_chunks(std::int64_t N) {
  const std::int64_t chunks64 = std::clamp<std::int64_t>(ceil_div(N, 64), 1, 1024);
  const std::int64_t rows_per_chunk = ceil_div(N, chunks64);
  return {rows_per_chunk, static_cast<int>(ceil_div(N, rows_per_chunk))};
}

// Lets `kernel` use `bytes` of dynamic shared memory (needed above 48 KiB); the launch then
// fails (a strata::Error from CUDA_CHECK_LAUNCH) on a device with less. The attribute belongs to
// the function, not to a launch, so it is always set to the most the device allows beside the
// kernel's static shared memory: another host thread launching the same kernel with fewer bytes
// must not lower it between this call and this launch.
template <typename Kernel>
void allow_dynamic_smem(Kernel kernel, std::size_t bytes) {
  if (bytes <= 48 * 1024) return;
  int device = 0, most = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  CUDA_CHECK(cudaDeviceGetAttribute(&most, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  cudaFuncAttributes attributes{};
  CUDA_CHECK(cudaFuncGetAttributes(&attributes, kernel));
  CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  most - static_cast<int>(attributes.sharedSizeBytes)));
}

// Scratch device memory for one op, stream-ordered: cudaMallocAsync on the op's stream, and
// cudaFreeAsync on the same stream once the op's kernels are enqueued, so the memory returns to
// the pool only after they complete (no host synchronisation). release() checks the free; the
// destructor frees without throwing (the path taken when a launch threw).
class StreamScratch {
 public:
  StreamScratch(std::size_t bytes, cudaStream_t stream) : stream_(stream) {
    if (bytes > 0) CUDA_CHECK(cudaMallocAsync(&ptr_, bytes, stream));
  }
  ~StreamScratch() {
    if (ptr_ != nullptr) static_cast<void>(cudaFreeAsync(ptr_, stream_));
  }
  StreamScratch(const StreamScratch&) = delete;
  StreamScratch& operator=(const StreamScratch&) = delete;

  template <typename T>
  T* as() const { return static_cast<T*>(ptr_); }

  void release() {
    void* p = ptr_;
    ptr_ = nullptr;
    if (p != nullptr) CUDA_CHECK(cudaFreeAsync(p, stream_));
  }

 private:
  void* ptr_ = nullptr;
  cudaStream_t stream_;
};

}  // namespace strata::kernels::cuda::detail
