#include "net/control/control_server.hpp"

#include "net/control/control_auth.hpp"
#include "net/control/prometheus.hpp"
#include "net/crypto/crypto.hpp"
#include "util/printable.hpp"

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include <cctype>
#include <cstdio>
#include <mutex>
#include <optional>
#include <thread>
#include <utility>

namespace troupe::net {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

namespace {

constexpr std::uint32_t kHeaderLimit = 8 * 1024;
constexpr std::uint64_t kBodyLimit = 64 * 1024;
// After an answer, bytes the client is still sending are read and dropped (up
// to this many, for at most a second) before closing, so that closing with
// unread data does not reset the connection before the client reads the answer.
constexpr std::size_t kDrainLimit = 1 << 20;
constexpr const char* kEndpoints = "GET /status, GET /metrics, POST /mode, POST /checkpoint, POST /stop, POST /drain";

// Set on the handler thread while a handler runs, so stop() can refuse to be
// called from inside one (it would wait for itself).
thread_local bool in_handler = false;
// The request's Troupe-Wait (kWaitHeader), while its handler runs.
thread_local std::optional<std::chrono::milliseconds> handler_wait;

std::string message_json(bool ok, const std::string& message) {
  nlohmann::ordered_json body;
  body["ok"] = ok;
  body["message"] = message;
  return body.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

struct Answer {
  unsigned status = 200;
  std::string body;           // JSON, or the Prometheus text of GET /metrics
  std::string allow;          // the Allow header of a 405
  bool authenticate = false;  // a 401: send WWW-Authenticate
  const char* content_type = "application/json";
};

Answer error_answer(unsigned status, const std::string& message) { return {status, message_json(false, message), {}}; }

// Troupe-Wait's value: whole milliseconds in [1, 3600000] (ctl's --timeout
// range), digits only.
std::optional<std::chrono::milliseconds> parse_wait(const std::string& text) {
  if (text.empty() || text.size() > 7) return std::nullopt;
  long long ms = 0;
  for (char c : text) {
    if (c < '0' || c > '9') return std::nullopt;
    ms = ms * 10 + (c - '0');
  }
  if (ms < 1 || ms > 3600000) return std::nullopt;
  return std::chrono::milliseconds(ms);
}

enum class Endpoint { status, mode, checkpoint, stop, drain, metrics };

std::string trim(const std::string& s) {
  const auto first = s.find_first_not_of(" \t\r\n");
  if (first == std::string::npos) return {};
  return s.substr(first, s.find_last_not_of(" \t\r\n") - first + 1);
}

// "Bearer TOKEN" (the scheme in any case, RFC 7235) -> true and TOKEN.
bool bearer_token(const std::string& credential, std::string& token) {
  static const std::string scheme = "bearer ";
  if (credential.size() < scheme.size()) return false;
  for (std::size_t i = 0; i < scheme.size(); ++i)
    if (std::tolower(static_cast<unsigned char>(credential[i])) != scheme[i]) return false;
  token = trim(credential.substr(scheme.size()));
  return true;
}

}  // namespace

struct ControlServer::Impl {
  Handlers handlers;
  ControlServerOptions options;
  HostPort bound;
  std::unique_ptr<asio::io_context> ioc;
  std::unique_ptr<tcp::acceptor> acceptor;
  std::unique_ptr<asio::steady_timer> accept_retry;
  std::unique_ptr<asio::thread_pool> handler_thread;
  std::thread io_thread;
  std::mutex mutex;  // start() and stop()
  bool started = false;
  bool stopped = false;

  std::unique_ptr<ControlAuth> auth;  // set when options.auth_key is

  void accept();
  // Why the request's credential is refused, or "" when it is good.
  std::string refusal(const std::string& credential, bool get_metrics, const std::string& method,
                      const std::string& target, const std::string& body);
  // On the handler thread; `wait`: the client's Troupe-Wait, if it sent one.
  Answer call(Endpoint endpoint, const std::string& body, std::optional<std::chrono::milliseconds> wait);
};

namespace {

// One connection: read one request, answer it, close.
class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(tcp::socket socket, ControlServer::Impl& server) : stream_(std::move(socket)), server_(server) {}

  void read() {
    parser_.emplace();
    parser_->header_limit(kHeaderLimit);
    parser_->body_limit(kBodyLimit);  // checked against Content-Length before the body is allocated
    stream_.expires_after(server_.options.io_timeout);
    http::async_read(stream_, buffer_, *parser_,
                     [self = shared_from_this()](beast::error_code ec, std::size_t) { self->on_read(ec); });
  }

 private:
  void on_read(beast::error_code ec) {
    if (ec == http::error::end_of_stream || ec == http::error::partial_message || ec == beast::error::timeout)
      return close();  // the client left, or sent too little in time: nobody to answer
    if (ec == http::error::body_limit) return answer(error_answer(413, "request body over 64 KiB"));
    if (ec == http::error::header_limit) return answer(error_answer(431, "request header over 8 KiB"));
    if (ec && ec.category() == http::make_error_code(http::error::bad_method).category())
      return answer(error_answer(400, "malformed HTTP request: " + ec.message()));
    if (ec) return close();  // a socket error

    const auto& req = parser_->get();
    std::string path(req.target());
    if (const auto q = path.find('?'); q != std::string::npos) path.resize(q);
    // With a key, nothing is routed, let alone done, before the credential
    // checks out: every refusal is the same 401, whatever the path.
    if (server_.auth) {
      const auto header = req.find(http::field::authorization);
      const std::string why = server_.refusal(header == req.end() ? std::string() : std::string(header->value()),
                                              path == "/metrics" && req.method() == http::verb::get,
                                              std::string(req.method_string()), std::string(req.target()), req.body());
      if (!why.empty()) {
        Answer a = error_answer(401, why);
        a.authenticate = true;
        return answer(std::move(a));
      }
    }
    Endpoint endpoint;
    http::verb wanted = http::verb::post;
    if (path == "/status") {
      endpoint = Endpoint::status;
      wanted = http::verb::get;
    } else if (path == "/metrics") {
      endpoint = Endpoint::metrics;
      wanted = http::verb::get;
    } else if (path == "/mode") {
      endpoint = Endpoint::mode;
    } else if (path == "/checkpoint") {
      endpoint = Endpoint::checkpoint;
    } else if (path == "/stop") {
      endpoint = Endpoint::stop;
    } else if (path == "/drain") {
      endpoint = Endpoint::drain;
    } else {
      return answer(error_answer(404, "no endpoint " + path + "; the endpoints are " + kEndpoints));
    }
    if (req.method() != wanted) {
      Answer a = error_answer(405, std::string(req.method_string()) + " " + path + " is not allowed; use " +
                                       std::string(http::to_string(wanted)) + " " + path);
      a.allow = std::string(http::to_string(wanted));
      return answer(std::move(a));
    }
    std::optional<std::chrono::milliseconds> wait;
    if (const auto w = req.find(kWaitHeader); w != req.end()) {
      const std::string text(w->value());
      wait = parse_wait(text);
      if (!wait)
        return answer(error_answer(400, std::string(kWaitHeader) +
                                            " must be whole milliseconds from 1 to 3600000, got '" +
                                            util::printable(text, 40) + "'"));
    }
    // The handler runs on the handler thread; the answer comes back to the io
    // thread. Meanwhile this connection waits and every other one goes on.
    stream_.expires_never();
    asio::post(*server_.handler_thread, [self = shared_from_this(), endpoint, body = req.body(), wait] {
      Answer a = self->server_.call(endpoint, body, wait);
      asio::post(self->stream_.get_executor(), [self, a = std::move(a)]() mutable { self->answer(std::move(a)); });
    });
  }

  void answer(Answer a) {
    response_.result(a.status);
    response_.version(11);
    response_.set(http::field::server, "troupe");
    response_.set(http::field::content_type, a.content_type);
    if (!a.allow.empty()) response_.set(http::field::allow, a.allow);
    if (a.authenticate) response_.set(http::field::www_authenticate, kControlAuthScheme);
    response_.keep_alive(false);
    // JSON gets a newline for the terminal; the metrics text ends in one.
    response_.body() = std::move(a.body);
    if (response_.body().empty() || response_.body().back() != '\n') response_.body() += "\n";
    response_.prepare_payload();
    stream_.expires_after(server_.options.io_timeout);
    http::async_write(stream_, response_, [self = shared_from_this()](beast::error_code ec, std::size_t) {
      if (ec) return self->close();
      beast::error_code ignored;
      self->stream_.socket().shutdown(tcp::socket::shutdown_send, ignored);
      self->stream_.expires_after(
          std::min<std::chrono::milliseconds>(self->server_.options.io_timeout, std::chrono::seconds(1)));
      self->drain();
    });
  }

  void drain() {
    stream_.async_read_some(asio::buffer(drain_buffer_),
                            [self = shared_from_this()](beast::error_code ec, std::size_t n) {
                              self->drained_ += n;
                              if (ec || self->drained_ > kDrainLimit) return self->close();
                              self->drain();
                            });
  }

  void close() {
    beast::error_code ignored;
    stream_.socket().shutdown(tcp::socket::shutdown_both, ignored);
    stream_.socket().close(ignored);
  }

  beast::tcp_stream stream_;
  ControlServer::Impl& server_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  http::response<http::string_body> response_;
  char drain_buffer_[4096];
  std::size_t drained_ = 0;
};

}  // namespace

void ControlServer::Impl::accept() {
  acceptor->async_accept(*ioc, [this](beast::error_code ec, tcp::socket socket) {
    if (ec == asio::error::operation_aborted || !acceptor->is_open()) return;
    if (!ec) {
      std::make_shared<Session>(std::move(socket), *this)->read();
      return accept();
    }
    // Out of descriptors or similar: try again shortly rather than spin.
    accept_retry->expires_after(std::chrono::milliseconds(100));
    accept_retry->async_wait([this](beast::error_code wait_ec) {
      if (!wait_ec) accept();
    });
  });
}

std::string ControlServer::Impl::refusal(const std::string& credential, bool get_metrics, const std::string& method,
                                         const std::string& target, const std::string& body) {
  std::string token;
  if (!bearer_token(credential, token)) return auth->check(credential, method, target, body, unix_seconds_now());
  // A Prometheus server sends a token from a file; it cannot sign. The token
  // reads metrics and nothing else, so a leaked one cannot steer the job.
  if (!get_metrics)
    return "a bearer token opens GET /metrics only; every other request must be signed (troupe ctl signs with "
           "--secret-file or TROUPE_SECRET, the job's secret)";
  if (options.metrics_token.empty())
    return "this job takes no bearer token: start it with --metrics-token-file FILE, or sign the request "
           "(troupe ctl metrics --secret-file)";
  if (!constant_time_equal(token, options.metrics_token))
    return "the bearer token does not match the job's --metrics-token-file";
  return {};
}

Answer ControlServer::Impl::call(Endpoint endpoint, const std::string& body,
                                 std::optional<std::chrono::milliseconds> wait) {
  static constexpr const char* names[] = {"GET /status", "POST /mode",  "POST /checkpoint",
                                          "POST /stop",  "POST /drain", "GET /metrics"};
  const char* name = names[static_cast<int>(endpoint)];
  struct InHandler {
    explicit InHandler(std::optional<std::chrono::milliseconds> wait) {
      in_handler = true;
      handler_wait = wait;
    }
    ~InHandler() {
      in_handler = false;
      handler_wait.reset();
    }
  } guard(wait);
  const auto not_available = [&] { return error_answer(501, std::string(name) + " is not available in this job"); };
  try {
    Reply reply;
    switch (endpoint) {
      case Endpoint::status:
        if (!handlers.status) return not_available();
        return {200, handlers.status(), {}};
      case Endpoint::mode:
        if (!handlers.mode) return not_available();
        reply = handlers.mode(trim(body));
        break;
      case Endpoint::checkpoint:
        if (!handlers.checkpoint) return not_available();
        reply = handlers.checkpoint();
        break;
      case Endpoint::stop:
        if (!handlers.stop) return not_available();
        reply = handlers.stop();
        break;
      case Endpoint::drain:
        if (!handlers.drain) return not_available();
        reply = handlers.drain(trim(body));
        break;
      case Endpoint::metrics: {
        if (!handlers.metrics) return not_available();
        Answer a{200, handlers.metrics(), {}};
        a.content_type = prometheus::kContentType;
        return a;
      }
    }
    if (reply.status < 100 || reply.status > 599)
      return error_answer(500, std::string("the handler for ") + name + " returned HTTP status " +
                                   std::to_string(reply.status) + " (" + reply.message + ")");
    return {static_cast<unsigned>(reply.status), message_json(reply.status / 100 == 2, reply.message), {}};
  } catch (const std::exception& e) {
    return error_answer(500, std::string(name) + " failed: " + e.what());
  } catch (...) {
    return error_answer(500, std::string(name) + " failed with an unknown exception");
  }
}

ControlServer::ControlServer(const std::string& address, Handlers handlers, ControlServerOptions options)
    : impl_(std::make_unique<Impl>()) {
  Impl& s = *impl_;
  s.handlers = std::move(handlers);
  s.options = options;
  const HostPort hp = parse_host_port(address);
  s.ioc = std::make_unique<asio::io_context>(1);
  beast::error_code ec;
  tcp::resolver resolver(*s.ioc);
  const auto endpoints =
      resolver.resolve(hp.host, std::to_string(hp.port), tcp::resolver::numeric_service | tcp::resolver::passive, ec);
  if (ec || endpoints.empty())
    throw std::invalid_argument("control address '" + address + "': unknown host '" + hp.host + "' (" +
                                (ec ? ec.message() : std::string("no addresses")) + ")");
  const tcp::endpoint endpoint = endpoints.begin()->endpoint();
  if (s.options.auth_key.empty() && !endpoint.address().is_loopback())
    throw std::invalid_argument("control address '" + address + "' (" + endpoint.address().to_string() +
                                ") is not a loopback address, and without a cluster secret the control endpoint "
                                "has no credential to ask for: bind it to 127.0.0.1, or give the job a secret "
                                "(--secret-file or TROUPE_SECRET) so that every request must be signed with it");
  if (s.options.auth_key.empty() && !s.options.metrics_token.empty())
    throw std::invalid_argument(
        "a metrics token needs a cluster secret: without one the control endpoint asks no "
        "credential at all (it binds loopback addresses only), so the token would protect "
        "nothing; give the job a secret (--secret-file or TROUPE_SECRET)");
  if (!s.options.auth_key.empty()) s.auth = std::make_unique<ControlAuth>(s.options.auth_key, s.options.auth_window);
  const auto fail = [&](const char* what) {
    throw ControlError("control endpoint: cannot " + std::string(what) + " " + address + " (" +
                       endpoint.address().to_string() + "): " + ec.message());
  };
  s.acceptor = std::make_unique<tcp::acceptor>(*s.ioc);
  s.acceptor->open(endpoint.protocol(), ec);
  if (ec) fail("open a socket for");
  // SO_REUSEADDR only lets a restarted job reuse a port in TIME_WAIT; a port
  // another process listens on still fails to bind (Linux).
  s.acceptor->set_option(asio::socket_base::reuse_address(true), ec);
  s.acceptor->bind(endpoint, ec);
  if (ec) fail("listen on");
  s.acceptor->listen(asio::socket_base::max_listen_connections, ec);
  if (ec) fail("listen on");
  s.bound = {hp.host, s.acceptor->local_endpoint().port()};
  s.accept_retry = std::make_unique<asio::steady_timer>(*s.ioc);
}

ControlServer::~ControlServer() {
  try {
    stop();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "troupe: control endpoint: %s\n", e.what());
  }
}

void ControlServer::start() {
  Impl& s = *impl_;
  std::lock_guard<std::mutex> lock(s.mutex);
  if (s.started || s.stopped) throw std::logic_error("ControlServer::start: already started or stopped");
  s.started = true;
  s.handler_thread = std::make_unique<asio::thread_pool>(1);
  s.accept();
  s.io_thread = std::thread([&s] {
    for (;;) {
      try {
        s.ioc->run();  // returns once stop() stops the io_context
        return;
      } catch (const std::exception& e) {  // bad_alloc in a session, say: log it and go on serving
        std::fprintf(stderr, "troupe: control endpoint: %s\n", e.what());
      }
    }
  });
}

std::optional<std::chrono::milliseconds> request_wait() { return handler_wait; }

void ControlServer::stop() {
  Impl& s = *impl_;
  if (in_handler)
    throw std::logic_error("ControlServer::stop called from a control handler (it would wait for itself)");
  std::lock_guard<std::mutex> lock(s.mutex);
  if (s.stopped) return;
  s.stopped = true;
  if (s.started) {
    s.ioc->stop();
    s.io_thread.join();
    s.handler_thread->stop();  // drop handler calls not yet begun
    s.handler_thread->join();  // and wait for the one running, if any
    s.handler_thread.reset();
  }
  // Destroying the io_context destroys the pending operations, and with them
  // the sessions and their sockets: every client sees its connection close.
  s.accept_retry.reset();
  s.acceptor.reset();
  s.ioc.reset();
}

std::uint16_t ControlServer::port() const { return impl_->bound.port; }

std::string ControlServer::address() const { return impl_->bound.str(); }

}  // namespace troupe::net
