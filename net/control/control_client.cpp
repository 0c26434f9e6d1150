// ControlClient on net/transport's sockets: a ctl request is bounded by the
// same deadlines, and fails in the same words, as every other link troupe
// opens, without an io_context and its handler chain per request. Beast
// stays for HTTP itself: it writes the request and parses the answer from
// the bytes the socket hands over.
#include "net/control/control_client.hpp"

#include <unistd.h>

#include <algorithm>
#include <sstream>

#include <boost/beast/http.hpp>

#include "net/control/control_auth.hpp"
#include "net/control/control_server.hpp"  // kWaitHeader
#include "net/transport/socket.hpp"

namespace troupe::net {

namespace beast = boost::beast;
namespace http = beast::http;

namespace {

constexpr std::uint64_t kResponseBodyLimit = 16 << 20;

using ResponseParser = http::response_parser<http::string_body>;

// Closed however request() leaves, an exception included.
class Connection {
 public:
  explicit Connection(int fd) : fd_(fd) {}
  ~Connection() { ::close(fd_); }
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;
  int fd() const { return fd_; }

 private:
  int fd_;
};

std::string request_text(const std::string& method, const std::string& path, const std::string& body,
                         const std::string& host, const std::string& auth_key, std::chrono::milliseconds timeout) {
  http::request<http::string_body> req;
  const http::verb verb = http::string_to_verb(method);
  if (verb == http::verb::unknown)
    req.method_string(method);
  else
    req.method(verb);
  req.target(path);
  req.version(11);
  req.set(http::field::host, host);
  req.set(http::field::user_agent, "troupe-ctl");
  if (!body.empty()) req.set(http::field::content_type, "text/plain");
  // The server answers "pending" before this wait ends rather than say
  // nothing while a switch waits for the next step boundary: it gets a
  // quarter of the timeout (at most 300 ms) less, the time for the answer
  // to come back.
  const auto margin = std::min<std::chrono::milliseconds>(timeout / 4, std::chrono::milliseconds(300));
  const long long wait = std::clamp<long long>((timeout - margin).count(), 1, 3600000);
  req.set(kWaitHeader, std::to_string(wait));
  req.keep_alive(false);
  req.body() = body;
  req.prepare_payload();
  if (!auth_key.empty())
    req.set(http::field::authorization, sign_control_request(auth_key, method, path, body, unix_seconds_now()));
  std::ostringstream text;
  text << req;
  return text.str();
}

// Feeds what the socket delivers to `parser` until it holds a whole answer,
// as http::read would: the parser's error when the bytes are not an answer
// (end_of_stream when the peer closed before sending anything,
// partial_message when it closed mid-answer, bad_version and the like for
// bytes that are not HTTP, body_limit), none when the answer is whole.
// `unparsed` keeps what the parser has not taken, so that bytes that are
// not HTTP can be quoted. Socket failures, the deadline's included, are
// wire::IoError.
beast::error_code read_answer(int fd, ResponseParser& parser, std::string& unparsed, Deadline deadline) {
  char chunk[16 * 1024];
  while (!parser.is_done()) {
    std::size_t used = 0;
    if (!unparsed.empty()) {
      beast::error_code ec;
      used = parser.put(boost::asio::const_buffer(unparsed.data(), unparsed.size()), ec);
      unparsed.erase(0, used);
      if (ec && ec != http::error::need_more) return ec;
    }
    // The parser stops after the header: the rest of `unparsed` may be body.
    if (used > 0) continue;
    const std::size_t got = wire::read_some(fd, chunk, sizeof chunk, deadline);
    if (got == 0) {
      if (!parser.got_some()) return http::error::end_of_stream;
      beast::error_code ec;
      parser.put_eof(ec);  // complete only for an answer whose body ends with the connection
      return ec;
    }
    unparsed.append(chunk, got);
  }
  return {};
}

}  // namespace

ControlClient::ControlClient(const std::string& address) : address_(parse_host_port(address)) {}

ControlResponse ControlClient::request(const std::string& method, const std::string& path, const std::string& body,
                                       std::chrono::milliseconds timeout) const {
  const std::string where = address_.str();
  const std::string text = request_text(method, path, body, where, auth_key_, timeout);

  const auto no_answer_in_time = [&] {
    return ControlError("no answer from " + where + " within " + describe_seconds(timeout.count() / 1000.0));
  };
  const auto failed = [&](const std::string& why) {
    return ControlError("control request " + method + " " + path + " to " + where + " failed: " + why);
  };

  // One deadline for connect, send and answer, as --timeout promises.
  const Deadline deadline = Clock::now() + timeout;
  int fd = -1;
  try {
    // Once: `troupe ctl` decides itself whether to try again while nothing
    // listens (a job still starting), and says so at once otherwise.
    fd = wire::connect_tcp_once(where, deadline);
  } catch (const wire::UnknownHost& e) {
    throw std::invalid_argument("control address '" + where + "': unknown host '" + address_.host + "' (" + e.reason +
                                ")");
  } catch (const wire::ConnectionRefused&) {
    throw ControlError("nothing is listening at " + where + " (is the job running with --control " + where + "?)",
                       /*refused=*/true);
  } catch (const wire::IoError& e) {
    if (e.timed_out) throw no_answer_in_time();
    throw failed(e.what());
  }
  const Connection connection(fd);

  // A failed send still reads: a server that refuses a request (413)
  // answers and closes before taking the whole body, and that answer is
  // the one to show.
  std::string write_error;
  try {
    wire::write_all(connection.fd(), text.data(), text.size(), nullptr, 0, deadline);
  } catch (const wire::IoError& e) {
    if (e.timed_out) throw no_answer_in_time();
    write_error = e.what();
  }

  ResponseParser parser;
  parser.body_limit(kResponseBodyLimit);
  std::string unparsed;
  beast::error_code read_ec;
  try {
    read_ec = read_answer(connection.fd(), parser, unparsed, deadline);
  } catch (const wire::IoError& e) {
    if (e.timed_out) throw no_answer_in_time();
    throw failed(write_error.empty() ? e.what() : write_error);
  }
  // Something answered, but not in HTTP (an SSH or database port, a troupe
  // node's cluster port): Beast's parser says "bad version" and the like,
  // which tells the user nothing about what to fix. An HTTP server whose
  // answer broke off after its header is another fault.
  if (read_ec && !parser.is_header_done()) {
    std::string first;  // what it sent, printable, for the user to recognise
    for (char c : unparsed.substr(0, 40)) first += (c >= 32 && c < 127) ? c : '.';
    throw ControlError(where + " is not a troupe control endpoint: " +
                       (first.empty() ? std::string("it closed the connection without an HTTP answer")
                                      : "it answered \"" + first + "\", not HTTP") +
                       " (give --at the address the job serves with --control)");
  }
  if (read_ec) throw failed(write_error.empty() ? read_ec.message() : write_error);
  return {static_cast<int>(parser.get().result_int()), parser.get().body()};
}

}  // namespace troupe::net
