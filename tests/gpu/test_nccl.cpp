// The nccl backend on real GPUs, against plain references on random data.
//
//   NcclOneGpu.*    world 1 on cuda:0: every operation, its ordering after
//                   the compute stream, and deadlines (run on any GPU machine).
//   NcclMultiGpu.*  one rank per GPU, one thread per rank, in one process:
//                   they skip unless the machine has 2 GPUs or more (NCCL
//                   refuses two ranks on one GPU), and have never run yet.
//
// Buffers are poisoned (filled with NaN) where an operation must write, so
// an element it leaves unwritten shows.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <limits>
#include <thread>

#include "kernels/ops.hpp"
#include "net/collective/nccl.hpp"
#include "tests/gpu/gpu_support.hpp"

namespace troupe::net {
namespace {

using gpu_test::make_current;
using gpu_test::on_device;
using gpu_test::random_values;
using kernels::Device;
using kernels::Tensor;
using namespace std::chrono_literals;

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

void wait(const std::shared_ptr<Work>& work) {
  ASSERT_TRUE(work);
  work->wait(Clock::now() + 30s);
}

CollectiveError error_of(const std::shared_ptr<Work>& work, Deadline deadline) {
  try {
    work->wait(deadline);
  } catch (const CollectiveError& e) {
    return e;
  }
  ADD_FAILURE() << "expected a CollectiveError";
  return CollectiveError(CollectiveErrorKind::invalid, "none");
}

std::unique_ptr<Collective> one_rank(std::chrono::milliseconds timeout = 30000ms) {
  auto group = make_nccl_group({Device::cuda(0)}, CollectiveOptions{timeout});
  return std::move(group[0]);
}

// ---------------------------------------------------------------- world 1

TEST(NcclOneGpu, DescribesItself) {
  TROUPE_REQUIRE_GPUS(1);
  auto c = one_rank();
  EXPECT_EQ(c->name(), "nccl");
  EXPECT_EQ(c->rank(), 0);
  EXPECT_EQ(c->size(), 1);
}

TEST(NcclOneGpu, AllreduceSumAndMeanOfOneRankAreTheBuffer) {
  TROUPE_REQUIRE_GPUS(1);
  auto c = one_rank();
  for (std::int64_t n : {1, 7, 1000, 1 << 20}) {
    const auto values = random_values(n, static_cast<unsigned>(n));
    for (ReduceOp op : {ReduceOp::sum, ReduceOp::mean}) {
      Tensor t = on_device(values, Device::cuda(0));
      wait(c->allreduce(t, op));
      EXPECT_EQ(t.to_vector(), values) << n << " " << to_string(op);
    }
  }
}

TEST(NcclOneGpu, BroadcastReduceScatterAllgatherOfOneRank) {
  TROUPE_REQUIRE_GPUS(1);
  auto c = one_rank();
  const auto values = random_values(4096, 3);
  Tensor t = on_device(values, Device::cuda(0));
  wait(c->broadcast(t, 0));
  EXPECT_EQ(t.to_vector(), values);

  Tensor out = Tensor::full({4096}, kNaN).to(Device::cuda(0));
  wait(c->reduce_scatter(t, out, ReduceOp::sum));
  EXPECT_EQ(out.to_vector(), values);

  Tensor gathered = Tensor::full({4096}, kNaN).to(Device::cuda(0));
  wait(c->allgather(t, gathered));
  EXPECT_EQ(gathered.to_vector(), values);
  wait(c->barrier());
}

// The operation starts after the work queued on the compute stream before
// it (an event, not a synchronize): a scale queued just before the
// all-reduce, and a long kernel before both, are in its result.
TEST(NcclOneGpu, RunsAfterTheComputeStreamsQueuedWork) {
  TROUPE_REQUIRE_GPUS(1);
  auto c = one_rank();
  const auto values = random_values(1 << 18, 5);
  Tensor t = on_device(values, Device::cuda(0));
  make_current(Device::cuda(0));
  gpu_test::spin_on_compute_stream(0, 50.0);
  kernels::ops::scale(t, 2.0f);  // queued behind the spin, not done yet
  wait(c->allreduce(t, ReduceOp::sum));
  const auto got = t.to_vector();
  for (std::size_t i = 0; i < values.size(); ++i) ASSERT_EQ(got[i], 2.0f * values[i]) << "element " << i;
}

TEST(NcclOneGpu, ManyOperationsInARow) {
  TROUPE_REQUIRE_GPUS(1);
  auto c = one_rank();
  const auto values = random_values(10000, 9);
  Tensor t = on_device(values, Device::cuda(0));
  for (int i = 0; i < 200; ++i) wait(c->allreduce(t, ReduceOp::sum));
  EXPECT_EQ(t.to_vector(), values);
}

TEST(NcclOneGpu, InvalidArgumentsFailTheRankAndBreakTheGroup) {
  TROUPE_REQUIRE_GPUS(1);
  auto c = one_rank();
  Tensor host = Tensor::full({16}, 1.0f);
  CollectiveError e = error_of(c->allreduce(host, ReduceOp::sum), Clock::now() + 10s);
  EXPECT_EQ(e.kind(), CollectiveErrorKind::invalid);
  EXPECT_NE(std::string(e.what()).find("not on this rank's GPU cuda:0"), std::string::npos) << e.what();
  // NCCL cannot skip an operation on one rank: the group is broken.
  Tensor t = on_device(random_values(16, 1), Device::cuda(0));
  EXPECT_EQ(error_of(c->allreduce(t, ReduceOp::sum), Clock::now() + 10s).kind(), CollectiveErrorKind::aborted);
}

TEST(NcclOneGpu, SendToItselfIsInvalid) {
  TROUPE_REQUIRE_GPUS(1);
  auto c = one_rank();
  Tensor t = on_device(random_values(16, 1), Device::cuda(0));
  EXPECT_EQ(error_of(c->send(t, 0, 1), Clock::now() + 10s).kind(), CollectiveErrorKind::invalid);
}

// A deadline that passes while the operation cannot finish (held behind a
// 2-second kernel on the compute stream): wait() throws timeout promptly,
// aborts the communicator, and returns only once nothing touches the buffer
// any more; later operations fail with the timeout.
TEST(NcclOneGpu, AnExpiringDeadlineAbortsCleanly) {
  TROUPE_REQUIRE_GPUS(1);
  auto c = one_rank(10000ms);
  Tensor t = on_device(random_values(1 << 16, 2), Device::cuda(0));
  make_current(Device::cuda(0));
  gpu_test::spin_on_compute_stream(0, 2000.0);
  auto work = c->allreduce(t, ReduceOp::sum);
  const auto started = Clock::now();
  CollectiveError e = error_of(work, started + 100ms);
  const auto waited = Clock::now() - started;
  EXPECT_EQ(e.kind(), CollectiveErrorKind::timeout) << e.what();
  EXPECT_NE(std::string(e.what()).find("allreduce #0 on rank 0 of 1"), std::string::npos) << e.what();
  EXPECT_LT(waited, 5s) << "the abort waited for more than the held kernel";
  EXPECT_TRUE(work->completed());
  EXPECT_EQ(error_of(c->allreduce(t, ReduceOp::sum), Clock::now() + 10s).kind(), CollectiveErrorKind::timeout);
  make_current(Device::cuda(0));  // the GPU is still usable
  kernels::ops::scale(t, 1.0f);
  EXPECT_EQ(t.to_vector().size(), std::size_t{1 << 16});
}

// Rank 1 of a world of 2 never joins: creating the group times out at the
// options' timeout, aborts what it made, and a fresh group works after it.
TEST(NcclOneGpu, AWorldWhoseOtherRankNeverJoinsTimesOut) {
  TROUPE_REQUIRE_GPUS(1);
  const auto started = Clock::now();
  try {
    make_nccl_group(nccl_unique_id(), 0, 2, {Device::cuda(0)}, CollectiveOptions{2000ms});
    FAIL() << "expected a timeout";
  } catch (const CollectiveError& e) {
    EXPECT_EQ(e.kind(), CollectiveErrorKind::timeout) << e.what();
    EXPECT_NE(std::string(e.what()).find("not every rank joined within 2 s"), std::string::npos) << e.what();
  }
  EXPECT_LT(Clock::now() - started, 15s);
  auto c = one_rank();
  Tensor t = on_device(random_values(100, 4), Device::cuda(0));
  wait(c->allreduce(t, ReduceOp::sum));
}

TEST(NcclOneGpu, AbortFailsLaterOperations) {
  TROUPE_REQUIRE_GPUS(1);
  auto c = one_rank();
  Tensor t = on_device(random_values(100, 4), Device::cuda(0));
  c->abort("the test says so");
  CollectiveError e = error_of(c->allreduce(t, ReduceOp::sum), Clock::now() + 10s);
  EXPECT_EQ(e.kind(), CollectiveErrorKind::aborted);
  EXPECT_NE(std::string(e.what()).find("the test says so"), std::string::npos) << e.what();
}

// ---------------------------------------------------------------- several GPUs

std::vector<Device> every_gpu() {
  std::vector<Device> out;
  for (int i = 0; i < kernels::cuda_device_count(); ++i) out.push_back(Device::cuda(i));
  return out;
}

Device gpu_of(int rank) { return Device::cuda(rank); }

TEST(NcclMultiGpu, AllreduceMatchesTheReferenceAndIsBitwiseEqualOnEveryRank) {
  TROUPE_REQUIRE_GPUS(2);
  auto group = make_nccl_group(every_gpu());
  gpu_test::expect_allreduce_matches_reference(group, gpu_of, {1, 1000, 3 << 20});
}

TEST(NcclMultiGpu, BroadcastFromEachRoot) {
  TROUPE_REQUIRE_GPUS(2);
  auto group = make_nccl_group(every_gpu());
  gpu_test::expect_broadcast_from_each_root(group, gpu_of);
}

TEST(NcclMultiGpu, ReduceScatterAndAllgatherMatchTheReference) {
  TROUPE_REQUIRE_GPUS(2);
  auto group = make_nccl_group(every_gpu());
  gpu_test::expect_scatter_gather_match_reference(group, gpu_of, 1031);
}

TEST(NcclMultiGpu, SendRecvAroundTheRing) {
  TROUPE_REQUIRE_GPUS(2);
  auto group = make_nccl_group(every_gpu());
  const int w = static_cast<int>(group.size());
  gpu_test::run_ranks(group, gpu_of, [&](int r, Collective& c) {
    Tensor mine = on_device(random_values(777, static_cast<unsigned>(r)), Device::cuda(r));
    Tensor got = Tensor::full({777}, kNaN).to(Device::cuda(r));
    // Even ranks send first, odd ranks receive first: no cycle of waits.
    const int next = (r + 1) % w, prev = (r + w - 1) % w;
    if (r % 2 == 0) {
      wait(c.send(mine, next, 0));
      wait(c.recv(got, prev, 0));
    } else {
      wait(c.recv(got, prev, 0));
      wait(c.send(mine, next, 0));
    }
    EXPECT_EQ(got.to_vector(), random_values(777, static_cast<unsigned>(prev)));
  });
}

// One rank never calls: the others' waits end at their deadline with a
// timeout (no hang), and the group is broken for all.
TEST(NcclMultiGpu, AMissingRankTimesOutTheOthers) {
  TROUPE_REQUIRE_GPUS(2);
  auto group = make_nccl_group(every_gpu(), CollectiveOptions{3000ms});
  const auto started = Clock::now();
  gpu_test::run_ranks(group, gpu_of, [&](int r, Collective& c) {
    if (r == 1) return;
    Tensor t = on_device(random_values(1000, 1), Device::cuda(r));
    EXPECT_EQ(error_of(c.allreduce(t, ReduceOp::sum), Clock::now() + 60s).kind(), CollectiveErrorKind::timeout);
  });
  EXPECT_LT(Clock::now() - started, 30s);
}

TEST(NcclMultiGpu, AbortFromAnyThreadWakesEveryRank) {
  TROUPE_REQUIRE_GPUS(2);
  auto group = make_nccl_group(every_gpu());
  std::thread aborter([&] {
    std::this_thread::sleep_for(300ms);
    group[0]->abort("a peer went away");
  });
  gpu_test::run_ranks(group, gpu_of, [&](int r, Collective& c) {
    if (r == 0) return;  // rank 0 never joins: the others would wait
    Tensor t = on_device(random_values(1000, 1), Device::cuda(r));
    CollectiveError e = error_of(c.allreduce(t, ReduceOp::sum), Clock::now() + 60s);
    EXPECT_EQ(e.kind(), CollectiveErrorKind::aborted) << e.what();
    EXPECT_NE(std::string(e.what()).find("a peer went away"), std::string::npos) << e.what();
  });
  aborter.join();
}

}  // namespace
}  // namespace troupe::net
