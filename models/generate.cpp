#include "models/generate.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <stdexcept>

#include "kernels/math/random.hpp"
#include "models/trainer.hpp"

namespace troupe::models {

namespace {

// Keeps the sampler's stream apart from other users of the seed: "SAMPLE".
constexpr std::uint64_t sample_domain = 0x53414d504c45ULL;

std::string byte_name(unsigned char b) {
  char text[16];
  if (b >= 0x20 && b < 0x7f && b != '\'')
    std::snprintf(text, sizeof text, "'%c'", b);
  else
    std::snprintf(text, sizeof text, "0x%02x", b);
  return text;
}

}  // namespace

std::vector<std::int32_t> encode_bytes(const ModelSpec& spec, const std::string& text) {
  if (spec.vocabulary.empty())
    throw std::invalid_argument("model " + spec.name +
                                " has no byte vocabulary: it was not trained on text (--data kjv or text:FILE)");
  std::int32_t id[256];
  std::fill(std::begin(id), std::end(id), -1);
  for (std::size_t i = 0; i < spec.vocabulary.size(); ++i)
    id[static_cast<unsigned char>(spec.vocabulary[i])] = static_cast<std::int32_t>(i);
  std::vector<std::int32_t> out;
  std::string missing;
  bool named[256] = {};
  for (std::size_t i = 0; i < text.size(); ++i) {
    const auto b = static_cast<unsigned char>(text[i]);
    if (id[b] < 0) {
      if (!named[b]) missing += (missing.empty() ? "" : ", ") + byte_name(b) + " at " + std::to_string(i);
      named[b] = true;
      continue;
    }
    out.push_back(id[b]);
  }
  if (!missing.empty())
    throw std::invalid_argument("the prompt has bytes outside model " + spec.name + "'s vocabulary of " +
                                std::to_string(spec.vocabulary.size()) + ": " + missing);
  return out;
}

std::int32_t sample_token(const float* logits, std::int64_t vocab, float temperature, std::int64_t top_k,
                          double uniform) {
  if (vocab < 1) throw std::invalid_argument("sample_token: no logits");
  if (temperature <= 0.0f) return static_cast<std::int32_t>(std::max_element(logits, logits + vocab) - logits);
  std::vector<std::int32_t> order(static_cast<std::size_t>(vocab));
  for (std::int32_t i = 0; i < vocab; ++i) order[static_cast<std::size_t>(i)] = i;
  // Largest first, ties by id: the same draw on every host.
  std::stable_sort(order.begin(), order.end(), [&](std::int32_t a, std::int32_t b) { return logits[a] > logits[b]; });
  const std::size_t kept = top_k > 0 ? static_cast<std::size_t>(std::min(top_k, vocab)) : order.size();
  std::vector<double> p(kept);
  const double top = logits[order[0]];
  double sum = 0;
  for (std::size_t i = 0; i < kept; ++i) sum += p[i] = std::exp((double(logits[order[i]]) - top) / temperature);
  double acc = 0;
  const double target = uniform * sum;
  for (std::size_t i = 0; i < kept; ++i) {
    acc += p[i];
    if (target < acc) return order[i];
  }
  return order[kept - 1];
}

std::string generate(Model& model, const std::string& prompt, const SampleOptions& options,
                     const std::function<void(char)>& on_byte) {
  const ModelSpec& spec = model.spec();
  if (spec.input_dtype != DType::i32 || spec.input.rank() != 1 || model.output_shape().rank() != 2 ||
      model.output_shape()[0] != spec.input[0])
    throw std::invalid_argument("model " + spec.name + " takes " + spec.input.str() + " and gives " +
                                model.output_shape().str() +
                                ": generating needs a language model, token ids [T] in and logits [T, vocab] out");
  if (options.tokens < 0) throw std::invalid_argument("--tokens must be >= 0");
  if (!(options.temperature >= 0.0f) || !std::isfinite(options.temperature))
    throw std::invalid_argument("--temperature must be >= 0");
  if (options.top_k < 0) throw std::invalid_argument("--top-k must be >= 0");
  std::vector<std::int32_t> ids = encode_bytes(spec, prompt);
  if (ids.empty()) throw std::invalid_argument("the prompt is empty: give at least one byte to continue from");
  const std::int64_t t = spec.input[0], vocab = model.output_shape()[1];
  Tensor host = Tensor::zeros(Shape{1, t}, DType::i32), staging;
  std::string out;
  for (std::int64_t k = 0; k < options.tokens; ++k) {
    // The last T ids at positions 0..n-1.
    const std::int64_t n = std::min<std::int64_t>(t, static_cast<std::int64_t>(ids.size()));
    std::int32_t* x = host.i32();
    std::copy(ids.end() - n, ids.end(), x);
    std::fill(x + n, x + t, 0);
    const Tensor& logits = model.forward(on_device(host, staging, model.device()), /*training=*/false);
    const std::vector<float> row = logits.slice((n - 1) * vocab, Shape{vocab}).to_vector();
    const std::uint64_t bits = kernels::math::random_bits(options.seed ^ sample_domain, static_cast<std::uint64_t>(k));
    const double uniform = static_cast<double>(bits >> 11) * 0x1.0p-53;
    const std::int32_t next = sample_token(row.data(), vocab, options.temperature, options.top_k, uniform);
    ids.push_back(next);
    const char byte = spec.vocabulary[static_cast<std::size_t>(next)];
    out += byte;
    if (on_byte) on_byte(byte);
  }
  return out;
}

}  // namespace troupe::models
