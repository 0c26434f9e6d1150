// Where a replica pushes each shard's part on the data plane (to the ps
// task hosting the shard, or to the coordinator's PushServer): a
// PushClient (push_link.hpp) per server address, not a CAF message. A
// replica's gradient sink (actors/gradient_sink.hpp) makes its clients on
// its first push of a view and keeps them; every client made from one PushRoutes is also
// kept in its registry, so that the node that spawned the replicas can fail
// every pending push at once when it stops (a device blocked in a push
// handles no message, not even an exit).
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "net/crypto/aead.hpp"  // LinkKeys
#include "net/deadline.hpp"

namespace troupe::net::push {

class PushClient;  // push_link.hpp

// Every PushClient of one node's replicas.
class PushClientRegistry {
 public:
  // Keeps `client`; fails it at once when abort() was called already.
  void add(const std::shared_ptr<PushClient>& client);
  // Fails every pending and later push of every client with `why`.
  void abort(const std::string& why);
  // Why abort() was called; empty before.
  std::string aborted() const;

 private:
  mutable std::mutex mutex_;
  std::vector<std::weak_ptr<PushClient>> clients_;
  std::string aborted_;
};

struct PushRoutes {
  std::vector<std::string> addresses;  // by shard index: the ps task's data-plane HOST:PORT
  std::uint64_t job_id = 0;            // both ends check it (push_link.hpp)
  // The cluster handshake (net::handshake_hook): sealed links with a secret.
  std::function<net::LinkKeys(int fd, bool accepting, net::Deadline deadline)> authenticate;
  std::chrono::milliseconds connect_timeout{30000};
  std::chrono::milliseconds timeout{60000};  // each push's round trip
  std::shared_ptr<PushClientRegistry> registry = std::make_shared<PushClientRegistry>();
};

// The job's id, from the cluster's fingerprint (hex): both ends of the data
// plane derive the ring's and the pushes' ids from it (cluster/node_support).
std::uint64_t job_id_of(const std::string& fingerprint);

// The data-plane job id of a job's pushes: apart from every view's ring
// (ring_id_of), so that a push connection can never be taken for a ring's.
std::uint64_t push_job_id(const std::string& fingerprint);

}  // namespace troupe::net::push
