#include "net/control/control_client.hpp"

#include "net/control/control_auth.hpp"

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

namespace troupe::net {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

namespace {
constexpr std::uint64_t kResponseBodyLimit = 16 << 20;
}

ControlClient::ControlClient(const std::string& address) : address_(parse_host_port(address)) {}

ControlResponse ControlClient::request(const std::string& method, const std::string& path, const std::string& body,
                                       std::chrono::milliseconds timeout) const {
  const std::string where = address_.str();
  asio::io_context ioc(1);
  beast::error_code ec;
  tcp::resolver resolver(ioc);
  const auto endpoints = resolver.resolve(address_.host, std::to_string(address_.port),
                                          tcp::resolver::numeric_service, ec);
  if (ec) throw std::invalid_argument("control address '" + where + "': unknown host '" + address_.host + "' (" +
                                      ec.message() + ")");

  http::request<http::string_body> req;
  const http::verb verb = http::string_to_verb(method);
  if (verb == http::verb::unknown)
    req.method_string(method);
  else
    req.method(verb);
  req.target(path);
  req.version(11);
  req.set(http::field::host, where);
  req.set(http::field::user_agent, "troupe-ctl");
  if (!body.empty()) req.set(http::field::content_type, "text/plain");
  req.keep_alive(false);
  req.body() = body;
  req.prepare_payload();
  if (!auth_key_.empty())
    req.set(http::field::authorization, sign_control_request(auth_key_, method, path, body, unix_seconds_now()));

  // One deadline for everything: the stream's timer cancels whichever
  // operation is pending when it fires, and that operation fails with
  // beast::error::timeout.
  beast::tcp_stream stream(ioc);
  stream.expires_after(timeout);
  beast::flat_buffer buffer;
  http::response_parser<http::string_body> parser;
  parser.body_limit(kResponseBodyLimit);
  beast::error_code connect_ec, write_ec, read_ec;
  bool read_started = false;
  stream.async_connect(endpoints, [&](beast::error_code c_ec, const tcp::endpoint&) {
    if (c_ec) {
      connect_ec = c_ec;
      return;
    }
    http::async_write(stream, req, [&](beast::error_code w_ec, std::size_t) {
      // Read even when the write failed: a server that refuses a request
      // (413) answers and closes before taking the whole body.
      write_ec = w_ec;
      if (w_ec == beast::error::timeout) return;
      read_started = true;
      http::async_read(stream, buffer, parser, [&](beast::error_code r_ec, std::size_t) { read_ec = r_ec; });
    });
  });
  ioc.run();

  const auto no_answer = [&](beast::error_code e) -> ControlError {
    if (e == beast::error::timeout)
      return ControlError("no answer from " + where + " within " + describe_seconds(timeout.count() / 1000.0));
    if (e == asio::error::connection_refused)
      return ControlError("nothing is listening at " + where + " (is the job running with --control " + where + "?)",
                          /*refused=*/true);
    return ControlError("control request " + method + " " + path + " to " + where + " failed: " + e.message());
  };
  // Something answered, but not in HTTP (an SSH or database port, a troupe
  // node's cluster port): Beast's parser says "bad version" and the like,
  // which tells the user nothing about what to fix.
  // An HTTP server whose answer broke off after its header is another fault.
  const auto not_http = [&](beast::error_code e) {
    return e.category() == http::make_error_code(http::error::bad_version).category() && !parser.is_header_done();
  };
  if (connect_ec) throw no_answer(connect_ec);
  if (!read_started) throw no_answer(write_ec);
  if (read_ec && not_http(read_ec)) {
    std::string first;  // what it sent, printable, for the user to recognise
    for (char c : beast::buffers_to_string(buffer.data()).substr(0, 40))
      first += (c >= 32 && c < 127) ? c : '.';
    throw ControlError(where + " is not a troupe control endpoint: " +
                       (first.empty() ? std::string("it closed the connection without an HTTP answer")
                                      : "it answered \"" + first + "\", not HTTP") +
                       " (give --at the address the job serves with --control)");
  }
  if (read_ec) throw no_answer(read_ec == beast::error::timeout || !write_ec ? read_ec : write_ec);
  beast::error_code ignored;
  stream.socket().shutdown(tcp::socket::shutdown_both, ignored);
  return {static_cast<int>(parser.get().result_int()), parser.get().body()};
}

}  // namespace troupe::net
