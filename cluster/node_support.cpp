#include "cluster/node_support.hpp"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <unistd.h>
#include <caf/io/all.hpp>

#include <csignal>
#include <cstdio>
#include <memory>

#include "actors/messages.hpp"
#include "kernels/config.hpp"  // TROUPE_VERSION
#include "net/cluster/auth.hpp"
#include "net/control/address.hpp"
#include "net/tcp/tcp.hpp"

namespace troupe::actors::node_support {

namespace {
void default_log(const std::string& line) { std::fprintf(stderr, "troupe node: %s\n", line.c_str()); }
}  // namespace

std::function<void(const std::string&)> logger(const NodeOptions& o) { return o.log ? o.log : default_log; }

// Remoting with heartbeats (../shared/CAF-0.17.md, section 3): a silent peer
// is declared down after about 4 s (the timeout plus up to one interval;
// a silent node is to be found in < 5 s), a closed connection at once.
void configure_cluster(caf::actor_system_config& cfg) {
  cfg.load<caf::io::middleman>();
  cfg.set("middleman.heartbeat-interval", caf::timespan{std::chrono::seconds(1)});
  cfg.set("middleman.connection-timeout", caf::timespan{std::chrono::seconds(4)});
  register_message_types(cfg);
}

// Both ends of the data plane derive the ring's job id from the job.

std::uint64_t ring_id_of(const std::string& fingerprint, std::uint32_t view) {
  return job_id_of(fingerprint) ^ (static_cast<std::uint64_t>(view) * 0x9E3779B97F4A7C15ULL);
}

// The first non-loopback IPv4 address of this host, else 127.0.0.1.
std::string first_host_address() {
  ifaddrs* list = nullptr;
  std::string out = "127.0.0.1";
  if (getifaddrs(&list) != 0) return out;
  for (ifaddrs* a = list; a; a = a->ifa_next) {
    if (!a->ifa_addr || a->ifa_addr->sa_family != AF_INET) continue;
    char text[INET_ADDRSTRLEN] = {};
    inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(a->ifa_addr)->sin_addr, text, sizeof text);
    if (!net::is_loopback(text)) {
      out = text;
      break;
    }
  }
  freeifaddrs(list);
  return out;
}

bool is_wildcard(const std::string& host) { return host.empty() || host == "0.0.0.0" || host == "::"; }

// "HOST[:PORT]" -> a listening data-plane socket and its "host:port".
int bind_data_plane(const std::string& requested, const std::string& default_host, std::string* address) {
  std::string host = default_host;
  std::uint16_t port = 0;
  if (!requested.empty()) {
    if (requested.find(':') == std::string::npos) {
      host = requested;
    } else {
      const net::HostPort hp = net::parse_host_port(requested);  // throws naming the address
      host = hp.host;
      port = hp.port;
    }
  }
  const std::string bracketed = host.find(':') != std::string::npos ? "[" + host + "]" : host;
  std::uint16_t bound = 0;
  const int fd = net::listen_tcp(bracketed + ":" + std::to_string(port), &bound);
  *address = bracketed + ":" + std::to_string(bound);
  return fd;
}

std::string node_name(const std::string& role) {
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  return role + "/" + host + "/pid " + std::to_string(getpid());
}

net::HandshakeConfig handshake_config(const net::Secret& secret, const NodeOptions& options,
                                      const std::string& identity) {
  net::HandshakeConfig c;
  c.secret = secret;
  c.version = TROUPE_VERSION;
  c.identity = identity;
  c.clear_links = options.insecure;
  return c;
}

std::string links_status(const net::Secret& secret, const NodeOptions& options) {
  if (!secret.configured()) return "not sealed (no secret: loopback peers only)";
  return options.insecure ? "NOT sealed (--insecure)" : "sealed (AES-256-GCM)";
}

std::string links_line(const net::Secret& secret, const NodeOptions& options) {
  if (!secret.configured())
    return "no cluster secret (--secret-file or TROUPE_SECRET): only loopback peers are accepted, and links are "
           "not sealed";
  if (options.insecure)
    return "WARNING: --insecure: nodes prove the cluster secret (from " + secret.origin() +
           ") when they connect, but every link between nodes then carries its bytes UNSEALED: anyone on the "
           "network path can read the gradients, parameters and control messages, alter them, and take over a "
           "connection. Use it only on a network you trust as much as the hosts themselves";
  return "cluster secret from " + secret.origin() +
         ": every link to another node is sealed after the handshake (AES-256-GCM)";
}

int run_sessions(const NodeOptions& options, net::JoinRelayConfig rc,
                 const std::function<void(const std::string&)>& log,
                 const std::function<SessionEnd(net::JoinRelay&)>& session, const std::function<bool()>& stopped,
                 const std::function<void()>& before_rejoin) {
  bool rejoining = false;
  for (;;) {
    std::unique_ptr<net::JoinRelay> relay;
    try {
      relay = std::make_unique<net::JoinRelay>(rc);
    } catch (const std::exception& e) {
      log(std::string(rejoining ? "gave up rejoining " : "cannot join ") + options.join + ": " + e.what());
      return 1;
    }
    const SessionEnd end = session(*relay);
    if (!end.coordinator_lost || options.rejoin_timeout.count() <= 0 || stopped()) return end.status;
    if (before_rejoin) before_rejoin();
    // While it waits for the coordinator, a signal ends the node at once.
    std::signal(SIGINT, SIG_DFL);
    std::signal(SIGTERM, SIG_DFL);
    rejoining = true;
    rc.timeout = options.rejoin_timeout;
    log("rejoining " + options.join + " for up to " +
        net::describe_seconds(std::chrono::duration<double>(options.rejoin_timeout).count()) +
        " (--rejoin-timeout): restart the coordinator with --resume to go on from its newest checkpoint");
  }
}

}  // namespace troupe::actors::node_support
