#include "kernels/host/threads.h"

#include <cblas.h>
#include <omp.h>

#include "core/error.h"

namespace strata::kernels::host {

void set_openmp_threads(int threads) {
  STRATA_ASSERT(threads >= 1, "set_openmp_threads: the thread count must be >= 1");
  omp_set_num_threads(threads);
}

void set_openblas_threads(int threads) {
  STRATA_ASSERT(threads >= 1, "set_openblas_threads: the thread count must be >= 1");
  openblas_set_num_threads(threads);
}

KernelThreads kernel_threads() { return {omp_get_max_threads(), openblas_get_num_threads()}; }

}  // namespace strata::kernels::host
