// The cpu backend's mixed-precision gemm (GemmShape::precision bf16 or
// fp16): A and B rounded, the products summed into an f32 C.
#pragma once

#include "kernels/backend.hpp"

namespace troupe::kernels::cpu {

// C = alpha op(A) op(B) + beta C with A and B rounded to s.precision.
void gemm_mixed(const GemmShape& s, float alpha, const float* a, const float* b, float beta, float* c);

}  // namespace troupe::kernels::cpu
