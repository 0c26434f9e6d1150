// One HTTP GET on a loopback port, on a plain socket, for tests that need to
// see the status line and headers (Content-Type) as a scraper would, or to
// ask a server that is not troupe's (Prometheus' HTTP API).
//
// It speaks HTTP/1.0 so that the answer ends when the server closes the
// connection: no chunked transfer encoding to undo (a Go server such as
// Prometheus chunks larger HTTP/1.1 answers). Every read waits at most
// `timeout`; a server that does not answer gives status 0.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <map>
#include <string>

namespace troupe::testing {

struct HttpResponse {
  int status = 0;                              // 0: no answer
  std::map<std::string, std::string> headers;  // names in lower case
  std::string body;
  std::string raw;
};

inline HttpResponse http_get(int port, const std::string& target, const std::string& authorization = "",
                             std::chrono::milliseconds timeout = std::chrono::milliseconds(5000)) {
  HttpResponse out;
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<std::uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  timeval tv{static_cast<time_t>(timeout.count() / 1000), static_cast<suseconds_t>(timeout.count() % 1000 * 1000)};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    ::close(fd);
    return out;
  }
  std::string request = "GET " + target + " HTTP/1.0\r\nHost: 127.0.0.1:" + std::to_string(port) + "\r\n";
  if (!authorization.empty()) request += "Authorization: " + authorization + "\r\n";
  request += "\r\n";
  ::send(fd, request.data(), request.size(), MSG_NOSIGNAL);
  char buf[8192];
  for (ssize_t n; (n = ::recv(fd, buf, sizeof buf, 0)) > 0;) out.raw.append(buf, static_cast<std::size_t>(n));
  ::close(fd);
  const std::size_t head_end = out.raw.find("\r\n\r\n");
  if (out.raw.rfind("HTTP/1.", 0) != 0 || head_end == std::string::npos) return out;
  out.status = std::atoi(out.raw.c_str() + 9);
  out.body = out.raw.substr(head_end + 4);
  for (std::size_t at = out.raw.find("\r\n") + 2; at < head_end;) {
    const std::size_t end = out.raw.find("\r\n", at);
    const std::string line = out.raw.substr(at, end - at);
    const std::size_t colon = line.find(':');
    if (colon != std::string::npos) {
      std::string name = line.substr(0, colon);
      std::transform(name.begin(), name.end(), name.begin(), [](unsigned char c) { return std::tolower(c); });
      const std::size_t value = line.find_first_not_of(' ', colon + 1);
      out.headers[name] = value == std::string::npos ? "" : line.substr(value);
    }
    at = end + 2;
  }
  return out;
}

// "a b{c}" -> "a%20b%7Bc%7D": a query parameter's value.
inline std::string url_encode(const std::string& text) {
  static const char* hex = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : text) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += hex[c >> 4];
      out += hex[c & 15];
    }
  }
  return out;
}

}  // namespace troupe::testing
