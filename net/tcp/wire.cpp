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
#include "net/schema/handshake.capnp.h"
#include "net/schema/message.hpp"
#include "net/tcp/sealed.hpp"

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

std::string purpose_name(Purpose purpose) {
  switch (purpose) {
    case Purpose::unset: return "unset";
    case Purpose::ring: return "ring";
    case Purpose::push_link: return "push link";
  }
  return "unknown purpose " + std::to_string(static_cast<unsigned>(purpose));
}

std::vector<unsigned char> encode_hello(const Hello& hello) {
  capnp::MallocMessageBuilder message(16);
  auto h = message.initRoot<schema::Hello>();
  h.setPurpose(static_cast<schema::Purpose>(hello.purpose));
  h.setVersion(hello.version);
  h.setJobId(hello.job_id);
  h.setRank(hello.rank);
  h.setWorld(hello.world);
  const std::string bytes = schema::message_bytes(message);
  std::vector<unsigned char> out(kLengthPrefixBytes + bytes.size());
  put_u32(out.data(), static_cast<std::uint32_t>(bytes.size()));
  std::memcpy(out.data() + kLengthPrefixBytes, bytes.data(), bytes.size());
  return out;
}

std::size_t hello_length(const unsigned char prefix[kLengthPrefixBytes]) {
  const std::uint64_t bytes = get_le(prefix, kLengthPrefixBytes);
  if (bytes > kMaxHelloBytes)
    throw std::runtime_error("a Hello of " + std::to_string(bytes) + " bytes (at most " +
                             std::to_string(kMaxHelloBytes) + ")");
  return static_cast<std::size_t>(bytes);
}

Hello decode_hello(const void* data, std::size_t bytes) {
  try {
    return schema::read_message<schema::Hello>(data, bytes, kMaxHelloBytes, [](schema::Hello::Reader h) {
      Hello hello;
      hello.purpose = static_cast<Purpose>(h.getPurpose());
      hello.version = h.getVersion();
      hello.job_id = h.getJobId();
      hello.rank = h.getRank();
      hello.world = h.getWorld();
      return hello;
    });
  } catch (const schema::MalformedMessage& e) {
    throw std::runtime_error(std::string("malformed Hello: ") + e.what());
  }
}

Hello decode_framed_hello(const void* data, std::size_t bytes) {
  if (bytes < kLengthPrefixBytes)
    throw std::runtime_error("a Hello of " + std::to_string(bytes) + " bytes, shorter than its length prefix");
  const auto* p = static_cast<const unsigned char*>(data);
  const std::size_t length = hello_length(p);
  if (length != bytes - kLengthPrefixBytes)
    throw std::runtime_error("a Hello whose length prefix says " + std::to_string(length) + " bytes but " +
                             std::to_string(bytes - kLengthPrefixBytes) + " follow");
  return decode_hello(p + kLengthPrefixBytes, length);
}

void write_hello(int fd, RecordSealer* sealer, const Hello& hello, Deadline deadline) {
  const auto bytes = encode_hello(hello);
  if (sealer)
    sealer->write(fd, bytes.data(), bytes.size(), deadline);
  else
    write_all(fd, bytes.data(), bytes.size(), nullptr, 0, deadline);
}

Hello read_hello(int fd, RecordOpener* opener, Deadline deadline) {
  unsigned char bytes[kLengthPrefixBytes + kMaxHelloBytes];
  if (opener) return decode_framed_hello(bytes, opener->read(fd, bytes, sizeof bytes, deadline));
  read_all(fd, bytes, kLengthPrefixBytes, deadline);
  const std::size_t length = hello_length(bytes);
  read_all(fd, bytes + kLengthPrefixBytes, length, deadline);
  return decode_hello(bytes + kLengthPrefixBytes, length);
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
  std::vector<unsigned char> out(kLengthPrefixBytes + bytes.size());
  put_u32(out.data(), static_cast<std::uint32_t>(bytes.size()));
  std::memcpy(out.data() + kLengthPrefixBytes, bytes.begin(), bytes.size());
  return out;
}

FrameFields decode_frame_header(const void* data, std::size_t bytes) {
  try {
    return schema::read_message<schema::FrameHeader>(data, bytes, kMaxHeaderBytes, [](schema::FrameHeader::Reader h) {
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
    });
  } catch (const schema::MalformedMessage& e) {
    throw std::runtime_error(std::string("unreadable Cap'n Proto header: ") + e.what());
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
