// MirroredStrategy's custom training loop (TF's strategy.run / reduce):
// one persistent thread per replica, each owning a models::Model and its
// optimizer on its device; gradients are summed with the `local` collective
// (net/collective/local.hpp), so every replica applies the same update and
// the replicas stay bitwise identical.
//
//   run(step_fn, lr)
//     every replica thread, at once:
//       next batch of its shard (data::BatchIterator, rank r of W)
//       value_r = step_fn(ctx_r)          forward, compute_average_loss, backward
//                                         (the seed, loss and finite checks: models/step.hpp)
//       all-reduce(SUM) of the gradient   net::Collective "local"
//       optimizer step with lr
//     the caller waits for all, rethrows the first failure
#include <condition_variable>
#include <exception>
#include <mutex>
#include <stdexcept>
#include <thread>

#include "kernels/registry.hpp"
#include "models/loss.hpp"
#include "models/step.hpp"
#include "net/collective/local.hpp"
#include "troupe/troupe.hpp"

namespace troupe {

struct ReplicaContext::Internals {
  models::Loss* loss = nullptr;
  Tensor dout;
};

double ReplicaContext::compute_average_loss(const Tensor& output) {
  if (!internals)
    throw std::logic_error("compute_average_loss: this ReplicaContext was not made by MirroredStrategy::run");
  Tensor& dout = models::output_gradient_buffer(internals->dout, output);
  // Scale by the GLOBAL batch: the replicas' gradients are then summed.
  const float scale = 1.0f / static_cast<float>(global_batch);
  const double loss_sum = internals->loss->sum(output, labels, dout, scale);
  // As every driver checks (models/step.hpp): before the all-reduce, so a
  // diverged replica fails the step on every replica.
  models::check_loss_finite(loss_sum, step + 1, replica_id);
  return loss_sum / static_cast<double>(global_batch);
}

const Tensor& ReplicaContext::output_gradient() const {
  if (!internals || !internals->dout.defined())
    throw std::logic_error("output_gradient: call compute_average_loss first");
  return internals->dout;
}

struct MirroredStrategy::Loop {
  struct Replica {
    Device device;
    std::unique_ptr<Model> model;
    std::unique_ptr<models::Optimizer> optimizer;
    std::unique_ptr<models::Loss> loss;
    std::unique_ptr<data::BatchIterator> batches;
    std::unique_ptr<net::Collective> collective;
    Tensor x_host, y_host, x_dev, y_dev, grad_host;
    ReplicaContext::Internals internals;
  };
  std::vector<Replica> replicas;
  Dataset train;
  bool distributed = false;
  std::int64_t global_batch = 0;
  std::uint64_t seed = 0;
  std::int64_t step = 0;
  bool broken = false;
  std::chrono::milliseconds timeout{60000};

  // Worker threads: one per replica, woken per run() by a new generation.
  std::vector<std::thread> threads;
  std::mutex mutex;
  std::condition_variable work_cv, done_cv;
  std::uint64_t generation = 0;
  int remaining = 0;
  bool quit = false;
  std::function<void(int)> task;
  std::vector<std::exception_ptr> errors;

  ~Loop() {
    {
      std::lock_guard<std::mutex> lock(mutex);
      quit = true;
    }
    work_cv.notify_all();
    for (auto& t : threads) t.join();
  }

  void worker(int r) {
    const Device device = replicas[static_cast<std::size_t>(r)].device;
    // Each replica's kernels use one thread of their own (like a device actor).
    kernels::Registry::instance().for_device(device).set_threads(1);
    std::uint64_t seen = 0;
    for (;;) {
      std::unique_lock<std::mutex> lock(mutex);
      work_cv.wait(lock, [&] { return quit || generation != seen; });
      if (quit) return;
      seen = generation;
      std::function<void(int)> t = task;
      lock.unlock();
      try {
        t(r);
      } catch (...) {
        errors[static_cast<std::size_t>(r)] = std::current_exception();
      }
      lock.lock();
      if (--remaining == 0) done_cv.notify_all();
    }
  }

  // Runs t(r) on every replica's thread and waits for all of them.
  void on_every_replica(std::function<void(int)> t) {
    const int world = static_cast<int>(replicas.size());
    if (threads.empty())
      for (int r = 0; r < world; ++r) threads.emplace_back([this, r] { worker(r); });
    std::unique_lock<std::mutex> lock(mutex);
    task = std::move(t);
    errors.assign(replicas.size(), nullptr);
    remaining = world;
    ++generation;
    work_cv.notify_all();
    done_cv.wait(lock, [&] { return remaining == 0; });
  }
};

MirroredStrategy::MirroredStrategy(std::vector<Device> devices) : Strategy(std::move(devices), "sync") {}
MirroredStrategy::~MirroredStrategy() = default;

void MirroredStrategy::create_replicas(const ModelSpec& spec, const OptimizerConfig& optimizer, std::uint64_t seed) {
  const int world = num_replicas_in_sync();
  auto loop = std::make_unique<Loop>();
  auto group = net::make_local_group(world, net::CollectiveOptions{loop->timeout});
  for (int r = 0; r < world; ++r) {
    Loop::Replica rep;
    rep.device = devices()[static_cast<std::size_t>(r)];
    rep.model = std::make_unique<Model>(spec, rep.device);
    rep.model->initialize(seed);  // the same seed everywhere: identical replicas
    rep.optimizer = models::make_optimizer(optimizer, rep.model->parameters(), rep.model->decayed_ranges());
    rep.collective = std::move(group[static_cast<std::size_t>(r)]);
    loop->replicas.push_back(std::move(rep));
  }
  loop->seed = seed;
  loop_ = std::move(loop);
}

void MirroredStrategy::distribute(const Dataset& train, std::int64_t global_batch, std::uint64_t seed, bool shuffle) {
  if (!loop_) throw std::logic_error("MirroredStrategy::distribute: call create_replicas first");
  const int world = num_replicas_in_sync();
  if (global_batch < world || global_batch % world != 0)
    throw std::invalid_argument("MirroredStrategy::distribute: the global batch (" + std::to_string(global_batch) +
                                ") must be a positive multiple of the " + std::to_string(world) + " replicas");
  if (train.size() < global_batch)
    throw std::invalid_argument("MirroredStrategy::distribute: " + train.name + " has " + std::to_string(train.size()) +
                                " examples, fewer than one global batch of " + std::to_string(global_batch));
  Loop& loop = *loop_;
  loop.train = train;
  loop.global_batch = global_batch;
  const std::int64_t per_replica = global_batch / world;
  // Full batches only, so every step's global batch is exactly global_batch.
  const data::PlanOptions plan = data::plan_options(train, per_replica, shuffle, seed, /*drop_remainder=*/true);
  const models::LossKind kind = train.task == data::Task::classification
                                    ? models::LossKind::sparse_categorical_crossentropy
                                    : models::LossKind::mean_squared_error;
  for (int r = 0; r < world; ++r) {
    auto& rep = loop.replicas[static_cast<std::size_t>(r)];
    rep.batches = std::make_unique<data::BatchIterator>(plan, data::Shard{r, world});
    rep.x_host = train.make_feature_batch(per_replica);
    rep.y_host = train.make_label_batch(per_replica);
    rep.loss = std::make_unique<models::Loss>(kind);
    rep.internals.loss = rep.loss.get();
  }
  loop.step = 0;
  loop.distributed = true;
}

std::int64_t MirroredStrategy::steps_per_epoch() const {
  if (!loop_ || !loop_->distributed) throw std::logic_error("MirroredStrategy::steps_per_epoch: call distribute first");
  return loop_->replicas[0].batches->batches_per_epoch();
}

std::int64_t MirroredStrategy::epoch() const {
  if (!loop_ || !loop_->distributed) throw std::logic_error("MirroredStrategy::epoch: call distribute first");
  return loop_->replicas[0].batches->cursor().epoch;
}

Model& MirroredStrategy::replica(int r) {
  if (!loop_) throw std::logic_error("MirroredStrategy::replica: call create_replicas first");
  if (r < 0 || r >= num_replicas_in_sync())
    throw std::out_of_range("MirroredStrategy::replica: " + std::to_string(r) + " is not in [0, " +
                            std::to_string(num_replicas_in_sync()) + ")");
  return *loop_->replicas[static_cast<std::size_t>(r)].model;
}

PerReplica MirroredStrategy::run(const StepFn& step_fn, float lr) {
  if (!loop_ || !loop_->distributed)
    throw std::logic_error("MirroredStrategy::run: call create_replicas and distribute first");
  Loop& loop = *loop_;
  if (loop.broken)
    throw std::logic_error("MirroredStrategy::run: an earlier step failed and broke the replicas' collective group");
  const int world = num_replicas_in_sync();
  PerReplica out;
  out.values.assign(static_cast<std::size_t>(world), 0.0);
  const std::int64_t step = loop.step;

  loop.on_every_replica([&](int r) {
    auto& rep = loop.replicas[static_cast<std::size_t>(r)];
    try {
      // The cuda ops run on the calling thread's current GPU; synchronize()
      // makes this replica's GPU current.
      if (rep.device.is_cuda()) kernels::Registry::instance().for_device(rep.device).synchronize(rep.device.index);
      data::BatchIterator::Batch b = rep.batches->next();
      const std::int64_t n = loop.train.gather(b.indices, rep.x_host, rep.y_host);
      const Tensor xb = rep.x_host.slice(0, models::batched(n, loop.train.feature_shape()));
      const Tensor yb = rep.y_host.slice(0, models::batched(n, loop.train.label_shape()));
      const Tensor& x = models::on_device(xb, rep.x_dev, rep.device);
      const Tensor& y = models::on_device(yb, rep.y_dev, rep.device);
      rep.model->set_step_seed(models::step_seed(loop.seed, r, step));
      ReplicaContext ctx{r, world, step, loop.global_batch, n, *rep.model, rep.device, x, y, &rep.internals};
      out.values[static_cast<std::size_t>(r)] = step_fn(ctx);

      // Sum the gradients over the replicas. The local collective needs one
      // memory space: CPU devices share the host's; GPUs go through it.
      const Tensor& grads = rep.model->gradients();
      const net::Deadline deadline = net::Clock::now() + loop.timeout;
      if (rep.device.is_cpu()) {
        rep.collective->allreduce(grads, net::ReduceOp::sum)->wait(deadline);
      } else {
        if (!rep.grad_host.defined()) rep.grad_host = Tensor::empty(grads.shape(), kernels::DType::f32, Device::cpu());
        rep.grad_host.copy_from(grads);
        rep.collective->allreduce(rep.grad_host, net::ReduceOp::sum)->wait(deadline);
        grads.copy_from(rep.grad_host);
      }
      models::check_gradient_finite(grads, step + 1, r);
      models::clip_gradient_norm(grads, rep.optimizer->config().clip_norm);  // the summed gradient
      rep.optimizer->step(rep.model->parameters(), grads, lr);
    } catch (const net::CollectiveError&) {
      throw;  // another replica failed first (or timed out)
    } catch (const std::exception& e) {
      // Fail the step on every replica now rather than at their deadline.
      rep.collective->abort("replica " + std::to_string(r) + " failed: " + e.what());
      throw;
    }
  });

  // The first failure that is not a consequence of another's.
  std::exception_ptr first, collective;
  for (auto& e : loop.errors) {
    if (!e) continue;
    try {
      std::rethrow_exception(e);
    } catch (const net::CollectiveError&) {
      if (!collective) collective = e;
    } catch (...) {
      if (!first) first = e;
    }
  }
  if (first || collective) {
    loop.broken = true;
    std::rethrow_exception(first ? first : collective);
  }
  ++loop.step;
  return out;
}

double MirroredStrategy::reduce(ReduceOp op, const PerReplica& values) {
  double sum = 0;
  for (double v : values.values) sum += v;
  if (op == ReduceOp::MEAN) return values.values.empty() ? 0.0 : sum / double(values.values.size());
  return sum;
}

}  // namespace troupe
