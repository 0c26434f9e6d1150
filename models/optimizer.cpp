#include "models/optimizer.hpp"

#include <algorithm>
#include <cmath>
#include <sstream>
#include <stdexcept>

#include "kernels/ops.hpp"

namespace troupe::models {

namespace ops = kernels::ops;

std::vector<std::string> optimizer_names() { return {"sgd", "adam", "adamw", "nadam"}; }

std::string OptimizerConfig::text() const {
  std::ostringstream out;
  out << name;
  if (name == "sgd") {
    out << " momentum=" << momentum << " nesterov=" << (nesterov ? 1 : 0);
  } else {
    out << " beta1=" << beta1 << " beta2=" << beta2 << " epsilon=" << epsilon;
  }
  out << " weight_decay=" << weight_decay << " decay=" << (decay_all ? "all" : "rank") << " clip_norm=" << clip_norm;
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
    if (key == "decay") {
      const std::string v = kv.substr(eq + 1);
      if (v != "all" && v != "rank")
        throw std::invalid_argument("optimizer option '" + kv + "': decay is 'rank' (tensors of rank >= 2) or 'all'");
      c.decay_all = v == "all";
      continue;
    }
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
    else if (key == "clip_norm")
      c.clip_norm = v;
    else
      throw std::invalid_argument("unknown optimizer option '" + key + "'");
  }
  return c;
}

FlatRanges slice_ranges(const FlatRanges& ranges, std::int64_t offset, std::int64_t count) {
  FlatRanges out;
  const std::int64_t end = offset + count;
  for (const auto& [o, n] : ranges) {
    const std::int64_t b = std::max(o, offset), e = std::min(o + n, end);
    if (b < e) out.emplace_back(b - offset, e - b);
  }
  return out;
}

double clip_gradient_norm(const Tensor& grads, float max_norm) {
  if (!(max_norm > 0.0f)) return 0.0;
  const double norm = ops::l2_norm(grads);
  if (!std::isfinite(norm)) return norm;
  const double coef = double(max_norm) / (norm + 1e-6);
  if (coef < 1.0) ops::scale(grads, static_cast<float>(coef));
  return norm;
}

Optimizer::Optimizer(OptimizerConfig config, const Tensor& params, const FlatRanges& decayed)
    : config_(std::move(config)) {
  const std::int64_t n = params.numel();
  if (config_.decay_all || config_.weight_decay == 0.0f) {
    pieces_.push_back({0, n, true});
    return;
  }
  std::int64_t at = 0;
  for (const auto& [offset, count] : decayed) {
    if (count < 0 || offset < at || offset > n - count)
      throw std::invalid_argument("optimizer " + config_.name + ": decayed range {" + std::to_string(offset) + ", " +
                                  std::to_string(count) + "} is unordered, overlaps or leaves the buffer of " +
                                  std::to_string(n) + " floats");
    if (count == 0) continue;
    if (offset > at) pieces_.push_back({at, offset - at, false});
    if (!pieces_.empty() && pieces_.back().decayed && pieces_.back().offset + pieces_.back().count == offset)
      pieces_.back().count += count;  // adjacent decayed ranges: one call
    else
      pieces_.push_back({offset, count, true});
    at = offset + count;
  }
  if (at < n || pieces_.empty()) pieces_.push_back({at, n - at, false});
}

std::vector<std::pair<std::string, double>> Optimizer::scalars() const {
  std::vector<std::pair<std::string, double>> out{{"steps", double(steps_)}};
  for (auto& scalar : loss_scale_.scalars()) out.push_back(std::move(scalar));
  return out;
}

void Optimizer::set_scalar(const std::string& name, double value) {
  if (name == "steps")
    steps_ = static_cast<std::int64_t>(value);
  else if (loss_scale_.set(name, value))
    return;
  else
    throw std::invalid_argument("optimizer " + config_.name + " has no state '" + name + "'");
}

namespace {

// A piece of a buffer: the whole tensor when the piece is all of it (no
// view made on the common path).
Tensor part(const Tensor& t, const Optimizer::Piece& p) {
  if (!t.defined() || t.raw() == nullptr || (p.offset == 0 && p.count == t.numel())) return t;
  return t.slice(p.offset, {p.count});
}

class Sgd final : public Optimizer {
 public:
  Sgd(const OptimizerConfig& c, const Tensor& params, const FlatRanges& decayed) : Optimizer(c, params, decayed) {
    if (c.momentum != 0.0f) velocity_ = Tensor::zeros(params.shape(), kernels::DType::f32, params.device());
  }
  void step(const Tensor& params, const Tensor& grads, float lr) override {
    kernels::SgdParams p;
    p.lr = lr;
    p.momentum = config_.momentum;
    p.nesterov = config_.nesterov;
    for (const Piece& piece : pieces_) {
      if (piece.count == 0) continue;
      p.weight_decay = piece.decayed ? config_.weight_decay : 0.0f;
      ops::sgd_update(part(params, piece), part(grads, piece), part(velocity_, piece), p);
    }
    ++steps_;
  }
  std::vector<std::pair<std::string, Tensor>> buffers() const override {
    if (config_.momentum == 0.0f) return {};
    return {{"velocity", velocity_}};
  }

 private:
  Tensor velocity_;
};

// Adam, AdamW and Nadam share the fused kernel; they differ in the per-step
// coefficients computed here on the host, and AdamW in decoupling the
// weight decay from the gradient.
class AdamFamily final : public Optimizer {
 public:
  enum class Kind { adam, adamw, nadam };
  AdamFamily(const OptimizerConfig& c, const Tensor& params, const FlatRanges& decayed, Kind kind)
      : Optimizer(c, params, decayed), kind_(kind) {
    m_ = Tensor::zeros(params.shape(), kernels::DType::f32, params.device());
    v_ = Tensor::zeros(params.shape(), kernels::DType::f32, params.device());
  }
  void step(const Tensor& params, const Tensor& grads, float lr) override {
    kernels::AdamParams p;
    p.lr = lr;
    p.beta1 = config_.beta1;
    p.beta2 = config_.beta2;
    p.eps = config_.epsilon;
    const std::int64_t t = steps_ + 1;
    p = kind_ == Kind::nadam ? ops::nadam_coefficients(p, t, m_schedule_) : ops::adam_coefficients(p, t);
    for (const Piece& piece : pieces_) {
      if (piece.count == 0) continue;
      const float decay = piece.decayed ? config_.weight_decay : 0.0f;
      p.weight_decay = kind_ == Kind::adamw ? 0.0f : decay;
      p.decoupled_weight_decay = kind_ == Kind::adamw ? decay : 0.0f;
      ops::adam_update(part(params, piece), part(grads, piece), part(m_, piece), part(v_, piece), p);
    }
    ++steps_;
  }
  std::vector<std::pair<std::string, Tensor>> buffers() const override { return {{"m", m_}, {"v", v_}}; }
  std::vector<std::pair<std::string, double>> scalars() const override {
    auto s = Optimizer::scalars();
    if (kind_ == Kind::nadam) s.emplace_back("m_schedule", m_schedule_);
    return s;
  }
  void set_scalar(const std::string& name, double value) override {
    if (kind_ == Kind::nadam && name == "m_schedule")
      m_schedule_ = value;
    else
      Optimizer::set_scalar(name, value);
  }

 private:
  Kind kind_;
  double m_schedule_ = 1.0;
  Tensor m_, v_;
};

}  // namespace

std::unique_ptr<Optimizer> make_optimizer(const OptimizerConfig& config, const Tensor& params,
                                          const FlatRanges& decayed) {
  using Kind = AdamFamily::Kind;
  if (!(config.clip_norm >= 0.0f) || !std::isfinite(config.clip_norm))
    throw std::invalid_argument("optimizer " + config.name + ": clip_norm " + std::to_string(config.clip_norm) +
                                " must be >= 0 (0: no clipping)");
  if (config.name == "sgd") return std::make_unique<Sgd>(config, params, decayed);
  if (config.name == "adam") return std::make_unique<AdamFamily>(config, params, decayed, Kind::adam);
  if (config.name == "adamw") return std::make_unique<AdamFamily>(config, params, decayed, Kind::adamw);
  if (config.name == "nadam") return std::make_unique<AdamFamily>(config, params, decayed, Kind::nadam);
  throw std::invalid_argument("unknown optimizer '" + config.name + "'; known: sgd, adam, adamw, nadam");
}

}  // namespace troupe::models
