// The cpu backend's bfloat16 gemm (GemmShape::bf16): oneDNN's matmul on
// bf16 A and B with an f32 C.
#pragma once

#include "kernels/backend.hpp"

namespace troupe::kernels::cpu {

// C = alpha op(A) op(B) + beta C with A and B rounded to bf16 (s.bf16).
void gemm_bf16(const GemmShape& s, float alpha, const float* a, const float* b, float beta, float* c);

}  // namespace troupe::kernels::cpu
