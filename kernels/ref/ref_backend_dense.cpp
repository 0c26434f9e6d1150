// TEMPORARY STUB: replaced by the real implementation before merging.
#pragma GCC diagnostic ignored "-Wunused-parameter"
#include "kernels/ref/ref_backend.hpp"
#include <stdexcept>
namespace troupe::kernels {
void RefBackend::gemm(const GemmShape& s, float alpha, const float* a, const float* b, float beta, float* c) { throw std::logic_error("RefBackend::gemm not implemented yet"); }
void RefBackend::bias_add(std::int64_t rows, std::int64_t cols, const float* bias, float* y) { throw std::logic_error("RefBackend::bias_add not implemented yet"); }
void RefBackend::bias_grad(std::int64_t rows, std::int64_t cols, const float* dy, float* db) { throw std::logic_error("RefBackend::bias_grad not implemented yet"); }
void RefBackend::transpose(std::int64_t batch, std::int64_t rows, std::int64_t cols, const float* x, float* y) { throw std::logic_error("RefBackend::transpose not implemented yet"); }
void RefBackend::conv2d_forward(const Conv2dShape& s, const float* x, const float* w, const float* bias, float* y) { throw std::logic_error("RefBackend::conv2d_forward not implemented yet"); }
void RefBackend::conv2d_backward_data(const Conv2dShape& s, const float* dy, const float* w, float* dx) { throw std::logic_error("RefBackend::conv2d_backward_data not implemented yet"); }
void RefBackend::conv2d_backward_filter(const Conv2dShape& s, const float* x, const float* dy, float* dw, float* db) { throw std::logic_error("RefBackend::conv2d_backward_filter not implemented yet"); }
void RefBackend::maxpool2d_forward(const Pool2dShape& s, const float* x, float* y, std::int32_t* argmax) { throw std::logic_error("RefBackend::maxpool2d_forward not implemented yet"); }
void RefBackend::maxpool2d_backward(const Pool2dShape& s, const float* dy, const std::int32_t* argmax, float* dx) { throw std::logic_error("RefBackend::maxpool2d_backward not implemented yet"); }
void RefBackend::embedding_forward(std::int64_t count, std::int64_t vocab, std::int64_t dim, const std::int32_t* ids, const float* table, float* out) { throw std::logic_error("RefBackend::embedding_forward not implemented yet"); }
void RefBackend::embedding_backward(std::int64_t count, std::int64_t vocab, std::int64_t dim, const std::int32_t* ids, const float* dout, float* dtable) { throw std::logic_error("RefBackend::embedding_backward not implemented yet"); }
}
