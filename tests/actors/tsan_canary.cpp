// The ThreadSanitizer build's canary (built only with -DTROUPE_SANITIZE=thread;
// tests/CMakeLists.txt, docs/SANITIZERS.md). TSan over the actor tests is
// only worth something when it sees CAF's happens-before: with Debian's
// uninstrumented libcaf it reports every message handed between actors (a
// false race), and a CAF whose atomics it cannot see could as well hide a
// real one. So two runs of real actors, each with a known answer:
//
//   tsan_canary race      two actors, each on a thread of its own (detached,
//                         so the race happens in every run, not only when
//                         the scheduler puts them on two workers), meet, and
//                         bump one global int unsynchronised: a real data
//                         race, which TSan must report (exit 66)
//   tsan_canary handoff   the main thread fills a buffer and hands it to an
//                         actor in a message, 200 times, the actor writes
//                         into it and answers: no race, and no report
#include <caf/all.hpp>

#include <atomic>
#include <cstring>
#include <iostream>
#include <thread>
#include <vector>

namespace {

int unguarded_counter = 0;  // written by two actors at once in `race`
// Both bumpers wait here until both have arrived, so that their writes
// overlap in every run. Relaxed atomics order nothing for TSan: without
// this, CAF's own atomics (reference counts, the running-actor count) can
// order one actor's whole run before the other's, and TSan rightly sees no
// race in that run.
std::atomic<int> arrived{0};

caf::behavior bumper(caf::event_based_actor*) {
  return {[](int x) {
    arrived.fetch_add(1, std::memory_order_relaxed);
    while (arrived.load(std::memory_order_relaxed) < 2) std::this_thread::yield();
    unguarded_counter += x;
    return unguarded_counter;
  }};
}

caf::behavior summer(caf::event_based_actor*) {
  return {[](std::vector<float>& v) {
    float sum = 0;
    for (float f : v) sum += f;
    v[0] = sum;  // the actor owns the buffer now: writing it is no race
    return v[0];
  }};
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode != "race" && mode != "handoff") {
    std::cerr << "usage: tsan_canary race|handoff\n";
    return 2;
  }
  caf::actor_system_config cfg;
  caf::actor_system sys{cfg};
  caf::scoped_actor self{sys};
  bool ok = true;
  if (mode == "race") {
    auto a = sys.spawn<caf::detached>(bumper);
    auto b = sys.spawn<caf::detached>(bumper);
    caf::anon_send(a, 1);
    caf::anon_send(b, 1);
    for (auto& who : {a, b})
      self->request(who, std::chrono::seconds(30), 0).receive([](int) {}, [&](caf::error&) { ok = false; });
  } else {
    auto s = sys.spawn(summer);
    for (int i = 0; i < 200 && ok; ++i) {
      std::vector<float> v(1000, 1.0f);
      self->request(s, std::chrono::seconds(30), std::move(v))
          .receive([&](float sum) { ok = sum == 1000.0f; }, [&](caf::error&) { ok = false; });
    }
  }
  std::cout << "tsan_canary " << mode << (ok ? ": done" : ": an actor did not answer") << "\n";
  return ok ? 0 : 1;
}
