#include "models/data/text.hpp"

#include <algorithm>
#include <stdexcept>

namespace troupe::data {

namespace {

bool is_word_byte(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9'); }
char lower(char c) { return (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c; }

// Calls visit(token) for each token of `text`, in order.
template <typename Visit>
void for_each_token(const std::string& text, Visit&& visit) {
  std::string token;
  for (const char c : text) {
    if (is_word_byte(c)) {
      token.push_back(lower(c));
    } else if (!token.empty()) {
      if (!visit(token)) return;
      token.clear();
    }
  }
  if (!token.empty()) visit(token);
}

}  // namespace

std::vector<std::string> tokenize(const std::string& text) {
  std::vector<std::string> tokens;
  for_each_token(text, [&](const std::string& token) {
    tokens.push_back(token);
    return true;
  });
  return tokens;
}

Vocabulary Vocabulary::build(const std::vector<const std::string*>& texts, int size) {
  if (size < 2)
    throw std::invalid_argument("Vocabulary: size must be >= 2 (pad and unknown), got " + std::to_string(size));
  std::unordered_map<std::string, std::int64_t> counts;
  for (const std::string* text : texts) {
    for_each_token(*text, [&](const std::string& token) {
      ++counts[token];
      return true;
    });
  }
  std::vector<std::pair<std::string, std::int64_t>> ranked(counts.begin(), counts.end());
  std::sort(ranked.begin(), ranked.end(), [](const auto& a, const auto& b) {
    return a.second != b.second ? a.second > b.second : a.first < b.first;
  });
  Vocabulary vocabulary;
  vocabulary.words_ = {"<pad>", "<unk>"};
  for (const auto& entry : ranked) {
    if (vocabulary.size() >= size) break;
    vocabulary.ids_.emplace(entry.first, static_cast<std::int32_t>(vocabulary.words_.size()));
    vocabulary.words_.push_back(entry.first);
  }
  return vocabulary;
}

std::int32_t Vocabulary::id(const std::string& word) const {
  const auto found = ids_.find(word);
  return found == ids_.end() ? unknown_token : found->second;
}

void Vocabulary::encode(const std::string& text, int length, std::int32_t* out) const {
  int written = 0;
  if (length > 0) {
    for_each_token(text, [&](const std::string& token) {
      out[written++] = id(token);
      return written < length;
    });
  }
  std::fill(out + written, out + std::max(length, written), pad_token);
}

}  // namespace troupe::data
