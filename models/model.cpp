#include "models/model.hpp"

#include <unistd.h>

#include <algorithm>
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
  std::int64_t total = 0, state_total = 0;
  std::vector<GraphNode> graph = spec.make_graph();
  for (std::size_t i = 0; i < graph.size(); ++i) {
    Entry e;
    e.layer = std::move(graph[i].layer);
    e.name = std::move(graph[i].name);
    e.inputs = std::move(graph[i].inputs);
    e.merge = dynamic_cast<Merge*>(e.layer.get());
    // A layer that does not fit its inputs, or whose shapes are too large,
    // names itself: a spec can have several of one kind.
    try {
      // Token ids are for an embedding, and an embedding takes only them:
      // without this the mismatch surfaced at the first step, in an op
      // ("ops::gemm: a i32[64, 300] must be f32").
      const bool embedding = dynamic_cast<const Embedding*>(e.layer.get()) != nullptr;
      const bool takes_input = std::find(e.inputs.begin(), e.inputs.end(), -1) != e.inputs.end();
      if (embedding && (!takes_input || spec.input_dtype != DType::i32))
        throw std::invalid_argument(
            "an embedding takes token ids ('input ids LENGTH') and must be the model's first layer");
      if (takes_input && !embedding && spec.input_dtype == DType::i32)
        throw std::invalid_argument("the input is token ids ('input ids ...'), which only an embedding layer takes");
      // The output tied to the token embedding: the model's one embedding,
      // of the width the output takes.
      if (auto* tied = dynamic_cast<TiedOutput*>(e.layer.get())) {
        for (std::size_t k = 0; k < layers_.size(); ++k) {
          if (dynamic_cast<const Embedding*>(layers_[k].layer.get()) == nullptr) continue;
          if (e.tie >= 0) throw std::invalid_argument("the model has several embeddings: tied_output ties to one");
          e.tie = static_cast<int>(k);
        }
        if (e.tie < 0) throw std::invalid_argument("tied_output needs an embedding (token ids in) to tie to");
        const auto& owner = static_cast<const Embedding&>(*layers_[static_cast<std::size_t>(e.tie)].layer);
        tied->tie_to(owner.vocab());
      }
      // A channels-first embedding gives [dim, length], which has a
      // sequence's rank: positional_embedding would take its dimensions the
      // wrong way round without a word.
      if (dynamic_cast<const PositionalEmbedding*>(e.layer.get()) && e.inputs.at(0) >= 0) {
        const auto& before = layers_[static_cast<std::size_t>(e.inputs.at(0))];
        if (auto* emb = dynamic_cast<const Embedding*>(before.layer.get()); emb && !emb->channels_last())
          throw std::invalid_argument("its input, layer " + std::to_string(e.inputs.at(0) + 1) + " '" + emb->spec() +
                                      "', is channels-first [dim, length] (the text CNN's layout); give that "
                                      "embedding layout=channels_last for a sequence [length, dim]");
      }
      auto shape_of = [&](int k) { return k < 0 ? spec.input : layers_[static_cast<std::size_t>(k)].output; };
      if (e.merge) {
        std::vector<Shape> shapes;
        for (int k : e.inputs) shapes.push_back(shape_of(k));
        e.output = e.merge->build_merge(shapes, device);
      } else {
        e.output = e.layer->build(shape_of(e.inputs.at(0)), device);
      }
      if (e.tie >= 0) {
        const auto& owner = static_cast<const Embedding&>(*layers_[static_cast<std::size_t>(e.tie)].layer);
        if (owner.dim() != static_cast<const TiedOutput&>(*e.layer).width())
          throw std::invalid_argument("tied_output takes width " +
                                      std::to_string(static_cast<const TiedOutput&>(*e.layer).width()) +
                                      ", but the embedding it ties to has dim " + std::to_string(owner.dim()));
      }
      e.count = e.layer->parameter_count();
      if (e.count > Shape::kMaxElements - aligned(total))
        throw std::invalid_argument("the model's parameters would number more than 2^56");
    } catch (const std::invalid_argument& x) {
      throw std::invalid_argument("model '" + spec.name + "', layer " + std::to_string(i + 1) + " '" + e.layer->spec() +
                                  "'" + (e.name.empty() ? "" : " (" + e.name + ")") + ": " + x.what());
    }
    e.offset = total;
    total += aligned(e.count);
    e.state_count = e.layer->state_count();
    e.state_offset = state_total;
    state_total += aligned(e.state_count);
    for (int k : e.inputs)
      if (k >= 0) ++layers_[static_cast<std::size_t>(k)].consumers;
    e.needs_grad = e.count > 0;
    for (int k : e.inputs) e.needs_grad = e.needs_grad || (k >= 0 && layers_[static_cast<std::size_t>(k)].needs_grad);
    layers_.push_back(std::move(e));
  }
  output_ = layers_.back().output;
  check_fits(spec.name, total, device);
  params_ = Tensor::zeros({total}, DType::f32, device);
  grads_ = Tensor::zeros({total}, DType::f32, device);
  state_ = Tensor::zeros({state_total}, DType::f32, device);
  for (auto& e : layers_) {
    if (e.count > 0) e.layer->bind(params_.slice(e.offset, {e.count}), grads_.slice(e.offset, {e.count}));
    if (e.state_count > 0) e.layer->bind_state(state_.slice(e.state_offset, {e.state_count}));
  }
  for (auto& e : layers_) {
    if (e.tie < 0) continue;
    const Entry& owner = layers_[static_cast<std::size_t>(e.tie)];
    const auto& embedding = static_cast<const Embedding&>(*owner.layer);
    const Shape table{embedding.vocab(), embedding.dim()};
    e.tied_grad = Tensor::zeros(table, DType::f32, device);
    static_cast<TiedOutput&>(*e.layer).bind_tied(params_.slice(owner.offset, table), e.tied_grad);
  }
  outputs_.assign(layers_.size(), nullptr);
  grads_in_.assign(layers_.size(), nullptr);
}

std::vector<std::pair<std::int64_t, std::int64_t>> Model::layer_ranges() const {
  std::vector<std::pair<std::int64_t, std::int64_t>> out;
  for (const auto& e : layers_)
    if (e.count > 0) out.emplace_back(e.offset, e.count);
  return out;
}

std::vector<std::pair<std::int64_t, std::int64_t>> Model::decayed_ranges() const {
  std::vector<std::pair<std::int64_t, std::int64_t>> out;
  for (const auto& e : layers_) {
    if (e.count == 0) continue;
    std::int64_t at = e.offset;  // a layer's tensors lie one after the other, in parameters() order
    for (const ParameterInfo& p : e.layer->parameters()) {
      const std::int64_t n = p.shape.numel();
      if (p.shape.rank() >= 2 && n > 0) {
        if (!out.empty() && out.back().first + out.back().second == at)
          out.back().second += n;
        else
          out.emplace_back(at, n);
      }
      at += n;
    }
  }
  return out;
}

Model::NodeView Model::node(std::size_t i) const {
  const Entry& e = layers_.at(i);
  return NodeView{*e.layer,
                  e.name,
                  e.inputs,
                  e.output,
                  params_.slice(e.offset, {e.count}),
                  state_.slice(e.state_offset, {e.state_count})};
}

void Model::initialize(std::uint64_t seed) {
  kernels::ops::fill(params_, 0.0f);
  if (state_.numel() > 0) kernels::ops::fill(state_, 0.0f);
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
  const kernels::ops::MatmulPrecisionScope precision(precision_);
  auto input = [&](int k) { return k < 0 ? &x : outputs_[static_cast<std::size_t>(k)]; };
  for (std::size_t i = 0; i < layers_.size(); ++i) {
    Entry& e = layers_[i];
    if (e.merge) {
      merge_inputs_.clear();
      for (int k : e.inputs) merge_inputs_.push_back(input(k));
      outputs_[i] = &e.merge->forward_merge(merge_inputs_, training);
    } else {
      outputs_[i] = &e.layer->forward(*input(e.inputs[0]), training);
    }
  }
  return *outputs_.back();
}

void Model::backward(const Tensor& doutput) {
  // A layer is run backward only when it or a layer before it has
  // parameters, and asked for its input's gradient only when that input
  // needs one: the MLP's first Dense follows a Flatten, and computing its
  // input gradient (a 64x784x256 product) would be wasted work.
  const kernels::ops::MatmulPrecisionScope precision(precision_);
  std::fill(grads_in_.begin(), grads_in_.end(), nullptr);
  grads_in_.back() = &doutput;
  // An output used by several layers gets the sum of their gradients: the
  // first is taken as it is, a second one starts the entry's own sum.
  auto hand_back = [&](int k, const Tensor* g) {
    if (k < 0 || g == nullptr) return;
    Entry& to = layers_[static_cast<std::size_t>(k)];
    const Tensor*& have = grads_in_[static_cast<std::size_t>(k)];
    if (have == nullptr) {
      have = g;
    } else if (have != &to.grad_sum) {
      if (!to.grad_sum.defined() || to.grad_sum.shape() != g->shape() || to.grad_sum.device() != g->device())
        to.grad_sum = Tensor::empty(g->shape(), DType::f32, g->device());
      kernels::ops::add(*have, *g, to.grad_sum);
      have = &to.grad_sum;
    } else {
      kernels::ops::add(to.grad_sum, *g, to.grad_sum);
    }
  };
  auto wants = [&](int k) { return k >= 0 && layers_[static_cast<std::size_t>(k)].needs_grad; };
  for (std::size_t i = layers_.size(); i-- > 0;) {
    Entry& e = layers_[i];
    if (!e.needs_grad || grads_in_[i] == nullptr) continue;
    const Tensor& d = *grads_in_[i];
    if (e.merge) {
      std::vector<bool> need;
      for (int k : e.inputs) need.push_back(wants(k));
      const auto& dxs = e.merge->backward_merge(d, need);
      for (std::size_t j = 0; j < e.inputs.size(); ++j)
        if (need[j]) hand_back(e.inputs[j], dxs[j]);
    } else {
      const bool need_dx = wants(e.inputs[0]);
      const Tensor& dx = e.layer->backward(d, need_dx);
      if (need_dx) hand_back(e.inputs[0], &dx);
    }
  }
  // The tied table's second use: the embedding's backward (the first
  // layer, so the last to run) wrote its part; the output's is added.
  for (const Entry& e : layers_) {
    if (e.tie < 0 || grads_in_[static_cast<std::size_t>(&e - layers_.data())] == nullptr) continue;
    const Entry& owner = layers_[static_cast<std::size_t>(e.tie)];
    const Tensor dtable = grads_.slice(owner.offset, e.tied_grad.shape());
    kernels::ops::add(dtable, e.tied_grad, dtable);
  }
}

bool Model::reduces_across_replicas() const {
  for (const auto& e : layers_)
    if (e.layer->reduces_across_replicas()) return true;
  return false;
}

void Model::set_reducer(ReplicaReducer* reducer) {
  for (auto& e : layers_) e.layer->set_reducer(reducer);
}

void Model::join_reductions() {
  // Forward in graph order, backward in reverse, as forward() and
  // backward() visit the layers (every layer that reduces has parameters,
  // so backward() never skips it).
  for (auto& e : layers_) e.layer->join_forward();
  for (std::size_t i = layers_.size(); i-- > 0;) layers_[i].layer->join_backward();
}

std::string Model::summary() const {
  std::string out = "Model \"" + spec_.name + "\" (input " + spec_.input.str() + ")\n";
  char line[160];
  std::snprintf(line, sizeof line, "  %-40s %-18s %10s\n", "layer", "output", "params");
  out += line;
  std::int64_t total = 0;
  const bool chain = spec_.is_chain();
  for (std::size_t i = 0; i < layers_.size(); ++i) {
    const auto& e = layers_[i];
    // A graph's layers say what they take when it is not the line before.
    std::string what = e.layer->spec();
    if (!chain) {
      if (!e.name.empty()) what = e.name + ": " + what;
      if (e.inputs.size() != 1 || e.inputs[0] != static_cast<int>(i) - 1) {
        std::string from;
        for (int k : e.inputs)
          from += (from.empty() ? "" : ",") + (k < 0 ? std::string("input")
                                                     : (layers_[static_cast<std::size_t>(k)].name.empty()
                                                            ? "#" + std::to_string(k + 1)
                                                            : layers_[static_cast<std::size_t>(k)].name));
        what += " <- " + from;
      }
    }
    std::snprintf(line, sizeof line, "  %-40s %-18s %10lld\n", what.c_str(), e.output.str().c_str(),
                  static_cast<long long>(e.count));
    out += line;
    total += e.count;
  }
  out += "  parameters: " + std::to_string(total) + " (flat buffer of " + std::to_string(params_.numel()) +
         " floats with 64-byte aligned slices)\n";
  std::int64_t kept = 0;
  for (const auto& e : layers_) kept += e.state_count;
  if (kept > 0) out += "  state (not trained: running statistics): " + std::to_string(kept) + "\n";
  return out;
}

}  // namespace troupe::models
