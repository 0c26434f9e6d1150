#include "net/push/push_routes.hpp"

#include <algorithm>
#include <string>

#include "net/push/push_link.hpp"

namespace troupe::net::push {

void PushClientRegistry::add(const std::shared_ptr<PushClient>& client) {
  std::string why;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    clients_.erase(std::remove_if(clients_.begin(), clients_.end(), [](const auto& w) { return w.expired(); }),
                   clients_.end());
    clients_.push_back(client);
    why = aborted_;
  }
  if (!why.empty()) client->abort(why);
}

void PushClientRegistry::abort(const std::string& why) {
  std::vector<std::shared_ptr<PushClient>> alive;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (aborted_.empty()) aborted_ = why.empty() ? std::string("aborted") : why;
    for (auto& w : clients_)
      if (auto c = w.lock()) alive.push_back(std::move(c));
  }
  for (auto& c : alive) c->abort(why);
}

std::string PushClientRegistry::aborted() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return aborted_;
}

std::uint64_t job_id_of(const std::string& fingerprint) { return std::stoull(fingerprint.substr(0, 15), nullptr, 16); }

std::uint64_t push_job_id(const std::string& fingerprint) {
  // "ps push" in ASCII: never a ring's id (ring_id_of mixes the view in by
  // multiplication with an odd constant; this one is a fixed xor).
  return job_id_of(fingerprint) ^ 0x7073207075736821ULL;
}

}  // namespace troupe::net::push
