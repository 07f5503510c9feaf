// Matmul with bias (torch.nn.Linear, weight (OC, C)) on cuBLAS / cuBLASLt, forward and
// backward, and the GPT MLP's two matmuls fused with their GELU.
//
// Layouts. cuBLAS is column-major; a row-major (R, K) matrix is a column-major (K, R) one with
// leading dimension K. So, with every product computed transposed:
//   out (N,OC) = inp @ W^T     <=>  out^T (OC,N)  = W^T[T] (OC,C) * inp^T (C,N)
//   dinp (N,C) = dout @ W      <=>  dinp^T (C,N)  = W^T (C,OC)    * dout^T (OC,N)
//   dW (OC,C) += dout^T @ inp  <=>  dW^T (C,OC)  += inp^T (C,N)   * dout^T[T] (N,OC)
// A/B/C in the storage type (CUDA_R_32F, CUDA_R_16BF, CUDA_R_16F) and CUBLAS_COMPUTE_32F (fp32
// accumulation, no TF32 for fp32) everywhere.
//
// Fused epilogues (cuBLASLt, cublaslt_impl.h), in the transposed terms above:
//   - bias (matmul_fwd): EPILOGUE_BIAS; bias[i] is added to row i of out^T (OC,N), i.e. to
//     channel i of every token, in fp32 before the single rounding.
//   - c_fc + GELU (matmul_bias_gelu_fwd): EPILOGUE_GELU_AUX_BIAS, aux = pre^T (OC,N) with
//     ld OC (cuBLASLt wants it a multiple of 8); pre is stored rounded, out = gelu of the fp32
//     value (the host takes gelu of the rounded pre: they differ by the rounding of pre).
//   - dbias (matmul_bwd): the dW GEMM with EPILOGUE_BGRADB; B is dout^T[T], op(B) = dout
//     (N,OC), and BGRADB sums op(B) over the GEMM's k = N for each of D's OC columns: exactly
//     sum over n of dout[n, oc]. cuBLASLt writes (never adds) the bias gradient, in the storage
//     type, to a scratch vector, which a small kernel then adds to dbias (+=, as documented).
//   - c_proj's backward through the GELU (matmul_bwd_dgelu): the dinp GEMM with
//     EPILOGUE_DGELU_BGRAD, aux = pre^T (C,N) ld C: dpre = (dout @ W) * gelu'(pre), and the
//     bias gradient of c_fc as the row sums of dpre^T (C,N) (sum over tokens), to a scratch
//     added as above.
// Where cuBLASLt has no algorithm for an epilogue (its heuristic says so, or the aux's leading
// dimension is not a multiple of 8) the op takes the unfused path, decided once per problem:
//   bias: the output is first filled with the broadcast bias and the GEMM runs with beta = 1;
//   dbias: column sums of dout in fp32 per chunk of rows (scratch), then added in chunk order;
//   GELU: the element-wise kernels of elementwise.cu.
// Every path is deterministic (no atomics; cuBLASLt algorithms cached per problem, Note
// [cuBLASLt plans] in cublaslt.cu).
//
// Note [cuBLAS handles]: one handle per (thread, device, stream), created on first use and kept
// in a thread_local cache, bound to its stream once. A handle is never used by two threads at
// once (cuBLAS handles are not thread-safe) and two streams never share one handle's workspace,
// so concurrent streams cannot race on it. There is no global mutable state, hence no lock. The
// cache holds one entry per distinct stream a thread has used (a destroyed stream's address
// reused by a new stream finds the same, still valid, entry); the handles are destroyed when
// the thread exits.
#include <cublas_v2.h>

#include <algorithm>
#include <climits>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/error.h"
#include "kernels/cuda/common_impl.cuh"
#include "kernels/cuda/cublaslt_impl.h"
#include "kernels/cuda/ops.h"

#define CUBLAS_CHECK(expr)                                                                   \
  do {                                                                                       \
    cublasStatus_t strata_cublas_rc_ = (expr);                                               \
    if (strata_cublas_rc_ != CUBLAS_STATUS_SUCCESS) [[unlikely]]                             \
      ::strata::detail::throw_gpu_error("cuBLAS", #expr, cublasGetStatusName(strata_cublas_rc_), \
                                        cublasGetStatusString(strata_cublas_rc_), __FILE__,  \
                                        __LINE__);                                           \
  } while (0)

namespace strata::kernels::cuda {
namespace {

using detail::from_f32;
using detail::LtEpilogue;
using detail::LtGemm;
using detail::to_f32;

// ---- cuBLAS handles (Note [cuBLAS handles]) ------------------------------------------------

class HandleCache {
 public:
  HandleCache() = default;
  HandleCache(const HandleCache&) = delete;
  HandleCache& operator=(const HandleCache&) = delete;
  ~HandleCache() {
    // At process exit the CUDA runtime may already be gone; nothing useful to do on failure.
    for (const Entry& e : entries_) static_cast<void>(cublasDestroy(e.handle));
  }

  cublasHandle_t get(cudaStream_t stream) {
    int device = 0;
    CUDA_CHECK(cudaGetDevice(&device));
    for (const Entry& e : entries_)
      if (e.device == device && e.stream == stream) return e.handle;
    cublasHandle_t handle = nullptr;
    CUBLAS_CHECK(cublasCreate(&handle));
    try {
      CUBLAS_CHECK(cublasSetStream(handle, stream));
      entries_.push_back(Entry{device, stream, handle});
    } catch (...) {
      static_cast<void>(cublasDestroy(handle));
      throw;
    }
    return handle;
  }

 private:
  struct Entry {
    int device;
    cudaStream_t stream;
    cublasHandle_t handle;
  };
  std::vector<Entry> entries_;
};

cublasHandle_t handle_for(cudaStream_t stream) {
  thread_local HandleCache cache;
  return cache.get(stream);
}

cudaDataType_t cuda_type(DType dtype) {
  switch (dtype) {
    case DType::f32: return CUDA_R_32F;
    case DType::bf16: return CUDA_R_16BF;
    case DType::f16: return CUDA_R_16F;
  }
  STRATA_ASSERT(false, "matmul: dtype is not a DType");
}

// Column-major C (m,n) = alpha op(A) op(B) + beta C, all in `dtype`, fp32 compute.
void gemm(cublasHandle_t handle, cublasOperation_t op_a, cublasOperation_t op_b, int m, int n,
          int k, const void* A, int lda, const void* B, int ldb, float beta, void* C, int ldc,
          DType dtype) {
  const float alpha = 1.0f;
  const cudaDataType_t t = cuda_type(dtype);
  CUBLAS_CHECK(cublasGemmEx(handle, op_a, op_b, m, n, k, &alpha, A, t, lda, B, t, ldb, &beta, C,
                            t, ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

// ---- bias kernels -------------------------------------------------------------------------

constexpr int kThreads = 256;

// out[n, oc] = bias[oc] for every row.
template <typename T>
__global__ void broadcast_bias_kernel(T* __restrict__ out, const T* __restrict__ bias,
                                      std::int64_t n, int OC) {
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride)
    out[i] = bias[i % OC];
}

constexpr int kTileC = 32;    // columns per block of the partial-sum kernel
constexpr int kTileRows = 8;  // threads along the rows

// Block (column tile, chunk), threads (kTileC, kTileRows): partial[chunk, oc] = sum over the
// chunk's rows of dout[n, oc], in a fixed order.
template <typename T>
__global__ void column_sum_partials_kernel(float* __restrict__ partial, const T* __restrict__ dout,
                                           std::int64_t N, int OC, std::int64_t rows_per_chunk) {
  __shared__ float s[kTileRows][kTileC];
  const int oc = blockIdx.x * kTileC + threadIdx.x;
  const std::int64_t r0 = static_cast<std::int64_t>(blockIdx.y) * rows_per_chunk;
  const std::int64_t r1 = N < r0 + rows_per_chunk ? N : r0 + rows_per_chunk;
  float acc = 0.0f;
  if (oc < OC)
    for (std::int64_t r = r0 + threadIdx.y; r < r1; r += kTileRows) acc += to_f32(dout[r * OC + oc]);
  s[threadIdx.y][threadIdx.x] = acc;
  __syncthreads();
  if (threadIdx.y == 0 && oc < OC) {
    for (int k = 1; k < kTileRows; ++k) acc += s[k][threadIdx.x];
    partial[static_cast<std::int64_t>(blockIdx.y) * OC + oc] = acc;
  }
}

// dbias[oc] += sum over chunks (in order) of partial[chunk, oc].
template <typename T>
__global__ void column_sum_finish_kernel(T* __restrict__ dbias, const float* __restrict__ partial,
                                         int chunks, int OC) {
  const int oc = blockIdx.x * blockDim.x + threadIdx.x;
  if (oc >= OC) return;
  float sum = 0.0f;
  for (int k = 0; k < chunks; ++k) sum += partial[static_cast<std::int64_t>(k) * OC + oc];
  dbias[oc] = from_f32<T>(to_f32(dbias[oc]) + sum);
}

void bias_grad(void* dbias, const void* dout, std::int64_t N, int OC, DType dtype,
               cudaStream_t stream) {
  const detail::RowChunks split = detail::row_chunks(N);
  const std::int64_t rows_per_chunk = split.rows_per_chunk;
  const int chunks = split.chunks;
  detail::StreamScratch scratch(static_cast<std::size_t>(chunks) * OC * sizeof(float), stream);
  detail::dispatch_dtype(dtype, [&](auto tag) {
    using E = typename decltype(tag)::type;
    const dim3 grid(static_cast<unsigned>(detail::ceil_div(OC, kTileC)),
                    static_cast<unsigned>(chunks));
    column_sum_partials_kernel<E><<<grid, dim3(kTileC, kTileRows), 0, stream>>>(
        scratch.as<float>(), static_cast<const E*>(dout), N, OC, rows_per_chunk);
    CUDA_CHECK_LAUNCH();
    column_sum_finish_kernel<E><<<static_cast<unsigned>(detail::ceil_div(OC, kThreads)), kThreads,
                                  0, stream>>>(static_cast<E*>(dbias), scratch.as<float>(),
                                               chunks, OC);
    CUDA_CHECK_LAUNCH();
  });
  scratch.release();
}

// acc[i] += add[i], both in the storage type, n elements.
template <typename T>
__global__ void add_vector_kernel(T* __restrict__ acc, const T* __restrict__ add, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) acc[i] = from_f32<T>(to_f32(acc[i]) + to_f32(add[i]));
}

void add_vector(void* acc, const void* add, int n, DType dtype, cudaStream_t stream) {
  detail::dispatch_dtype(dtype, [&](auto tag) {
    using E = typename decltype(tag)::type;
    add_vector_kernel<E><<<static_cast<unsigned>(detail::ceil_div(n, kThreads)), kThreads, 0,
                           stream>>>(static_cast<E*>(acc), static_cast<const E*>(add), n);
    CUDA_CHECK_LAUNCH();
  });
}

// out^T (OC,N) = W[T] (OC,C) * inp^T (C,N), no epilogue yet.
LtGemm forward_gemm(void* out, const void* inp, const void* weight, std::int64_t N, int C, int OC,
                    DType dtype) {
  LtGemm g;
  g.trans_a = true;
  g.m = OC;
  g.n = static_cast<int>(N);
  g.k = C;
  g.A = weight;
  g.lda = C;
  g.B = inp;
  g.ldb = C;
  g.D = out;
  g.ldd = OC;
  g.dtype = dtype;
  return g;
}

void check_dims(std::int64_t N, int C, int OC) {
  STRATA_ASSERT(N >= 0 && C >= 0 && OC >= 0);
  STRATA_ASSERT(N <= INT_MAX, "matmul: N must fit in an int (cuBLAS dimensions)");
}

}  // namespace

void matmul_fwd(void* out, const void* inp, const void* weight, const void* bias,
                std::int64_t N, int C, int OC, DType dtype, cudaStream_t stream) {
  check_dims(N, C, OC);
  if (N == 0 || OC == 0) return;
  STRATA_ASSERT(out != nullptr);
  if (bias != nullptr && C > 0) {
    STRATA_ASSERT(inp != nullptr && weight != nullptr);
    LtGemm g = forward_gemm(out, inp, weight, N, C, OC, dtype);
    g.epilogue = LtEpilogue::bias;
    g.bias = bias;
    if (detail::lt_gemm(g, stream)) return;
  }
  // Unfused: bias broadcast, then the GEMM with beta = 1.
  const std::int64_t n_out = N * OC;
  if (bias != nullptr) {
    detail::dispatch_dtype(dtype, [&](auto tag) {
      using E = typename decltype(tag)::type;
      broadcast_bias_kernel<E><<<detail::grid_stride_blocks(n_out, kThreads), kThreads, 0,
                                 stream>>>(static_cast<E*>(out), static_cast<const E*>(bias),
                                           n_out, OC);
      CUDA_CHECK_LAUNCH();
    });
  }
  if (C == 0) {  // an empty sum: out = bias, or 0
    if (bias == nullptr)
      CUDA_CHECK(cudaMemsetAsync(out, 0, static_cast<std::size_t>(n_out) * dtype_size(dtype),
                                 stream));
    return;
  }
  STRATA_ASSERT(inp != nullptr && weight != nullptr);
  // out^T (OC,N) = W[T] (OC,C) * inp^T (C,N) (+ the bias already in out)
  gemm(handle_for(stream), CUBLAS_OP_T, CUBLAS_OP_N, OC, static_cast<int>(N), C, weight, C, inp, C,
       bias != nullptr ? 1.0f : 0.0f, out, OC, dtype);
}

// Note [Grouped expert matmuls]: a mixture's experts over their sorted rows in one
// cublasGemmGroupedBatchedEx call instead of one GEMM per expert (Qwen3-30B-A3B decoding at batch
// 1 runs 8 experts a layer, a prefill up to 128: the launches, not the flops, were the cost).
// Each expert is a group of one problem, in the transposed terms of the header: out^T (OC, rows)
// = W[T] (OC, C) * inp^T (C, rows), rows varying by expert. The pointer arrays must be in device
// memory, in stream-ordered scratch. They travel as a small kernel's arguments, which go with
// its launch (a copy from pageable host memory may make the driver wait for the stream's work
// first: a bubble per mixture layer). Where cuBLAS does not support the call (its status says
// so), or a matrix does not start on 16 bytes (cuBLAS cannot see the pointers in device memory
// to check them; an output of OC = 30 bf16 columns puts most experts' rows on 4 bytes), each
// group's GEMM runs alone, counted by matmul_grouped_declined_count.
namespace {
thread_local std::uint64_t grouped_declined = 0;

// Pointers per launch of store_pointers: 3840 bytes of them, within the 4 KiB of kernel
// arguments every architecture takes.
constexpr int kPointersPerLaunch = 480;

struct PointerBatch {
  const void* p[kPointersPerLaunch];
};

__global__ void store_pointers(PointerBatch batch, int count, const void** dst) {
  const int i = static_cast<int>(threadIdx.x);
  if (i < count) dst[i] = batch.p[i];
}

// dst[i] = pointers[i] on `stream`, by kernel arguments.
void upload_pointers(const std::vector<const void*>& pointers, const void** dst, cudaStream_t stream) {
  for (std::size_t first = 0; first < pointers.size(); first += kPointersPerLaunch) {
    const std::size_t count = std::min<std::size_t>(kPointersPerLaunch, pointers.size() - first);
    PointerBatch batch{};
    std::copy_n(pointers.begin() + static_cast<std::ptrdiff_t>(first), count, batch.p);
    store_pointers<<<1, kPointersPerLaunch, 0, stream>>>(batch, static_cast<int>(count), dst + first);
    CUDA_CHECK_LAUNCH();
  }
}
}  // namespace

void matmul_grouped_fwd(void* out, const void* inp, const void* const* weights, const std::int32_t* offsets,
                        int groups, int C, int OC, DType dtype, cudaStream_t stream) {
  STRATA_ASSERT(groups >= 0 && C >= 0 && OC >= 0);
  const std::size_t es = dtype_size(dtype);
  struct Problem {
    const void* w;
    const void* x;
    void* y;
    int rows;
  };
  std::vector<Problem> problems;
  for (int g = 0; g < groups; ++g) {
    const std::int64_t first = offsets[g], rows = offsets[g + 1] - offsets[g];
    STRATA_ASSERT(rows >= 0 && rows <= INT_MAX, "matmul_grouped_fwd: a group's rows must fit in an int");
    if (rows == 0 || weights[g] == nullptr) continue;
    problems.push_back({weights[g],
                        static_cast<const std::byte*>(inp) + static_cast<std::size_t>(first) * static_cast<std::size_t>(C) * es,
                        static_cast<std::byte*>(out) + static_cast<std::size_t>(first) * static_cast<std::size_t>(OC) * es,
                        static_cast<int>(rows)});
  }
  if (problems.empty() || OC == 0) return;
  cublasHandle_t handle = handle_for(stream);
  auto each_alone = [&] {
    ++grouped_declined;
    for (const Problem& p : problems) {
      gemm(handle, CUBLAS_OP_T, CUBLAS_OP_N, OC, p.rows, C, p.w, C, p.x, C, 0.0f, p.y, OC, dtype);
    }
  };
  if (C == 0) {
    for (const Problem& p : problems) {
      CUDA_CHECK(cudaMemsetAsync(p.y, 0, static_cast<std::size_t>(p.rows) * static_cast<std::size_t>(OC) * es, stream));
    }
    return;
  }
  const auto on16 = [](const void* ptr) { return reinterpret_cast<std::uintptr_t>(ptr) % 16 == 0; };
  if (!std::all_of(problems.begin(), problems.end(),
                   [&](const Problem& p) { return on16(p.w) && on16(p.x) && on16(p.y); })) {
    each_alone();
    return;
  }
  const int G = static_cast<int>(problems.size());
  std::vector<const void*> pointers(3 * static_cast<std::size_t>(G));  // [A... | B... | C...]
  std::vector<int> m(G, OC), n(G), k(G, C), lda(G, C), ldb(G, C), ldc(G, OC), sizes(G, 1);
  std::vector<cublasOperation_t> op_a(G, CUBLAS_OP_T), op_b(G, CUBLAS_OP_N);
  std::vector<float> alpha(G, 1.0f), beta(G, 0.0f);
  for (int i = 0; i < G; ++i) {
    const auto u = static_cast<std::size_t>(i);
    pointers[u] = problems[u].w;
    pointers[static_cast<std::size_t>(G) + u] = problems[u].x;
    pointers[2 * static_cast<std::size_t>(G) + u] = problems[u].y;
    n[u] = problems[u].rows;
  }
  detail::StreamScratch device_pointers(pointers.size() * sizeof(void*), stream);
  upload_pointers(pointers, device_pointers.as<const void*>(), stream);
  const auto* arrays = device_pointers.as<const void*>();
  const cudaDataType_t t = cuda_type(dtype);
  const cublasStatus_t rc = cublasGemmGroupedBatchedEx(
      handle, op_a.data(), op_b.data(), m.data(), n.data(), k.data(), alpha.data(), arrays, t, lda.data(), arrays + G,
      t, ldb.data(), beta.data(), const_cast<void* const*>(arrays + 2 * G), t, ldc.data(), G, sizes.data(),
      CUBLAS_COMPUTE_32F);
  device_pointers.release();
  if (rc == CUBLAS_STATUS_SUCCESS) return;
  if (rc != CUBLAS_STATUS_NOT_SUPPORTED) CUBLAS_CHECK(rc);
  each_alone();
}

std::uint64_t matmul_grouped_declined_count() { return grouped_declined; }

void matmul_bwd(void* dinp, void* dweight, void* dbias, const void* dout, const void* inp,
                const void* weight, std::int64_t N, int C, int OC, DType dtype,
                cudaStream_t stream) {
  check_dims(N, C, OC);
  if (dinp != nullptr && N > 0 && C > 0) {
    if (OC == 0) {  // an empty sum
      CUDA_CHECK(cudaMemsetAsync(dinp, 0, static_cast<std::size_t>(N) * C * dtype_size(dtype),
                                 stream));
    } else {
      STRATA_ASSERT(dout != nullptr && weight != nullptr);
      // dinp^T (C,N) = W^T (C,OC) * dout^T (OC,N), overwritten
      gemm(handle_for(stream), CUBLAS_OP_N, CUBLAS_OP_N, C, static_cast<int>(N), OC, weight, C,
           dout, OC, 0.0f, dinp, C, dtype);
    }
  }
  bool dbias_done = false;
  if (dweight != nullptr && N > 0 && C > 0 && OC > 0) {
    STRATA_ASSERT(dout != nullptr && inp != nullptr);
    // dW^T (C,OC) += inp^T (C,N) * dout^T[T] (N,OC)
    if (dbias != nullptr) {
      // ... and with BGRADB, the column sums of op(B) = dout (N,OC) into a scratch (OC).
      detail::StreamScratch partial(static_cast<std::size_t>(OC) * dtype_size(dtype), stream);
      LtGemm g;
      g.trans_b = true;
      g.m = C;
      g.n = OC;
      g.k = static_cast<int>(N);
      g.A = inp;
      g.lda = C;
      g.B = dout;
      g.ldb = OC;
      g.D = dweight;
      g.ldd = C;
      g.beta = 1.0f;
      g.dtype = dtype;
      g.epilogue = LtEpilogue::bgrad_b;
      g.bias_grad = partial.as<void>();
      if (detail::lt_gemm(g, stream)) {
        add_vector(dbias, partial.as<void>(), OC, dtype, stream);
        dbias_done = true;
      }
      partial.release();
    }
    if (!dbias_done)
      gemm(handle_for(stream), CUBLAS_OP_N, CUBLAS_OP_T, C, OC, static_cast<int>(N), inp, C, dout,
           OC, 1.0f, dweight, C, dtype);
  }
  if (dbias != nullptr && !dbias_done && N > 0 && OC > 0) {
    STRATA_ASSERT(dout != nullptr);
    bias_grad(dbias, dout, N, OC, dtype, stream);
  }
}

std::uint64_t matmul_unfused_epilogue_count() { return detail::lt_declined_count(); }

void matmul_bias_gelu_fwd(void* out, void* pre, const void* inp, const void* weight,
                          const void* bias, std::int64_t N, int C, int OC, DType dtype,
                          cudaStream_t stream) {
  check_dims(N, C, OC);
  if (N == 0 || OC == 0) return;
  STRATA_ASSERT(out != nullptr && pre != nullptr);
  if (C > 0) {
    STRATA_ASSERT(inp != nullptr && weight != nullptr);
    // pre^T (OC,N) = W[T] (OC,C) * inp^T (C,N) + bias, out^T = gelu(pre^T)
    LtGemm g = forward_gemm(out, inp, weight, N, C, OC, dtype);
    g.epilogue = LtEpilogue::gelu_aux_bias;
    g.bias = bias;
    g.aux = pre;
    g.ldaux = OC;
    if (detail::lt_gemm(g, stream)) return;
  }
  matmul_fwd(pre, inp, weight, bias, N, C, OC, dtype, stream);
  gelu_fwd(out, pre, N * OC, dtype, stream);
}

void matmul_bwd_dgelu(void* dpre, void* dpre_bias, void* dweight, void* dbias, const void* dout,
                      const void* inp, const void* pre, const void* weight, std::int64_t N, int C,
                      int OC, DType dtype, cudaStream_t stream) {
  check_dims(N, C, OC);
  if (N > 0 && C > 0 && OC > 0) {
    STRATA_ASSERT(dpre != nullptr && dout != nullptr && pre != nullptr && weight != nullptr);
    // dpre^T (C,N) = (W^T (C,OC) * dout^T (OC,N)) * gelu'(pre^T), and with a bias gradient its
    // row sums (over the N tokens) into a scratch (C).
    detail::StreamScratch partial(
        dpre_bias != nullptr ? static_cast<std::size_t>(C) * dtype_size(dtype) : 0, stream);
    LtGemm g;
    g.m = C;
    g.n = static_cast<int>(N);
    g.k = OC;
    g.A = weight;
    g.lda = C;
    g.B = dout;
    g.ldb = OC;
    g.D = dpre;
    g.ldd = C;
    g.dtype = dtype;
    g.epilogue = LtEpilogue::dgelu_bgrad;
    g.bias_grad = partial.as<void>();  // null without dpre_bias: DGELU alone
    g.aux = pre;
    g.ldaux = C;
    const bool fused = detail::lt_gemm(g, stream);
    if (fused && dpre_bias != nullptr) add_vector(dpre_bias, partial.as<void>(), C, dtype, stream);
    partial.release();
    if (fused) {
      matmul_bwd(nullptr, dweight, dbias, dout, inp, weight, N, C, OC, dtype, stream);
      return;
    }
  }
  // Unfused: matmul_bwd, the GELU backward in place, then the column sums of dpre.
  matmul_bwd(dpre, dweight, dbias, dout, inp, weight, N, C, OC, dtype, stream);
  gelu_bwd(dpre, pre, dpre, N * C, dtype, stream);
  if (dpre_bias != nullptr && N > 0 && C > 0) bias_grad(dpre_bias, dpre, N, C, dtype, stream);
}

}  // namespace strata::kernels::cuda
