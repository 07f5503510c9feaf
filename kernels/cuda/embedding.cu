// Token + position embedding on CUDA, forward and a deterministic backward.
//
// Backward, dwte: the (token, position) pairs are sorted by token with a stable radix sort
// (CUB), so the positions of each distinct token form one contiguous run, in increasing (b, t)
// order. One block per run walks it in that order, each thread owning channels c, c + blockDim,
// ... and summing in fp32 onto the current dwte row: no atomics, the same bits on every run,
// and the host's summation order (row value first, then (b, t) ascending). dwpe: one thread per
// (t, c) sums over b in order. Scratch (the sort's keys, values and temporary storage) is
// stream-ordered (cudaMallocAsync / cudaFreeAsync on the op's stream).
#include <cub/device/device_radix_sort.cuh>

#include <climits>
#include <cstdint>

#include "core/error.h"
#include "kernels/cuda/common_impl.cuh"
#include "kernels/cuda/ops.h"

namespace strata::kernels::cuda {
namespace {

using detail::from_f32;
using detail::to_f32;

constexpr int kThreads = 256;

// out (B,T,C) = wte[tokens] + wpe[pos_offset + t]; one element per thread and step.
template <typename T>
__global__ void embedding_fwd_kernel(T* __restrict__ out, const std::int32_t* __restrict__ tokens,
                                     const T* __restrict__ wte, const T* __restrict__ wpe, int T_,
                                     int C, int pos_offset, std::int64_t n) {
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    const std::int64_t row = i / C;  // b * T + t
    const int c = static_cast<int>(i - row * C);
    const int t = static_cast<int>(row % T_);
    const std::int64_t tok = tokens[row];
    out[i] = wpe == nullptr ? wte[tok * C + c]
                            : from_f32<T>(to_f32(wte[tok * C + c]) +
                                          to_f32(wpe[static_cast<std::int64_t>(pos_offset + t) * C + c]));
  }
}

__global__ void iota_kernel(std::int32_t* __restrict__ out, int n) {
  const int stride = gridDim.x * blockDim.x;
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) out[i] = i;
}

// Block i handles the run of equal tokens starting at sorted position i (other blocks return):
// dwte[tok, c] = dwte[tok, c] + dout[rows of the run, c], in run order, in fp32.
template <typename T>
__global__ void embedding_bwd_wte_kernel(T* __restrict__ dwte, const T* __restrict__ dout,
                                         const std::int32_t* __restrict__ sorted_tokens,
                                         const std::int32_t* __restrict__ sorted_rows, int rows,
                                         int C) {
  const int start = blockIdx.x;
  const std::int32_t tok = sorted_tokens[start];
  if (start > 0 && sorted_tokens[start - 1] == tok) return;
  int end = start + 1;
  while (end < rows && sorted_tokens[end] == tok) ++end;
  T* dst = dwte + static_cast<std::int64_t>(tok) * C;
  for (int c = threadIdx.x; c < C; c += blockDim.x) {
    float acc = to_f32(dst[c]);
    for (int j = start; j < end; ++j)
      acc += to_f32(dout[static_cast<std::int64_t>(sorted_rows[j]) * C + c]);
    dst[c] = from_f32<T>(acc);
  }
}

// dwpe[t, c] = dwpe[t, c] + sum over b (in order) of dout[b, t, c].
template <typename T>
__global__ void embedding_bwd_wpe_kernel(T* __restrict__ dwpe, const T* __restrict__ dout, int B,
                                         int T_, int C) {
  const std::int64_t n = static_cast<std::int64_t>(T_) * C;
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    float acc = to_f32(dwpe[i]);
    for (int b = 0; b < B; ++b) acc += to_f32(dout[static_cast<std::int64_t>(b) * n + i]);
    dwpe[i] = from_f32<T>(acc);
  }
}

}  // namespace

void embedding_fwd(void* out, const std::int32_t* tokens, const void* wte, const void* wpe,
                   int B, int T, int C, int pos_offset, DType dtype, cudaStream_t stream) {
  STRATA_ASSERT(B >= 0 && T >= 0 && C >= 0 && pos_offset >= 0);
  const std::int64_t n = static_cast<std::int64_t>(B) * T * C;
  if (n == 0) return;
  STRATA_ASSERT(out != nullptr && tokens != nullptr && wte != nullptr);  // wpe may be null
  detail::dispatch_dtype(dtype, [&](auto tag) {
    using E = typename decltype(tag)::type;
    embedding_fwd_kernel<E><<<detail::grid_stride_blocks(n, kThreads), kThreads, 0, stream>>>(
        static_cast<E*>(out), tokens, static_cast<const E*>(wte), static_cast<const E*>(wpe), T,
        C, pos_offset, n);
    CUDA_CHECK_LAUNCH();
  });
}

void embedding_bwd(void* dwte, void* dwpe, const void* dout, const std::int32_t* tokens, int B,
                   int T, int C, DType dtype, cudaStream_t stream) {
  STRATA_ASSERT(B >= 0 && T >= 0 && C >= 0);
  const std::int64_t rows64 = static_cast<std::int64_t>(B) * T;
  if (rows64 == 0 || C == 0) return;
  STRATA_ASSERT(rows64 <= INT_MAX, "embedding_bwd: B * T must fit in an int");
  STRATA_ASSERT(dout != nullptr);
  const int rows = static_cast<int>(rows64);

  if (dwpe != nullptr) {
    const std::int64_t n = static_cast<std::int64_t>(T) * C;
    detail::dispatch_dtype(dtype, [&](auto tag) {
      using E = typename decltype(tag)::type;
      embedding_bwd_wpe_kernel<E><<<detail::grid_stride_blocks(n, kThreads), kThreads, 0,
                                    stream>>>(static_cast<E*>(dwpe),
                                              static_cast<const E*>(dout), B, T, C);
      CUDA_CHECK_LAUNCH();
    });
  }
  if (dwte == nullptr) return;
  STRATA_ASSERT(tokens != nullptr);

  // Scratch: sorted tokens, row indices (unsorted and sorted), then CUB's temporary storage.
  std::size_t sort_bytes = 0;
  CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, sort_bytes, tokens,
                                             static_cast<std::int32_t*>(nullptr),
                                             static_cast<const std::int32_t*>(nullptr),
                                             static_cast<std::int32_t*>(nullptr), rows, 0,
                                             static_cast<int>(sizeof(std::int32_t) * 8), stream));
  const std::size_t array_bytes = (static_cast<std::size_t>(rows) * 4 + 255) / 256 * 256;
  detail::StreamScratch scratch(3 * array_bytes + sort_bytes, stream);
  auto* base = scratch.as<unsigned char>();
  auto* sorted_tokens = reinterpret_cast<std::int32_t*>(base);
  auto* row_ids = reinterpret_cast<std::int32_t*>(base + array_bytes);
  auto* sorted_rows = reinterpret_cast<std::int32_t*>(base + 2 * array_bytes);
  void* sort_temp = base + 3 * array_bytes;

  iota_kernel<<<detail::grid_stride_blocks(rows, kThreads), kThreads, 0, stream>>>(row_ids, rows);
  CUDA_CHECK_LAUNCH();
  // LSD radix sort: stable, so equal tokens keep their (b, t) order (row_ids ascending).
  CUDA_CHECK(cub::DeviceRadixSort::SortPairs(sort_temp, sort_bytes, tokens, sorted_tokens,
                                             row_ids, sorted_rows, rows, 0,
                                             static_cast<int>(sizeof(std::int32_t) * 8), stream));
  detail::dispatch_dtype(dtype, [&](auto tag) {
    using E = typename decltype(tag)::type;
    const int threads = C >= 256 ? 256 : (C + 31) / 32 * 32;
    embedding_bwd_wte_kernel<E><<<static_cast<unsigned>(rows), threads, 0, stream>>>(
        static_cast<E*>(dwte), static_cast<const E*>(dout), sorted_tokens, sorted_rows, rows, C);
    CUDA_CHECK_LAUNCH();
  });
  scratch.release();
}

}  // namespace strata::kernels::cuda
