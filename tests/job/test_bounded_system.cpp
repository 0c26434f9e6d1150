// run_with_bounded_shutdown (job/replica.hpp): ~actor_system waits
// without a deadline for every detached actor to be destroyed; a finished
// actor that something still references would hold the process forever.
// The caller gets the body's outcome at once and waits at most the limit
// for the shutdown; past it the system is left behind, said and counted.
// Run in a child process (the abandoned system's threads stay blocked until
// the process ends), which exits the way troupe's CLI does.
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <caf/all.hpp>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>

#include "job/replica.hpp"

namespace troupe::actors {
namespace {

using namespace std::chrono_literals;

caf::behavior idle(caf::event_based_actor*) {
  return {[](int x) { return x; }};
}

struct Child {
  int status;
  double seconds;
};

// In a child: a job-like body with a detached actor that ends; with
// `keep_reference` something keeps it referenced forever. The child exits 0
// when the body's value arrived and the system was (or was not) left
// behind as expected.
Child child(bool keep_reference, bool body_throws, std::chrono::milliseconds limit) {
  std::fflush(nullptr);
  const auto start = std::chrono::steady_clock::now();
  const pid_t pid = ::fork();
  if (pid == 0) {
    int value = 0;
    bool caught = false;
    try {
      run_with_bounded_shutdown(
          [&](ActorSystemSlot& slot) {
            caf::actor_system& system = slot.create([](caf::actor_system_config& cfg) { configure_actor_system(cfg); });
            auto actor = system.spawn<caf::detached>(idle);
            caf::scoped_actor self{system};
            self->request(actor, 10s, 41).receive([&](int x) { value = x + 1; }, [](caf::error&) {});
            if (keep_reference) new caf::actor(actor);  // the reference CAF 0.17 sometimes keeps: never released
            self->send_exit(actor, caf::exit_reason::user_shutdown);
            if (body_throws) throw std::runtime_error("the body failed");
          },
          limit);
    } catch (const std::runtime_error& e) {
      caught = std::string(e.what()) == "the body failed";
    }
    const bool ok = value == 42 && caught == body_throws && abandoned_actor_systems() == (keep_reference ? 1 : 0);
    std::fflush(nullptr);
    std::_Exit(ok ? 0 : 3);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return {WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status), seconds};
}

TEST(BoundedShutdown, AFinishedActorStillReferencedNoLongerHoldsTheProcess) {
  const Child c = child(true, false, 1s);
  EXPECT_EQ(c.status, 0) << "no value, or the system was not counted as left behind";
  EXPECT_GE(c.seconds, 0.9);   // it waited its limit...
  EXPECT_LT(c.seconds, 20.0);  // ...and not forever (an unbounded ~actor_system never returns here)
}

TEST(BoundedShutdown, ANormalShutdownIsQuickAndNotLeftBehind) {
  const Child c = child(false, false, 30s);
  EXPECT_EQ(c.status, 0);
  EXPECT_LT(c.seconds, 10.0);  // far below the 30 s limit
}

TEST(BoundedShutdown, TheBodysExceptionReachesTheCallerAfterABoundedShutdown) {
  const Child c = child(true, true, 1s);
  EXPECT_EQ(c.status, 0) << "the exception was lost, or the system not counted";
  EXPECT_LT(c.seconds, 20.0);
}

}  // namespace
}  // namespace troupe::actors
