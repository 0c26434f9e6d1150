// The two fast CPU convolutions that CpuBackend chooses between: oneDNN and
// im2col + OpenBLAS sgemm. Both are kept (not only the winner) so the
// benchmark can go on comparing them as libraries and shapes change; which
// one CpuBackend calls for each direction is recorded, with the figures, at
// the top of cpu_backend_dense.cpp. Arguments and results are exactly those
// of the Backend methods of the same names, except that the im2col variants
// compute in fp32 whatever Conv2dShape::precision says (the oneDNN ones honour it).
#pragma once

#include "kernels/backend.hpp"

namespace troupe::kernels::cpu {

void conv2d_forward_onednn(const Conv2dShape& s, const float* x, const float* w, const float* bias, float* y);
void conv2d_backward_data_onednn(const Conv2dShape& s, const float* dy, const float* w, float* dx);
void conv2d_backward_filter_onednn(const Conv2dShape& s, const float* x, const float* dy, float* dw, float* db);

// oneDNN in the layouts its primitive chooses (blocked on AVX-512), troupe's
// plain buffers reordered in and out (conv_onednn.cpp).
void conv2d_forward_onednn_blocked(const Conv2dShape& s, const float* x, const float* w, const float* bias, float* y);
void conv2d_backward_data_onednn_blocked(const Conv2dShape& s, const float* dy, const float* w, float* dx);
void conv2d_backward_filter_onednn_blocked(const Conv2dShape& s, const float* x, const float* dy, float* dw, float* db);

void conv2d_forward_im2col(const Conv2dShape& s, const float* x, const float* w, const float* bias, float* y);
void conv2d_backward_data_im2col(const Conv2dShape& s, const float* dy, const float* w, float* dx);
void conv2d_backward_filter_im2col(const Conv2dShape& s, const float* x, const float* dy, float* dw, float* db);

}  // namespace troupe::kernels::cpu
