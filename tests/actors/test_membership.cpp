// actors/membership: a node's role is what its join request says, never
// read from its name: a ps task the listener hears as one whatever it is
// called, a worker named like a ps task stays a worker, and a role there is
// not is refused with the reason. Through the real membership actor, its
// typed interface and the listener's (ready, ReadyNode).
#include <gtest/gtest.h>

#include <caf/all.hpp>

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include "actors/membership.hpp"
#include "actors/messages.hpp"
#include "job/replica.hpp"  // configure_actor_system
#include "kernels/config.hpp"

namespace troupe::actors {
namespace {

using namespace std::chrono_literals;

struct Joined {
  bool admitted = false;
  std::int32_t index = -1;
  std::string text;
};

Joined join(caf::scoped_actor& node, const membership_actor_t& membership, const std::string& name,
            const std::string& role) {
  Joined out;
  node->request(membership, 5s, join_atom::value, name, std::string(TROUPE_VERSION), std::string(), role)
      .receive(
          [&](bool admitted, std::int32_t index, const std::string& text) {
            out = Joined{admitted, index, text};
          },
          [&](caf::error& e) { out.text = "error: " + node->system().render(e); });
  return out;
}

TEST(Membership, ANodesRoleIsWhatItsJoinSaysNotItsName) {
  caf::actor_system_config cfg;
  configure_actor_system(cfg);
  caf::actor_system system{cfg};
  caf::scoped_actor listener{system};
  MembershipState init;
  init.fingerprint = "f";
  init.job_text = "model = \"mlp\"\n";
  init.listener = caf::actor_cast<caf::actor>(listener);
  // The actor logs from its own thread, and may still log (a member's
  // scoped actor going down) while this test's locals are destroyed: the
  // lines live in a shared, locked record, not in a local.
  struct Log {
    std::mutex mutex;
    std::vector<std::string> lines;
  };
  auto log = std::make_shared<Log>();
  init.log = [log](const std::string& line) {
    std::lock_guard<std::mutex> lock(log->mutex);
    log->lines.push_back(line);
  };
  init.started = std::make_shared<std::atomic<bool>>(false);
  init.gone = std::make_shared<GoneNodes>();
  auto membership = system.spawn(membership_actor, init);

  caf::scoped_actor a{system}, b{system}, c{system};
  const Joined ps = join(a, membership, "shards/host-1/pid 7", "ps-task");
  ASSERT_TRUE(ps.admitted) << ps.text;
  const Joined worker = join(b, membership, "ps/host-2/pid 8", "worker");  // named like a ps task
  ASSERT_TRUE(worker.admitted) << worker.text;
  const Joined chief = join(c, membership, "worker/host-3/pid 9", "chief");
  EXPECT_FALSE(chief.admitted);
  EXPECT_EQ(chief.text, "unknown node role 'chief'; a node is a worker or a ps-task");

  // Ready: the listener hears each with the role it joined as.
  for (auto* node : {&a, &b}) {
    const std::int32_t index = node == &a ? ps.index : worker.index;
    const std::vector<std::string> devices =
        node == &a ? std::vector<std::string>{} : std::vector<std::string>{"cpu:0"};
    (*node)
        ->request(membership, 5s, ready_atom::value, index, std::string("127.0.0.1:1"), devices, std::string())
        .receive([](caf::ok_atom) {}, [&](caf::error& e) { FAIL() << system.render(e); });
  }
  std::vector<ReadyNode> heard;
  for (int i = 0; i < 2; ++i)
    listener->receive([&](ready_atom, const ReadyNode& n) { heard.push_back(n); },
                      caf::after(5s) >> [&] { FAIL() << "the listener heard no ready"; });
  ASSERT_EQ(heard.size(), 2u);
  EXPECT_EQ(heard[0].name, "shards/host-1/pid 7");
  EXPECT_EQ(heard[0].role, NodeRole::ps_task);
  EXPECT_EQ(heard[1].name, "ps/host-2/pid 8");
  EXPECT_EQ(heard[1].role, NodeRole::worker);
  EXPECT_EQ(heard[1].devices, std::vector<std::string>{"cpu:0"});
  bool refused_logged = false;
  {
    std::lock_guard<std::mutex> lock(log->mutex);
    for (const auto& line : log->lines)
      refused_logged = refused_logged || line.find("refused worker/host-3/pid 9") == 0;
  }
  EXPECT_TRUE(refused_logged);
  caf::anon_send_exit(membership, caf::exit_reason::user_shutdown);
}

TEST(Membership, RolesReadBackFromTheirText) {
  EXPECT_EQ(parse_role(role_text(NodeRole::worker)), NodeRole::worker);
  EXPECT_EQ(parse_role(role_text(NodeRole::ps_task)), NodeRole::ps_task);
  EXPECT_THROW(parse_role("ps"), std::invalid_argument);
}

}  // namespace
}  // namespace troupe::actors
