// The GPU tests' shared bodies (gpu_support.hpp): one check of each
// collective operation that both the nccl group (a rank per GPU) and the
// local group on one GPU (logical replicas) must pass.
#include "tests/gpu/gpu_support.hpp"

#include <chrono>
#include <exception>
#include <limits>
#include <thread>

namespace troupe::gpu_test {

using kernels::Tensor;
using net::Collective;
using namespace std::chrono_literals;

namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

void wait(const std::shared_ptr<net::Work>& work) { work->wait(net::Clock::now() + 30s); }

}  // namespace

void run_ranks(std::vector<std::unique_ptr<Collective>>& group, const DeviceOf& device_of,
               const std::function<void(int, Collective&)>& body) {
  std::vector<std::thread> threads;
  std::vector<std::exception_ptr> errors(group.size());
  for (std::size_t r = 0; r < group.size(); ++r)
    threads.emplace_back([&, r] {
      try {
        make_current(device_of(static_cast<int>(r)));  // the cuda ops run on the thread's current GPU
        body(static_cast<int>(r), *group[r]);
      } catch (...) {
        errors[r] = std::current_exception();
      }
    });
  for (auto& t : threads) t.join();
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
}

void expect_allreduce_matches_reference(std::vector<std::unique_ptr<Collective>>& group, const DeviceOf& device_of,
                                        const std::vector<std::int64_t>& sizes) {
  const int w = static_cast<int>(group.size());
  for (std::int64_t n : sizes) {
    for (net::ReduceOp op : {net::ReduceOp::sum, net::ReduceOp::mean}) {
      std::vector<std::vector<float>> inputs, outputs(static_cast<std::size_t>(w));
      for (int r = 0; r < w; ++r) inputs.push_back(random_values(n, static_cast<unsigned>(r * 100 + n)));
      run_ranks(group, device_of, [&](int r, Collective& c) {
        Tensor t = on_device(inputs[static_cast<std::size_t>(r)], device_of(r));
        wait(c.allreduce(t, op));
        outputs[static_cast<std::size_t>(r)] = t.to_vector();
      });
      for (std::int64_t i = 0; i < n; ++i) {
        double expect = 0;
        for (int r = 0; r < w; ++r) expect += inputs[static_cast<std::size_t>(r)][static_cast<std::size_t>(i)];
        if (op == net::ReduceOp::mean) expect /= w;
        ASSERT_NEAR(outputs[0][static_cast<std::size_t>(i)], expect, 1e-5 * w)
            << net::to_string(op) << " of " << n << ", element " << i;
      }
      for (int r = 1; r < w; ++r) EXPECT_EQ(outputs[static_cast<std::size_t>(r)], outputs[0]) << "rank " << r;
    }
  }
}

void expect_broadcast_from_each_root(std::vector<std::unique_ptr<Collective>>& group, const DeviceOf& device_of) {
  const int w = static_cast<int>(group.size());
  for (int root = 0; root < w; ++root) {
    const auto values = random_values(5000, static_cast<unsigned>(root));
    run_ranks(group, device_of, [&](int r, Collective& c) {
      Tensor t = r == root ? on_device(values, device_of(r)) : Tensor::full({5000}, kNaN).to(device_of(r));
      wait(c.broadcast(t, root));
      EXPECT_EQ(t.to_vector(), values) << "rank " << r << ", root " << root;
    });
  }
}

void expect_scatter_gather_match_reference(std::vector<std::unique_ptr<Collective>>& group, const DeviceOf& device_of,
                                           std::int64_t chunk) {
  const int w = static_cast<int>(group.size());
  std::vector<std::vector<float>> inputs;
  for (int r = 0; r < w; ++r) inputs.push_back(random_values(chunk * w, static_cast<unsigned>(r + 7)));
  auto input = [&](int r, std::int64_t i) { return inputs[static_cast<std::size_t>(r)][static_cast<std::size_t>(i)]; };
  run_ranks(group, device_of, [&](int r, Collective& c) {
    Tensor in = on_device(inputs[static_cast<std::size_t>(r)], device_of(r));
    Tensor out = Tensor::full({chunk}, kNaN).to(device_of(r));
    wait(c.reduce_scatter(in, out, net::ReduceOp::sum));
    const auto got = out.to_vector();
    for (std::int64_t i = 0; i < chunk; ++i) {
      double expect = 0;
      for (int j = 0; j < w; ++j) expect += input(j, r * chunk + i);
      ASSERT_NEAR(got[static_cast<std::size_t>(i)], expect, 1e-5 * w) << "rank " << r << ", element " << i;
    }
    Tensor gathered = Tensor::full({chunk * w}, kNaN).to(device_of(r));
    wait(c.allgather(in.slice(r * chunk, kernels::Shape{chunk}), gathered));
    const auto all = gathered.to_vector();
    for (int j = 0; j < w; ++j)
      for (std::int64_t i = 0; i < chunk; ++i)
        ASSERT_EQ(all[static_cast<std::size_t>(j * chunk + i)], input(j, j * chunk + i)) << "rank " << r;
  });
}

}  // namespace troupe::gpu_test
