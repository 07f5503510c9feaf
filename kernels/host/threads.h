#pragma once
// The thread count of the host kernels (kernels/host): OpenMP's team size inside each op and
// OpenBLAS's threads for the matmuls' sgemm. Every host op gives the same bits for any thread
// count (tests/kernels: BitwiseDeterministicForAnyThreadCount), so this changes speed only.
//
// The host device sets both from DeviceOptions::host_threads (strata.cpu_threads, resolved):
// OpenBLAS's once when the device is created, OpenMP's in each stream's worker thread as it
// starts, since the host ops run there. Without a call, the libraries' defaults apply
// (OMP_NUM_THREADS / OPENBLAS_NUM_THREADS, else every CPU).

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
