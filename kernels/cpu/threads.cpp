#include <cblas.h>
#include <omp.h>

#include "kernels/cpu/cpu_backend.hpp"

namespace troupe::kernels {

void CpuBackend::set_threads(int threads) {
  if (threads < 1) threads = 1;
  openblas_set_num_threads(threads);
  omp_set_num_threads(threads);  // oneDNN in Debian runs on OpenMP (libgomp)
}

}  // namespace troupe::kernels
