// The public numeric ops on Tensors.
//
// Each op checks dtypes, shapes and devices once, throwing
// std::invalid_argument that names the op and the tensors involved, then runs
// on the backend that the registry picks for the tensors' device. All tensors
// of one call must be on the same device. Outputs are passed in, already
// allocated with the right shape (a Tensor is a handle, so `const Tensor&`
// outputs still receive the results); backward ops overwrite their outputs.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/backend.hpp"
#include "kernels/tensor.hpp"

namespace troupe::kernels::ops {

// ---- dense ----
// The precision of gemm, gemm_batched and the convolutions on the calling
// thread (PyTorch's autocast to bfloat16 for its matmuls and convolutions):
// fp32, or bf16 or fp16, where each input element rounds to bfloat16 or
// IEEE half and the products are summed in fp32 (kernels::Precision,
// GemmShape::precision, Conv2dShape::precision). Everything else (LayerNorm, softmax, the loss,
// reductions, the optimizer) stays fp32. models::Model sets it around its
// forward and backward passes (Model::set_precision).
using MatmulPrecision = Precision;
MatmulPrecision matmul_precision();
// Sets it for the calling thread; the previous one comes back when the
// scope ends.
class MatmulPrecisionScope {
 public:
  explicit MatmulPrecisionScope(MatmulPrecision p);
  ~MatmulPrecisionScope();
  MatmulPrecisionScope(const MatmulPrecisionScope&) = delete;
  MatmulPrecisionScope& operator=(const MatmulPrecisionScope&) = delete;

 private:
  MatmulPrecision saved_;
};

// c = alpha * op(a) * op(b) + beta * c for 2-D a, b, c.
void gemm(const Tensor& a, const Tensor& b, const Tensor& c, bool trans_a = false, bool trans_b = false,
          float alpha = 1.0f, float beta = 0.0f);
// The same for every matrix of 3-D a [batch, ., .], b, c [batch, m, n].
void gemm_batched(const Tensor& a, const Tensor& b, const Tensor& c, bool trans_a = false, bool trans_b = false,
                  float alpha = 1.0f, float beta = 0.0f);
// y[..., j] += bias[j]: bias has y's last dimension.
void bias_add(const Tensor& y, const Tensor& bias);
// db[j] = sum of dy[..., j].
void bias_grad(const Tensor& dy, const Tensor& db);
// Swaps the last two dimensions: y[..., j, i] = x[..., i, j].
void transpose_last2(const Tensor& x, const Tensor& y);

// ---- convolution ----
struct Conv2dOptions {
  std::int64_t stride_h = 1, stride_w = 1, pad_h = 0, pad_w = 0;
};
// x [n, c, h, w], w [k, c, r, s] -> y [n, k, p, q]
Shape conv2d_output_shape(const Shape& x, const Shape& w, const Conv2dOptions& o = {});
// bias [k] may be an undefined Tensor (no bias).
void conv2d_forward(const Tensor& x, const Tensor& w, const Tensor& bias, const Tensor& y, const Conv2dOptions& o = {});
void conv2d_backward_data(const Tensor& dy, const Tensor& w, const Tensor& dx, const Conv2dOptions& o = {});
// db may be an undefined Tensor.
void conv2d_backward_filter(const Tensor& x, const Tensor& dy, const Tensor& dw, const Tensor& db,
                            const Conv2dOptions& o = {});

// 1-D convolution over x [n, c, length] with w [k, c, r] -> y [n, k, length'];
// the 2-D kernels with a height of 1.
struct Conv1dOptions {
  std::int64_t stride = 1, pad = 0;
};
Shape conv1d_output_shape(const Shape& x, const Shape& w, const Conv1dOptions& o = {});
void conv1d_forward(const Tensor& x, const Tensor& w, const Tensor& bias, const Tensor& y, const Conv1dOptions& o = {});
void conv1d_backward_data(const Tensor& dy, const Tensor& w, const Tensor& dx, const Conv1dOptions& o = {});
void conv1d_backward_filter(const Tensor& x, const Tensor& dy, const Tensor& dw, const Tensor& db,
                            const Conv1dOptions& o = {});

// ---- max pooling (argmax: i32, same shape as y) ----
struct Pool2dOptions {
  std::int64_t window_h = 2, window_w = 2, stride_h = 2, stride_w = 2;
};
Shape maxpool2d_output_shape(const Shape& x, const Pool2dOptions& o = {});
void maxpool2d_forward(const Tensor& x, const Tensor& y, const Tensor& argmax, const Pool2dOptions& o = {});
void maxpool2d_backward(const Tensor& dy, const Tensor& argmax, const Tensor& dx, const Pool2dOptions& o = {});
struct Pool1dOptions {
  std::int64_t window = 2, stride = 2;
};
Shape maxpool1d_output_shape(const Shape& x, const Pool1dOptions& o = {});
void maxpool1d_forward(const Tensor& x, const Tensor& y, const Tensor& argmax, const Pool1dOptions& o = {});
void maxpool1d_backward(const Tensor& dy, const Tensor& argmax, const Tensor& dx, const Pool1dOptions& o = {});

// ---- average pooling: x [n, c, h, w] -> y [n, c, p, q], no padding, each
// output the mean of its full window (Keras' AveragePooling2D, 'valid') ----
Shape avgpool2d_output_shape(const Shape& x, const Pool2dOptions& o = {});
void avgpool2d_forward(const Tensor& x, const Tensor& y, const Pool2dOptions& o = {});
void avgpool2d_backward(const Tensor& dy, const Tensor& dx, const Pool2dOptions& o = {});
// Global average pooling: x [n, c, h, w] -> y [n, c], the mean of each plane;
// backward broadcasts dy / (h * w) over dx [n, c, h, w].
void global_avgpool2d_forward(const Tensor& x, const Tensor& y);
void global_avgpool2d_backward(const Tensor& dy, const Tensor& dx);

// ---- batch normalisation, in the steps of PyTorch's SyncBatchNorm ----
// x is [n, c, ...] (rank >= 2, e.g. [n, c] or [n, c, h, w]); every
// per-channel tensor (sum, mean, var, gamma, beta, ...) is [c]. Channel c's
// statistics run over n and every spatial position: count = n * (product of
// the dimensions after c). A training step is
//   channel_sum(x, sum);                    mean = sum / count
//   channel_centered_sumsq(x, mean, sq);    var = sq / count (biased)
//   batchnorm_forward(x, mean, var, gamma, beta, eps, y)
//   ... batchnorm_backward_reduce(x, dy, mean, var, eps, sum_dy, sum_dy_xhat)
//   batchnorm_backward_data(x, dy, mean, var, gamma, eps, sum_dy, sum_dy_xhat, count, dx)
// and the sums may be all-reduced across replicas after each reduction (the
// count then being the replicas' total). Inference passes the running
// statistics to batchnorm_forward.
void channel_sum(const Tensor& x, const Tensor& sum);
// out[c] = sum over channel c of (x - mean[c])^2.
void channel_centered_sumsq(const Tensor& x, const Tensor& mean, const Tensor& out);
// y = gamma[c] * (x - mean[c]) / sqrt(var[c] + eps) + beta[c].
void batchnorm_forward(const Tensor& x, const Tensor& mean, const Tensor& var, const Tensor& gamma, const Tensor& beta,
                       float eps, const Tensor& y);
// sum_dy[c] = sum of dy (= dbeta), sum_dy_xhat[c] = sum of dy * xhat (= dgamma),
// xhat = (x - mean[c]) / sqrt(var[c] + eps).
void batchnorm_backward_reduce(const Tensor& x, const Tensor& dy, const Tensor& mean, const Tensor& var, float eps,
                               const Tensor& sum_dy, const Tensor& sum_dy_xhat);
// dx = gamma * invstd * (dy - sum_dy / count - xhat * sum_dy_xhat / count), where
// count is the total number of elements per channel the statistics were
// taken over (at least x's own n * spatial).
void batchnorm_backward_data(const Tensor& x, const Tensor& dy, const Tensor& mean, const Tensor& var,
                             const Tensor& gamma, float eps, const Tensor& sum_dy, const Tensor& sum_dy_xhat,
                             double count, const Tensor& dx);

// ---- layer normalisation over the last dimension: x [..., n] ----
// Each row of n: mean[r], rstd[r] = 1 / sqrt(var + eps) (biased variance),
// y = gamma * (x - mean) * rstd + beta; gamma, beta [n]; mean, rstd [rows],
// rows = x.numel() / n, kept for the backward pass. eps > 0.
void layernorm_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta, float eps, const Tensor& y,
                       const Tensor& mean, const Tensor& rstd);
// dx (skipped when undefined) = rstd * (g - mean_j(g) - xhat * mean_j(g * xhat)),
// g = dy * gamma, xhat = (x - mean) * rstd; dgamma = sum over rows of
// dy * xhat, dbeta = sum over rows of dy (written, not added to).
void layernorm_backward(const Tensor& x, const Tensor& dy, const Tensor& gamma, const Tensor& mean, const Tensor& rstd,
                        const Tensor& dx, const Tensor& dgamma, const Tensor& dbeta);

// ---- embedding: ids i32 [...], table [vocab, dim] -> out [..., dim] ----
void embedding_forward(const Tensor& ids, const Tensor& table, const Tensor& out);
void embedding_backward(const Tensor& ids, const Tensor& dout, const Tensor& dtable);

// ---- activations ----
void relu_forward(const Tensor& x, const Tensor& y);
void relu_backward(const Tensor& x, const Tensor& dy, const Tensor& dx);
void dropout_forward(const Tensor& x, const Tensor& y, float rate, std::uint64_t seed);
void dropout_backward(const Tensor& dy, const Tensor& dx, float rate, std::uint64_t seed);
// Element-wise; the backward ops take what their derivative needs: sigmoid
// and tanh the forward output y, gelu (exact, with erf) the forward input x.
void sigmoid_forward(const Tensor& x, const Tensor& y);
void sigmoid_backward(const Tensor& y, const Tensor& dy, const Tensor& dx);
void tanh_forward(const Tensor& x, const Tensor& y);
void tanh_backward(const Tensor& y, const Tensor& dy, const Tensor& dx);
void gelu_forward(const Tensor& x, const Tensor& y);
void gelu_backward(const Tensor& x, const Tensor& dy, const Tensor& dx);
// Softmax over the last dimension, any rank (rows = numel / last dimension):
// y = softmax(x); dx = y * (dy - sum_j dy_j y_j), from the forward output y.
void softmax_forward(const Tensor& x, const Tensor& y);
// Causal softmax over stacked score matrices x [..., n, n]: query i sees
// keys 0..i, y is 0 beyond (backward: softmax_backward on this y).
void causal_softmax_forward(const Tensor& x, const Tensor& y);
void softmax_backward(const Tensor& y, const Tensor& dy, const Tensor& dx);

// ---- losses and metrics ----
// logits [n, c], labels i32 [n], loss [n]; dlogits [n, c] or undefined.
// For the mean loss over a batch pass grad_scale = 1 / n (or 1 / global
// batch when replicas' gradients are summed). label_smoothing e in [0, 1]:
// the target (1 - e) onehot + e / c, as PyTorch's
// CrossEntropyLoss(label_smoothing=e) (Backend::softmax_xent).
void softmax_xent(const Tensor& logits, const Tensor& labels, const Tensor& loss, const Tensor& dlogits,
                  float grad_scale, float label_smoothing = 0.0f);
// pred, target [n, d] (or [n]), loss [n]; dpred like pred or undefined.
void mse(const Tensor& pred, const Tensor& target, const Tensor& loss, const Tensor& dpred, float grad_scale);
// correct [n]: 1 where the label is among the top k logits.
void topk_correct(const Tensor& logits, const Tensor& labels, const Tensor& correct, std::int64_t k);
double sum(const Tensor& x);
// Sum of squares, accumulated in double; l2_norm is its square root.
double sum_squares(const Tensor& x);
double l2_norm(const Tensor& x);

// ---- element-wise and buffers ----
void fill(const Tensor& x, float value);
void add(const Tensor& a, const Tensor& b, const Tensor& y);
void scale(const Tensor& x, float alpha);
void axpy(float alpha, const Tensor& x, const Tensor& y);
// dst = sum of srcs (all the same shape and device; dst may be one of them).
void sum_n(const std::vector<Tensor>& srcs, const Tensor& dst);
// Copies `rows` rows of `cols` elements: row i of src starts at element
// src_offset + i * src_pitch and goes to dst_offset + i * dst_pitch (all in
// elements; pitches at least cols). Both regions must lie inside their
// tensors and must not overlap. Concatenating a [n, c1, h, w] and b
// [n, c2, h, w] along the channels into y [n, c1 + c2, h, w] is
//   copy_2d(a, 0, c1*h*w, y, 0,      (c1+c2)*h*w, n, c1*h*w);
//   copy_2d(b, 0, c2*h*w, y, c1*h*w, (c1+c2)*h*w, n, c2*h*w);
// and its backward the same calls with the roles of source and destination swapped.
void copy_2d(const Tensor& src, std::int64_t src_offset, std::int64_t src_pitch, const Tensor& dst,
             std::int64_t dst_offset, std::int64_t dst_pitch, std::int64_t rows, std::int64_t cols);

// ---- optimizer updates on flat buffers ----
void sgd_update(const Tensor& param, const Tensor& grad, const Tensor& velocity, const SgdParams& p);
void adam_update(const Tensor& param, const Tensor& grad, const Tensor& m, const Tensor& v, const AdamParams& p);
// Per-step coefficients for Adam at step t (1-based).
AdamParams adam_coefficients(AdamParams p, std::int64_t t);
// Nadam as Keras implements it (Dozat 2016 with the 0.96^(0.004 t) momentum
// schedule). m_schedule is the optimizer's running product of momentum
// factors: start it at 1.0 and pass it to every step, which updates it.
AdamParams nadam_coefficients(AdamParams p, std::int64_t t, double& m_schedule);

// ---- seeded initialisers ----
void init_uniform(const Tensor& x, float low, float high, std::uint64_t seed);
void init_normal(const Tensor& x, float mean, float stddev, std::uint64_t seed);
// Keras' default for Dense and Conv kernels: U(-l, l), l = sqrt(6 / (fan_in + fan_out)).
void glorot_uniform(const Tensor& x, std::int64_t fan_in, std::int64_t fan_out, std::uint64_t seed);
// He et al. 2015: N(0, 2 / fan_in) and U(-l, l), l = sqrt(6 / fan_in).
void he_normal(const Tensor& x, std::int64_t fan_in, std::uint64_t seed);
void he_uniform(const Tensor& x, std::int64_t fan_in, std::uint64_t seed);

}  // namespace troupe::kernels::ops
