// JobRun's first phase: the first view (job_run.hpp).
#include <caf/all.hpp>

#include <atomic>
#include <cstdio>
#include <map>

#include "actors/data_loader.hpp"
#include "actors/device.hpp"
#include "job/job_run.hpp"
#include "job/replica.hpp"
#include "net/control/address.hpp"

namespace troupe::actors {

namespace {

// One state onto the replicas `devices` from `first` on (a resume, or the
// nodes' initial parameters), each with its own clock and data cursor (0
// and the beginning when none are planned). The answers are awaited
// together, each request from an actor of its own, so that a node lost
// meanwhile is seen within 100 ms (CAF 0.17 fails a request to a lost node
// only at its timeout): before training starts that is a member of the
// first view lost, and the job starts again without it while it may
// (FirstViewLost).
// One of install_state's helpers: it sends its request when it starts and
// answers the job's thread; it takes no message of its own.
using install_helper_t = caf::typed_actor<caf::reacts_to<caf::ok_atom>>;

void install_state(caf::scoped_actor& self, const ClusterStart* cluster, const std::vector<device_actor_t>& devices,
                   const ReplicaState& state, std::size_t first, const std::vector<std::int64_t>& clocks,
                   const std::vector<data::Cursor>& cursors, std::chrono::milliseconds timeout,
                   const std::string& what) {
  static std::atomic<std::uint64_t> installs{0};
  const std::uint64_t id = ++installs;
  const caf::actor me = caf::actor_cast<caf::actor>(self);
  std::vector<bool> waiting(devices.size(), false);
  std::size_t pending = 0;
  // A request to a lost node's replica stays until its timeout: its actor
  // is ended when this gives up (it would hold the actor system's end).
  struct Helpers {
    caf::scoped_actor& self;
    std::vector<bool>& waiting;
    std::vector<install_helper_t> of_rank;
    ~Helpers() {
      for (std::size_t r = 0; r < of_rank.size(); ++r)
        if (waiting[r] && of_rank[r]) self->send_exit(of_rank[r], caf::exit_reason::user_shutdown);
    }
  } helpers{self, waiting, std::vector<install_helper_t>(devices.size())};
  for (std::size_t r = first; r < devices.size(); ++r) {
    const data::Cursor at = r < cursors.size() ? cursors[r] : data::Cursor{};
    const ReplicaPosition position{clocks.empty() ? 0 : clocks[r], at.epoch, at.batch, at.offset};
    const auto rank = static_cast<std::int32_t>(r);
    helpers.of_rank[r] =
        self->system().spawn([=, device = devices[r]](install_helper_t::pointer a) -> install_helper_t::behavior_type {
          auto answer = [=](const std::string& why) {
            caf::anon_send(me, set_state_atom::value, id, rank, why);  // `me` is a blocking actor: not typed
            a->quit();
          };
          a->request(device, timeout, set_state_atom::value, state, position)
              .then([=](caf::ok_atom) { answer(""); }, [=](caf::error& e) { answer(a->system().render(e)); });
          return {[](caf::ok_atom) {}};  // nothing else to do: it ends with the answer
        });
    waiting[r] = true;
    ++pending;
  }
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  std::string error;
  while (pending > 0 && error.empty()) {
    self->receive(
        [&](set_state_atom, std::uint64_t of, std::int32_t rank, const std::string& why) {
          if (of != id || rank < 0 || static_cast<std::size_t>(rank) >= waiting.size() || !waiting[rank]) return;
          waiting[rank] = false;
          --pending;
          if (!why.empty()) error = what + ": replica " + std::to_string(rank) + ": " + why;
        },
        caf::after(std::chrono::milliseconds(100)) >> [] {});
    if (!error.empty() || pending == 0) break;
    for (std::size_t r = 0; r < waiting.size() && error.empty(); ++r) {
      if (!waiting[r] || !cluster) continue;
      const int node = cluster->node_of_rank(static_cast<int>(r));
      if (node > 0 && cluster->node_gone(node)) {
        const std::string why = what + ": node " + std::to_string(node) + " (replica " + std::to_string(r) +
                                ") was lost before training started";
        if (cluster->may_start_again()) throw FirstViewLost(why);
        error = why;
      }
    }
    if (error.empty() && std::chrono::steady_clock::now() >= deadline)
      error = what + ": no answer from " + std::to_string(pending) + " replica(s) within " +
              net::describe_seconds(std::chrono::duration<double>(timeout).count());
  }
  if (!error.empty()) throw std::runtime_error(error);
}
}  // namespace

JobRun::JobRun(Job& job, const models::Callbacks& callbacks, caf::actor_system& system,
               std::optional<checkpoint::State> resumed, std::string resumed_path, Position start)
    : job_(job),
      config_(job.config_),
      data_(job.data_),
      spec_(job.spec_),
      parameter_count_(job.parameter_count_),
      state_count_(job.state_count_),
      decayed_(job.decayed_),
      partition_(job.partition_),
      batches_per_epoch_(job.batches_per_epoch_),
      checkpoints_(job.checkpoints_),
      t(job.config_.train),
      callbacks(callbacks),
      local(static_cast<int>(job.config_.devices.size())),
      cluster(job.config_.cluster.get()),
      train_data(std::make_shared<const data::Dataset>(job.data_.train)),
      test_data(std::make_shared<const data::Dataset>(job.data_.test)),
      schedule(std::make_shared<const models::LrSchedule>(t.schedule, t.lr, t.warmup_steps)),
      resumed(std::move(resumed)),
      resumed_path(std::move(resumed_path)),
      start_at(start),
      system(system),
      self(system),
      world(local) {}

void JobRun::shutdown(const std::string& why) {
  // A device blocked in a push handles no exit: fail its push first.
  if (push_routes) push_routes->registry->abort(why);
  for (auto& a : devices) self->send_exit(a, caf::exit_reason::user_shutdown);
  for (auto& a : loaders) self->send_exit(a, caf::exit_reason::user_shutdown);
  if (server.front) self->send_exit(server.front, caf::exit_reason::user_shutdown);  // and its shards (linked)
  for (auto& a : server.shards) self->send_exit(a, caf::exit_reason::user_shutdown);
}

// Anything failing before training starts must still stop what was
// spawned (~actor_system waits for every live actor) and tell the nodes.
void JobRun::start() {
  try {
    // A cluster first gathers its nodes: the world is every node's devices.
    std::vector<int> remote_counts;
    if (cluster) remote_counts = cluster->gather(self);
    // A member lost while the first view forms: everything that depends on
    // the world (the data plan, the shards, a resume's positions) is made
    // again for the nodes left, and the next view is tried
    // (FirstViewLost).
    const std::shared_ptr<const ps::Partition> own_partition = partition_;  // shards in this process
    for (;;) {
      partition_ = own_partition;
      try {
        start_world(remote_counts);
      } catch (const FirstViewLost& e) {
        undo_start(e.what());
        remote_counts = cluster->regather(self, e.what());
        continue;
      }
      break;
    }
  } catch (const std::exception& e) {
    for (auto& c : collectives) c->abort("the job could not start");
    if (cluster) cluster->finish(self, e.what());
    shutdown();
    throw;
  }
}

// Everything a try started for its world goes: the collectives, this
// host's replicas, the shards (the next try places them anew).
void JobRun::undo_start(const std::string& why) {
  for (auto& c : collectives) c->abort(why);
  shutdown(why);
  collectives.clear();
  push_routes = nullptr;
  devices.clear();
  loaders.clear();
  all_devices.clear();
  server = ps::ParameterServer{};
  start_clocks.clear();
  start_cursors.clear();
  data_start = DataStart{};
}

void JobRun::start_world(const std::vector<int>& remote_counts) {
  world = local;
  for (int n : remote_counts) world += n;
  {  // (a try after a loss may be back to this host alone)
    data::PlanOptions plan{data_.train.size(), t.batch, t.shuffle, t.seed, t.drop_remainder};
    batches_per_epoch_ = data::batches_per_epoch(plan, {0, world});
    if (batches_per_epoch_ < 1) {
      const std::string why = "dataset " + t.data + " has " + std::to_string(data_.train.size()) +
                              " training examples, fewer than one global batch of " +
                              std::to_string(t.batch * static_cast<std::int64_t>(world));
      throw std::invalid_argument(why);
    }
  }

  pc.partition = partition_;
  pc.optimizer = t.optimizer;
  pc.decayed = decayed_;
  pc.schedule = schedule;
  pc.replicas = world;
  pc.metrics = config_.metrics;
  pc.timeout = config_.timeout;
  const std::vector<ClusterHooks::PsTask> ps_tasks =
      cluster ? cluster->ps_tasks() : std::vector<ClusterHooks::PsTask>{};
  if (ps_tasks.empty()) {
    server = ps::spawn_parameter_server(system, pc);
    if (cluster) {
      std::map<int, std::shared_ptr<ps::ShardCore>> mine;
      for (std::size_t i = 0; i < server.cores.size(); ++i) mine[static_cast<int>(i)] = server.cores[i];
      cluster->serve_shards(mine, *server.partition, config_.ps_shards);
    }
  } else {
    // Shards on ps tasks: at least one per task (TF places variables
    // round-robin on its ps tasks), shard i on task i mod P; every replica
    // pushes each its part on the data plane.
    const int tasks = static_cast<int>(ps_tasks.size());
    const int wanted = std::max(config_.ps_shards, tasks);
    ps_wanted = wanted;
    partition_ = std::make_shared<const ps::Partition>(ps::partition_for(spec_, wanted, config_.ps_split_above));
    pc.partition = partition_;
    // Staleness is measured where the shards run; shard 0 answers each
    // push's to the pusher, whose step report brings it to /metrics.
    pc.metrics = nullptr;
    if (config_.metrics) config_.metrics->staleness_from_reports();
    ClusterHooks::Placement placed = cluster->replace_shards(self, *partition_, world, {}, decayed_);
    if (!placed.error.empty()) throw std::runtime_error(placed.error);
    server = ps::front_over(system, pc, ps::to_ps_actors(placed.handles));
    push_routes = cluster->place_shards(placed.addresses, wanted);
    std::fprintf(stderr, "parameter server: %s on %d ps task(s)\n", partition_->describe().c_str(), tasks);
  }

  // Where each replica resumes (its clock and data cursor), now that the
  // world size is known.
  if (resumed) {
    const data::PlanOptions data_plan{data_.train.size(), t.batch, t.shuffle, t.seed, t.drop_remainder};
    ResumePlan rp = plan_resume(*resumed, resumed_path, world, t.batch, data_plan);
    if (!rp.note.empty()) std::fprintf(stderr, "resume: %s\n", rp.note.c_str());
    start_clocks = std::move(rp.clocks);
    start_cursors = std::move(rp.cursors);
    data_start = rp.start;
  }
  if (cluster) {
    collectives = cluster->form(self, local, world, start_cursor(0));
    // A first view after one that did not form: the shards count its
    // pushes (a push carries its view).
    if (cluster->first_view() != 0) {
      std::string error;
      self->request(server.front, config_.timeout, view_clocks_atom::value, cluster->first_view(),
                    std::vector<std::int64_t>(static_cast<std::size_t>(world), 0))
          .receive([](caf::ok_atom) {}, [&](caf::error& e) { error = system.render(e); });
      if (!error.empty()) throw std::runtime_error("telling the shards the first view: " + error);
    }
  } else {
    for (auto& c : make_replica_group(config_.devices, net::CollectiveOptions{config_.timeout}))
      collectives.emplace_back(std::move(c));
  }
  for (int r = 0; r < local; ++r) {
    ReplicaPlan plan;
    plan.rank = r;
    plan.world = world;
    plan.device = config_.devices[static_cast<std::size_t>(r)];
    plan.train = t;
    plan.spec = spec_;
    plan.train_data = train_data;
    plan.test_data = r == 0 ? test_data : nullptr;
    plan.schedule = schedule;
    plan.collective = collectives[static_cast<std::size_t>(r)];
    plan.shards = server.shards;      // this process's replicas push to the shards directly
    plan.shard_cores = server.cores;  // (to their cores: in process, on the device's thread)
    plan.partition = server.partition;
    plan.push_routes = push_routes;
    plan.start = start_cursor(static_cast<std::size_t>(r));
    plan.prefetch = config_.prefetch;
    plan.threads = config_.threads_per_device;
    plan.timeout = config_.timeout;
    plan.elastic = cluster != nullptr;
    plan.view = cluster ? cluster->first_view() : 0;
    plan.timeline = config_.timeline;
    plan.track = r;
    ReplicaActors a = spawn_replica(system, plan);
    loaders.push_back(a.loader);
    devices.push_back(a.device);
  }
  // Every replica of the job in rank order: this host's, then the nodes'.
  all_devices = devices;
  if (cluster) {
    for (auto& d : cluster->remote_devices(self)) all_devices.push_back(d);
    // The nodes' replicas start from this host's parameters (identical
    // by seed anyway: this makes sure). A resumed state goes to all below.
    if (!resumed) {
      ReplicaState initial;
      std::string error;
      self->request(devices[0], config_.timeout, get_state_atom::value)
          .receive([&](ReplicaState& s) { initial = std::move(s); }, [&](caf::error& e) { error = system.render(e); });
      if (!error.empty()) throw std::runtime_error("reading the initial parameters: " + error);
      install_state(self, cluster, all_devices, initial, devices.size(), start_clocks, start_cursors, config_.timeout,
                    "sending the initial parameters to the nodes");
    }
  }
  if (resumed) {
    ReplicaState state;
    state.parameters = Tensor::from_vector({parameter_count_}, resumed->parameters);
    if (state_count_ > 0) state.model_state = Tensor::from_vector({state_count_}, resumed->model_state);
    for (const auto& b : resumed->optimizer.buffers)
      state.buffers.emplace_back(b.name, Tensor::from_vector({static_cast<std::int64_t>(b.values.size())}, b.values));
    for (const auto& [name, value] : resumed->optimizer.scalars) state.scalars.emplace_back(name, value);
    install_state(self, cluster, all_devices, state, 0, start_clocks, start_cursors, config_.timeout,
                  "resuming from " + resumed_path);
  }
}

}  // namespace troupe::actors
