// Reference embedding lookup and its gradient: table [vocab, dim],
// ids [count], out [count, dim].
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>

namespace troupe::kernels::ref {

// Ids come from data files, so they are checked here, not trusted: throws
// std::out_of_range naming the op, the position and the id.
inline void check_embedding_ids(const char* op, std::int64_t count, std::int64_t vocab, const std::int32_t* ids) {
  for (std::int64_t i = 0; i < count; ++i)
    if (ids[i] < 0 || ids[i] >= vocab)
      throw std::out_of_range(std::string(op) + ": ids[" + std::to_string(i) + "] = " + std::to_string(ids[i]) +
                              " is outside [0, " + std::to_string(vocab) + ")");
}

template <class T>
void embedding_forward(std::int64_t count, std::int64_t vocab, std::int64_t dim, const std::int32_t* ids,
                       const T* table, T* out) {
  check_embedding_ids("embedding_forward", count, vocab, ids);
  for (std::int64_t i = 0; i < count; ++i)
    for (std::int64_t d = 0; d < dim; ++d) out[i * dim + d] = table[ids[i] * dim + d];
}

// dtable = 0, then dtable[ids[i]] += dout[i]. Ids are checked before dtable
// is touched, so a bad id leaves it as it was.
template <class T>
void embedding_backward(std::int64_t count, std::int64_t vocab, std::int64_t dim, const std::int32_t* ids,
                        const T* dout, T* dtable) {
  check_embedding_ids("embedding_backward", count, vocab, ids);
  for (std::int64_t i = 0; i < vocab * dim; ++i) dtable[i] = T(0);
  for (std::int64_t i = 0; i < count; ++i)
    for (std::int64_t d = 0; d < dim; ++d) dtable[ids[i] * dim + d] += dout[i * dim + d];
}

}  // namespace troupe::kernels::ref
