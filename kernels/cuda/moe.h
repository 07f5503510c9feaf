#pragma once
// The mixture-of-experts ops on CUDA (kernels/cuda/moe.cu): the same signatures and semantics as
// kernels/host/moe.h (read it for shapes, meaning and roundings), plus the stream they are
// enqueued on. Includes no CUDA header. Every launch is checked (strata::Error on failure); each
// call returns after enqueueing. Pointers are device accessible.
//
// All deterministic, no atomics: the router is one warp per token (fp32 softmax, warp sums),
// prob_sum sums chunks of rows and then the chunks in order, combine / scatter are one block per
// token summing its k slots in slot order, the router backward's and combine_bwd's dot products
// in double.
//
// Results agree with the host within floating-point tolerance (different summation orders);
// moe_sort and moe_gather bit for bit, and the router's picks too unless two probs of a row are
// within an fp32 rounding of each other (expf and the sum differ from the host's by an ulp;
// exact ties stay ties and go to the lower index on both). An index out of range (an expert
// outside [0, E) in idx, a position / order entry outside [0, N k)) cannot be reported from the
// device: the kernels skip it (its slot adds nothing; rows only it would write keep their bytes).
//
// moe_sort is a single-block counting sort (1024 threads, each a contiguous slice of the pairs;
// scratch of E x 1024 int32 counts): correct for any N k that fits in int32, but it runs on one
// SM (not measured yet). A multi-block sort is future work if N k gets large. The host needs
// offsets (copied back) to loop over the experts.
#include <cstdint>

#include "core/dtype.h"

typedef struct CUstream_st* cudaStream_t;  // as cuda_runtime_api.h declares it

namespace strata::kernels::cuda {

void moe_router_fwd(float* probs, std::int32_t* idx, float* weights, float* prob_sum,
                    const void* logits, std::int64_t N, int E, int k, bool renormalize,
                    DType dtype, cudaStream_t stream);
void moe_router_bwd(void* dlogits, const float* dweights, const float* probs,
                    const std::int32_t* idx, const float* daux, std::int64_t N, int E, int k,
                    bool renormalize, DType dtype, cudaStream_t stream);
void moe_sort(std::int32_t* offsets, std::int32_t* order, std::int32_t* position,
              const std::int32_t* idx, std::int64_t N, int E, int k, cudaStream_t stream);
void moe_gather(void* out, const void* inp, const std::int32_t* order, std::int64_t N, int k,
                int C, DType dtype, cudaStream_t stream);
void moe_combine_fwd(void* out, const void* y, const float* weights,
                     const std::int32_t* position, std::int64_t N, int k, int C, DType dtype,
                     cudaStream_t stream);
void moe_combine_bwd(void* dy, float* dweights, const void* dout, const void* y,
                     const float* weights, const std::int32_t* position, std::int64_t N, int k,
                     int C, DType dtype, cudaStream_t stream);
void moe_scatter_add(void* dinp, const void* dx, const std::int32_t* position, std::int64_t N,
                     int k, int C, DType dtype, cudaStream_t stream);

}  // namespace strata::kernels::cuda
