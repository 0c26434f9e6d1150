// Text to fixed-length token-id sequences, as Keras' Tokenizer +
// pad_sequences do for the text CNN (sequence length 300 there).
//
//   tokens      lower-cased runs of ASCII letters and digits; every other
//               byte separates tokens ("Don't stop!" -> don, t, stop)
//   vocabulary  id 0 is padding, id 1 an unknown word, ids 2..V-1 the V-2
//               most frequent words of the TRAINING texts (ties broken by
//               the word, so the vocabulary is the same on every host)
//   sequences   the first `length` ids of a text, padded at the end with 0
//               ("post" truncation and padding)
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

namespace troupe::data {

constexpr std::int32_t pad_token = 0;
constexpr std::int32_t unknown_token = 1;

std::vector<std::string> tokenize(const std::string& text);

class Vocabulary {
 public:
  // From the texts' tokens, keeping at most `size` ids (size >= 2).
  static Vocabulary build(const std::vector<const std::string*>& texts, int size);

  // id -> word; [0] is "<pad>", [1] "<unk>".
  const std::vector<std::string>& words() const { return words_; }
  int size() const { return static_cast<int>(words_.size()); }
  std::int32_t id(const std::string& word) const;  // unknown_token if absent

  // Writes `length` ids of `text` to `out`.
  void encode(const std::string& text, int length, std::int32_t* out) const;

 private:
  std::vector<std::string> words_;
  std::unordered_map<std::string, std::int32_t> ids_;
};

}  // namespace troupe::data
