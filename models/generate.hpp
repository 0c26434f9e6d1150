// Sampling from a byte-level language model (troupe generate): the prompt's
// bytes become token ids through the model's vocabulary (ModelSpec::
// vocabulary), and each new byte is drawn from the logits at the last
// position of the context, as nanoGPT's sample.py does:
//
//   context   the last T ids (T: the model's input length); a shorter one
//             sits at positions 0..n-1 and the rest are padding, which the
//             causal mask keeps from the positions read, so the logits are
//             those of the n ids alone (nanoGPT crops to block_size the same
//             way; its positions are absolute too). Past T the window slides.
//   logits    / temperature; with top_k > 0 only the k largest stay; softmax;
//             one draw from a uniform keyed by (seed, the byte's index), so a
//             seed gives the same text on every run and host. Temperature 0
//             takes the largest (greedy).
//
// No KV cache: each byte is one forward pass over the T positions (T times
// the work of a cached step; docs/USER-GUIDE.md gives its speed).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "models/model.hpp"

namespace troupe::models {

struct SampleOptions {
  std::int64_t tokens = 200;  // bytes to generate
  float temperature = 1.0f;   // >= 0; 0: greedy
  std::int64_t top_k = 0;     // 0: every token
  std::uint64_t seed = 0;
};

// The prompt's token ids. Throws std::invalid_argument naming every byte
// (and its first place) that the vocabulary lacks, or when the model has no
// vocabulary (it was not trained on text:FILE or kjv).
std::vector<std::int32_t> encode_bytes(const ModelSpec& spec, const std::string& text);

// Appends `options.tokens` bytes to `prompt`'s and returns them; `on_byte`
// (optional) hears each as it is drawn. Throws std::invalid_argument for an
// empty prompt, a model that does not map [T] ids to [T, vocab] logits, or
// bad options.
std::string generate(Model& model, const std::string& prompt, const SampleOptions& options,
                     const std::function<void(char)>& on_byte = {});

// One draw from `logits` (one row of V) as above; `uniform` in [0, 1).
std::int32_t sample_token(const float* logits, std::int64_t vocab, float temperature, std::int64_t top_k,
                          double uniform);

}  // namespace troupe::models
