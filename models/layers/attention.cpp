// Multi-head causal self-attention (layers.hpp), composed from the kernels'
// GEMMs and the causal softmax: the fused q/k/v projection and the output
// projection are one GEMM each over every position of the batch; each
// head's q, k and v are copied out of the fused projection into contiguous
// [length, head width] blocks (copy_2d), so that the scores and the
// weighted values of every (example, head) are one batched GEMM each
// (gemm_batched: on the GPU one strided-batched cuBLAS call, not a launch
// per head).
//
// Backward, with P the probabilities and S the scaled scores of one head:
//   dO = dY Wo^T (all heads),  dV = P^T dO,  dP = dO V^T,
//   dS = softmax_backward(P, dP) / sqrt(head width),  dQ = dS K,  dK = dS^T Q,
// the three written back side by side as the fused projection's gradient.
#include <cmath>
#include <stdexcept>
#include <string>

#include "kernels/ops.hpp"
#include "models/layers/layers.hpp"

namespace troupe::models {

namespace ops = kernels::ops;

CausalSelfAttention::CausalSelfAttention(std::int64_t heads, float init_std, float out_std)
    : heads_(heads), init_std_(init_std), out_std_(out_std) {
  if (heads <= 0) throw std::invalid_argument("attention: heads must be positive, got " + std::to_string(heads));
  if (!(init_std >= 0.0f) || !(out_std >= 0.0f))
    throw std::invalid_argument("attention: the inits' deviations must be positive");
}

std::string CausalSelfAttention::spec() const {
  return "attention heads=" + std::to_string(heads_) + (init_std_ > 0 ? " init=" + normal_init_text(init_std_) : "") +
         (out_std_ > 0 ? " out_init=" + normal_init_text(out_std_) : "");
}

Shape CausalSelfAttention::build(const Shape& input, const Device& device) {
  if (input.rank() != 2)
    throw std::invalid_argument("attention: expects a sequence [length, width], got " + input.str() +
                                " (an embedding with layout=channels_last gives one)");
  if (input[1] % heads_ != 0)
    throw std::invalid_argument("attention: width " + std::to_string(input[1]) + " does not split into " +
                                std::to_string(heads_) + " heads");
  shape_ = input;
  device_ = device;
  length_ = input[0];
  width_ = input[1];
  head_width_ = width_ / heads_;
  return input;
}

std::vector<ParameterInfo> CausalSelfAttention::parameters() const {
  return {{"qkv_kernel", Shape{width_, 3 * width_}},
          {"qkv_bias", Shape{3 * width_}},
          {"out_kernel", Shape{width_, width_}},
          {"out_bias", Shape{width_}}};
}

void CausalSelfAttention::bind(const Tensor& params, const Tensor& grads) {
  const std::int64_t c = width_;
  std::int64_t at = 0;
  auto take = [&](const Tensor& from, const Shape& shape, std::int64_t offset) { return from.slice(offset, shape); };
  w_qkv_ = take(params, {c, 3 * c}, at);
  dw_qkv_ = take(grads, {c, 3 * c}, at);
  at += 3 * c * c;
  b_qkv_ = take(params, {3 * c}, at);
  db_qkv_ = take(grads, {3 * c}, at);
  at += 3 * c;
  w_out_ = take(params, {c, c}, at);
  dw_out_ = take(grads, {c, c}, at);
  at += c * c;
  b_out_ = take(params, {c}, at);
  db_out_ = take(grads, {c}, at);
}

void CausalSelfAttention::initialize(std::uint64_t seed) {
  if (init_std_ > 0)
    ops::init_normal(w_qkv_, 0.0f, init_std_, seed);
  else
    ops::glorot_uniform(w_qkv_, width_, 3 * width_, seed);
  ops::fill(b_qkv_, 0.0f);
  if (out_std_ > 0)
    ops::init_normal(w_out_, 0.0f, out_std_, seed + 1);
  else
    ops::glorot_uniform(w_out_, width_, width_, seed + 1);
  ops::fill(b_out_, 0.0f);
}

Tensor CausalSelfAttention::qkv_part(int part) const {
  const std::int64_t n = heads_qkv_.size(1), block = n * heads_ * length_ * head_width_;
  return heads_qkv_.slice(static_cast<std::int64_t>(part) * block, {n * heads_, length_, head_width_});
}

const Tensor& CausalSelfAttention::forward(const Tensor& x, bool) {
  const std::int64_t n = x.size(0), rows = n * length_, c = width_, t = length_, d = head_width_;
  x_ = x.reshape({rows, c});
  // q, k and v of every position: one GEMM.
  Tensor& qkv = ensure(qkv_, n, {t, 3 * c}, device_);
  const Tensor qkv2 = qkv.reshape({rows, 3 * c});
  ops::gemm(x_, w_qkv_, qkv2);
  ops::bias_add(qkv2, b_qkv_);
  // Each head's q, k, v as contiguous blocks [3, n, heads, t, d].
  if (!heads_qkv_.defined() || heads_qkv_.size(1) != n || heads_qkv_.device() != device_)
    heads_qkv_ = Tensor::zeros({3, n, heads_ * t * d}, DType::f32, device_);
  for (int part = 0; part < 3; ++part)
    for (std::int64_t b = 0; b < n; ++b)
      for (std::int64_t h = 0; h < heads_; ++h)
        ops::copy_2d(qkv, b * t * 3 * c + part * c + h * d, 3 * c, heads_qkv_, ((part * n + b) * heads_ + h) * t * d, d,
                     t, d);
  // Scores and probabilities [n * heads, t, t], one batched GEMM.
  Tensor& probs = ensure(probs_, n * heads_, {t, t}, device_);
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(d)));
  ops::gemm_batched(qkv_part(0), qkv_part(1), probs, false, true, scale);
  ops::causal_softmax_forward(probs, probs);
  // The weighted values [n * heads, t, d], side by side [rows, c], then the projection.
  Tensor& out = ensure(per_head_, n * heads_, {t, d}, device_);
  ops::gemm_batched(probs, qkv_part(2), out);
  Tensor& merged = ensure(merged_, n, {t, c}, device_);
  for (std::int64_t b = 0; b < n; ++b)
    for (std::int64_t h = 0; h < heads_; ++h)
      ops::copy_2d(out, (b * heads_ + h) * t * d, d, merged, b * t * c + h * d, c, t, d);
  Tensor& y = ensure(y_, n, shape_, device_);
  const Tensor y2 = y.reshape({rows, c});
  ops::gemm(merged.reshape({rows, c}), w_out_, y2);
  ops::bias_add(y2, b_out_);
  return y;
}

const Tensor& CausalSelfAttention::backward(const Tensor& dy, bool need_dx) {
  const std::int64_t n = dy.size(0), rows = n * length_, c = width_, t = length_, d = head_width_;
  const Tensor dy2 = dy.reshape({rows, c});
  const Tensor merged2 = merged_.reshape({rows, c});
  ops::gemm(merged2, dy2, dw_out_, /*trans_a=*/true);
  ops::bias_grad(dy2, db_out_);
  Tensor& dmerged = ensure(dmerged_, n, {t, c}, device_);
  ops::gemm(dy2, w_out_, dmerged.reshape({rows, c}), false, /*trans_b=*/true);

  Tensor& dqkv = ensure(dqkv_, n, {t, 3 * c}, device_);
  const std::int64_t bh = n * heads_;
  Tensor& dout = ensure(per_head_, bh, {t, d}, device_);
  Tensor& dpart = ensure(dpart_, bh, {t, d}, device_);
  Tensor& dprobs = ensure(dprobs_, bh, {t, t}, device_);
  Tensor& dscores = ensure(dscores_, bh, {t, t}, device_);
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(d)));
  // Part `part` of the fused projection's gradient, from dpart, every head.
  auto scatter = [&](int part) {
    for (std::int64_t b = 0; b < n; ++b)
      for (std::int64_t h = 0; h < heads_; ++h)
        ops::copy_2d(dpart, (b * heads_ + h) * t * d, d, dqkv, b * t * 3 * c + part * c + h * d, 3 * c, t, d);
  };
  for (std::int64_t b = 0; b < n; ++b)
    for (std::int64_t h = 0; h < heads_; ++h)
      ops::copy_2d(dmerged, b * t * c + h * d, c, dout, (b * heads_ + h) * t * d, d, t, d);
  ops::gemm_batched(probs_, dout, dpart, /*trans_a=*/true);  // dV = P^T dO
  scatter(2);
  ops::gemm_batched(dout, qkv_part(2), dprobs, false, /*trans_b=*/true);  // dP = dO V^T
  ops::softmax_backward(probs_, dprobs, dscores);                         // masked keys: P = 0, so dS = 0
  ops::gemm_batched(dscores, qkv_part(1), dpart, false, false, scale);    // dQ = dS K / sqrt(d)
  scatter(0);
  ops::gemm_batched(dscores, qkv_part(0), dpart, /*trans_a=*/true, false, scale);  // dK = dS^T Q / sqrt(d)
  scatter(1);
  const Tensor dqkv2 = dqkv.reshape({rows, 3 * c});
  ops::gemm(x_, dqkv2, dw_qkv_, /*trans_a=*/true);
  ops::bias_grad(dqkv2, db_qkv_);
  if (!need_dx) return dx_;
  Tensor& dx = ensure(dx_, n, shape_, device_);
  ops::gemm(dqkv2, w_qkv_, dx.reshape({rows, c}), false, /*trans_b=*/true);
  return dx;
}

}  // namespace troupe::models
