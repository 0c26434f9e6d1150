#include "models/model.hpp"

#include <unistd.h>

#include <cstdio>
#include <stdexcept>
#include <string>

#include "kernels/math/random.hpp"
#include "kernels/ops.hpp"
#include "models/layers/layers.hpp"

namespace troupe::models {

namespace {
constexpr std::int64_t slice_alignment = 16;  // floats: 64 bytes
std::int64_t aligned(std::int64_t n) { return (n + slice_alignment - 1) / slice_alignment * slice_alignment; }

std::string gib(double bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f GiB", bytes / (1024.0 * 1024.0 * 1024.0));
  return text;
}

// A model whose parameters and gradients alone are more than the host's
// memory is refused before anything is allocated, naming its size: the
// allocation would fail as a bare std::bad_alloc, or, where the kernel
// overcommits, succeed and have the process killed as the zeros are
// written. (A GPU's allocation fails with cudaMalloc's own message.)
void check_fits(const std::string& name, std::int64_t floats, const Device& device) {
  if (!device.is_cpu()) return;
  const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGE_SIZE);
  if (pages <= 0 || page <= 0) return;
  const double host = static_cast<double>(pages) * static_cast<double>(page);
  const double need = 2.0 * static_cast<double>(floats) * sizeof(float);
  if (need > host)
    throw std::invalid_argument("model '" + name + "' has " + std::to_string(floats) +
                                " parameters: they and their gradients alone need " + gib(need) +
                                ", more than this host's " + gib(host) + " of memory");
}
}  // namespace

Model::Model(const ModelSpec& spec, Device device) : spec_(spec), device_(device) {
  Shape shape = spec.input;
  std::int64_t total = 0;
  auto made = spec.make_layers();
  for (std::size_t i = 0; i < made.size(); ++i) {
    Entry e;
    // A layer that does not fit what comes before it, or whose shapes are
    // too large, names itself: a spec can have several of one kind.
    try {
      // Token ids are for an embedding, and an embedding takes only them:
      // without this the mismatch surfaced at the first step, in an op
      // ("ops::gemm: a i32[64, 300] must be f32").
      const bool embedding = dynamic_cast<const Embedding*>(made[i].get()) != nullptr;
      if (embedding && (i != 0 || spec.input_dtype != DType::i32))
        throw std::invalid_argument(
            "an embedding takes token ids ('input ids LENGTH') and must be the model's first layer");
      if (i == 0 && !embedding && spec.input_dtype == DType::i32)
        throw std::invalid_argument("the input is token ids ('input ids ...'), which only an embedding layer takes");
      e.output = made[i]->build(shape, device);
      e.count = made[i]->parameter_count();
      if (e.count > Shape::kMaxElements - aligned(total))
        throw std::invalid_argument("the model's parameters would number more than 2^56");
    } catch (const std::invalid_argument& x) {
      throw std::invalid_argument("model '" + spec.name + "', layer " + std::to_string(i + 1) + " '" + made[i]->spec() +
                                  "': " + x.what());
    }
    e.offset = total;
    total += aligned(e.count);
    e.layer = std::move(made[i]);
    shape = e.output;
    layers_.push_back(std::move(e));
  }
  output_ = shape;
  check_fits(spec.name, total, device);
  params_ = Tensor::zeros({total}, DType::f32, device);
  grads_ = Tensor::zeros({total}, DType::f32, device);
  for (auto& e : layers_)
    if (e.count > 0) e.layer->bind(params_.slice(e.offset, {e.count}), grads_.slice(e.offset, {e.count}));
}

std::vector<std::pair<std::int64_t, std::int64_t>> Model::layer_ranges() const {
  std::vector<std::pair<std::int64_t, std::int64_t>> out;
  for (const auto& e : layers_)
    if (e.count > 0) out.emplace_back(e.offset, e.count);
  return out;
}

void Model::initialize(std::uint64_t seed) {
  kernels::ops::fill(params_, 0.0f);
  for (std::size_t i = 0; i < layers_.size(); ++i) layers_[i].layer->initialize(kernels::math::random_bits(seed, i));
}

void Model::set_step_seed(std::uint64_t seed) {
  for (std::size_t i = 0; i < layers_.size(); ++i) layers_[i].layer->set_step_seed(kernels::math::random_bits(seed, i));
}

const Tensor& Model::forward(const Tensor& x, bool training) {
  if (x.rank() != spec_.input.rank() + 1 || batched(x.size(0), spec_.input) != x.shape())
    throw std::invalid_argument("model " + spec_.name + ": input " + x.describe() +
                                " does not match the model's input [batch, " + spec_.input.str().substr(1));
  if (x.dtype() != spec_.input_dtype)
    throw std::invalid_argument("model " + spec_.name + ": input " + x.describe() + " must be " +
                                kernels::to_string(spec_.input_dtype));
  const Tensor* h = &x;
  for (auto& e : layers_) h = &e.layer->forward(*h, training);
  return *h;
}

void Model::backward(const Tensor& doutput) {
  // A layer needs the gradient of its input only when a layer before it has
  // parameters: the MLP's first Dense follows a Flatten, and computing its
  // input gradient (a 64x784x256 product) would be wasted work.
  std::size_t first_trainable = layers_.size();
  for (std::size_t i = 0; i < layers_.size(); ++i)
    if (layers_[i].count > 0) {
      first_trainable = i;
      break;
    }
  const Tensor* d = &doutput;
  for (std::size_t i = layers_.size(); i-- > first_trainable;)
    d = &layers_[i].layer->backward(*d, /*need_dx=*/i > first_trainable);
}

std::string Model::summary() const {
  std::string out = "Model \"" + spec_.name + "\" (input " + spec_.input.str() + ")\n";
  char line[160];
  std::snprintf(line, sizeof line, "  %-40s %-18s %10s\n", "layer", "output", "params");
  out += line;
  std::int64_t total = 0;
  for (const auto& e : layers_) {
    std::snprintf(line, sizeof line, "  %-40s %-18s %10lld\n", e.layer->spec().c_str(), e.output.str().c_str(),
                  static_cast<long long>(e.count));
    out += line;
    total += e.count;
  }
  out += "  parameters: " + std::to_string(total) + " (flat buffer of " + std::to_string(params_.numel()) +
         " floats with 64-byte aligned slices)\n";
  return out;
}

}  // namespace troupe::models
