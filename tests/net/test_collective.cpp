// The local collective backend, with one real thread per rank, checked
// against plain references on random data; then its failure modes: sizes
// that differ across ranks, a rank that never arrives, abort.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <exception>
#include <functional>
#include <random>
#include <thread>
#include <vector>

#include "kernels/ops.hpp"
#include "net/collective/local.hpp"

namespace troupe::net {
namespace {

using kernels::Device;
using kernels::DType;
using kernels::Shape;
using namespace std::chrono_literals;

// Runs body(rank, collective) on one thread per rank and rethrows the first
// exception (a failed gtest assertion in a thread is recorded by gtest).
void run_ranks(std::vector<std::unique_ptr<Collective>>& group, const std::function<void(int, Collective&)>& body) {
  std::vector<std::thread> threads;
  std::vector<std::exception_ptr> errors(group.size());
  for (std::size_t r = 0; r < group.size(); ++r) {
    threads.emplace_back([&, r] {
      try {
        body(static_cast<int>(r), *group[r]);
      } catch (...) {
        errors[r] = std::current_exception();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
}

void wait(const std::shared_ptr<Work>& work) {
  ASSERT_TRUE(work);
  work->wait(Clock::now() + 10s);
}

// The error the work holds (fails the test when there is none).
CollectiveError error_of(const std::shared_ptr<Work>& work) {
  try {
    work->wait(Clock::now() + 10s);
  } catch (const CollectiveError& e) {
    return e;
  }
  ADD_FAILURE() << "expected a CollectiveError";
  return CollectiveError(CollectiveErrorKind::invalid, "none");
}

std::vector<float> random_values(std::int64_t n, unsigned seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> v(static_cast<std::size_t>(n));
  for (auto& x : v) x = dist(gen);
  return v;
}

Tensor on_device(const std::vector<float>& values, Device device) {
  Tensor t = Tensor::empty(Shape{static_cast<std::int64_t>(values.size())}, DType::f32, device);
  std::memcpy(t.f32(), values.data(), values.size() * sizeof(float));
  return t;
}

bool bitwise_equal(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// The reference: sources added in rank order in f32, then scaled by 1 / W.
std::vector<float> reference_reduce(const std::vector<std::vector<float>>& inputs, ReduceOp op) {
  std::vector<float> out = inputs[0];
  for (std::size_t r = 1; r < inputs.size(); ++r)
    for (std::size_t i = 0; i < out.size(); ++i) out[i] += inputs[r][i];
  if (op == ReduceOp::mean)
    for (auto& x : out) x *= 1.0f / static_cast<float>(inputs.size());
  return out;
}

TEST(LocalCollective, DescribesItself) {
  auto group = make_local_group(3);
  ASSERT_EQ(group.size(), 3u);
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(group[static_cast<std::size_t>(r)]->rank(), r);
    EXPECT_EQ(group[static_cast<std::size_t>(r)]->size(), 3);
    EXPECT_EQ(group[static_cast<std::size_t>(r)]->name(), "local");
  }
  EXPECT_THROW(make_local_group(0), std::invalid_argument);
  EXPECT_THROW(make_local_group(2, CollectiveOptions{0ms}), std::invalid_argument);
}

TEST(LocalCollective, AllreduceMatchesReference) {
  for (int world : {1, 2, 3, 4}) {
    for (std::int64_t n : {1, 7, 1000, 1000003}) {
      for (ReduceOp op : {ReduceOp::sum, ReduceOp::mean}) {
        SCOPED_TRACE("world " + std::to_string(world) + ", n " + std::to_string(n) + ", " + to_string(op));
        std::vector<std::vector<float>> inputs;
        for (int r = 0; r < world; ++r) inputs.push_back(random_values(n, static_cast<unsigned>(1000 * r + n)));
        const std::vector<float> expected = reference_reduce(inputs, op);
        std::vector<std::vector<float>> results(static_cast<std::size_t>(world));
        auto group = make_local_group(world);
        run_ranks(group, [&](int r, Collective& c) {
          Tensor buffer = on_device(inputs[static_cast<std::size_t>(r)], Device::cpu(r));
          wait(c.allreduce(buffer, op));
          results[static_cast<std::size_t>(r)] = buffer.to_vector();
        });
        for (int r = 0; r < world; ++r) {
          // Sources are added in rank order, as the reference does: exact.
          EXPECT_TRUE(bitwise_equal(results[static_cast<std::size_t>(r)], expected)) << "rank " << r;
          // Replicas must stay identical.
          EXPECT_TRUE(bitwise_equal(results[static_cast<std::size_t>(r)], results[0])) << "rank " << r;
        }
      }
    }
  }
}

// 100 back-to-back allreduces of changing data: a barrier that is not safely
// reusable lets a fast rank overwrite a chunk a slow one is still reading.
TEST(LocalCollective, RepeatedAllreducesStayCorrect) {
  for (int world : {2, 3, 4, 8}) {
    SCOPED_TRACE("world " + std::to_string(world));
    constexpr std::int64_t n = 1037;
    auto group = make_local_group(world);
    std::atomic<int> wrong{0};
    run_ranks(group, [&](int r, Collective& c) {
      Tensor buffer = Tensor::empty(Shape{n}, DType::f32, Device::cpu(r));
      float* x = buffer.f32();
      for (int step = 0; step < 100; ++step) {
        // Small integers: every sum is exact whatever the order.
        for (std::int64_t i = 0; i < n; ++i) x[i] = static_cast<float>((step * 7 + r * 3 + i) % 101);
        wait(c.allreduce(buffer, ReduceOp::sum));
        for (std::int64_t i = 0; i < n; ++i) {
          float expected = 0;
          for (int q = 0; q < world; ++q) expected += static_cast<float>((step * 7 + q * 3 + i) % 101);
          if (x[i] != expected) ++wrong;
        }
      }
    });
    EXPECT_EQ(wrong.load(), 0);
  }
}

TEST(LocalCollective, BroadcastFromEachRoot) {
  constexpr int world = 3;
  constexpr std::int64_t n = 1001;
  auto group = make_local_group(world);
  for (int root = 0; root < world; ++root) {
    SCOPED_TRACE("root " + std::to_string(root));
    std::vector<std::vector<float>> results(world);
    const std::vector<float> expected = random_values(n, static_cast<unsigned>(root) * 7919u + 13u);
    run_ranks(group, [&](int r, Collective& c) {
      Tensor buffer = on_device(r == root ? expected : random_values(n, static_cast<unsigned>(r)), Device::cpu(r));
      wait(c.broadcast(buffer, root));
      results[static_cast<std::size_t>(r)] = buffer.to_vector();
    });
    for (int r = 0; r < world; ++r)
      EXPECT_TRUE(bitwise_equal(results[static_cast<std::size_t>(r)], expected)) << "rank " << r;
  }
}

TEST(LocalCollective, ReduceScatterMatchesReference) {
  for (int world : {1, 2, 4}) {
    for (bool in_place : {false, true}) {
      for (ReduceOp op : {ReduceOp::sum, ReduceOp::mean}) {
        SCOPED_TRACE("world " + std::to_string(world) + (in_place ? ", in place, " : ", ") + to_string(op));
        const std::int64_t chunk = 257;
        const std::int64_t n = chunk * world;
        std::vector<std::vector<float>> inputs;
        for (int r = 0; r < world; ++r) inputs.push_back(random_values(n, static_cast<unsigned>(r + 77)));
        const std::vector<float> reduced = reference_reduce(inputs, op);
        std::vector<std::vector<float>> results(static_cast<std::size_t>(world));
        auto group = make_local_group(world);
        run_ranks(group, [&](int r, Collective& c) {
          Tensor input = on_device(inputs[static_cast<std::size_t>(r)], Device::cpu(r));
          Tensor output =
              in_place ? input.slice(r * chunk, Shape{chunk}) : Tensor::empty(Shape{chunk}, DType::f32, Device::cpu(r));
          wait(c.reduce_scatter(input, output, op));
          results[static_cast<std::size_t>(r)] = output.to_vector();
        });
        for (int r = 0; r < world; ++r) {
          const std::vector<float> expected(reduced.begin() + r * chunk, reduced.begin() + (r + 1) * chunk);
          EXPECT_TRUE(bitwise_equal(results[static_cast<std::size_t>(r)], expected)) << "rank " << r;
        }
      }
    }
  }
}

TEST(LocalCollective, AllgatherMatchesReference) {
  for (int world : {1, 3, 4}) {
    for (bool in_place : {false, true}) {
      SCOPED_TRACE("world " + std::to_string(world) + (in_place ? ", in place" : ""));
      const std::int64_t chunk = 333;
      std::vector<std::vector<float>> inputs;
      std::vector<float> expected;
      for (int r = 0; r < world; ++r) {
        inputs.push_back(random_values(chunk, static_cast<unsigned>(r + 5)));
        expected.insert(expected.end(), inputs.back().begin(), inputs.back().end());
      }
      std::vector<std::vector<float>> results(static_cast<std::size_t>(world));
      auto group = make_local_group(world);
      run_ranks(group, [&](int r, Collective& c) {
        Tensor output = Tensor::zeros(Shape{chunk * world}, DType::f32, Device::cpu(r));
        Tensor input =
            in_place ? output.slice(r * chunk, Shape{chunk}) : Tensor::empty(Shape{chunk}, DType::f32, Device::cpu(r));
        std::memcpy(input.f32(), inputs[static_cast<std::size_t>(r)].data(), chunk * sizeof(float));
        wait(c.allgather(input, output));
        results[static_cast<std::size_t>(r)] = output.to_vector();
      });
      for (int r = 0; r < world; ++r)
        EXPECT_TRUE(bitwise_equal(results[static_cast<std::size_t>(r)], expected)) << "rank " << r;
    }
  }
}

TEST(LocalCollective, SendRecvPairs) {
  // Even ranks send first, odd ranks receive first: a ring of blocking sends
  // that cannot deadlock.
  constexpr int world = 4;
  constexpr std::int64_t n = 4099;
  auto group = make_local_group(world);
  std::vector<std::vector<float>> got(world);
  run_ranks(group, [&](int r, Collective& c) {
    const int next = (r + 1) % world, prev = (r + world - 1) % world;
    Tensor out = on_device(random_values(n, static_cast<unsigned>(r)), Device::cpu(r));
    Tensor in = Tensor::zeros(Shape{n}, DType::f32, Device::cpu(r));
    if (r % 2 == 0) {
      wait(c.send(out, next, 7));
      wait(c.recv(in, prev, 7));
    } else {
      wait(c.recv(in, prev, 7));
      wait(c.send(out, next, 7));
    }
    got[static_cast<std::size_t>(r)] = in.to_vector();
  });
  for (int r = 0; r < world; ++r)
    EXPECT_TRUE(bitwise_equal(got[static_cast<std::size_t>(r)],
                              random_values(n, static_cast<unsigned>((r + world - 1) % world))))
        << "rank " << r;
}

TEST(LocalCollective, SendRecvTagsAndDtypes) {
  auto group = make_local_group(2);
  run_ranks(group, [&](int r, Collective& c) {
    if (r == 0) {
      Tensor a = Tensor::from_vector(Shape{3}, std::vector<std::int32_t>{1, 2, 3});
      Tensor b = Tensor::from_vector(Shape{2}, std::vector<float>{4.5f, 5.5f});
      // The receiver asks for tag 2 first: sends with other tags wait apart.
      std::thread other([&] { wait(c.send(b, 1, 2)); });
      wait(c.send(a, 1, 1));
      other.join();
    } else {
      Tensor b = Tensor::zeros(Shape{2});
      Tensor a = Tensor::zeros(Shape{3}, DType::i32);
      wait(c.recv(b, 0, 2));
      wait(c.recv(a, 0, 1));
      EXPECT_EQ(a.to_int_vector(), (std::vector<std::int32_t>{1, 2, 3}));
      EXPECT_EQ(b.to_vector(), (std::vector<float>{4.5f, 5.5f}));
    }
  });
}

TEST(LocalCollective, SendRecvSizeMismatchFailsBothSides) {
  auto group = make_local_group(2);
  std::vector<std::string> messages(2);
  run_ranks(group, [&](int r, Collective& c) {
    Tensor t = Tensor::zeros(Shape{r == 0 ? 10 : 11}, DType::f32, Device::cpu(r));
    const CollectiveError e = error_of(r == 0 ? c.send(t, 1, 0) : c.recv(t, 0, 0));
    EXPECT_EQ(e.kind(), CollectiveErrorKind::invalid);
    messages[static_cast<std::size_t>(r)] = e.what();
  });
  for (const auto& m : messages) {
    EXPECT_NE(m.find("f32[10]"), std::string::npos) << m;
    EXPECT_NE(m.find("f32[11]"), std::string::npos) << m;
  }
}

TEST(LocalCollective, RecvWithoutSenderTimesOut) {
  auto group = make_local_group(2, CollectiveOptions{200ms});
  Tensor t = Tensor::zeros(Shape{4});
  const auto start = Clock::now();
  const CollectiveError e = error_of(group[1]->recv(t, 0, 3));
  EXPECT_EQ(e.kind(), CollectiveErrorKind::timeout);
  EXPECT_GE(Clock::now() - start, 190ms);
  EXPECT_NE(
      std::string(e.what()).find("recv from rank 0 (tag 3) on rank 1 of 2: timed out after 200 ms waiting for rank 0"),
      std::string::npos)
      << e.what();
  // A timed-out send withdraws its buffer: a later recv does not see it.
  EXPECT_EQ(error_of(group[0]->send(t, 1, 3)).kind(), CollectiveErrorKind::timeout);
  EXPECT_EQ(error_of(group[1]->recv(t, 0, 3)).kind(), CollectiveErrorKind::timeout);
}

TEST(LocalCollective, BarrierWaitsForEveryRank) {
  constexpr int world = 4;
  auto group = make_local_group(world);
  std::atomic<int> before{0};
  std::atomic<int> wrong{0};
  run_ranks(group, [&](int r, Collective& c) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5 * r));
    ++before;
    wait(c.barrier());
    if (before.load() != world) ++wrong;
  });
  EXPECT_EQ(wrong.load(), 0);
}

TEST(LocalCollective, MismatchedSizesFailEveryRankAndKeepTheGroup) {
  auto group = make_local_group(2);
  std::vector<std::string> messages(2);
  run_ranks(group, [&](int r, Collective& c) {
    Tensor bad = Tensor::zeros(Shape{r == 0 ? 1000 : 999}, DType::f32, Device::cpu(r));
    const CollectiveError e = error_of(c.allreduce(bad, ReduceOp::sum));
    EXPECT_EQ(e.kind(), CollectiveErrorKind::invalid);
    messages[static_cast<std::size_t>(r)] = e.what();
    // Every rank failed the same op, so the group is still in step.
    Tensor good = Tensor::full(Shape{10}, 1.0f, Device::cpu(r));
    wait(c.allreduce(good, ReduceOp::sum));
    EXPECT_EQ(good.to_vector(), std::vector<float>(10, 2.0f));
  });
  for (int r = 0; r < 2; ++r) {
    const std::string& m = messages[static_cast<std::size_t>(r)];
    EXPECT_NE(m.find("allreduce #0 on rank " + std::to_string(r) + " of 2"), std::string::npos) << m;
    EXPECT_NE(m.find("f32[1000]"), std::string::npos) << m;
    EXPECT_NE(m.find("f32[999]"), std::string::npos) << m;
  }
}

TEST(LocalCollective, InvalidArgumentsFailEveryRank) {
  auto group = make_local_group(3);
  std::atomic<int> invalid{0};
  run_ranks(group, [&](int r, Collective& c) {
    Tensor t = Tensor::zeros(Shape{10}, DType::f32, Device::cpu(r));
    Tensor out = Tensor::zeros(Shape{3}, DType::f32, Device::cpu(r));
    auto check = [&](const std::shared_ptr<Work>& w, const char* what) {
      const CollectiveError e = error_of(w);
      if (e.kind() == CollectiveErrorKind::invalid && std::string(e.what()).find(what) != std::string::npos)
        ++invalid;
      else
        ADD_FAILURE() << "expected '" << what << "' in: " << e.what();
    };
    // Different operations at the same position.
    check(r == 1 ? c.broadcast(t, 0) : c.allreduce(t, ReduceOp::sum), "different operations");
    check(c.broadcast(t, 3), "not a rank");
    check(c.broadcast(t, r), "roots differ");
    check(c.reduce_scatter(t, out, ReduceOp::sum), "not a multiple of the group size 3");
    Tensor labels = Tensor::zeros(Shape{9}, DType::i32, Device::cpu(r));
    check(c.allreduce(labels, ReduceOp::sum), "reductions need f32");
    // A host buffer and a GPU buffer in one group (a view, so no GPU is needed:
    // the check happens before anything reads it).
    Tensor mixed = r == 2 ? Tensor::view(t.raw(), Shape{10}, DType::f32, Device::cuda(0)) : t;
    check(c.allreduce(mixed, ReduceOp::sum), "one memory space");
    check(c.allgather(t, t), "should be f32 with 30 elements");
  });
  EXPECT_EQ(invalid.load(), 3 * 7);
}

TEST(LocalCollective, MissingRankTimesOutNamingIt) {
  constexpr auto timeout = 200ms;
  auto group = make_local_group(3, CollectiveOptions{timeout});
  std::vector<std::unique_ptr<Collective>> present;
  present.push_back(std::move(group[0]));
  present.push_back(std::move(group[1]));
  std::vector<std::string> messages(2);
  std::vector<Clock::duration> took(2);
  run_ranks(present, [&](int r, Collective& c) {
    Tensor t = Tensor::zeros(Shape{100}, DType::f32, Device::cpu(r));
    const auto start = Clock::now();
    const CollectiveError e = error_of(c.allreduce(t, ReduceOp::sum));
    took[static_cast<std::size_t>(r)] = Clock::now() - start;
    EXPECT_EQ(e.kind(), CollectiveErrorKind::timeout);
    messages[static_cast<std::size_t>(r)] = e.what();
  });
  for (int r = 0; r < 2; ++r) {
    EXPECT_LT(took[static_cast<std::size_t>(r)], timeout + 300ms) << "rank " << r;
    EXPECT_GE(took[static_cast<std::size_t>(r)], timeout - 20ms) << "rank " << r;
    EXPECT_NE(messages[static_cast<std::size_t>(r)].find("allreduce #0 on rank " + std::to_string(r) +
                                                         " of 3: timed out after 200 ms waiting for ranks 2"),
              std::string::npos)
        << messages[static_cast<std::size_t>(r)];
  }
  // The group is broken: the late rank fails at once, with the same cause.
  Tensor t = Tensor::zeros(Shape{100}, DType::f32, Device::cpu(2));
  const auto start = Clock::now();
  const CollectiveError late = error_of(group[2]->allreduce(t, ReduceOp::sum));
  EXPECT_LT(Clock::now() - start, 100ms);
  EXPECT_EQ(late.kind(), CollectiveErrorKind::timeout);
  EXPECT_NE(std::string(late.what()).find("waiting for ranks 2"), std::string::npos) << late.what();
}

TEST(LocalCollective, AbortWakesBlockedRanks) {
  auto group = make_local_group(3, CollectiveOptions{30s});
  std::vector<std::unique_ptr<Collective>> present;
  present.push_back(std::move(group[0]));
  present.push_back(std::move(group[1]));
  std::thread monitor([&] {
    std::this_thread::sleep_for(100ms);
    group[2]->abort("peer on host b died");
  });
  std::vector<std::string> messages(2);
  run_ranks(present, [&](int r, Collective& c) {
    Tensor t = Tensor::zeros(Shape{100}, DType::f32, Device::cpu(r));
    const auto start = Clock::now();
    const CollectiveError e = error_of(c.allreduce(t, ReduceOp::sum));
    EXPECT_LT(Clock::now() - start, 5s);
    EXPECT_EQ(e.kind(), CollectiveErrorKind::aborted);
    messages[static_cast<std::size_t>(r)] = e.what();
  });
  monitor.join();
  for (const auto& m : messages) EXPECT_NE(m.find("peer on host b died"), std::string::npos) << m;
  // Later operations on any rank fail at once, with the reason.
  Tensor t = Tensor::zeros(Shape{4});
  for (auto* c : {present[0].get(), present[1].get(), group[2].get()}) {
    const CollectiveError e = error_of(c->barrier());
    EXPECT_EQ(e.kind(), CollectiveErrorKind::aborted);
    EXPECT_NE(std::string(e.what()).find("peer on host b died"), std::string::npos) << e.what();
  }
  EXPECT_EQ(error_of(present[0]->send(t, 1, 0)).kind(), CollectiveErrorKind::aborted);
}

// Abort lands at any point of a stream of allreduces (inside a phase, at a
// barrier, between operations): every rank stops with the reason, none hangs.
TEST(LocalCollective, AbortDuringAStreamOfAllreduces) {
  constexpr int world = 4;
  auto group = make_local_group(world, CollectiveOptions{10s});
  std::thread monitor([&] {
    std::this_thread::sleep_for(20ms);
    group[1]->abort("stop");
  });
  std::vector<std::string> messages(world);
  run_ranks(group, [&](int r, Collective& c) {
    Tensor t = Tensor::full(Shape{50000}, 1.0f, Device::cpu(r));
    for (int step = 0; step < 1000000; ++step) {
      try {
        c.allreduce(t, ReduceOp::mean)->wait(Clock::now() + 10s);
      } catch (const CollectiveError& e) {
        EXPECT_EQ(e.kind(), CollectiveErrorKind::aborted) << e.what();
        messages[static_cast<std::size_t>(r)] = e.what();
        // A failed operation has ended too: no other rank still reads this
        // buffer (the thread sanitizer checks it).
        std::fill(t.f32(), t.f32() + t.numel(), 0.0f);
        return;
      }
    }
  });
  monitor.join();
  for (const auto& m : messages) EXPECT_NE(m.find("aborted (on rank 1): stop"), std::string::npos) << m;
}

TEST(LocalCollective, AbortWakesABlockedRecv) {
  auto group = make_local_group(2, CollectiveOptions{30s});
  std::thread monitor([&] {
    std::this_thread::sleep_for(50ms);
    group[0]->abort("shutting down");
  });
  Tensor t = Tensor::zeros(Shape{4});
  const CollectiveError e = error_of(group[1]->recv(t, 0, 0));
  monitor.join();
  EXPECT_EQ(e.kind(), CollectiveErrorKind::aborted);
  EXPECT_NE(std::string(e.what()).find("shutting down"), std::string::npos) << e.what();
}

}  // namespace
}  // namespace troupe::net
