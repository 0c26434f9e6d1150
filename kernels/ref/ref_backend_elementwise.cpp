// RefBackend's non-dense ops: each instantiates the reference template of the
// same name (activation.hpp, batchnorm.hpp, layernorm.hpp, loss.hpp, elementwise.hpp,
// optim.hpp, init.hpp) for float. The templates are the reference; this file
// only binds them.
#include "kernels/ref/activation.hpp"
#include "kernels/ref/batchnorm.hpp"
#include "kernels/ref/elementwise.hpp"
#include "kernels/ref/init.hpp"
#include "kernels/ref/layernorm.hpp"
#include "kernels/ref/loss.hpp"
#include "kernels/ref/optim.hpp"
#include "kernels/ref/ref_backend.hpp"

namespace troupe::kernels {

void RefBackend::relu_forward(std::size_t n, const float* x, float* y) { ref::relu_forward(n, x, y); }

void RefBackend::relu_backward(std::size_t n, const float* x, const float* dy, float* dx) {
  ref::relu_backward(n, x, dy, dx);
}

void RefBackend::dropout_forward(std::size_t n, float rate, std::uint64_t seed, const float* x, float* y) {
  ref::dropout_forward(n, rate, seed, x, y);
}

void RefBackend::dropout_backward(std::size_t n, float rate, std::uint64_t seed, const float* dy, float* dx) {
  ref::dropout_backward(n, rate, seed, dy, dx);
}

void RefBackend::sigmoid_forward(std::size_t n, const float* x, float* y) { ref::sigmoid_forward(n, x, y); }

void RefBackend::sigmoid_backward(std::size_t n, const float* y, const float* dy, float* dx) {
  ref::sigmoid_backward(n, y, dy, dx);
}

void RefBackend::tanh_forward(std::size_t n, const float* x, float* y) { ref::tanh_forward(n, x, y); }

void RefBackend::tanh_backward(std::size_t n, const float* y, const float* dy, float* dx) {
  ref::tanh_backward(n, y, dy, dx);
}

void RefBackend::gelu_forward(std::size_t n, const float* x, float* y) { ref::gelu_forward(n, x, y); }

void RefBackend::gelu_backward(std::size_t n, const float* x, const float* dy, float* dx) {
  ref::gelu_backward(n, x, dy, dx);
}

void RefBackend::softmax_forward(std::int64_t rows, std::int64_t n, const float* x, float* y) {
  ref::softmax_forward(rows, n, x, y);
}

void RefBackend::causal_softmax_forward(std::int64_t rows, std::int64_t n, const float* x, float* y) {
  ref::causal_softmax_forward(rows, n, x, y);
}

void RefBackend::softmax_backward(std::int64_t rows, std::int64_t n, const float* y, const float* dy, float* dx) {
  ref::softmax_backward(rows, n, y, dy, dx);
}

void RefBackend::channel_sum(const BatchNormShape& s, const float* x, float* sum) { ref::channel_sum(s, x, sum); }

void RefBackend::channel_centered_sumsq(const BatchNormShape& s, const float* x, const float* mean, float* out) {
  ref::channel_centered_sumsq(s, x, mean, out);
}

void RefBackend::batchnorm_forward(const BatchNormShape& s, const float* x, const float* mean, const float* var,
                                   const float* gamma, const float* beta, float eps, float* y) {
  ref::batchnorm_forward(s, x, mean, var, gamma, beta, eps, y);
}

void RefBackend::batchnorm_backward_reduce(const BatchNormShape& s, const float* x, const float* dy, const float* mean,
                                           const float* var, float eps, float* sum_dy, float* sum_dy_xhat) {
  ref::batchnorm_backward_reduce(s, x, dy, mean, var, eps, sum_dy, sum_dy_xhat);
}

void RefBackend::batchnorm_backward_data(const BatchNormShape& s, const float* x, const float* dy, const float* mean,
                                         const float* var, const float* gamma, float eps, const float* sum_dy,
                                         const float* sum_dy_xhat, double count, float* dx) {
  ref::batchnorm_backward_data(s, x, dy, mean, var, gamma, eps, sum_dy, sum_dy_xhat, count, dx);
}

void RefBackend::layernorm_forward(std::int64_t rows, std::int64_t n, const float* x, const float* gamma,
                                   const float* beta, float eps, float* y, float* mean, float* rstd) {
  ref::layernorm_forward(rows, n, x, gamma, beta, eps, y, mean, rstd);
}

void RefBackend::layernorm_backward(std::int64_t rows, std::int64_t n, const float* x, const float* dy,
                                    const float* gamma, const float* mean, const float* rstd, float* dx, float* dgamma,
                                    float* dbeta) {
  ref::layernorm_backward(rows, n, x, dy, gamma, mean, rstd, dx, dgamma, dbeta);
}

void RefBackend::softmax_xent(std::int64_t n, std::int64_t c, const float* logits, const std::int32_t* labels,
                              float* loss, float* dlogits, float grad_scale, float smoothing) {
  ref::softmax_xent(n, c, logits, labels, loss, dlogits, grad_scale, smoothing);
}

void RefBackend::mse(std::int64_t n, std::int64_t d, const float* pred, const float* target, float* loss, float* dpred,
                     float grad_scale) {
  ref::mse(n, d, pred, target, loss, dpred, grad_scale);
}

void RefBackend::topk_correct(std::int64_t n, std::int64_t c, std::int64_t k, const float* logits,
                              const std::int32_t* labels, float* correct) {
  ref::topk_correct(n, c, k, logits, labels, correct);
}

double RefBackend::reduce_sum(std::size_t n, const float* x) { return ref::reduce_sum(n, x); }

double RefBackend::reduce_sum_squares(std::size_t n, const float* x) { return ref::reduce_sum_squares(n, x); }

void RefBackend::add(std::size_t n, const float* a, const float* b, float* y) { ref::add(n, a, b, y); }

void RefBackend::scale(std::size_t n, float alpha, float* x) { ref::scale(n, alpha, x); }

void RefBackend::axpy(std::size_t n, float alpha, const float* x, float* y) { ref::axpy(n, alpha, x, y); }

void RefBackend::sum_n(std::size_t n, const float* const* srcs, int count, float* dst) {
  ref::sum_n(n, srcs, count, dst);
}

void RefBackend::copy_2d(std::int64_t rows, std::int64_t cols, const float* src, std::int64_t src_pitch, float* dst,
                         std::int64_t dst_pitch) {
  ref::copy_2d(rows, cols, src, src_pitch, dst, dst_pitch);
}

void RefBackend::sgd_update(std::size_t n, const SgdParams& p, float* param, const float* grad, float* velocity) {
  ref::sgd_update(n, p, param, grad, velocity);
}

void RefBackend::adam_update(std::size_t n, const AdamParams& p, float* param, const float* grad, float* m, float* v) {
  ref::adam_update(n, p, param, grad, m, v);
}

void RefBackend::init_uniform(std::size_t n, float low, float high, std::uint64_t seed, float* x) {
  ref::init_uniform(n, low, high, seed, x);
}

void RefBackend::init_normal(std::size_t n, float mean, float stddev, std::uint64_t seed, float* x) {
  ref::init_normal(n, mean, stddev, seed, x);
}

}  // namespace troupe::kernels
