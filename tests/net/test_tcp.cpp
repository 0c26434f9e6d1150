// The tcp collective backend on real loopback sockets: ranks as threads of
// this process, checked against references on random data; then ranks as
// forked processes, including one killed with SIGKILL mid-allreduce.
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <iostream>
#include <mutex>
#include <sstream>

#include "tests/net/test_tcp_support.hpp"

namespace troupe::net::testing {
namespace {

// Sum (or mean) over ranks of random_values(n, seed + r), element by element.
std::vector<float> reference(std::int64_t n, int world, ReduceOp op, unsigned seed) {
  std::vector<double> acc(static_cast<std::size_t>(n), 0.0);
  for (int r = 0; r < world; ++r) {
    const auto v = random_values(n, seed + static_cast<unsigned>(r));
    for (std::size_t i = 0; i < acc.size(); ++i) acc[i] += v[i];
  }
  std::vector<float> out(acc.size());
  for (std::size_t i = 0; i < acc.size(); ++i)
    out[i] = static_cast<float>(op == ReduceOp::mean ? acc[i] / world : acc[i]);
  return out;
}

struct AllreduceCase {
  int world;
  std::int64_t n;
  std::size_t chunk_bytes;
};

class TcpAllreduce : public ::testing::TestWithParam<AllreduceCase> {};

TEST_P(TcpAllreduce, SumAndMeanMatchTheReferenceAndAgreeBitwise) {
  const auto p = GetParam();
  auto groups = thread_ring(p.world, 10s, p.chunk_bytes);
  for (ReduceOp op : {ReduceOp::sum, ReduceOp::mean}) {
    const unsigned seed = 100 + static_cast<unsigned>(op == ReduceOp::mean);
    const auto want = reference(p.n, p.world, op, seed);
    std::vector<std::vector<float>> got(static_cast<std::size_t>(p.world));
    run_ranks(groups, [&](int r, Collective& c) {
      Tensor t = tensor_of(random_values(p.n, seed + static_cast<unsigned>(r)));
      c.allreduce(t, op)->wait(Clock::now() + 30s);
      got[static_cast<std::size_t>(r)] = t.to_vector();
    });
    for (int r = 0; r < p.world; ++r) {
      const auto& g = got[static_cast<std::size_t>(r)];
      ASSERT_EQ(g.size(), want.size());
      EXPECT_LT(max_diff(g, want), 1e-5) << "rank " << r << " " << to_string(op);
      EXPECT_EQ(0, std::memcmp(g.data(), got[0].data(), g.size() * sizeof(float)))
          << "rank " << r << " differs bitwise from rank 0 (" << to_string(op) << ")";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Sizes, TcpAllreduce,
                         ::testing::Values(AllreduceCase{2, 1, 1 << 20}, AllreduceCase{2, 7, 1 << 20},
                                           AllreduceCase{2, 1000, 1 << 20}, AllreduceCase{2, 1000003, 1 << 20},
                                           AllreduceCase{2, 1000003, 4096}, AllreduceCase{3, 1, 1 << 20},
                                           AllreduceCase{3, 7, 1 << 20}, AllreduceCase{3, 1000, 64},
                                           AllreduceCase{3, 1000003, 1 << 20}, AllreduceCase{3, 3 << 20, 1 << 20}),
                         [](const auto& param_info) {
                           return "w" + std::to_string(param_info.param.world) + "_n" +
                                  std::to_string(param_info.param.n) + "_chunk" +
                                  std::to_string(param_info.param.chunk_bytes);
                         });

TEST(Tcp, FiftyBackToBackAllreducesAreExact) {
  auto groups = thread_ring(3);
  run_ranks(groups, [&](int r, Collective& c) {
    for (int k = 0; k < 50; ++k) {
      // Small integers: every order of summation gives the same floats.
      std::vector<float> v(1000 + static_cast<std::size_t>(k) * 97);
      for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>((i + static_cast<std::size_t>(k * r)) % 17);
      Tensor t = tensor_of(v);
      c.allreduce(t, k % 2 ? ReduceOp::mean : ReduceOp::sum)->wait(Clock::now() + 10s);
      const auto got = t.to_vector();
      for (std::size_t i = 0; i < v.size(); ++i) {
        float want = 0;
        for (int q = 0; q < 3; ++q) want += static_cast<float>((i + static_cast<std::size_t>(k * q)) % 17);
        if (k % 2) want /= 3.0f;
        ASSERT_NEAR(got[i], want, 1e-5) << "op " << k << " element " << i;
      }
    }
  });
}

TEST(Tcp, BroadcastFromEveryRoot) {
  for (int world : {2, 3}) {
    auto groups = thread_ring(world, 10s, 4096);
    for (int root = 0; root < world; ++root) {
      const auto want = random_values(100003, 7 + static_cast<unsigned>(root));
      run_ranks(groups, [&](int r, Collective& c) {
        Tensor t = r == root ? tensor_of(want) : Tensor::zeros(Shape{100003});
        c.broadcast(t, root)->wait(Clock::now() + 10s);
        EXPECT_EQ(t.to_vector(), want) << "world " << world << " root " << root << " rank " << r;
      });
    }
  }
}

TEST(Tcp, AllgatherAndReduceScatter) {
  for (int world : {2, 3}) {
    auto groups = thread_ring(world, 10s, 4096);
    const std::int64_t each = 10007;
    run_ranks(groups, [&](int r, Collective& c) {
      const auto mine = random_values(each, 50 + static_cast<unsigned>(r));
      Tensor out = Tensor::zeros(Shape{each * world});
      c.allgather(tensor_of(mine), out)->wait(Clock::now() + 10s);
      const auto got = out.to_vector();
      for (int q = 0; q < world; ++q) {
        const auto theirs = random_values(each, 50 + static_cast<unsigned>(q));
        EXPECT_TRUE(std::equal(theirs.begin(), theirs.end(), got.begin() + q * each)) << "chunk " << q;
      }
      // reduce_scatter, with the output in place (this rank's chunk of the input).
      const auto input_values = random_values(each * world, 60 + static_cast<unsigned>(r));
      Tensor input = tensor_of(input_values);
      Tensor output = input.slice(r * each, Shape{each});
      c.reduce_scatter(input, output, ReduceOp::mean)->wait(Clock::now() + 10s);
      const auto want = reference(each * world, world, ReduceOp::mean, 60);
      const auto reduced = output.to_vector();
      EXPECT_LT(max_diff(reduced, std::vector<float>(want.begin() + r * each, want.begin() + (r + 1) * each)), 1e-5);
    });
  }
}

TEST(Tcp, SendRecvAlongTheRingAndBarrier) {
  auto groups = thread_ring(3, 10s, 4096);
  const auto payload = random_values(30001, 3);
  run_ranks(groups, [&](int r, Collective& c) {
    c.barrier()->wait(Clock::now() + 10s);
    // Each rank sends to the next and receives from the previous.
    Tensor in = Tensor::zeros(Shape{30001});
    if (r == 0) {
      c.send(tensor_of(payload), 1, 5)->wait(Clock::now() + 10s);
      c.recv(in, 2, 6)->wait(Clock::now() + 10s);
    } else {
      c.recv(in, r - 1, r == 1 ? 5 : 6)->wait(Clock::now() + 10s);
      c.send(in, (r + 1) % 3, 6)->wait(Clock::now() + 10s);
    }
    EXPECT_EQ(in.to_vector(), payload) << "rank " << r;
    c.barrier()->wait(Clock::now() + 10s);
    // Not along the ring: invalid, and the group stays usable.
    const auto e = error_of(c.send(in, (r + 2) % 3, 1));
    EXPECT_EQ(e.kind(), CollectiveErrorKind::invalid);
    EXPECT_NE(std::string(e.what()).find("along the ring"), std::string::npos) << e.what();
    c.barrier()->wait(Clock::now() + 10s);
  });
}

TEST(Tcp, BadArgumentsAreInvalidAndLeaveTheGroupUsable) {
  auto groups = thread_ring(2);
  run_ranks(groups, [&](int r, Collective& c) {
    Tensor gpu = Tensor::view(reinterpret_cast<void*>(0x1000), Shape{4}, DType::f32, kernels::Device::cuda(0));
    auto e = error_of(c.allreduce(gpu, ReduceOp::sum));
    EXPECT_EQ(e.kind(), CollectiveErrorKind::invalid);
    EXPECT_NE(std::string(e.what()).find("host buffers only"), std::string::npos) << e.what();
    e = error_of(c.reduce_scatter(Tensor::zeros(Shape{5}), Tensor::zeros(Shape{2}), ReduceOp::sum));
    EXPECT_EQ(e.kind(), CollectiveErrorKind::invalid);
    e = error_of(c.broadcast(Tensor::zeros(Shape{5}), 7));
    EXPECT_EQ(e.kind(), CollectiveErrorKind::invalid);
    Tensor t = tensor_of({1.0f, 2.0f, static_cast<float>(r)});
    c.allreduce(t, ReduceOp::sum)->wait(Clock::now() + 10s);
    EXPECT_EQ(t.to_vector(), (std::vector<float>{2.0f, 4.0f, 1.0f}));
  });
}

TEST(Tcp, ARankThatNeverArrivesTimesOutAndBreaksTheGroup) {
  auto groups = thread_ring(2, 500ms);
  Tensor t = tensor_of(random_values(1000, 1));
  const auto start = Clock::now();
  auto e = error_of(groups[0]->allreduce(t, ReduceOp::sum));
  const auto took = Clock::now() - start;
  EXPECT_EQ(e.kind(), CollectiveErrorKind::timeout) << e.what();
  EXPECT_NE(std::string(e.what()).find("rank 1"), std::string::npos) << e.what();
  EXPECT_LT(took, 2s);
  EXPECT_GE(took, 400ms);
  // Broken: the next operation fails at once with the same error.
  const auto again = Clock::now();
  e = error_of(groups[0]->barrier());
  EXPECT_EQ(e.kind(), CollectiveErrorKind::timeout);
  EXPECT_LT(Clock::now() - again, 100ms);
  // The peer sees the broken connection at once.
  e = error_of(groups[1]->allreduce(tensor_of(random_values(1000, 2)), ReduceOp::sum));
  EXPECT_EQ(e.kind(), CollectiveErrorKind::aborted) << e.what();
}

TEST(Tcp, AbortWakesABlockedOperationWithTheReason) {
  auto groups = thread_ring(2, 10s);
  std::thread aborter([&] {
    std::this_thread::sleep_for(200ms);
    groups[0]->abort("the coordinator saw rank 1 go down");
  });
  const auto start = Clock::now();
  auto e = error_of(groups[0]->allreduce(tensor_of(random_values(1 << 20, 1)), ReduceOp::sum));
  aborter.join();
  EXPECT_EQ(e.kind(), CollectiveErrorKind::aborted);
  EXPECT_NE(std::string(e.what()).find("the coordinator saw rank 1 go down"), std::string::npos) << e.what();
  EXPECT_LT(Clock::now() - start, 2s);
  // Rank 1 fails at once too: either on the frames rank 0's allreduce had
  // already sent (a different operation: invalid) or on the closed socket.
  const auto second = Clock::now();
  e = error_of(groups[1]->barrier());
  EXPECT_NE(e.kind(), CollectiveErrorKind::timeout) << e.what();
  EXPECT_LT(Clock::now() - second, 1s);
}

TEST(Tcp, ConfigurationErrors) {
  TcpGroupConfig c;
  c.addresses = {"127.0.0.1:0", "127.0.0.1:1"};
  EXPECT_THROW(make_tcp_group(c), std::invalid_argument);  // port 0 without a listener
  c.rank = 2;
  EXPECT_THROW(make_tcp_group(c), std::invalid_argument);
  c.rank = 0;
  c.chunk_bytes = 6;
  EXPECT_THROW(make_tcp_group(c), std::invalid_argument);
}

TEST(Tcp, ConnectTimesOutNamingTheMissingPeer) {
  Listeners l(2);
  auto c = config_for(l, 0);
  c.connect_timeout = 300ms;
  ::close(l.take(1));  // nobody listens for rank 1
  try {
    make_tcp_group(c);
    FAIL() << "expected a timeout";
  } catch (const CollectiveError& e) {
    EXPECT_EQ(e.kind(), CollectiveErrorKind::timeout);
    EXPECT_NE(std::string(e.what()).find("rank 1"), std::string::npos) << e.what();
  }
}

// A ring whose rank 2 is gone while it connects (its listener is there, as a
// stopped process's is: connections are taken by the kernel and nothing
// answers): with `abandon` answering, ranks 0 and 1 give up within seconds
// with its reason -- rank 0 waiting for rank 2 to connect, rank 1 waiting
// for rank 2's answer after rank 0 has connected -- instead of waiting out
// the 30 s connect timeout. Before the answer, nothing gives up. As in a
// worker node (which reads the coordinator's word from its mailbox), the
// answer is learnt only on the thread that builds the group; the set-up's
// other thread sees it once it is known.
TEST(Tcp, AbandonGivesUpTheRingSetUpWithTheReason) {
  Listeners l(3);
  std::atomic<bool> gone{false};
  struct Learnt {
    std::mutex mutex;
    std::thread::id owner;  // the thread that builds the group
    std::string why;
  };
  std::vector<TcpGroupConfig> configs;
  std::vector<std::shared_ptr<Learnt>> learnt;
  for (int r = 0; r < 2; ++r) {
    configs.push_back(config_for(l, r));
    configs.back().connect_timeout = 30s;
    learnt.push_back(std::make_shared<Learnt>());
  }
  for (int r = 0; r < 2; ++r)
    configs[static_cast<std::size_t>(r)].abandon = [&gone,
                                                    mine = learnt[static_cast<std::size_t>(r)]]() -> std::string {
      std::lock_guard<std::mutex> lock(mine->mutex);
      if (std::this_thread::get_id() == mine->owner && gone && mine->why.empty()) mine->why = "rank 2's node was lost";
      return mine->why;
    };
  std::vector<std::string> errors(2);
  std::vector<CollectiveErrorKind> kinds(2, CollectiveErrorKind::timeout);
  std::vector<Clock::time_point> ended(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r)
    threads.emplace_back([&, r] {
      {
        std::lock_guard<std::mutex> lock(learnt[static_cast<std::size_t>(r)]->mutex);
        learnt[static_cast<std::size_t>(r)]->owner = std::this_thread::get_id();
      }
      try {
        make_tcp_group(configs[static_cast<std::size_t>(r)]);
        errors[static_cast<std::size_t>(r)] = "connected without rank 2";
      } catch (const CollectiveError& e) {
        kinds[static_cast<std::size_t>(r)] = e.kind();
        errors[static_cast<std::size_t>(r)] = e.what();
      } catch (const std::exception& e) {
        errors[static_cast<std::size_t>(r)] = std::string("not a CollectiveError: ") + e.what();
      }
      ended[static_cast<std::size_t>(r)] = Clock::now();
    });
  std::this_thread::sleep_for(1500ms);
  const auto abandoned = Clock::now();
  gone = true;
  for (auto& t : threads) t.join();
  for (int r = 0; r < 2; ++r) {
    const auto i = static_cast<std::size_t>(r);
    EXPECT_EQ(kinds[i], CollectiveErrorKind::aborted) << "rank " << r << ": " << errors[i];
    EXPECT_NE(errors[i].find("rank 2's node was lost"), std::string::npos) << "rank " << r << ": " << errors[i];
    EXPECT_GE(ended[i], abandoned) << "rank " << r << " gave up before `abandon` answered: " << errors[i];
    EXPECT_LT(ended[i] - abandoned, 3s) << "rank " << r << ": " << errors[i];
  }
}

// ------------------------------------------------------------ processes

TEST(TcpProcesses, ThreeProcessAllreduceMatchesTheParentsReference) {
  const int world = 3;
  const std::vector<std::int64_t> sizes{1, 7, 1000, 1000003, 1 << 20};
  std::vector<std::vector<float>> sums, means;
  for (auto n : sizes) {
    sums.push_back(reference(n, world, ReduceOp::sum, 1000));
    means.push_back(reference(n, world, ReduceOp::mean, 2000));
  }
  auto results = run_processes(world, [&](int r, Listeners& l, int out) {
    auto group = make_tcp_group(config_for(l, r));
    for (std::size_t k = 0; k < sizes.size(); ++k) {
      for (ReduceOp op : {ReduceOp::sum, ReduceOp::mean}) {
        const unsigned seed = op == ReduceOp::sum ? 1000 : 2000;
        Tensor t = tensor_of(random_values(sizes[k], seed + static_cast<unsigned>(r)));
        group->allreduce(t, op)->wait(Clock::now() + 30s);
        const auto got = t.to_vector();
        const double diff = max_diff(got, op == ReduceOp::sum ? sums[k] : means[k]);
        if (diff > 1e-5) {
          say(out, "size " + std::to_string(sizes[k]) + ": max diff " + std::to_string(diff) + "\n");
          return 1;
        }
        // The result's checksum, for the parent to compare across ranks.
        say(out, std::to_string(wire::crc32c(got.data(), got.size() * sizeof(float))) + "\n");
      }
    }
    return 0;
  });
  for (int r = 0; r < world; ++r) {
    EXPECT_TRUE(results[static_cast<std::size_t>(r)].exited_ok())
        << "rank " << r << ": " << results[static_cast<std::size_t>(r)].output;
    EXPECT_EQ(results[static_cast<std::size_t>(r)].output, results[0].output)
        << "rank " << r << "'s results differ bitwise from rank 0's";
  }
}

// Survivors of a SIGKILLed rank write "error <kind> <ms> <what>".
TEST(TcpProcesses, APeerKilledMidAllreduceFailsTheSurvivorsWithinTheTimeout) {
  const int world = 3;
  auto results = run_processes(
      world,
      [&](int r, Listeners& l, int out) {
        auto group = make_tcp_group(config_for(l, r, 2s));
        say(out, "ready\n");
        Tensor t = tensor_of(random_values(4 << 20, static_cast<unsigned>(r)));  // 16 MB
        for (int k = 0; k < 100000; ++k) {
          const auto start = Clock::now();
          try {
            group->allreduce(t, ReduceOp::mean)->wait(Clock::now() + 30s);
          } catch (const CollectiveError& e) {
            const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count();
            say(out, std::string("error ") + to_string(e.kind()) + " " + std::to_string(ms) + " " + e.what() + "\n");
            // The group stays broken: the next operation fails at once.
            const auto again = Clock::now();
            try {
              group->barrier()->wait(Clock::now() + 30s);
            } catch (const CollectiveError&) {
              if (Clock::now() - again < 100ms) return 0;
            }
            return 3;
          }
        }
        return 2;
      },
      [](std::vector<pid_t>& pids) {
        std::this_thread::sleep_for(1500ms);  // the group is up and reducing
        ::kill(pids[2], SIGKILL);
      },
      30s);
  EXPECT_TRUE(WIFSIGNALED(results[2].status) && WTERMSIG(results[2].status) == SIGKILL);
  for (int r = 0; r < 2; ++r) {
    const auto& res = results[static_cast<std::size_t>(r)];
    EXPECT_TRUE(res.exited_ok()) << "rank " << r << ": " << res.output;
    std::cout << "rank " << r << ": " << res.output;
    const auto at = res.output.find("error ");
    ASSERT_NE(at, std::string::npos) << res.output;
    std::istringstream line(res.output.substr(at));
    std::string word, kind;
    long ms = -1;
    line >> word >> kind >> ms;
    EXPECT_TRUE(kind == "aborted" || kind == "timeout") << res.output;
    EXPECT_LT(ms, 2500) << "rank " << r << " noticed only after " << ms << " ms: " << res.output;
  }
}

TEST(TcpProcesses, APeerThatStopsRespondingTimesOut) {
  const int world = 3;
  auto results = run_processes(world, [&](int r, Listeners& l, int out) {
    auto group = make_tcp_group(config_for(l, r, 2s));
    if (r == 2) {  // joins, then hangs (alive, sockets open, never reads)
      std::this_thread::sleep_for(6s);
      return 0;
    }
    Tensor t = tensor_of(random_values(1 << 20, static_cast<unsigned>(r)));
    const auto start = Clock::now();
    auto e = error_of(group->allreduce(t, ReduceOp::sum));
    const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count();
    say(out, std::string(to_string(e.kind())) + " " + std::to_string(ms) + " " + e.what() + "\n");
    return ms < 3000 ? 0 : 4;
  });
  for (int r = 0; r < 2; ++r) {
    const auto& res = results[static_cast<std::size_t>(r)];
    EXPECT_TRUE(res.exited_ok()) << "rank " << r << ": " << res.output;
  }
  // At least one survivor names the timeout (the other may see its broken connection first).
  EXPECT_TRUE(results[0].output.find("timeout") == 0 || results[1].output.find("timeout") == 0)
      << results[0].output << results[1].output;
}

}  // namespace
}  // namespace troupe::net::testing
