#include "actors/gradient_sink.hpp"

#include <stdexcept>
#include <utility>

#include "actors/messages.hpp"
#include "net/push/push_link.hpp"

namespace troupe::actors {

namespace {

// This step's push of shard i's part: a view of the packed gradient.
GradientPush part_push(const GradientSink::Push& p, const ps::Partition& partition, int i) {
  GradientPush push;
  push.view = p.view;
  push.rank = p.rank;
  push.clock = p.clock;
  push.gradient = partition.part(i, p.packed);
  return push;
}

// Why a push to the shards in process failed, naming the shard when there
// are several.
std::string push_failure(const ps::Partition& partition, int i, const std::string& why) {
  return "pushing its gradient to the parameter server" +
         (partition.shards() > 1 ? " (shard " + std::to_string(i) + ")" : std::string()) + ": " + why;
}

class DataPlaneSink final : public GradientSink {
 public:
  DataPlaneSink(std::shared_ptr<const ps::Partition> partition, std::shared_ptr<const net::push::PushRoutes> routes)
      : GradientSink(std::move(partition)), routes_(std::move(routes)) {}
  const char* kind() const override { return "data plane"; }

  void push(const Push& p, Done done, Failed failed) override {
    const ps::Partition& partition = *partition_;
    // A whole buffer in one shard: the answer goes straight into the
    // parameters; else into `fresh_` (packed), unpacked after.
    const bool whole = partition.is_whole();
    if (!whole && (!fresh_.defined() || fresh_.raw() == nullptr)) fresh_ = Tensor::empty({partition.total()});
    int shard = -1;
    std::int64_t staleness = -1;
    try {
      for (shard = 0; shard < partition.shards(); ++shard) {
        const Tensor part = partition.part(shard, p.packed);
        client_of(shard).send(shard, p.view, p.rank, p.clock, part.f32(), part.numel(), last_to_its_server(shard));
      }
      for (shard = 0; shard < partition.shards(); ++shard) {
        Tensor out = whole ? p.target : partition.part(shard, fresh_);
        const std::int64_t seen = client_of(shard).receive(shard, out.f32(), out.numel());
        if (shard == 0) staleness = seen;
      }
    } catch (const std::exception& e) {
      // The link is unusable after a failure: the next push (a later view)
      // connects afresh.
      if (shard >= 0 && shard < partition.shards())
        clients_.erase(routes_->addresses.at(static_cast<std::size_t>(shard)));
      // In a cluster a ps task may be lost or its shards placed anew: the
      // step is not done, and the coordinator restores a consistent state
      // (some shards may have applied this push's part and others not).
      failed(e.what(), true);
      return;
    }
    const auto answered = net::Clock::now();
    if (!whole)
      for (int i = 0; i < partition.shards(); ++i) partition.unpack(i, partition.part(i, fresh_), p.target);
    done(answered, staleness);
  }

 private:
  net::push::PushClient& client_of(int shard) {
    const std::string& address = routes_->addresses.at(static_cast<std::size_t>(shard));
    auto& c = clients_[address];
    if (!c) {
      // The node aborted these routes (a ps task was lost): no new link to
      // an address that may be gone (a connect retries for seconds).
      const std::string aborted = routes_->registry->aborted();
      if (!aborted.empty()) throw net::push::PushError("push to " + address + ": " + aborted);
      net::push::PushClientConfig pc;
      pc.address = address;
      pc.job_id = routes_->job_id;
      pc.connect_timeout = routes_->connect_timeout;
      pc.timeout = routes_->timeout;
      pc.authenticate = routes_->authenticate;
      pc.retry_refused = false;  // a ps task that refuses is gone (net/push/push_link.hpp)
      pc.answer_poll = net::push::push_poll_from_env();
      c = std::make_shared<net::push::PushClient>(pc);
      routes_->registry->add(c);
    }
    return *c;
  }
  // A server's last part says so: that server then answers it on its
  // reading thread (net/push/push_link.hpp), a thread hand-off less per push.
  bool last_to_its_server(int shard) const {
    for (int j = shard + 1; j < partition_->shards(); ++j)
      if (routes_->addresses.at(static_cast<std::size_t>(j)) == routes_->addresses.at(static_cast<std::size_t>(shard)))
        return false;
    return true;
  }

  std::shared_ptr<const net::push::PushRoutes> routes_;
  std::map<std::string, std::shared_ptr<net::push::PushClient>> clients_;  // by server address, made on first use
  Tensor fresh_;  // the answers, packed, when the partition is not whole
};

class CoreSink final : public GradientSink {
 public:
  CoreSink(std::shared_ptr<const ps::Partition> partition, std::vector<std::shared_ptr<ps::ShardCore>> cores)
      : GradientSink(std::move(partition)), cores_(std::move(cores)) {}
  const char* kind() const override { return "cores"; }

  void push(const Push& p, Done done, Failed failed) override {
    const ps::Partition& partition = *partition_;
    for (int i = 0; i < partition.shards(); ++i) {
      try {
        cores_.at(static_cast<std::size_t>(i))->apply(part_push(p, partition, i), [&](const Tensor& fresh) {
          partition.unpack(i, fresh, p.target);
        });
      } catch (const std::exception& e) {
        failed(push_failure(partition, i, e.what()), false);
        return;
      }
    }
    done(net::Clock::now(), -1);
  }

 private:
  std::vector<std::shared_ptr<ps::ShardCore>> cores_;
};

// `Self`: the device's typed pointer, or an event-based actor's (tests).
template <class Self>
class ActorSink final : public GradientSink, public std::enable_shared_from_this<ActorSink<Self>> {
 public:
  ActorSink(Self self, std::shared_ptr<const ps::Partition> partition, std::vector<ps::ps_actor_t> shards,
            std::chrono::milliseconds timeout)
      : GradientSink(std::move(partition)), self_(self), shards_(std::move(shards)), timeout_(timeout) {}
  const char* kind() const override { return "actors"; }

  void push(const Push& p, Done done, Failed failed) override {
    const int n = partition_->shards();
    auto left = std::make_shared<int>(n);
    auto over = std::make_shared<bool>(false);  // failed once: the other answers are dropped
    auto keep = this->shared_from_this();       // the handlers outlive a view change
    for (int i = 0; i < n; ++i) {
      self_->request(shards_.at(static_cast<std::size_t>(i)), timeout_, push_atom::value, part_push(p, *partition_, i))
          .await(
              [=](const Tensor& fresh) {
                if (*over) return;
                const auto answered = net::Clock::now();
                keep->partition_->unpack(i, fresh, p.target);
                if (--*left == 0) done(answered, -1);  // every shard has applied its part
              },
              [=](caf::error& e) {
                if (*over) return;
                *over = true;
                failed(push_failure(*keep->partition_, i, keep->self_->system().render(e)), false);
              });
    }
  }

 private:
  Self self_;
  std::vector<ps::ps_actor_t> shards_;
  std::chrono::milliseconds timeout_;
};

template <class Self>
std::shared_ptr<GradientSink> make_sink(Self self, std::shared_ptr<const ps::Partition> partition,
                                        std::shared_ptr<const net::push::PushRoutes> routes,
                                        std::vector<std::shared_ptr<ps::ShardCore>> cores,
                                        std::vector<ps::ps_actor_t> shards, std::chrono::milliseconds timeout) {
  if (!partition) throw std::logic_error("a gradient sink needs the shards' partition");
  if (routes) return std::make_shared<DataPlaneSink>(std::move(partition), std::move(routes));
  if (!cores.empty()) {
    if (static_cast<int>(cores.size()) != partition->shards())
      throw std::logic_error("the shards' cores do not match the partition");
    return std::make_shared<CoreSink>(std::move(partition), std::move(cores));
  }
  if (static_cast<int>(shards.size()) != partition->shards())
    throw std::logic_error("the device has " + std::to_string(shards.size()) +
                           " parameter-server shards for a partition of " + std::to_string(partition->shards()));
  return std::make_shared<ActorSink<Self>>(self, std::move(partition), std::move(shards), timeout);
}

}  // namespace

std::shared_ptr<GradientSink> make_gradient_sink(device_actor_t::pointer self,
                                                 std::shared_ptr<const ps::Partition> partition,
                                                 std::shared_ptr<const net::push::PushRoutes> routes,
                                                 std::vector<std::shared_ptr<ps::ShardCore>> cores,
                                                 std::vector<ps::ps_actor_t> shards,
                                                 std::chrono::milliseconds timeout) {
  return make_sink(self, std::move(partition), std::move(routes), std::move(cores), std::move(shards), timeout);
}

std::shared_ptr<GradientSink> make_gradient_sink(caf::event_based_actor* self,
                                                 std::shared_ptr<const ps::Partition> partition,
                                                 std::shared_ptr<const net::push::PushRoutes> routes,
                                                 std::vector<std::shared_ptr<ps::ShardCore>> cores,
                                                 std::vector<ps::ps_actor_t> shards,
                                                 std::chrono::milliseconds timeout) {
  return make_sink(self, std::move(partition), std::move(routes), std::move(cores), std::move(shards), timeout);
}

}  // namespace troupe::actors
