// The tcp backend's wire format and socket I/O (wire.hpp).
#include "net/tcp/wire.hpp"

#include <arpa/inet.h>
#include <capnp/message.h>
#include <capnp/serialize.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <climits>
#include <cstring>
#include <thread>

#include "net/schema/frame.capnp.h"

namespace troupe::net::wire {

namespace {

// Milliseconds for poll(): at least 1 while the deadline is ahead.
int poll_ms(Deadline deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  if (left <= 0) return 0;
  return static_cast<int>(std::min<long long>(left + 1, INT_MAX));
}

// Waits for `events` on fd; throws IoError on timeout.
void wait_fd(int fd, short events, Deadline deadline) {
  for (;;) {
    const int ms = poll_ms(deadline);
    if (ms == 0) throw IoError("timed out", true);
    pollfd p{fd, events, 0};
    const int n = ::poll(&p, 1, ms);
    if (n > 0) return;  // ready, or an error/hangup the next call reports
    if (n < 0 && errno != EINTR) throw IoError(std::string("poll: ") + errno_text(errno), false);
  }
}


}  // namespace

std::string errno_text(int err) {
  if (err == ECONNRESET) return "connection reset by peer";
  if (err == EPIPE) return "connection closed (broken pipe)";
  return std::strerror(err);
}

void encode_hello(const Hello& hello, unsigned char out[kHelloBytes]) {
  put_u32(out, hello.magic);
  put_u16(out + 4, hello.version);
  put_u16(out + 6, 0);
  put_u64(out + 8, hello.job_id);
  put_u32(out + 16, hello.rank);
  put_u32(out + 20, hello.world);
}

Hello decode_hello(const unsigned char in[kHelloBytes]) {
  Hello h;
  h.magic = static_cast<std::uint32_t>(get_le(in, 4));
  h.version = static_cast<std::uint16_t>(get_le(in + 4, 2));
  h.job_id = get_le(in + 8, 8);
  h.rank = static_cast<std::uint32_t>(get_le(in + 16, 4));
  h.world = static_cast<std::uint32_t>(get_le(in + 20, 4));
  return h;
}

std::vector<unsigned char> encode_frame_header(const FrameFields& f) {
  capnp::MallocMessageBuilder message(32);
  auto h = message.initRoot<schema::FrameHeader>();
  h.setJobId(f.job_id);
  h.setKind(static_cast<schema::OpKind>(f.kind));
  h.setOpSeq(f.op_seq);
  h.setTotalBytes(f.total_bytes);
  h.setStep(f.step);
  h.setChunk(f.chunk);
  h.setLength(f.length);
  h.setCrc32c(f.crc32c);
  const auto words = capnp::messageToFlatArray(message);
  const auto bytes = words.asBytes();
  std::vector<unsigned char> out(4 + bytes.size());
  put_u32(out.data(), static_cast<std::uint32_t>(bytes.size()));
  std::memcpy(out.data() + 4, bytes.begin(), bytes.size());
  return out;
}

FrameFields decode_frame_header(const void* data, std::size_t bytes) {
  if (bytes % 8 != 0 || bytes == 0 || bytes > kMaxHeaderBytes)
    throw std::runtime_error("header of " + std::to_string(bytes) + " bytes");
  // Word-aligned copy for the reader.
  std::array<capnp::word, kMaxHeaderBytes / 8> words;
  std::memcpy(words.data(), data, bytes);
  try {
    capnp::ReaderOptions options;
    options.traversalLimitInWords = kMaxHeaderBytes / 8;
    options.nestingLimit = 4;
    capnp::FlatArrayMessageReader reader(kj::arrayPtr(words.data(), bytes / 8), options);
    auto h = reader.getRoot<schema::FrameHeader>();
    FrameFields f;
    f.job_id = h.getJobId();
    f.kind = static_cast<std::uint16_t>(h.getKind());
    f.op_seq = h.getOpSeq();
    f.total_bytes = h.getTotalBytes();
    f.step = h.getStep();
    f.chunk = h.getChunk();
    f.length = h.getLength();
    f.crc32c = h.getCrc32c();
    return f;
  } catch (const kj::Exception& e) {
    throw std::runtime_error("unreadable Cap'n Proto header: " + std::string(e.getDescription().cStr()));
  }
}

void write_all(int fd, const void* a, std::size_t a_bytes, const void* b, std::size_t b_bytes,
               Deadline deadline) {
  iovec iov[2] = {{const_cast<void*>(a), a_bytes}, {const_cast<void*>(b), b_bytes}};
  int first = 0;
  while (first < 2) {
    if (iov[first].iov_len == 0) {
      ++first;
      continue;
    }
    msghdr msg{};
    msg.msg_iov = iov + first;
    msg.msg_iovlen = static_cast<std::size_t>(2 - first);
    const ssize_t n = ::sendmsg(fd, &msg, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) {
        wait_fd(fd, POLLOUT, deadline);
        continue;
      }
      throw IoError(errno_text(errno), false);
    }
    auto left = static_cast<std::size_t>(n);
    while (first < 2 && left >= iov[first].iov_len) {
      left -= iov[first].iov_len;
      iov[first].iov_len = 0;
      ++first;
    }
    if (first < 2) {
      iov[first].iov_base = static_cast<char*>(iov[first].iov_base) + left;
      iov[first].iov_len -= left;
    }
  }
}

void read_all(int fd, void* data, std::size_t bytes, Deadline deadline) {
  auto* p = static_cast<char*>(data);
  while (bytes > 0) {
    const ssize_t n = ::recv(fd, p, bytes, 0);
    if (n > 0) {
      p += n;
      bytes -= static_cast<std::size_t>(n);
      continue;
    }
    if (n == 0) throw IoError("end of stream (the peer closed the connection)", false);
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      wait_fd(fd, POLLIN, deadline);
      continue;
    }
    throw IoError(errno_text(errno), false);
  }
}

void prepare_socket(int fd) {
  const int flags = ::fcntl(fd, F_GETFL, 0);
  ::fcntl(fd, F_SETFL, flags | O_NONBLOCK);
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

std::string peer_address(int fd) {
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  if (::getpeername(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0) return "?";
  char host[NI_MAXHOST], port[NI_MAXSERV];
  if (::getnameinfo(reinterpret_cast<sockaddr*>(&ss), len, host, sizeof host, port, sizeof port,
                    NI_NUMERICHOST | NI_NUMERICSERV) != 0)
    return "?";
  return ss.ss_family == AF_INET6 ? "[" + std::string(host) + "]:" + port : std::string(host) + ":" + port;
}

int connect_tcp(const std::string& address, Deadline deadline) {
  const auto colon = address.rfind(':');
  if (colon == std::string::npos) throw std::invalid_argument("address '" + address + "' is not host:port");
  std::string host = address.substr(0, colon);
  const std::string port = address.substr(colon + 1);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  std::string last_error = "nothing tried";
  for (;;) {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* found = nullptr;
    const int rc = ::getaddrinfo(host.c_str(), port.c_str(), &hints, &found);
    if (rc != 0) {
      last_error = std::string("cannot resolve: ") + ::gai_strerror(rc);
    } else {
      for (addrinfo* ai = found; ai; ai = ai->ai_next) {
        const int fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
        if (fd < 0) continue;
        prepare_socket(fd);
        int err = 0;
        if (::connect(fd, ai->ai_addr, ai->ai_addrlen) != 0) {
          err = errno;
          if (err == EINPROGRESS) {
            try {
              wait_fd(fd, POLLOUT, deadline);
              socklen_t len = sizeof err;
              ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
            } catch (const IoError&) {
              err = ETIMEDOUT;
            }
          }
        }
        if (err == 0) {
          ::freeaddrinfo(found);
          return fd;
        }
        ::close(fd);
        last_error = std::strerror(err);
      }
      ::freeaddrinfo(found);
    }
    if (Clock::now() + std::chrono::milliseconds(20) >= deadline)
      throw IoError("could not connect to " + address + ": " + last_error, true);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));  // not listening yet: retry
  }
}

}  // namespace troupe::net::wire
