// actors/gradient_sink: the three ways an async gradient reaches the
// parameter server's shards (the data plane, the shards' cores, the shard
// actors) apply the same push alike, bit for bit, for a partition of
// several shards and for one whole shard (whose push is the gradient as it
// is); and a push to a shard that refuses it reaches `failed`, naming the
// shard, never `done`.
#include <gtest/gtest.h>

#include <caf/all.hpp>

#include <chrono>
#include <cstring>
#include <future>
#include <memory>
#include <string>
#include <vector>

#include "actors/gradient_sink.hpp"
#include "actors/messages.hpp"
#include "actors/ps/partition.hpp"
#include "actors/ps/shard.hpp"
#include "job/replica.hpp"  // configure_actor_system
#include "kernels/math/random.hpp"
#include "net/push/push_link.hpp"
#include "net/transport/socket.hpp"

namespace troupe::actors {
namespace {

using namespace std::chrono_literals;

constexpr std::int64_t kTotal = 96;

ps::ShardConfig shard_config(int index, std::int64_t size) {
  ps::ShardConfig c;
  c.index = index;
  c.size = size;
  c.optimizer.name = "adam";
  c.schedule = std::make_shared<const models::LrSchedule>("constant", 0.01f, 0);
  c.replicas = 1;
  return c;
}

Tensor gradient() {
  Tensor g = Tensor::empty({kTotal});
  for (std::int64_t i = 0; i < kTotal; ++i)
    g.f32()[i] =
        static_cast<float>(kernels::math::random_bits(5, static_cast<std::uint64_t>(i)) % 1000) / 500.0f - 1.0f;
  return g;
}

// Two layers, [0, 48) and [48, 96), on two shards; or the whole buffer.
std::shared_ptr<const ps::Partition> partition(int shards) {
  return std::make_shared<const ps::Partition>(shards == 1 ? ps::Partition::whole(kTotal)
                                                           : ps::Partition::make(kTotal, {{0, 48}, {48, 48}}, shards));
}

struct Outcome {
  bool done = false;
  std::string failure;
  Tensor target;
};

// Runs one push through `make` (a sink made inside an actor, as the device
// makes it) and waits for done or failed.
Outcome push_through(caf::actor_system& system, std::shared_ptr<const ps::Partition> part,
                     std::function<std::shared_ptr<GradientSink>(caf::event_based_actor*)> make) {
  auto result = std::make_shared<std::promise<Outcome>>();
  auto future = result->get_future();
  system.spawn([=](caf::event_based_actor* self) {
    auto sink = make(self);
    GradientSink::Push p;
    p.view = 0;
    p.rank = 0;
    p.clock = 1;
    const Tensor g = gradient();
    if (part->is_whole()) {
      p.packed = g;
    } else {
      p.packed = Tensor::empty({part->total()});
      part->pack_all(g, p.packed);
    }
    p.target = Tensor::zeros({kTotal});
    sink->push(
        p,
        [=](net::Clock::time_point, std::int64_t) {
          result->set_value({true, "", p.target});
        },
        [=](const std::string& why, bool) {
          result->set_value({false, why, p.target});
        });
  });
  if (future.wait_for(20s) != std::future_status::ready) return {false, "no answer within 20 s", Tensor()};
  return future.get();
}

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.numel() == b.numel() && std::memcmp(a.raw(), b.raw(), a.bytes()) == 0;
}

std::vector<std::shared_ptr<ps::ShardCore>> cores_for(const ps::Partition& part) {
  std::vector<std::shared_ptr<ps::ShardCore>> out;
  for (int i = 0; i < part.shards(); ++i) out.push_back(std::make_shared<ps::ShardCore>(shard_config(i, part.size(i))));
  return out;
}

TEST(GradientSink, TheDataPlaneTheCoresAndTheActorsApplyAPushAlike) {
  caf::actor_system_config cfg;
  configure_actor_system(cfg);
  caf::actor_system system{cfg};
  for (int shards : {2, 1}) {
    SCOPED_TRACE(std::to_string(shards) + " shard(s)");
    const auto part = partition(shards);

    // The shards' cores, on the device's thread.
    const auto cores = cores_for(*part);
    const Outcome by_cores = push_through(system, part, [&](caf::event_based_actor* self) {
      return make_gradient_sink(self, part, nullptr, cores, {}, 10s);
    });
    ASSERT_TRUE(by_cores.done) << by_cores.failure;

    // The shard actors, a request each.
    std::vector<ps::ps_actor_t> actors;
    for (int i = 0; i < part->shards(); ++i)
      actors.push_back(ps::spawn_shard(system, shard_config(i, part->size(i))).actor);
    const Outcome by_actors = push_through(system, part, [&](caf::event_based_actor* self) {
      return make_gradient_sink(self, part, nullptr, {}, actors, 10s);
    });
    ASSERT_TRUE(by_actors.done) << by_actors.failure;
    for (auto& a : actors) caf::anon_send_exit(a, caf::exit_reason::user_shutdown);

    // The data plane: a PushServer on loopback hosting fresh cores.
    const auto served = cores_for(*part);
    std::map<int, std::shared_ptr<ps::ShardCore>> by_index;
    std::map<int, std::int64_t> sizes;
    for (int i = 0; i < part->shards(); ++i) {
      by_index[i] = served[static_cast<std::size_t>(i)];
      sizes[i] = part->size(i);
    }
    net::push::PushServerConfig sc;
    std::uint16_t port = 0;
    sc.listen_fd = net::listen_tcp("127.0.0.1:0", &port);
    sc.job_id = 77;
    sc.shards = sizes;
    sc.apply = ps::shard_apply(by_index);
    net::push::PushServer server(std::move(sc));
    auto routes = std::make_shared<net::push::PushRoutes>();
    routes->addresses.assign(static_cast<std::size_t>(part->shards()), "127.0.0.1:" + std::to_string(server.port()));
    routes->job_id = 77;
    routes->connect_timeout = 10s;
    routes->timeout = 10s;
    const Outcome by_link = push_through(system, part, [&](caf::event_based_actor* self) {
      return make_gradient_sink(self, part, routes, {}, {}, 10s);
    });
    ASSERT_TRUE(by_link.done) << by_link.failure;
    routes->registry->abort("the test is over");

    // Adam's first step moved every parameter away from zero, alike.
    EXPECT_TRUE(same_bits(by_cores.target, by_actors.target));
    EXPECT_TRUE(same_bits(by_cores.target, by_link.target));
    EXPECT_NE(by_cores.target.f32()[0], 0.0f);
    EXPECT_NE(by_cores.target.f32()[kTotal - 1], 0.0f);
  }
}

TEST(GradientSink, ARefusedPushFailsNamingTheShardAndIsNeverDone) {
  caf::actor_system_config cfg;
  configure_actor_system(cfg);
  caf::actor_system system{cfg};
  const auto part = partition(2);
  auto cores = cores_for(*part);
  cores[1]->close("the job is over");
  const Outcome out = push_through(system, part, [&](caf::event_based_actor* self) {
    return make_gradient_sink(self, part, nullptr, cores, {}, 10s);
  });
  EXPECT_FALSE(out.done);
  EXPECT_NE(out.failure.find("pushing its gradient to the parameter server (shard 1): "), std::string::npos)
      << out.failure;
  EXPECT_NE(out.failure.find("the job is over"), std::string::npos) << out.failure;
}

TEST(GradientSink, ASinkIsChosenFromWhatTheDeviceWasGiven) {
  caf::actor_system_config cfg;
  configure_actor_system(cfg);
  caf::actor_system system{cfg};
  const auto part = partition(2);
  auto routes = std::make_shared<net::push::PushRoutes>();
  routes->addresses = {"127.0.0.1:9", "127.0.0.1:9"};
  std::promise<std::vector<std::string>> kinds;
  auto future = kinds.get_future();
  system.spawn([&](caf::event_based_actor* self) {
    std::vector<std::string> k;
    k.push_back(make_gradient_sink(self, part, routes, cores_for(*part), {}, 1s)->kind());
    k.push_back(make_gradient_sink(self, part, nullptr, cores_for(*part), {}, 1s)->kind());
    k.push_back(make_gradient_sink(self, part, nullptr, {}, {ps::ps_actor_t(), ps::ps_actor_t()}, 1s)->kind());
    try {
      make_gradient_sink(self, part, nullptr, {}, {ps::ps_actor_t()}, 1s);
      k.push_back("(one actor for two shards accepted)");
    } catch (const std::logic_error& e) {
      k.push_back(e.what());
    }
    kinds.set_value(k);
  });
  ASSERT_EQ(future.wait_for(10s), std::future_status::ready);
  const auto k = future.get();
  ASSERT_EQ(k.size(), 4u);
  EXPECT_EQ(k[0], "data plane");
  EXPECT_EQ(k[1], "cores");
  EXPECT_EQ(k[2], "actors");
  EXPECT_NE(k[3].find("1 parameter-server shards for a partition of 2"), std::string::npos) << k[3];
}

}  // namespace
}  // namespace troupe::actors
