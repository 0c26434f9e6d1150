// troupe ctl: talk to a running job's HTTP control endpoint.
//
//   troupe ctl --at 127.0.0.1:7070 status
//   troupe ctl --at 127.0.0.1:7070 metrics        (Prometheus text, as a scrape sees it)
//   troupe ctl --at 127.0.0.1:7070 mode ssp:3
//   troupe ctl --at 127.0.0.1:7070 checkpoint
//   troupe ctl --at 127.0.0.1:7070 stop
//   troupe ctl --at 127.0.0.1:7070 drain 2        (a cluster node, by index or name)
//   troupe ctl --at host-a:7070 --secret-file /etc/troupe/secret stop
//
// With --secret-file (or TROUPE_SECRET) every request is signed with a key
// derived from the job's cluster secret (net/control/control_auth.hpp); a job
// with a secret answers an unsigned or wrongly signed request with 401.
// Prints the job's answer (JSON; Prometheus text for metrics) on stdout and exits 0 on a 2xx answer; 1 with
// the answer on stderr on an HTTP error, or with a message when nothing
// answers within --timeout; 2 on a usage error.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <thread>

#include "cli/commands.hpp"
#include "net/cluster/auth.hpp"
#include "net/control/control_auth.hpp"
#include "net/control/control_client.hpp"

namespace troupe::cli {

void add_ctl_command(CLI::App& app, CtlOptions& o) {
  auto* cmd = app.add_subcommand("ctl", "Query or steer a running job through its control endpoint");
  cmd->add_option("--at", o.at, "The job's control address HOST:PORT (its --control)")->required();
  cmd->add_option(
         "--timeout", o.timeout_s,
         "Seconds to wait for connect (retried while nothing listens yet, e.g. a job still starting) and answer")
      ->capture_default_str();
  cmd->add_option("--secret-file", o.secret_file,
                  "File holding the job's cluster secret, to sign requests (else TROUPE_SECRET; neither: unsigned)");
  cmd->require_subcommand(1);
  cmd->add_subcommand("status", "Print the job's status (step, epoch, mode, replicas, throughput, loss)")
      ->callback([&o] { o.action = "status"; });
  auto* mode = cmd->add_subcommand("mode", "Switch the update mode at the next step boundary");
  mode->add_option("MODE", o.mode, "sync, async or ssp:N")->required();
  mode->callback([&o] { o.action = "mode"; });
  cmd->add_subcommand("checkpoint", "Write a checkpoint now")->callback([&o] { o.action = "checkpoint"; });
  cmd->add_subcommand("stop", "Stop the job at the next step boundary (checkpointing if configured)")->callback([&o] {
    o.action = "stop";
  });
  auto* drain =
      cmd->add_subcommand("drain", "Make a cluster node leave the job at the next step boundary (no step lost)");
  drain->add_option("NODE", o.node, "The node's index (as `troupe ctl status` lists it) or name")->required();
  drain->callback([&o] { o.action = "drain"; });
  cmd->add_subcommand("metrics", "Print the job's metrics in the Prometheus text format (GET /metrics)")
      ->callback([&o] { o.action = "metrics"; });
}

int run_ctl(CtlOptions& o) {
  if (!(o.timeout_s > 0) || !std::isfinite(o.timeout_s) || o.timeout_s > 3600)
    throw UsageError("--timeout must be in (0, 3600] seconds, got " + std::to_string(o.timeout_s));
  net::ControlClient client(o.at);  // a malformed address is std::invalid_argument: exit 2
  const net::Secret secret = net::Secret::load(o.secret_file);
  if (secret.configured()) client.sign_with(secret.derive(net::kControlKeyLabel));
  const auto timeout = std::chrono::milliseconds(static_cast<long long>(std::llround(o.timeout_s * 1000)));
  if (o.action != "status" && o.action != "metrics" && o.action != "mode" && o.action != "checkpoint" &&
      o.action != "stop" && o.action != "drain")
    throw UsageError("ctl: expected status, metrics, mode MODE, checkpoint, stop or drain NODE");
  // A job started a moment ago (`troupe train ... --control A &` and then
  // `troupe ctl --at A ...`) binds its endpoint only after loading its data:
  // while nothing listens yet, try again until --timeout is spent.
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  net::ControlResponse r;
  for (;;) {
    // Rounded up: truncated, the first try's timeout would be a hair under
    // --timeout and "no answer ... within 1.999 s" would not be what was asked.
    const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    try {
      if (o.action == "status" || o.action == "metrics")
        r = client.request("GET", "/" + o.action, "", std::max(left, std::chrono::milliseconds(1)));
      else if (o.action == "mode")
        r = client.request("POST", "/mode", o.mode, std::max(left, std::chrono::milliseconds(1)));
      else if (o.action == "drain")
        r = client.request("POST", "/drain", o.node, std::max(left, std::chrono::milliseconds(1)));
      else
        r = client.request("POST", "/" + o.action, "", std::max(left, std::chrono::milliseconds(1)));
      break;
    } catch (const net::ControlError& e) {
      if (!e.connection_refused || std::chrono::steady_clock::now() + std::chrono::milliseconds(200) >= deadline) throw;
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
  }
  std::string body = r.body;
  if (body.empty() || body.back() != '\n') body += '\n';
  if (r.status / 100 == 2) {
    std::fputs(body.c_str(), stdout);
    return 0;
  }
  std::fprintf(stderr, "troupe: %s answered HTTP %d: %s", client.address().str().c_str(), r.status, body.c_str());
  return 1;
}

}  // namespace troupe::cli
