// TEMPORARY STUB: replaced by the real implementation before merging.
#pragma GCC diagnostic ignored "-Wunused-parameter"
#include "kernels/cpu/cpu_backend.hpp"
#include <stdexcept>
namespace troupe::kernels {
void CpuBackend::relu_forward(std::size_t n, const float* x, float* y) { throw std::logic_error("CpuBackend::relu_forward not implemented yet"); }
void CpuBackend::relu_backward(std::size_t n, const float* x, const float* dy, float* dx) { throw std::logic_error("CpuBackend::relu_backward not implemented yet"); }
void CpuBackend::dropout_forward(std::size_t n, float rate, std::uint64_t seed, const float* x, float* y) { throw std::logic_error("CpuBackend::dropout_forward not implemented yet"); }
void CpuBackend::dropout_backward(std::size_t n, float rate, std::uint64_t seed, const float* dy, float* dx) { throw std::logic_error("CpuBackend::dropout_backward not implemented yet"); }
void CpuBackend::softmax_xent(std::int64_t n, std::int64_t c, const float* logits, const std::int32_t* labels, float* loss, float* dlogits, float grad_scale) { throw std::logic_error("CpuBackend::softmax_xent not implemented yet"); }
void CpuBackend::mse(std::int64_t n, std::int64_t d, const float* pred, const float* target, float* loss, float* dpred, float grad_scale) { throw std::logic_error("CpuBackend::mse not implemented yet"); }
void CpuBackend::topk_correct(std::int64_t n, std::int64_t c, std::int64_t k, const float* logits, const std::int32_t* labels, float* correct) { throw std::logic_error("CpuBackend::topk_correct not implemented yet"); }
double CpuBackend::reduce_sum(std::size_t n, const float* x) { throw std::logic_error("CpuBackend::reduce_sum not implemented yet"); }
void CpuBackend::add(std::size_t n, const float* a, const float* b, float* y) { throw std::logic_error("CpuBackend::add not implemented yet"); }
void CpuBackend::scale(std::size_t n, float alpha, float* x) { throw std::logic_error("CpuBackend::scale not implemented yet"); }
void CpuBackend::axpy(std::size_t n, float alpha, const float* x, float* y) { throw std::logic_error("CpuBackend::axpy not implemented yet"); }
void CpuBackend::sum_n(std::size_t n, const float* const* srcs, int count, float* dst) { throw std::logic_error("CpuBackend::sum_n not implemented yet"); }
void CpuBackend::sgd_update(std::size_t n, const SgdParams& p, float* param, const float* grad, float* velocity) { throw std::logic_error("CpuBackend::sgd_update not implemented yet"); }
void CpuBackend::adam_update(std::size_t n, const AdamParams& p, float* param, const float* grad, float* m, float* v) { throw std::logic_error("CpuBackend::adam_update not implemented yet"); }
void CpuBackend::init_uniform(std::size_t n, float low, float high, std::uint64_t seed, float* x) { throw std::logic_error("CpuBackend::init_uniform not implemented yet"); }
void CpuBackend::init_normal(std::size_t n, float mean, float stddev, std::uint64_t seed, float* x) { throw std::logic_error("CpuBackend::init_normal not implemented yet"); }
}
