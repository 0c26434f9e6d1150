// The device actor's in-memory rollback (elastic sync). A view change sets
// every survivor to the clock the slowest one reached; a survivor ahead by
// one step rolls that step back from the copy it kept. The case CI once
// hit: the replica completes step k (a peer's part of the ring arrived, the
// other survivor's did not), starts step k+1, and k+1's all-reduce fails.
// Its kept copy must still be the state before step k, not the state before
// k+1, or the new view cannot be formed ("cannot go back to step ...").
//
// Real parts: two replicas (data loader + device actor, spawned as a job
// spawns them) on the `local` collective; the test thread plays the
// coordinator (grants, reports) and aborts the group as the node does when
// a member is lost.
#include <gtest/gtest.h>

#include <caf/all.hpp>

#include "actors/messages.hpp"
#include "actors/replica.hpp"
#include "models/data/load.hpp"
#include "models/spec.hpp"
#include "net/collective/local.hpp"

namespace troupe::actors {
namespace {

using namespace std::chrono_literals;

struct Pair {
  caf::actor_system_config cfg;
  std::unique_ptr<caf::actor_system> system;
  std::vector<std::shared_ptr<net::Collective>> group;
  std::vector<ReplicaActors> replicas;

  Pair() {
    configure_actor_system(cfg);
    register_message_types(cfg);
    system = std::make_unique<caf::actor_system>(cfg);
    auto splits = data::load_dataset("linreg");
    auto train = std::make_shared<const data::Dataset>(splits.train);
    auto local = net::make_local_group(2, net::CollectiveOptions{});
    for (auto& c : local) group.push_back(std::shared_ptr<net::Collective>(std::move(c)));
    for (int rank = 0; rank < 2; ++rank) {
      ReplicaPlan p;
      p.rank = rank;
      p.world = 2;
      p.device = kernels::Device::cpu(0);
      p.train.batch = 8;
      p.train.seed = 3;
      p.train.lr = 0.05f;
      p.train.optimizer.name = "adam";  // optimizer state too must roll back
      p.spec = models::ModelSpec::parse("input 1\ndense units=1\n", "test");
      p.train_data = train;
      p.schedule = std::make_shared<const models::LrSchedule>("constant", p.train.lr, 0);
      p.collective = group[static_cast<std::size_t>(rank)];
      p.timeout = 20s;
      p.elastic = true;
      replicas.push_back(spawn_replica(*system, p));
    }
  }
  ~Pair() {
    for (auto& r : replicas) {
      caf::anon_send_exit(r.device, caf::exit_reason::user_shutdown);
      caf::anon_send_exit(r.loader, caf::exit_reason::user_shutdown);
    }
  }
  std::string digest(int rank) {
    caf::scoped_actor self{*system};
    std::string out;
    self->request(replicas[static_cast<std::size_t>(rank)].device, 10s, digest_atom::value)
        .receive([&](const std::string& d) { out = d; },
                 [&](caf::error& e) { ADD_FAILURE() << "digest: " << system->render(e); });
    return out;
  }
};

Grant grant(std::int64_t up_to) {
  Grant g;
  g.up_to = up_to;
  g.mode = Mode::parse("sync");
  return g;
}

TEST(DeviceRollback, AReplicaThatCompletedStepKAndFailedInKPlus1GoesBackToK) {
  Pair p;
  const std::string before = p.digest(0);
  ASSERT_FALSE(before.empty());
  caf::scoped_actor coordinator{*p.system};
  // Step 1 on both replicas: the all-reduce completes.
  for (auto& r : p.replicas) coordinator->send(r.device, grant_atom::value, grant(1));
  int reports = 0;
  coordinator->receive_for(reports, 2)(
      [&](step_done_atom, const StepReport& r) { EXPECT_EQ(r.clock, 1) << "rank " << r.rank; },
      caf::after(20s) >> [&] { FAIL() << "step 1 did not complete"; });
  const std::string after_step1 = p.digest(0);
  EXPECT_NE(after_step1, before);
  EXPECT_EQ(p.digest(1), after_step1);
  // Step 2 only on replica 0; replica 1 is "lost": the group is aborted.
  coordinator->send(p.replicas[0].device, grant_atom::value, grant(2));
  std::this_thread::sleep_for(200ms);  // replica 0 is waiting in step 2's all-reduce
  p.group[1]->abort("replica 1 was lost");
  std::int64_t aborted_at = -1;
  coordinator->receive([&](step_aborted_atom, std::uint32_t, int rank, std::int64_t clock, const std::string&) {
    EXPECT_EQ(rank, 0);
    aborted_at = clock;
  },
                       caf::after(20s) >> [&] { FAIL() << "replica 0 did not report the aborted step"; });
  ASSERT_EQ(aborted_at, 1);
  // The new view starts at clock 0 (a survivor that never completed step 1
  // sets it): replica 0 must go back to the state before step 1, bitwise.
  auto fresh = net::make_local_group(1, net::CollectiveOptions{});
  ViewAssignment a;
  a.view = 1;
  a.rank = 0;
  a.world = 1;
  a.batch_size = 8;
  a.clock = 0;
  a.collective = std::shared_ptr<net::Collective>(std::move(fresh[0]));
  bool ok = false;
  coordinator->request(p.replicas[0].device, 20s, reconfig_atom::value, a)
      .receive([&](caf::ok_atom) { ok = true; },
               [&](caf::error& e) { ADD_FAILURE() << "reconfig: " << p.system->render(e); });
  ASSERT_TRUE(ok);
  EXPECT_EQ(p.digest(0), before) << "the rolled-back state is not the state before step 1";
}

}  // namespace
}  // namespace troupe::actors
