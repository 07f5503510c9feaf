#pragma once
// Internal to kernels/cuda: one GEMM with a fused epilogue on cuBLASLt (cublaslt.cu). Included
// only by .cu files (matmul.cu).
//
// Terms are cuBLASLt's, column-major: D (m,n) = op(A) (m,k) * op(B) (k,n) + beta * D, then the
// epilogue; C is D itself (same pointer, same layout: cuBLASLt's in-place form). A, B, D, the
// bias, the bias gradient and aux are all in the storage dtype; compute and scale are fp32
// (CUBLAS_COMPUTE_32F: no TF32).
//
// Epilogues (cublasLt.h, cublasLtEpilogue_t):
//   bias          D[i,j] = acc[i,j] + bias[i]                                 (EPILOGUE_BIAS)
//   gelu_aux_bias aux[i,j] = acc[i,j] + bias[i]; D[i,j] = gelu(aux[i,j])      (GELU_AUX_BIAS;
//                 GELU_AUX when bias is null). cuBLASLt's GELU is the tanh approximation
//                 (cublasLt.h only says "GELU"; test_fused_cuda checks it against both forms)
//   dgelu_bgrad   D[i,j] = acc[i,j] * gelu'(aux[i,j]); bias_grad[i] = sum over j of D[i,j]
//                 (DGELU_BGRAD; DGELU when bias_grad is null)
//   bgrad_b       D as `none`, and bias_grad[j] = sum over k of op(B)[k,j]    (BGRADB)
// bias_grad is overwritten (cuBLASLt has no accumulate for it): callers add it where the
// semantics say +=. aux is (m,n) with leading dimension ldaux, which cuBLASLt requires to be
// a multiple of 8.
#include <cuda_runtime.h>

#include <cstdint>

#include "core/dtype.h"

namespace strata::kernels::cuda::detail {

enum class LtEpilogue { none, bias, gelu_aux_bias, dgelu_bgrad, bgrad_b };

struct LtGemm {
  bool trans_a = false, trans_b = false;
  int m = 0, n = 0, k = 0;
  const void* A = nullptr;
  int lda = 0;
  const void* B = nullptr;
  int ldb = 0;
  void* D = nullptr;
  int ldd = 0;
  float beta = 0.0f;  // 0: D is overwritten; 1: D accumulates
  DType dtype = DType::f32;
  LtEpilogue epilogue = LtEpilogue::none;
  const void* bias = nullptr;  // (m): bias, gelu_aux_bias
  void* bias_grad = nullptr;   // (m): dgelu_bgrad; (n): bgrad_b
  // (m,n), ld ldaux: written by gelu_aux_bias (the caller passes a writable buffer), only read
  // by dgelu_bgrad.
  const void* aux = nullptr;
  int ldaux = 0;
};

// Enqueues g on `stream` and returns true; or returns false, having enqueued nothing, when
// cuBLASLt offers no algorithm for it or refuses the combination (NOT_SUPPORTED or
// INVALID_VALUE from the heuristic or from cublasLtMatmul's argument checks: an epilogue it
// does not support for these types, shapes or alignments): the caller then takes its
// unfused path. The answer is cached per
// (thread, device, stream) and problem (Note [cuBLASLt plans] in cublaslt.cu), so it is the
// same on every call, and so are the bits. Any other failure throws strata::Error.
bool lt_gemm(const LtGemm& g, cudaStream_t stream);

// How many lt_gemm calls on this thread returned false (kernels::cuda::
// matmul_unfused_epilogue_count() makes it public).
std::uint64_t lt_declined_count();

}  // namespace strata::kernels::cuda::detail
