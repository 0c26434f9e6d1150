// Text a peer sent, fit for an error message or a log line: a peer that is
// broken, or an attacker on an unsealed link, must not be able to cut a
// message short (a NUL ends what() and strerror-style C strings), forge
// lines (CR, LF) or drive a terminal (ESC sequences) through it. Used for
// the gate's identities and refusals (net/cluster/gate.cpp) and the push
// link's refusal reasons (net/push/push_link.cpp). Header-only.
#pragma once

#include <algorithm>
#include <cstddef>
#include <string>
#include <string_view>

namespace troupe::util {

// Control bytes (below 0x20, and DEL) become '?'; the text is cut at `most`
// bytes, with "..." after a cut. Bytes from 0x80 up pass (UTF-8 names).
inline std::string printable(std::string_view text, std::size_t most = 512) {
  std::string out;
  out.reserve(std::min(text.size(), most) + 3);
  for (char c : text.substr(0, most)) {
    const auto u = static_cast<unsigned char>(c);
    out += (u < 0x20 || u == 0x7f) ? '?' : c;
  }
  if (text.size() > most) out += "...";
  return out;
}

}  // namespace troupe::util
