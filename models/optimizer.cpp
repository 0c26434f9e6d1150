#include "models/optimizer.hpp"

#include <sstream>
#include <stdexcept>

#include "kernels/ops.hpp"

namespace troupe::models {

namespace ops = kernels::ops;

std::vector<std::string> optimizer_names() { return {"sgd", "adam", "nadam"}; }

std::string OptimizerConfig::text() const {
  std::ostringstream out;
  out << name;
  if (name == "sgd") {
    out << " momentum=" << momentum << " nesterov=" << (nesterov ? 1 : 0);
  } else {
    out << " beta1=" << beta1 << " beta2=" << beta2 << " epsilon=" << epsilon;
  }
  out << " weight_decay=" << weight_decay;
  return out.str();
}

OptimizerConfig OptimizerConfig::parse(const std::string& text) {
  std::istringstream in(text);
  OptimizerConfig c;
  in >> c.name;
  for (std::string kv; in >> kv;) {
    auto eq = kv.find('=');
    if (eq == std::string::npos) throw std::invalid_argument("optimizer option '" + kv + "' is not key=value");
    const std::string key = kv.substr(0, eq);
    float v;
    try {
      v = std::stof(kv.substr(eq + 1));
    } catch (const std::exception&) {
      throw std::invalid_argument("optimizer option '" + kv + "' is not a number");
    }
    if (key == "momentum")
      c.momentum = v;
    else if (key == "nesterov")
      c.nesterov = v != 0.0f;
    else if (key == "beta1")
      c.beta1 = v;
    else if (key == "beta2")
      c.beta2 = v;
    else if (key == "epsilon")
      c.epsilon = v;
    else if (key == "weight_decay")
      c.weight_decay = v;
    else
      throw std::invalid_argument("unknown optimizer option '" + key + "'");
  }
  return c;
}

std::vector<std::pair<std::string, double>> Optimizer::scalars() const { return {{"steps", double(steps_)}}; }

void Optimizer::set_scalar(const std::string& name, double value) {
  if (name == "steps")
    steps_ = static_cast<std::int64_t>(value);
  else
    throw std::invalid_argument("optimizer " + config_.name + " has no state '" + name + "'");
}

namespace {

class Sgd final : public Optimizer {
 public:
  Sgd(const OptimizerConfig& c, const Tensor& params) : Optimizer(c) {
    if (c.momentum != 0.0f) velocity_ = Tensor::zeros(params.shape(), kernels::DType::f32, params.device());
  }
  void step(const Tensor& params, const Tensor& grads, float lr) override {
    kernels::SgdParams p;
    p.lr = lr;
    p.momentum = config_.momentum;
    p.nesterov = config_.nesterov;
    p.weight_decay = config_.weight_decay;
    ops::sgd_update(params, grads, velocity_, p);
    ++steps_;
  }
  std::vector<std::pair<std::string, Tensor>> buffers() const override {
    if (config_.momentum == 0.0f) return {};
    return {{"velocity", velocity_}};
  }

 private:
  Tensor velocity_;
};

// Adam and Nadam share the fused kernel; they differ in the per-step
// coefficients computed here on the host.
class AdamFamily final : public Optimizer {
 public:
  AdamFamily(const OptimizerConfig& c, const Tensor& params, bool nesterov) : Optimizer(c), nesterov_(nesterov) {
    m_ = Tensor::zeros(params.shape(), kernels::DType::f32, params.device());
    v_ = Tensor::zeros(params.shape(), kernels::DType::f32, params.device());
  }
  void step(const Tensor& params, const Tensor& grads, float lr) override {
    kernels::AdamParams p;
    p.lr = lr;
    p.beta1 = config_.beta1;
    p.beta2 = config_.beta2;
    p.eps = config_.epsilon;
    p.weight_decay = config_.weight_decay;
    const std::int64_t t = steps_ + 1;
    p = nesterov_ ? ops::nadam_coefficients(p, t, m_schedule_) : ops::adam_coefficients(p, t);
    ops::adam_update(params, grads, m_, v_, p);
    ++steps_;
  }
  std::vector<std::pair<std::string, Tensor>> buffers() const override { return {{"m", m_}, {"v", v_}}; }
  std::vector<std::pair<std::string, double>> scalars() const override {
    auto s = Optimizer::scalars();
    if (nesterov_) s.emplace_back("m_schedule", m_schedule_);
    return s;
  }
  void set_scalar(const std::string& name, double value) override {
    if (nesterov_ && name == "m_schedule")
      m_schedule_ = value;
    else
      Optimizer::set_scalar(name, value);
  }

 private:
  bool nesterov_;
  double m_schedule_ = 1.0;
  Tensor m_, v_;
};

}  // namespace

std::unique_ptr<Optimizer> make_optimizer(const OptimizerConfig& config, const Tensor& params) {
  if (config.name == "sgd") return std::make_unique<Sgd>(config, params);
  if (config.name == "adam") return std::make_unique<AdamFamily>(config, params, false);
  if (config.name == "nadam") return std::make_unique<AdamFamily>(config, params, true);
  throw std::invalid_argument("unknown optimizer '" + config.name + "'; known: sgd, adam, nadam");
}

}  // namespace troupe::models
