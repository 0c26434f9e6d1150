// Sigmoid and tanh through oneDNN's eltwise primitives (eltwise_onednn.cpp);
// CpuBackend calls these (see the note above its activations in
// cpu_backend_elementwise.cpp for why these two and not GELU). Arguments and
// results are those of the Backend methods of the same names.
#pragma once

#include <cstddef>

namespace troupe::kernels::cpu {

enum class Eltwise { sigmoid, tanh };

// y = f(x).
void eltwise_forward_onednn(Eltwise f, std::size_t n, const float* x, float* y);
// dx = f'(x) * dy, computed from the forward output y.
void eltwise_backward_onednn(Eltwise f, std::size_t n, const float* y, const float* dy, float* dx);

}  // namespace troupe::kernels::cpu
