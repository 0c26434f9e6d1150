// Fused optimizer updates: every backend against ref, and every backend and
// ref against scalar loops written here from the published formulas
// (PyTorch's SGD, Kingma & Ba's Adam, Keras' Nadam), which also checks the
// host-side coefficients of ops::adam_coefficients / nadam_coefficients.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "kernels/ops.hpp"
#include "tests/kernels/harness.hpp"
#include "tests/kernels/op_checks.hpp"

namespace troupe::kernels {
namespace {

using namespace testing;
using Outputs = std::vector<std::vector<float>>;

constexpr int kSteps = 8;

// A different gradient for each step.
Tensor step_gradient(std::int64_t n, int step) { return random_tensor({n}, 5000 + 17 * step + n); }

std::vector<SgdParams> sgd_configs() {
  SgdParams plain;
  plain.lr = 0.1f;
  SgdParams momentum = plain;
  momentum.momentum = 0.9f;
  SgdParams nesterov = momentum;
  nesterov.nesterov = true;
  SgdParams decay = momentum;
  decay.weight_decay = 0.01f;
  SgdParams nesterov_decay = nesterov;
  nesterov_decay.weight_decay = 0.05f;
  SgdParams plain_decay = plain;
  plain_decay.weight_decay = 0.1f;
  return {plain, momentum, nesterov, decay, nesterov_decay, plain_decay};
}

std::string describe(const SgdParams& p) {
  return "lr " + std::to_string(p.lr) + ", momentum " + std::to_string(p.momentum) + (p.nesterov ? " (nesterov)" : "") +
         ", weight decay " + std::to_string(p.weight_decay);
}

// Runs kSteps SGD updates from `param0` on `d`; returns param and velocity.
Outputs run_sgd(Device d, const Tensor& param0, const SgdParams& p) {
  const std::int64_t n = param0.numel();
  Tensor param = param0.to(d), velocity = Tensor::zeros({n}, DType::f32, d);
  for (int step = 0; step < kSteps; ++step)
    ops::sgd_update(param, step_gradient(n, step).to(d), p.momentum != 0.0f ? velocity : Tensor(), p);
  return Outputs{param.to_vector(), velocity.to_vector()};
}

TEST(Sgd, MatchesRef) {
  auto backends = backends_under_test();
  TROUPE_REQUIRE_BACKENDS(backends);
  for (const auto& backend : backends) {
    SCOPED_TRACE(backend.name);
    for (const SgdParams& p : sgd_configs()) {
      for (std::int64_t n : op_sizes()) {
        SCOPED_TRACE(describe(p) + ", n = " + std::to_string(n));
        const Tensor param0 = random_tensor({n}, 5100 + n);
        auto body = [&](Device d) { return run_sgd(d, param0, p); };
        const Outputs want = run_ref(body), got = backend.run(body);
        EXPECT_LE(rel_error(got[0], want[0]), 1e-6) << "param";
        EXPECT_LE(rel_error(got[1], want[1]), 1e-6) << "velocity";
      }
    }
  }
}

// torch.optim.SGD's step, per element, in double:
//   d_p = grad + weight_decay * p
//   buf = d_p at the first step, then momentum * buf + d_p  (dampening 0)
//   d_p = nesterov ? d_p + momentum * buf : buf
//   p -= lr * d_p
// With buf starting at 0 the first step's buf is d_p as well, which is why
// the kernels need no first-step flag.
TEST(Sgd, FollowsPyTorchFormula) {
  const std::int64_t n = 1000;
  const Tensor param0 = random_tensor({n}, 5200);
  for (const auto& backend : ref_and_backends_under_test()) {
    SCOPED_TRACE(backend.name);
    for (const SgdParams& p : sgd_configs()) {
      SCOPED_TRACE(describe(p));
      std::vector<double> param = to_doubles(param0.to_vector()), buf(n, 0.0);
      for (int step = 0; step < kSteps; ++step) {
        const std::vector<float> grad = step_gradient(n, step).to_vector();
        for (std::int64_t i = 0; i < n; ++i) {
          double d_p = grad[i] + double(p.weight_decay) * param[i];
          if (p.momentum != 0.0f) {
            buf[i] = step == 0 ? d_p : double(p.momentum) * buf[i] + d_p;
            d_p = p.nesterov ? d_p + double(p.momentum) * buf[i] : buf[i];
          }
          param[i] -= double(p.lr) * d_p;
        }
      }
      const Outputs got = backend.run([&](Device d) { return run_sgd(d, param0, p); });
      std::vector<float> want(param.begin(), param.end());
      EXPECT_LE(rel_error(got[0], want), 1e-5);
    }
  }
}

std::vector<AdamParams> adam_configs() {
  AdamParams adam;
  adam.lr = 0.01f;
  AdamParams l2 = adam;
  l2.weight_decay = 0.1f;
  AdamParams adamw = adam;
  adamw.decoupled_weight_decay = 0.05f;
  return {adam, l2, adamw};
}

std::string describe(const AdamParams& p) {
  return "lr " + std::to_string(p.lr) + ", weight decay " + std::to_string(p.weight_decay) +
         ", decoupled weight decay " + std::to_string(p.decoupled_weight_decay);
}

// Runs kSteps Adam (or Nadam) updates; returns param, m and v.
Outputs run_adam(Device d, const Tensor& param0, const AdamParams& base, bool nadam) {
  const std::int64_t n = param0.numel();
  Tensor param = param0.to(d), m = Tensor::zeros({n}, DType::f32, d), v = Tensor::zeros({n}, DType::f32, d);
  double m_schedule = 1.0;
  for (int t = 1; t <= kSteps; ++t) {
    const AdamParams p = nadam ? ops::nadam_coefficients(base, t, m_schedule) : ops::adam_coefficients(base, t);
    ops::adam_update(param, step_gradient(n, t).to(d), m, v, p);
  }
  return Outputs{param.to_vector(), m.to_vector(), v.to_vector()};
}

TEST(Adam, MatchesRef) {
  auto backends = backends_under_test();
  TROUPE_REQUIRE_BACKENDS(backends);
  for (const auto& backend : backends) {
    SCOPED_TRACE(backend.name);
    for (bool nadam : {false, true}) {
      for (const AdamParams& p : adam_configs()) {
        for (std::int64_t n : op_sizes()) {
          SCOPED_TRACE(std::string(nadam ? "nadam, " : "adam, ") + describe(p) + ", n = " + std::to_string(n));
          const Tensor param0 = random_tensor({n}, 5300 + n);
          auto body = [&](Device d) { return run_adam(d, param0, p, nadam); };
          const Outputs want = run_ref(body), got = backend.run(body);
          EXPECT_LE(rel_error(got[0], want[0]), 1e-6) << "param";
          EXPECT_LE(rel_error(got[1], want[1]), 1e-6) << "m";
          EXPECT_LE(rel_error(got[2], want[2]), 1e-6) << "v";
        }
      }
    }
  }
}

// Compares the change of the parameters, not the parameters: an update of
// 1e-2 on a parameter of 1 would hide a wrong update in the sixth digit.
double update_error(const std::vector<float>& got, const std::vector<double>& want, const std::vector<float>& start) {
  std::vector<float> got_delta(got.size()), want_delta(got.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    got_delta[i] = float(double(got[i]) - double(start[i]));
    want_delta[i] = float(want[i] - double(start[i]));
  }
  return rel_error(got_delta, want_delta);
}

// Adam (Kingma & Ba 2015, Algorithm 1), per element, in double, with L2
// weight decay added to the gradient (torch.optim.Adam's weight_decay) and
// decoupled decay applied to the old parameter (torch.optim.AdamW):
//   g = grad + wd * p;  m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2
//   m_hat = m / (1 - b1^t);  v_hat = v / (1 - b2^t)
//   p = p - lr * m_hat / (sqrt(v_hat) + eps) - lr * decoupled * p
TEST(Adam, FollowsKingmaBaWithBiasCorrection) {
  const std::int64_t n = 1000;
  const Tensor param0 = random_tensor({n}, 5400);
  const std::vector<float> start = param0.to_vector();
  for (const auto& backend : ref_and_backends_under_test()) {
    SCOPED_TRACE(backend.name);
    for (const AdamParams& p : adam_configs()) {
      SCOPED_TRACE(describe(p));
      const double b1 = p.beta1, b2 = p.beta2, lr = p.lr, eps = p.eps;
      std::vector<double> param = to_doubles(start), m(n, 0.0), v(n, 0.0);
      for (int t = 1; t <= kSteps; ++t) {
        const std::vector<float> grad = step_gradient(n, t).to_vector();
        for (std::int64_t i = 0; i < n; ++i) {
          const double g = grad[i] + double(p.weight_decay) * param[i];
          m[i] = b1 * m[i] + (1 - b1) * g;
          v[i] = b2 * v[i] + (1 - b2) * g * g;
          const double m_hat = m[i] / (1 - std::pow(b1, t));
          const double v_hat = v[i] / (1 - std::pow(b2, t));
          param[i] =
              param[i] - lr * m_hat / (std::sqrt(v_hat) + eps) - lr * double(p.decoupled_weight_decay) * param[i];
        }
      }
      const Outputs got = backend.run([&](Device d) { return run_adam(d, param0, p, false); });
      EXPECT_LE(update_error(got[0], param, start), 1e-4);
    }
  }
}

// Nadam as tf.keras.optimizers.Nadam computes it (Dozat 2016 with Keras'
// momentum schedule), per element, in double:
//   u_t = b1 (1 - 0.5 * 0.96^(0.004 t));  u_t1 = the same at t + 1
//   schedule_new = schedule * u_t;  schedule_next = schedule_new * u_t1
//   g' = g / (1 - schedule_new)
//   m = b1 m + (1 - b1) g;  m' = m / (1 - schedule_next)
//   v = b2 v + (1 - b2) g^2;  v' = v / (1 - b2^t)
//   m_bar = (1 - u_t) g' + u_t1 m'
//   p -= lr * m_bar / (sqrt(v') + eps)
TEST(Nadam, FollowsKerasFormula) {
  const std::int64_t n = 1000;
  const Tensor param0 = random_tensor({n}, 5500);
  const std::vector<float> start = param0.to_vector();
  AdamParams base;
  base.lr = 0.01f;
  for (const auto& backend : ref_and_backends_under_test()) {
    SCOPED_TRACE(backend.name);
    const double b1 = base.beta1, b2 = base.beta2, lr = base.lr, eps = base.eps;
    std::vector<double> param = to_doubles(start), m(n, 0.0), v(n, 0.0);
    double schedule = 1.0;
    for (int t = 1; t <= kSteps; ++t) {
      const double u_t = b1 * (1 - 0.5 * std::pow(0.96, 0.004 * t));
      const double u_t1 = b1 * (1 - 0.5 * std::pow(0.96, 0.004 * (t + 1)));
      const double schedule_new = schedule * u_t, schedule_next = schedule_new * u_t1;
      schedule = schedule_new;
      const std::vector<float> grad = step_gradient(n, t).to_vector();
      for (std::int64_t i = 0; i < n; ++i) {
        const double g = grad[i];
        const double g_prime = g / (1 - schedule_new);
        m[i] = b1 * m[i] + (1 - b1) * g;
        const double m_prime = m[i] / (1 - schedule_next);
        v[i] = b2 * v[i] + (1 - b2) * g * g;
        const double v_prime = v[i] / (1 - std::pow(b2, t));
        const double m_bar = (1 - u_t) * g_prime + u_t1 * m_prime;
        param[i] -= lr * m_bar / (std::sqrt(v_prime) + eps);
      }
    }
    const Outputs got = backend.run([&](Device d) { return run_adam(d, param0, base, true); });
    EXPECT_LE(update_error(got[0], param, start), 1e-4);
  }
}

TEST(Nadam, CoefficientsAdvanceTheSchedule) {
  // The running product is the optimizer's state: after t steps it is the
  // product of u_1 .. u_t.
  AdamParams p;
  double schedule = 1.0, product = 1.0;
  for (int t = 1; t <= 5; ++t) {
    ops::nadam_coefficients(p, t, schedule);
    product *= double(p.beta1) * (1 - 0.5 * std::pow(0.96, 0.004 * t));  // beta1 is the float 0.9f
  }
  EXPECT_NEAR(schedule, product, 1e-15);
  EXPECT_THROW(ops::adam_coefficients(p, 0), std::invalid_argument);
  EXPECT_THROW(ops::nadam_coefficients(p, 0, schedule), std::invalid_argument);
}

}  // namespace
}  // namespace troupe::kernels
