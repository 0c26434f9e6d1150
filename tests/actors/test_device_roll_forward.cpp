// The device actor's side of the roll forward (elastic sync;
// actors/coordinator/view_start.hpp). A sync step whose all-reduce fails applies
// nothing: the replica stays bitwise at the last step it completed, at its
// clock. A view then starts at the newest clock a survivor reached; a
// replica a step behind takes that clock and the state of one that is
// there, and both go on bitwise identical. A replica ahead of the view's
// clock is refused (that would mean replicas that differ).
//
// Real parts: two replicas (data loader + device actor, spawned as a job
// spawns them) on the `local` collective; the test thread plays the
// coordinator (grants, reports) and aborts the group as the node does when
// a member is lost.
#include <gtest/gtest.h>

#include <caf/all.hpp>

#include "actors/messages.hpp"
#include "job/replica.hpp"
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

ViewAssignment view(std::uint32_t number, int rank, int world, std::int64_t clock,
                    std::shared_ptr<net::Collective> collective) {
  ViewAssignment a;
  a.view = number;
  a.rank = rank;
  a.world = world;
  a.batch_size = 8;
  a.clock = clock;
  a.collective = std::move(collective);
  return a;
}

bool enter(caf::scoped_actor& coordinator, Pair& p, int replica, const ViewAssignment& a,
           std::string* error = nullptr) {
  bool ok = false;
  coordinator->request(p.replicas[static_cast<std::size_t>(replica)].device, 20s, reconfig_atom::value, a)
      .receive([&](caf::ok_atom) { ok = true; },
               [&](caf::error& e) {
                 if (error) *error = p.system->render(e);
               });
  return ok;
}

TEST(DeviceRollForward, AFailedStepAppliesNothingAndABehindReplicaTakesTheNewerState) {
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
  // Step 2 only on replica 0; replica 1 is "lost": the group is aborted
  // while replica 0 waits in step 2's all-reduce.
  coordinator->send(p.replicas[0].device, grant_atom::value, grant(2));
  std::this_thread::sleep_for(200ms);
  p.group[1]->abort("replica 1 was lost");
  std::int64_t aborted_at = -1;
  coordinator->receive(
      [&](step_aborted_atom, std::uint32_t, int rank, std::int64_t clock, const std::string&) {
        EXPECT_EQ(rank, 0);
        aborted_at = clock;
      },
      caf::after(20s) >> [&] { FAIL() << "replica 0 did not report the aborted step"; });
  ASSERT_EQ(aborted_at, 1);
  EXPECT_EQ(p.digest(0), after_step1) << "the failed step changed the replica";

  // Replica 1 trains step 2 alone (a view of one), so it is a step ahead:
  // what a survivor whose all-reduce completed looks like.
  auto solo = net::make_local_group(1, net::CollectiveOptions{});
  ASSERT_TRUE(enter(coordinator, p, 1, view(1, 0, 1, 1, std::shared_ptr<net::Collective>(std::move(solo[0])))));
  Grant g = grant(2);
  g.view = 1;
  coordinator->send(p.replicas[1].device, grant_atom::value, g);
  coordinator->receive([&](step_done_atom, const StepReport& r) { EXPECT_EQ(r.clock, 2); },
                       caf::after(20s) >> [&] { FAIL() << "replica 1's step 2 did not complete"; });
  const std::string ahead = p.digest(1);
  EXPECT_NE(ahead, after_step1);

  // View 2 starts at step 2. Replica 1 cannot be told to go back to step 1
  // (nothing to roll back to: refused, never silently kept).
  auto pair = net::make_local_group(2, net::CollectiveOptions{});
  std::vector<std::shared_ptr<net::Collective>> group;
  for (auto& c : pair) group.push_back(std::shared_ptr<net::Collective>(std::move(c)));
  std::string error;
  EXPECT_FALSE(enter(coordinator, p, 1, view(2, 1, 2, 1, group[1]), &error));
  EXPECT_NE(error.find("past step 1"), std::string::npos) << error;
  // Both enter at step 2; replica 0, behind, takes replica 1's state.
  ASSERT_TRUE(enter(coordinator, p, 0, view(3, 0, 2, 2, group[0])));
  ASSERT_TRUE(enter(coordinator, p, 1, view(3, 1, 2, 2, group[1])));
  ReplicaState state;
  coordinator->request(p.replicas[1].device, 20s, get_state_atom::value)
      .receive([&](ReplicaState& s) { state = std::move(s); }, [&](caf::error& e) { FAIL() << p.system->render(e); });
  coordinator->request(p.replicas[0].device, 20s, set_state_atom::value, state)
      .receive([](caf::ok_atom) {}, [&](caf::error& e) { FAIL() << p.system->render(e); });
  EXPECT_EQ(p.digest(0), ahead);
  // Step 3 together: still bitwise identical, both at clock 3.
  g = grant(3);
  g.view = 3;
  for (auto& r : p.replicas) coordinator->send(r.device, grant_atom::value, g);
  reports = 0;
  coordinator->receive_for(reports, 2)(
      [&](step_done_atom, const StepReport& r) { EXPECT_EQ(r.clock, 3) << "rank " << r.rank; },
      caf::after(20s) >> [&] { FAIL() << "step 3 did not complete"; });
  EXPECT_NE(p.digest(0), ahead);
  EXPECT_EQ(p.digest(0), p.digest(1));
}

}  // namespace
}  // namespace troupe::actors
