#include "actors/device.hpp"

#include <cmath>
#include <type_traits>

#include "kernels/ops.hpp"
#include "kernels/registry.hpp"
#include "models/step.hpp"
#include "net/crypto/crypto.hpp"
#include "net/push/push_link.hpp"

namespace troupe::actors {

namespace {

using Self = std::remove_pointer_t<device_actor_t::stateful_pointer<DeviceState>>;

void fail(Self* self, const std::string& what) {
  auto& s = self->state;
  if (s.failed) return;
  s.failed = true;
  s.failure = "replica " + std::to_string(s.config.rank) + " on " + s.config.device.str() + ": " + what;
  if (s.config.collective) s.config.collective->abort(s.failure);
  // Before the first grant the coordinator is not known yet: the grant
  // handler reports the failure then (a replica that cannot be built must
  // never leave the job waiting for its steps).
  if (s.config.coordinator) self->send(s.config.coordinator, failed_atom::value, s.config.rank, s.failure);
}

// A step's all-reduce (sync) or push (async, ssp) failed in an elastic job:
// the view is changing, or the shards' state is restored.
struct Interrupted : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// A synchronized BatchNorm's reductions (models/layer.hpp's
// ReplicaReducer) go through the step's collective, within the step's
// deadline, before its gradient all-reduce: the same collectives in the
// same order on every replica. In an elastic job a failure interrupts the
// step as a failed gradient all-reduce does.
struct CollectiveReducer final : models::ReplicaReducer {
  const DeviceConfig& config;
  explicit CollectiveReducer(const DeviceConfig& c) : config(c) {}
  void sum(const Tensor& t) override {
    auto work = config.collective->allreduce(t, net::ReduceOp::sum);
    try {
      work->wait(net::Clock::now() + config.timeout);
    } catch (const std::exception& e) {
      if (config.elastic) throw Interrupted(e.what());
      throw;
    }
  }
};

// Hands the model a reducer for one step and takes it back however the
// step ends, so that no evaluation or later async step reduces.
struct ReducerForStep {
  models::Model& model;
  ReducerForStep(models::Model& m, models::ReplicaReducer* r) : model(m) { model.set_reducer(r); }
  ~ReducerForStep() { model.set_reducer(nullptr); }
};

// No more steps in this view; the coordinator forms the next one.
void interrupt(Self* self, const std::string& why) {
  auto& s = self->state;
  s.grant.up_to = s.clock;
  if (s.config.coordinator)
    self->send(s.config.coordinator, step_aborted_atom::value, s.config.view, s.config.rank, s.clock, why);
}

// A span of the step this replica is running (clock + 1) on the timeline.
void mark(const DeviceState& s, const char* name, net::Clock::time_point begin, net::Clock::time_point end) {
  if (s.config.timeline) s.config.timeline->span(s.config.track, name, begin, end, s.clock + 1, s.config.rank);
}

void maybe_continue(Self* self) {
  auto& s = self->state;
  if (!s.failed && s.clock >= s.grant.up_to && !s.idle_since && s.config.timeline) s.idle_since = net::Clock::now();
  if (s.failed || s.step_queued || s.clock >= s.grant.up_to) return;
  s.step_queued = true;
  self->send(self, step_atom::value);
}

// `started`: when the step asked for its batch; `wait_seconds`: its
// all-reduce or push round trip (StepReport, for /metrics).
void report(Self* self, double loss_sum, std::int64_t examples, std::int64_t correct, bool pushed,
            net::Clock::time_point started, double wait_seconds, std::int64_t staleness = -1) {
  auto& s = self->state;
  StepReport r;
  r.view = s.config.view;
  r.rank = s.config.rank;
  r.clock = s.clock;
  r.loss_sum = loss_sum;
  r.examples = examples;
  r.correct = correct;
  r.pushed = pushed;
  r.step_seconds = std::chrono::duration<double>(net::Clock::now() - started).count();
  r.wait_seconds = wait_seconds;
  r.staleness = staleness;
  self->send(s.config.coordinator, step_done_atom::value, r);
  maybe_continue(self);
}

// Forward and backward on one batch; returns the batch's loss sum and sets
// `correct` to the examples whose top-1 prediction was right.
double compute_gradient(DeviceState& s, const Batch& b, float grad_scale, std::int64_t& correct) {
  std::vector<std::int64_t> xdims = b.features.shape().dims(), ydims = b.labels.shape().dims();
  xdims[0] = b.examples;
  ydims[0] = b.examples;
  const Tensor xb = b.features.slice(0, kernels::Shape(xdims));
  const Tensor yb = b.labels.slice(0, kernels::Shape(ydims));
  const Tensor& x = models::on_device(xb, s.x_dev, s.config.device);
  const Tensor& y = models::on_device(yb, s.y_dev, s.config.device);
  // The step every driver takes (models/step.hpp).
  s.model->set_step_seed(models::step_seed(s.config.seed, s.config.rank, s.clock));
  models::StepTimes times;
  const models::StepResult stepped = models::forward_backward(*s.model, *s.loss, x, y, grad_scale, s.dout, &times);
  mark(s, "forward", times.forward, times.backward);
  mark(s, "backward", times.backward, times.end);
  if (s.classification) {
    s.metrics.reset();
    s.metrics.add(*stepped.output, y, stepped.loss_sum, /*classification=*/true);
    correct = s.metrics.top1_correct();
  }
  return stepped.loss_sum;
}

// A diverged step must not be applied: the state before it is the last
// finite one, and the job stops there with a checkpoint (the coordinator's
// failure path). The loss is checked before the all-reduce (a failing
// replica aborts it, so no other applies the step either); the gradient
// about to be applied after it, so every replica decides alike.
void check_loss(const DeviceState& s, double loss_sum) {
  models::check_loss_finite(loss_sum, s.clock + 1, s.config.rank);
}
void check_gradient(const DeviceState& s, const Tensor& gradient) {
  models::check_gradient_finite(gradient, s.clock + 1, s.config.rank);
}

// An async / ssp step whose every shard has answered (its fresh parameters
// unpacked into the model, or into the host copy of a GPU replica): the
// parameters go to the device, the spans are marked, the step is reported.
// `staleness`: shard 0's, from its answer on the data plane (-1 in process,
// where the shard records it itself).
void pushed(Self* self, double loss_sum, std::int64_t examples, std::int64_t correct, net::Clock::time_point started,
            net::Clock::time_point pushed_at, net::Clock::time_point answered, std::int64_t staleness = -1) {
  auto& s = self->state;
  if (s.config.device.is_cuda()) s.host_staging->pull(s.host_parameters, s.model->parameters());
  const double push_seconds = std::chrono::duration<double>(answered - pushed_at).count();
  mark(s, "push", pushed_at, answered);
  mark(s, "pull", answered, net::Clock::now());
  ++s.clock;
  report(self, loss_sum, examples, correct, true, started, push_seconds, staleness);
}

void run_step(Self* self, const Batch& b, net::Clock::time_point started) {
  auto& s = self->state;
  // The cuda ops run on the calling thread's current GPU; synchronize()
  // makes this replica's GPU current (and is cheap when it is idle).
  if (s.config.device.is_cuda())
    kernels::Registry::instance().for_device(s.config.device).synchronize(s.config.device.index);
  if (b.examples == 0) {
    // An empty batch (the last, partial global batch without
    // drop_remainder): contribute a zero gradient so the all-reduce matches.
    kernels::ops::fill(s.model->gradients(), 0.0f);
  }
  std::int64_t correct = 0;
  if (s.grant.mode.kind == Mode::Kind::sync) {
    // Synchronized BatchNorm reduces inside forward and backward; a replica
    // without examples joins those reductions with zeros.
    const bool reduces = s.model->reduces_across_replicas() && s.config.collective;
    CollectiveReducer reducer(s.config);
    ReducerForStep scoped(*s.model, reduces ? &reducer : nullptr);
    double loss_sum = 0.0;
    // The mean over the global batch: a partial last one (no drop_remainder)
    // has fewer examples than batch x world.
    const std::int64_t full = s.config.sync_batch;
    // Under fp16 the loss's gradient is also multiplied by the loss scale,
    // the same on every replica.
    models::LossScale& loss_scale = s.optimizer->loss_scale();
    const float scale =
        (b.global_examples > 0 && b.global_examples != full ? 1.0f / static_cast<float>(b.global_examples)
                                                            : s.config.sync_grad_scale) *
        loss_scale.factor();
    if (b.examples)
      loss_sum = compute_gradient(s, b, scale, correct);
    else if (reduces)
      s.model->join_reductions();
    check_loss(s, loss_sum);
    const auto reduce_started = net::Clock::now();
    auto work = s.config.collective->allreduce(s.model->gradients(), net::ReduceOp::sum);
    if (s.config.elastic) {
      try {
        work->wait(net::Clock::now() + s.config.timeout);
      } catch (const std::exception& e) {
        // Nothing of this step is applied: the replica stays at the last
        // step it completed. If another survivor completed this one, the
        // next view hands its state to this replica (view_start.hpp).
        throw Interrupted(e.what());
      }
    } else {
      work->wait(net::Clock::now() + s.config.timeout);
    }
    const auto reduced = net::Clock::now();
    const double reduce_seconds = std::chrono::duration<double>(reduced - reduce_started).count();
    mark(s, "all-reduce", reduce_started, reduced);
    // fp16: every replica unscales the same reduced gradient with the same
    // scale, so an overflow skips the step on all of them alike.
    bool apply = true;
    if (loss_scale.enabled())
      apply = loss_scale.unscale(s.model->gradients(), s.clock + 1, s.config.rank);
    else
      check_gradient(s, s.model->gradients());
    if (apply) {
      // The clip sees the reduced gradient, the same on every replica.
      models::clip_gradient_norm(s.model->gradients(), s.config.optimizer.clip_norm);
      const float lr = s.config.schedule->at(s.grant.global_at_base + (s.clock - s.grant.clock_at_base), s.grant.epoch);
      s.optimizer->step(s.model->parameters(), s.model->gradients(), lr);
    }
    mark(s, "optimizer", reduced, net::Clock::now());
    ++s.clock;
    report(self, loss_sum, b.examples, correct, false, started, reduce_seconds);
    return;
  }
  // async / ssp: the gradient of this replica's own mean loss goes to the server.
  const double loss_sum =
      b.examples ? compute_gradient(s, b, 1.0f / static_cast<float>(std::max<std::int64_t>(b.examples, 1)), correct)
                 : 0.0;
  check_loss(s, loss_sum);
  check_gradient(s, s.model->gradients());
  // Clipped here, over the whole pushed gradient: shards see parts only.
  models::clip_gradient_norm(s.model->gradients(), s.config.optimizer.clip_norm);
  // The gradient goes to the shards in their packed layout: one staging
  // buffer, each shard a view of its part (the next step rewrites it only
  // after every shard has answered this one), or, when one shard owns the
  // whole buffer, the gradient as it is. A GPU replica's gradient first
  // reaches the host through pinned memory (host_staging.hpp), and the
  // answers go to a host copy of its parameters.
  if (!s.config.partition)
    s.config.partition = std::make_shared<ps::Partition>(ps::Partition::whole(s.model->parameter_count()));
  // Chosen once per view (gradient_sink.hpp), not at every step.
  if (!s.sink)
    s.sink = make_gradient_sink(self, s.config.partition, s.config.push_routes, s.config.shard_cores, s.config.shards,
                                s.config.timeout);
  const ps::Partition& partition = s.sink->partition();
  const bool on_gpu = s.config.device.is_cuda();
  if (on_gpu && !s.host_staging) {
    s.host_staging = std::make_unique<HostStaging>(s.config.device, s.model->gradients().numel());
    s.host_parameters = Tensor::empty({s.model->parameter_count()});
  }
  // The shards live on the host (cpu:0); a CPU replica's gradient is host
  // memory too, whichever cpu:N it trains on, so it goes as a view of it.
  const Tensor& gradients = s.model->gradients();
  const Tensor flat =
      on_gpu ? s.host_staging->push(gradients)
             : Tensor::view(gradients.raw(), gradients.shape(), kernels::DType::f32, kernels::Device::cpu());
  GradientSink::Push push;
  push.view = s.config.view;
  push.rank = s.config.rank;
  push.clock = s.clock + 1;
  push.target = on_gpu ? s.host_parameters : s.model->parameters();
  if (partition.is_whole()) {
    push.packed = flat;
  } else {
    if (!s.staging.defined() || s.staging.raw() == nullptr) s.staging = Tensor::empty({partition.total()});
    partition.pack_all(flat, s.staging);
    push.packed = s.staging;
  }
  const std::int64_t examples = b.examples;
  const auto pushed_at = net::Clock::now();
  const bool elastic = s.config.elastic;
  s.sink->push(
      push,
      [=](net::Clock::time_point answered, std::int64_t staleness) {
        pushed(self, loss_sum, examples, correct, started, pushed_at, answered, staleness);
      },
      [=](const std::string& why, bool interrupted) {
        // Called inside push() when interrupted: the step's caller turns it
        // into a step_aborted (an elastic job survives a lost ps task).
        if (interrupted && elastic) throw Interrupted("its push to the parameter server failed: " + why);
        fail(self, interrupted ? "pushing its gradient to the parameter server: " + why : why);
      });
}

ReplicaState snapshot(const DeviceState& s) {
  ReplicaState out;
  out.clock = s.clock;
  out.parameters = s.model->parameters().to(kernels::Device::cpu());
  for (const auto& [name, buffer] : s.optimizer->buffers())
    out.buffers.emplace_back(name, buffer.to(kernels::Device::cpu()));
  out.scalars = s.optimizer->scalars();
  if (s.model->state_count() > 0) out.model_state = s.model->state().to(kernels::Device::cpu());
  return out;
}

}  // namespace

device_actor_t::behavior_type device_actor(Self* self, DeviceConfig config) {
  auto& s = self->state;
  s.config = std::move(config);
  try {
    kernels::Registry::instance().for_device(s.config.device).set_threads(s.config.threads);
    s.model = std::make_unique<models::Model>(s.config.spec, s.config.device);
    s.model->set_precision(s.config.precision);
    s.model->initialize(s.config.seed);  // the same seed on every replica: identical replicas
    s.optimizer = models::make_optimizer(s.config.optimizer, s.model->parameters(), s.model->decayed_ranges());
    // fp16's loss scale: the optimizer's state, so a replica joining a view
    // or resuming gets it with the rest (models/loss_scale.hpp).
    if (s.config.precision == kernels::ops::MatmulPrecision::fp16) {
      s.optimizer->loss_scale().enable();
      s.optimizer->loss_scale().set("loss_scale", s.config.initial_loss_scale);
    }
    s.classification = !s.config.regression;
    s.loss = std::make_unique<models::Loss>(
        s.config.regression ? models::LossKind::mean_squared_error : models::LossKind::sparse_categorical_crossentropy,
        s.config.label_smoothing);
  } catch (const std::exception& e) {
    fail(self, std::string("cannot build the replica: ") + e.what());
  }
  return {
      [=](grant_atom, const Grant& g) {
        // Grants come from the coordinator, which is spawned after the
        // devices: its handle arrives with the first one.
        if (!self->state.config.coordinator) {
          self->state.config.coordinator = caf::actor_cast<device_reports_t>(self->current_sender());
          if (self->state.failed)
            self->send(self->state.config.coordinator, failed_atom::value, self->state.config.rank,
                       self->state.failure);
        }
        if (g.view != self->state.config.view) {
          ++self->state.stale_grants;  // from a view this replica has left
          return;
        }
        auto& st = self->state;
        st.grant = g;
        if (st.idle_since && st.clock < g.up_to) {
          mark(st, "grant wait", *st.idle_since, net::Clock::now());
          st.idle_since.reset();
        }
        maybe_continue(self);
      },
      [=](step_atom) {
        auto& st = self->state;
        st.step_queued = false;
        if (st.failed || st.clock >= st.grant.up_to) return;
        const auto started = net::Clock::now();  // the step's time includes waiting for its batch
        self->request(st.config.loader, st.config.timeout, next_batch_atom::value)
            .await(
                [=](const Batch& b) {
                  mark(self->state, "data wait", started, net::Clock::now());
                  try {
                    run_step(self, b, started);
                  } catch (const Interrupted& e) {
                    interrupt(self, e.what());
                  } catch (const std::exception& e) {
                    fail(self, std::string("step ") + std::to_string(self->state.clock + 1) + ": " + e.what());
                  }
                },
                [=](caf::error& e) { fail(self, "waiting for its data loader: " + self->system().render(e)); });
      },
      [=](get_state_atom) -> caf::result<ReplicaState> {
        if (!self->state.model) return caf::make_error(caf::sec::runtime_error, self->state.failure);
        return snapshot(self->state);
      },
      // What sync promises: every replica holds the same bits. The coordinator
      // compares these at the end of a sync job (and the elastic tests across
      // view changes).
      [=](digest_atom) -> caf::result<std::string> {
        if (!self->state.model) return caf::make_error(caf::sec::runtime_error, self->state.failure);
        const ReplicaState state = snapshot(self->state);
        net::Sha256 h;
        h.update({static_cast<const char*>(state.parameters.raw()), state.parameters.bytes()});
        for (const auto& [name, buffer] : state.buffers) {
          h.update(name);
          h.update({static_cast<const char*>(buffer.raw()), buffer.bytes()});
        }
        for (const auto& [name, value] : state.scalars) {
          h.update(name);
          h.update({reinterpret_cast<const char*>(&value), sizeof value});
        }
        return net::to_hex(h.finish());
      },
      [=](set_state_atom, const ReplicaState& state) -> caf::result<caf::ok_atom> {
        if (!self->state.model) return caf::make_error(caf::sec::runtime_error, self->state.failure);
        restore_state(self->state.model->parameters(), *self->state.optimizer, state);
        restore_model_state(*self->state.model, state.model_state);
        return caf::ok_atom::value;
      },
      // The running statistics alone (BatchNorm), which the coordinator
      // averages over the replicas before an evaluation or a checkpoint.
      [=](model_state_atom) -> caf::result<Tensor> {
        if (!self->state.model) return caf::make_error(caf::sec::runtime_error, self->state.failure);
        return self->state.model->state().to(kernels::Device::cpu());
      },
      [=](model_state_atom, const Tensor& state) -> caf::result<caf::ok_atom> {
        if (!self->state.model) return caf::make_error(caf::sec::runtime_error, self->state.failure);
        restore_model_state(*self->state.model, state);
        return caf::ok_atom::value;
      },
      // Resume (and joins): the state, and the replica's own clock and data
      // position. The loader drops what it prefetched from its old cursor;
      // the reply waits until it has moved, so the first step after it reads
      // the right batch.
      [=](set_state_atom, const ReplicaState& state, const ReplicaPosition& at) -> caf::result<caf::ok_atom> {
        auto& st = self->state;
        if (!st.model) return caf::make_error(caf::sec::runtime_error, st.failure);
        if (st.clock != st.grant.up_to && st.grant.up_to > 0)
          return caf::make_error(caf::sec::runtime_error,
                                 "replica " + std::to_string(st.config.rank) + " was moved while it had steps granted");
        restore_state(st.model->parameters(), *st.optimizer, state);
        restore_model_state(*st.model, state.model_state);
        st.clock = at.clock;
        st.grant.up_to = at.clock;
        auto rp = self->make_response_promise<caf::ok_atom>();
        self->request(st.config.loader, st.config.timeout, seek_atom::value,
                      data::Cursor{at.epoch, at.batch, at.offset})
            .then([=](caf::ok_atom) mutable { rp.deliver(caf::ok_atom::value); },
                  [=](caf::error& e) mutable { rp.deliver(std::move(e)); });
        return rp;
      },
      [=](halt_atom) -> std::int64_t {
        auto& st = self->state;
        st.grant.up_to = st.clock;
        return st.clock;
      },
      // A new membership view. Every replica of it starts at a.clock, the
      // newest step a survivor completed: a survivor a step behind (its
      // all-reduce failed where another's completed) and a joiner take the
      // clock here and the state in set_state (view_start.hpp). Nobody is
      // ever ahead of it.
      [=](reconfig_atom, const ViewAssignment& a) -> caf::result<caf::ok_atom> {
        auto& st = self->state;
        if (!st.model) return caf::make_error(caf::sec::runtime_error, st.failure);
        if (st.clock > a.clock)
          return caf::make_error(caf::sec::runtime_error, "replica " + std::to_string(st.config.rank) + " is at step " +
                                                              std::to_string(st.clock) + ", past step " +
                                                              std::to_string(a.clock) + " where view " +
                                                              std::to_string(a.view) + " starts");
        st.config.view = a.view;
        st.config.rank = a.rank;
        st.config.collective = a.collective;
        if (a.push_routes && a.push_routes != st.config.push_routes) {
          // The shards were placed anew: a new sink, new links at the next push.
          st.config.push_routes = a.push_routes;
          st.sink.reset();
        }
        st.config.sync_grad_scale = 1.0f / static_cast<float>(a.batch_size * a.world);
        st.config.sync_batch = a.batch_size * a.world;
        st.clock = a.clock;
        st.grant = Grant{};
        st.grant.view = a.view;
        st.grant.up_to = a.clock;
        auto rp = self->make_response_promise<caf::ok_atom>();
        self->request(st.config.loader, st.config.timeout, reshard_atom::value,
                      LoaderView{a.batch_size, a.rank, a.world, a.cursor})
            .then([=](caf::ok_atom) mutable { rp.deliver(caf::ok_atom::value); },
                  [=](caf::error& e) mutable { rp.deliver(std::move(e)); });
        return rp;
      },
      [=](evaluate_atom) -> models::EpochResult {
        auto& st = self->state;
        if (!st.config.test) return models::EpochResult{};
        return models::evaluate_model(*st.model, *st.config.test, st.config.eval_batch);
      },
  };
}

}  // namespace troupe::actors
