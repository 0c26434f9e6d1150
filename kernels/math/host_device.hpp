// TROUPE_HD marks math that is compiled both for the host (the cpu backend's
// loops) and for the GPU (the cuda backend's kernels). Writing the math once
// means every CPU test exercises the same arithmetic the GPU runs; only launch
// geometry is left for GPU-only tests (DESIGN.md, "GPU code that is tested
// without a GPU").
#pragma once

#if defined(__CUDACC__)
#define TROUPE_HD __host__ __device__ __forceinline__
#else
#define TROUPE_HD inline
#endif
