// Synchronized BatchNorm (`batchnorm sync=true`): replicas that reduce
// their statistics through a ReplicaReducer (models/layer.hpp) compute
// what one model computes on all their examples together, forward and
// backward, and a replica without examples joins without changing it.
#include <gtest/gtest.h>

#include <algorithm>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "kernels/math/random.hpp"
#include "kernels/ops.hpp"
#include "models/model.hpp"
#include "models/spec.hpp"

namespace troupe::models {
namespace {

// N threads' sum() calls meet: each waits for the others' tensors and all
// get the elementwise sum (a collective's semantics, in one process).
class ThreadsReducer {
 public:
  explicit ThreadsReducer(int parties) : parties_(parties) {}
  struct Party final : ReplicaReducer {
    ThreadsReducer* group = nullptr;
    void sum(const Tensor& t) override { group->meet(t); }
  };
  int calls() const { return calls_; }

 private:
  void meet(const Tensor& t) {
    std::unique_lock<std::mutex> lock(mutex_);
    const int generation = generation_;
    const std::vector<float> mine = t.to_vector();
    if (arrived_ == 0) total_.assign(mine.size(), 0.0f);
    EXPECT_EQ(total_.size(), mine.size()) << "the replicas reduced tensors of different sizes";
    total_.resize(std::max(total_.size(), mine.size()), 0.0f);
    for (std::size_t i = 0; i < mine.size(); ++i) total_[i] += mine[i];
    if (++arrived_ == parties_) {
      result_ = total_;
      arrived_ = 0;
      ++generation_;
      ++calls_;
      changed_.notify_all();
    } else {
      changed_.wait(lock, [&] { return generation_ != generation; });
    }
    t.copy_from(Tensor::from_vector(t.shape(), result_));
  }
  const int parties_;
  std::mutex mutex_;
  std::condition_variable changed_;
  int arrived_ = 0, generation_ = 0, calls_ = 0;
  std::vector<float> total_, result_;
};

constexpr const char* kSpec =
    "name sync_bn\ninput 2 5 5\nconv2d filters=3 kernel=3 bias=false\nbatchnorm sync=true\nrelu\nflatten\n"
    "dense units=4\n";

Tensor random_tensor(const Shape& shape, std::uint64_t seed) {
  std::vector<float> v(static_cast<std::size_t>(shape.numel()));
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = kernels::math::random_normal(seed, i);
  return Tensor::from_vector(shape, v);
}

Tensor rows(const Tensor& t, std::int64_t begin, std::int64_t count) {
  std::vector<std::int64_t> dims = t.shape().dims();
  const std::int64_t per = t.numel() / dims[0];
  dims[0] = count;
  return t.slice(begin * per, Shape(dims)).clone();
}

void expect_near(const std::vector<float>& a, const std::vector<float>& b, float tolerance, const char* what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  for (std::size_t i = 0; i < a.size(); ++i) ASSERT_NEAR(a[i], b[i], tolerance) << what << " element " << i;
}

// Replicas with `shares` examples each (0: a replica that joins only)
// against one model on all of them, for two steps.
void expect_replicas_equal_one_model(const std::vector<std::int64_t>& shares) {
  const ModelSpec spec = ModelSpec::parse(kSpec, "sync.spec");
  std::int64_t total = 0;
  for (auto n : shares) total += n;
  Model whole(spec, Device::cpu());
  whole.initialize(3);
  std::vector<std::unique_ptr<Model>> replicas;
  for (std::size_t r = 0; r < shares.size(); ++r) {
    replicas.push_back(std::make_unique<Model>(spec, Device::cpu()));
    replicas.back()->initialize(3);
  }
  ThreadsReducer group(static_cast<int>(shares.size()));
  for (int step = 0; step < 2; ++step) {
    const Tensor x = random_tensor(Shape({total, 2, 5, 5}), 10 + step);
    const Tensor dout = random_tensor(Shape({total, 4}), 20 + step);
    const std::vector<float> y = whole.forward(x, true).to_vector();
    whole.backward(dout);
    std::vector<std::vector<float>> outputs(shares.size()), grads(shares.size());
    std::vector<std::thread> threads;
    std::vector<ThreadsReducer::Party> parties(shares.size());
    std::int64_t begin = 0;
    for (std::size_t r = 0; r < shares.size(); ++r) {
      parties[r].group = &group;
      const std::int64_t from = begin, n = shares[r];
      begin += n;
      threads.emplace_back([&, r, from, n] {
        Model& m = *replicas[r];
        m.set_reducer(&parties[r]);
        if (n > 0) {
          outputs[r] = m.forward(rows(x, from, n), true).to_vector();
          m.backward(rows(dout, from, n));
        } else {
          kernels::ops::fill(m.gradients(), 0.0f);
          m.join_reductions();
        }
        m.set_reducer(nullptr);
        grads[r] = m.gradients().to_vector();
      });
    }
    for (auto& t : threads) t.join();
    // Each replica's outputs are the whole model's rows; the replicas'
    // gradients sum to the whole model's (what the gradient all-reduce
    // does); every replica keeps the whole model's running statistics.
    std::vector<float> joined, summed(grads[0].size(), 0.0f);
    for (std::size_t r = 0; r < shares.size(); ++r) {
      joined.insert(joined.end(), outputs[r].begin(), outputs[r].end());
      for (std::size_t i = 0; i < summed.size(); ++i) summed[i] += grads[r][i];
    }
    expect_near(joined, y, 1e-5f, "outputs");
    expect_near(summed, whole.gradients().to_vector(), 2e-4f, "gradients");
    for (auto& m : replicas)
      expect_near(m->state().to_vector(), whole.state().to_vector(), 1e-6f, "running statistics");
    // The replicas' parameters follow the whole model's (plain SGD on the
    // summed gradient), so the next step starts equal too.
    kernels::ops::axpy(-0.1f, whole.gradients(), whole.parameters());
    const Tensor step_taken = Tensor::from_vector(Shape({static_cast<std::int64_t>(summed.size())}), summed);
    for (auto& m : replicas) kernels::ops::axpy(-0.1f, step_taken, m->parameters());
  }
  // Per step: two reductions forward, one backward.
  EXPECT_EQ(group.calls(), 2 * 3);
}

TEST(SyncBatchNorm, TwoReplicasComputeWhatOneModelComputesOnBothBatches) { expect_replicas_equal_one_model({4, 4}); }

TEST(SyncBatchNorm, UnevenSharesAndAnEmptyReplicaThatOnlyJoins) { expect_replicas_equal_one_model({5, 0, 2}); }

TEST(SyncBatchNorm, WithoutAReducerItIsThePlainLayerAndTheTextKeepsTheOption) {
  const ModelSpec spec = ModelSpec::parse(kSpec, "sync.spec");
  EXPECT_NE(spec.text().find("batchnorm momentum=0.9 epsilon=1e-05 sync=true"), std::string::npos) << spec.text();
  EXPECT_EQ(ModelSpec::parse(spec.text(), "again").text(), spec.text());
  const ModelSpec plain = ModelSpec::parse(
      "name sync_bn\ninput 2 5 5\nconv2d filters=3 kernel=3 bias=false\nbatchnorm\nrelu\nflatten\n"
      "dense units=4\n",
      "plain.spec");
  EXPECT_EQ(plain.text().find("sync="), std::string::npos) << "an unsynchronized model's text changed";
  Model a(spec, Device::cpu()), b(plain, Device::cpu());
  EXPECT_TRUE(a.reduces_across_replicas());
  EXPECT_FALSE(b.reduces_across_replicas());
  a.initialize(1);
  b.initialize(1);
  const Tensor x = random_tensor(Shape({6, 2, 5, 5}), 4);
  EXPECT_EQ(a.forward(x, true).to_vector(), b.forward(x, true).to_vector());
  EXPECT_THROW(ModelSpec::parse("input 2 5 5\nbatchnorm sync=yes\nflatten\ndense units=2\n", "bad"),
               std::invalid_argument);
}

}  // namespace
}  // namespace troupe::models
