// TEMPORARY STUB: replaced by the real implementation before merging.
#pragma GCC diagnostic ignored "-Wunused-parameter"
#include "kernels/ref/ref_backend.hpp"
#include <stdexcept>
namespace troupe::kernels {
void RefBackend::relu_forward(std::size_t n, const float* x, float* y) { throw std::logic_error("RefBackend::relu_forward not implemented yet"); }
void RefBackend::relu_backward(std::size_t n, const float* x, const float* dy, float* dx) { throw std::logic_error("RefBackend::relu_backward not implemented yet"); }
void RefBackend::dropout_forward(std::size_t n, float rate, std::uint64_t seed, const float* x, float* y) { throw std::logic_error("RefBackend::dropout_forward not implemented yet"); }
void RefBackend::dropout_backward(std::size_t n, float rate, std::uint64_t seed, const float* dy, float* dx) { throw std::logic_error("RefBackend::dropout_backward not implemented yet"); }
void RefBackend::softmax_xent(std::int64_t n, std::int64_t c, const float* logits, const std::int32_t* labels, float* loss, float* dlogits, float grad_scale) { throw std::logic_error("RefBackend::softmax_xent not implemented yet"); }
void RefBackend::mse(std::int64_t n, std::int64_t d, const float* pred, const float* target, float* loss, float* dpred, float grad_scale) { throw std::logic_error("RefBackend::mse not implemented yet"); }
void RefBackend::topk_correct(std::int64_t n, std::int64_t c, std::int64_t k, const float* logits, const std::int32_t* labels, float* correct) { throw std::logic_error("RefBackend::topk_correct not implemented yet"); }
double RefBackend::reduce_sum(std::size_t n, const float* x) { throw std::logic_error("RefBackend::reduce_sum not implemented yet"); }
void RefBackend::add(std::size_t n, const float* a, const float* b, float* y) { throw std::logic_error("RefBackend::add not implemented yet"); }
void RefBackend::scale(std::size_t n, float alpha, float* x) { throw std::logic_error("RefBackend::scale not implemented yet"); }
void RefBackend::axpy(std::size_t n, float alpha, const float* x, float* y) { throw std::logic_error("RefBackend::axpy not implemented yet"); }
void RefBackend::sum_n(std::size_t n, const float* const* srcs, int count, float* dst) { throw std::logic_error("RefBackend::sum_n not implemented yet"); }
void RefBackend::sgd_update(std::size_t n, const SgdParams& p, float* param, const float* grad, float* velocity) { throw std::logic_error("RefBackend::sgd_update not implemented yet"); }
void RefBackend::adam_update(std::size_t n, const AdamParams& p, float* param, const float* grad, float* m, float* v) { throw std::logic_error("RefBackend::adam_update not implemented yet"); }
void RefBackend::init_uniform(std::size_t n, float low, float high, std::uint64_t seed, float* x) { throw std::logic_error("RefBackend::init_uniform not implemented yet"); }
void RefBackend::init_normal(std::size_t n, float mean, float stddev, std::uint64_t seed, float* x) { throw std::logic_error("RefBackend::init_normal not implemented yet"); }
}
