#pragma once
// The LM head and its loss: logits = x @ W^T, softmax cross-entropy, and their backward, over a
// vocabulary padded to an aligned width and in chunks of rows.
//
// Padding. W is the (V, C) head weight (the embedding when tied). A vocabulary such as GPT-2's 50257 is not a
// multiple of 8, and cuBLAS then falls back to its slowest, unaligned kernels for all three of
// the head's GEMMs (measured on an H100: 11 % of a GPT-2 step). So the head runs on a copy of W
// padded with zero rows to Vp = a multiple of `vocab_multiple` (128 on CUDA; the host backend
// does not pad by default, see ModelOptions): the logits are (rows, Vp),
// their V..Vp columns are zero and take no part in the softmax (softmax_xent's `ld`), their
// gradient is written as zero, so the padded rows of dW are zero and only the first V rows are
// added to the real gradient. Weights in and out of strata stay (V, C).
//
// Chunks. The logits of a micro-batch are (B*T, Vp): 0.8 GB in bf16 for GPT-2 at 8 x 1024 and
// 2.1 GB for a 128k vocabulary. At most `chunk_bytes` of them are held at once: the forward
// runs the GEMM and the loss chunk by chunk and keeps only the per-row losses; when there is
// more than one chunk, the backward recomputes each chunk's logits (one more head GEMM) before
// turning them into dlogits in place. With one chunk the backward reuses the forward's logits.
//
// Bits: with Vp == V and one chunk this is exactly the unpadded, unchunked head. Padding and
// chunking change the summation order of dx (the padded GEMM's K) and round dW once per chunk
// and once more when it is added to the gradient (see head_backward).
#include <cstdint>

#include "core/dtype.h"
#include "runtime/device/device.h"

namespace strata::models {

struct LmHeadGeometry {
  int V = 0;                      // vocabulary
  int Vp = 0;                     // padded width of the logits and the head weight
  int C = 0;                      // channels
  std::int64_t rows = 0;          // the most rows (tokens) one call handles
  std::int64_t chunk_rows = 0;    // rows per chunk, <= rows

  // vocab_multiple >= 1; chunk_bytes: the most bytes of logits (in `dtype`) held at once (at
  // least one row, and whole 64-row groups when a chunk is not all the rows).
  static LmHeadGeometry make(int V, int C, std::int64_t rows, int vocab_multiple,
                             std::uint64_t chunk_bytes, DType dtype);
  bool padded() const { return Vp != V; }
  std::int64_t chunks(std::int64_t n) const { return (n + chunk_rows - 1) / chunk_rows; }
  // Device bytes of LmHeadBuffers' parts, in `dtype`.
  std::uint64_t weight_bytes(DType dtype) const;  // one (Vp, C) matrix; 0 when not padded
  std::uint64_t logits_bytes(DType dtype) const;  // one chunk of logits
};

// Device scratch the head works in (from the model's activation allocation).
struct LmHeadBuffers {
  void* weight = nullptr;   // (Vp, C): W then zero rows; null when not padded
  void* dweight = nullptr;  // (Vp, C): the padded dW; null when not padded
  void* logits = nullptr;   // (chunk_rows, Vp); dlogits in place in backward
};

// Forward over n <= g.rows rows of x (n, C) with W = wte (V, C): losses[i] (fp32, device) for
// targets (device; both null when there is no loss). With `logits_out` (host, (n, V) fp32) the
// logits are copied out too, the padding dropped; the stream is synchronized for each chunk
// then. Otherwise the call returns after enqueueing.
void head_forward(runtime::device::Stream& stream, const LmHeadGeometry& g,
                  const LmHeadBuffers& b, const void* x, const void* wte, std::int64_t n,
                  const std::int32_t* targets, float* losses, DType dtype,
                  float* logits_out = nullptr);

// Backward of the last head_forward over the same n rows and targets: dx (n, C) is overwritten
// with d(loss)/dx and dwte (V, C) += d(loss)/dW, with d(loss)/d(losses[i]) = dloss for every i.
// When padded, dW is accumulated in b.dweight over the chunks and then added to dwte.
void head_backward(runtime::device::Stream& stream, const LmHeadGeometry& g,
                   const LmHeadBuffers& b, const void* x, const void* wte, void* dx, void* dwte,
                   std::int64_t n, const std::int32_t* targets, float dloss, DType dtype);

}  // namespace strata::models
