#pragma once
// The thread count of the host kernels (kernels/host): OpenMP's team size inside each op.
// The OpenMP parts give the same bits for any team size (tests/kernels:
// BitwiseDeterministicForAnyThreadCount), so this changes speed only. The host device sets it
// from DeviceOptions::host_threads in each stream's worker thread as it starts.
//
// OpenBLAS's sgemm (the matmuls) does NOT give the same bits for every thread count (measured:
// 1 vs 2, 3, 7 threads differ), so nothing in strata sets it: it stays at the library's
// default (OPENBLAS_NUM_THREADS / OMP_NUM_THREADS at start, else every CPU), as before.
// set_openblas_threads exists for tests and benchmarks only.

namespace strata::kernels::host {

// OpenMP keeps the team size per thread: ops called later from the calling thread use
// `threads` (>= 1) threads.
void set_openmp_threads(int threads);

// OpenBLAS has one thread count per process: every sgemm after this call uses `threads`
// (>= 1). Not to be called while another thread runs a host matmul.
void set_openblas_threads(int threads);

// What an op called from this thread would use: OpenMP's team size (omp_get_max_threads())
// and OpenBLAS's thread count.
struct KernelThreads {
  int openmp;
  int openblas;
};
KernelThreads kernel_threads();

}  // namespace strata::kernels::host
