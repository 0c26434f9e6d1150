#include "job/job.hpp"

#include <caf/all.hpp>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <future>
#include <optional>
#include <thread>

#include "actors/coordinator/resume.hpp"
#include "actors/data_loader.hpp"
#include "actors/device.hpp"
#include "actors/ps/parameter_server.hpp"
#include "job/collective_choice.hpp"
#include "job/replica.hpp"
#include "kernels/registry.hpp"
#include "models/warm_up.hpp"
#include "net/collective/nccl.hpp"
#include "net/control/address.hpp"

namespace troupe::actors {

// How long a control request (a mode switch, a checkpoint: answered at the
// next step boundary) may wait for the coordinator's answer.
constexpr int kControlAnswerSeconds = 10;

std::vector<kernels::Device> default_devices() {
  return default_devices_for(kernels::cuda_device_count(), std::thread::hardware_concurrency());
}

std::vector<kernels::Device> parse_devices(const std::string& text) {
  std::vector<kernels::Device> out;
  std::size_t start = 0;
  while (start <= text.size()) {
    const std::size_t comma = text.find(',', start);
    const std::string item = text.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    kernels::Device d = kernels::Device::parse(item);
    // A GPU named again is another logical replica on it (the local backend
    // sums them on the GPU); CPU devices are logical already: name cpu:0,cpu:1.
    if (d.is_cpu())
      for (const auto& seen : out)
        if (seen == d)
          throw std::invalid_argument("--devices names " + d.str() +
                                      " twice; CPU replicas are numbered (cpu:0,cpu:1), only a GPU may be repeated "
                                      "(cuda:0,cuda:0: two logical replicas on one GPU)");
    out.push_back(d);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

Job::Job(JobConfig config) : config_(std::move(config)) {
  auto& t = config_.train;
  if (config_.devices.empty()) config_.devices = default_devices();
  if (t.epochs < 1) throw std::invalid_argument("--epochs must be at least 1");
  if (t.batch < 1) throw std::invalid_argument("--batch must be at least 1");
  if (config_.prefetch < 1) throw std::invalid_argument("--prefetch must be at least 1");
  if (config_.threads_per_device < 1) throw std::invalid_argument("--threads-per-device must be at least 1");
  // Which backend reduces the replicas (collective_choice.hpp); refuses
  // mixed CPU and GPU devices, whatever this machine has.
  collective_choice_ = choose_collective(config_.devices, net::nccl_built());
  int cpu_devices = 0;
  for (const auto& d : config_.devices) {
    cpu_devices += d.is_cpu();
    if (d.is_cuda() && d.index >= kernels::cuda_device_count())
      throw std::invalid_argument("--devices: " + d.str() + " requested, but this machine has " +
                                  std::to_string(kernels::cuda_device_count()) + " CUDA device(s)");
  }
  // A program linked without troupe_backends (the object library whose
  // static initialiser registers the fast kernels) would fall back to the
  // reference kernels, which are orders of magnitude slower: a cnn epoch
  // takes hours and fit() looks hung. Say so at once instead; the reference
  // kernels stay available on purpose through TROUPE_CPU_BACKEND=ref.
  const char* cpu_choice = std::getenv("TROUPE_CPU_BACKEND");
  const auto registered = kernels::Registry::instance().names();
  const bool have_cpu = std::find(registered.begin(), registered.end(), "cpu") != registered.end();
  for (const auto& d : config_.devices) {
    try {
      kernels::Registry::instance().for_device(d);
    } catch (const std::exception& e) {
      throw std::runtime_error("no compute backend for " + d.str() + " (" + e.what() +
                               "); a program using troupe must link troupe_backends, the object library that "
                               "registers them");
    }
    if (d.is_cpu() && !have_cpu && !(cpu_choice && *cpu_choice))
      throw std::runtime_error("no fast CPU backend is registered for " + d.str() +
                               ": link troupe_backends (the object library that registers the cpu and cuda "
                               "kernels) into the program, or set TROUPE_CPU_BACKEND=ref to train on the slow "
                               "reference kernels deliberately");
  }
  const unsigned cores = std::thread::hardware_concurrency();
  if (cores > 0 && unsigned(cpu_devices * config_.threads_per_device) > cores)
    std::fprintf(stderr,
                 "warning: %d CPU device(s) x %d thread(s) on a machine with %u cores; "
                 "they will compete for the cores\n",
                 cpu_devices, config_.threads_per_device, cores);
  data_ = data::load_dataset(t.data, t.data_options);
  spec_ = models::training_model(t, data_.train);  // names the model and the data, before any step
  data::Augmentation::parse(t.augment).check_images(data_.train.feature_shape(), data_.train.features.dtype());
  if (models::parse_precision(t.precision) == kernels::ops::MatmulPrecision::fp16) {
    // The loss scale is decided on the all-reduced gradient, which only sync
    // has; an async worker's own scale is not built (models/loss_scale.hpp).
    bool async_somewhere = config_.mode.kind != actors::Mode::Kind::sync;
    for (const auto& sw : config_.switches) async_somewhere |= sw.mode.kind != actors::Mode::Kind::sync;
    if (async_somewhere)
      throw std::invalid_argument(
          "--precision fp16 trains in sync mode only (its dynamic loss scale is decided on the all-reduced "
          "gradient); for async or ssp use --precision bf16, which needs no loss scaling");
  }
  {
    models::Model probe(spec_, kernels::Device::cpu());  // validates the spec against the data
    parameter_count_ = probe.parameter_count();
    decayed_ = probe.decayed_ranges();
    state_count_ = probe.state_count();
    // The parameter server's shards (async, ssp): whole layers round-robin,
    // big ones split. Shards that would own nothing are not run.
    std::vector<ps::Range> layers;
    for (const auto& [offset, count] : probe.layer_ranges()) layers.push_back({offset, count});
    const ps::Partition all = ps::Partition::make(parameter_count_, layers, config_.ps_shards, config_.ps_split_above);
    partition_ = std::make_shared<const ps::Partition>(all.without_empty_shards());
    if (partition_->shards() < config_.ps_shards)
      std::fprintf(stderr,
                   "note: ps_shards = %d, but model %s has parts for %d (layers of at most %lld floats stay "
                   "whole); running %d\n",
                   config_.ps_shards, spec_.name.c_str(), partition_->shards(),
                   static_cast<long long>(config_.ps_split_above), partition_->shards());
  }
  models::make_optimizer(t.optimizer, Tensor::zeros({1}), {});  // validates the optimizer name
  data::PlanOptions plan{data_.train.size(), t.batch, t.shuffle, t.seed, t.drop_remainder};
  batches_per_epoch_ = data::batches_per_epoch(plan, {0, static_cast<int>(config_.devices.size())});
  if (batches_per_epoch_ < 1)
    throw std::invalid_argument("dataset " + t.data + " has " + std::to_string(data_.train.size()) +
                                " training examples, fewer than one global batch of " +
                                std::to_string(t.batch * static_cast<std::int64_t>(config_.devices.size())));
  // Warm-up epochs and a cosine to the end become steps of this job's
  // epochs (what the checkpoints and a cluster's job text then carry), in
  // global steps of the mode the job starts in: a synchronous step is one
  // global batch, but in async and ssp every replica's push is a global
  // step: an epoch has each replica's batches times the replicas (it had
  // one replica's, on two, and a cosine over 5 epochs reached 0 in the
  // third). A cluster's world is known once its nodes joined: n / batch,
  // which that product approaches whatever the world. A switch later
  // trains on at that rate.
  const auto world = static_cast<std::int64_t>(config_.devices.size());
  const std::int64_t schedule_steps_per_epoch = !config_.mode.uses_server() ? batches_per_epoch_
                                                : config_.cluster           ? data::batches_per_epoch(plan, {0, 1})
                                                                            : batches_per_epoch_ * world;
  models::resolve_training_length(t, schedule_steps_per_epoch);
  models::LrSchedule(t.schedule, t.lr, t.warmup_steps);  // validates the schedule
  if (t.resume && t.checkpoint_dir.empty()) throw std::invalid_argument("--resume needs --checkpoint-dir");
  if (!t.checkpoint_dir.empty()) checkpoints_ = std::make_shared<checkpoint::Directory>(t.checkpoint_dir, t.keep_last);
}

Job::~Job() = default;

namespace {

// The ps task named by its index or name ("3", "ps/HOST/pid N"), or -1.
int ps_task_index(const ClusterShards* cluster, const std::string& which) {
  if (!cluster) return -1;
  for (const auto& task : cluster->ps_tasks())
    if (which == std::to_string(task.index) || which == task.name) return task.index;
  return -1;
}

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

// The job on a thread of its own, so that its actor system's shutdown has a
// deadline (run_with_bounded_shutdown, job/replica.hpp).
JobResult Job::run(const models::Callbacks& callbacks) {
  JobResult result;
  run_with_bounded_shutdown([&](ActorSystemSlot& slot) { result = run_here(callbacks, slot); });
  return result;
}

JobResult Job::run_here(const models::Callbacks& callbacks, ActorSystemSlot& slot) {
  const auto& t = config_.train;
  const int local = static_cast<int>(config_.devices.size());
  auto train = std::make_shared<const data::Dataset>(data_.train);
  auto test = std::make_shared<const data::Dataset>(data_.test);
  auto schedule = std::make_shared<const models::LrSchedule>(t.schedule, t.lr, t.warmup_steps);
  ClusterHooks* cluster = config_.cluster.get();
  {
    std::lock_guard<std::mutex> lock(control_mutex_);
    starting_ = true;
  }
  // Every way out of run() (a result, an error before training, a finished
  // job) answers the control requests still waiting.
  struct CloseControl {
    Job* job;
    ~CloseControl() { job->close_control("the job has finished"); }
  } close_control_on_exit{this};

  // Resume: the newest checkpoint that verifies (older ones when the
  // newest is damaged), its state, position and every replica's clock.
  std::optional<checkpoint::State> resumed;
  std::string resumed_path;
  if (t.resume && checkpoints_) {
    if (auto found = models::find_resume_checkpoint(*checkpoints_, t.resume_or_start)) {
      models::check_resumable(found->state, found->path, spec_, parameter_count_, t.optimizer.name, t.seed);
      if (static_cast<std::int64_t>(found->state.model_state.size()) != state_count_)
        throw checkpoint::CheckpointError(found->path, "holds " + std::to_string(found->state.model_state.size()) +
                                                           " values of model state (running statistics), but model '" +
                                                           spec_.name + "' keeps " + std::to_string(state_count_));
      resumed = std::move(found->state);
      resumed_path = found->path;
    }
  }
  Position start;
  if (resumed) {
    start.global_step = static_cast<std::int64_t>(resumed->position.global_step);
    start.epoch = static_cast<std::int64_t>(resumed->position.epoch);
    if (models::training_finished(t, start.epoch, start.global_step)) {
      // Nothing to train: say so instead of running a negative step count.
      JobResult done;
      done.already_finished = true;
      done.steps = start.global_step;
      done.resumed_from = resumed_path;
      return done;
    }
  }

  // Destroyed after run_here returns, on this thread, with a deadline.
  caf::actor_system& system = slot.create([&](caf::actor_system_config& cfg) {
    configure_actor_system(cfg);
    if (cluster) cluster->configure(cfg);
  });
  caf::scoped_actor self{system};

  ps::ParameterServer server;
  std::shared_ptr<const net::push::PushRoutes> push_routes;  // shards on ps tasks: pushes on the data plane
  std::vector<std::shared_ptr<net::Collective>> collectives;
  std::vector<data_loader_actor> loaders;
  std::vector<device_actor_t> devices, all_devices;
  auto shutdown = [&](const std::string& why = "the job is over") {
    // A device blocked in a push handles no exit: fail its push first.
    if (push_routes) push_routes->registry->abort(why);
    for (auto& a : devices) self->send_exit(a, caf::exit_reason::user_shutdown);
    for (auto& a : loaders) self->send_exit(a, caf::exit_reason::user_shutdown);
    if (server.front) self->send_exit(server.front, caf::exit_reason::user_shutdown);  // and its shards (linked)
    for (auto& a : server.shards) self->send_exit(a, caf::exit_reason::user_shutdown);
  };
  int world = local;
  std::vector<std::int64_t> start_clocks;   // by rank; empty: every replica starts at 0
  std::vector<data::Cursor> start_cursors;  // by rank; empty: every replica starts at the beginning
  DataStart data_start;                     // the segment training starts in (a resume)
  auto start_cursor = [&](std::size_t r) { return r < start_cursors.size() ? start_cursors[r] : data::Cursor{}; };
  ps::ParameterServerConfig pc;  // the shards' optimizer, schedule and partition (a new placement reuses it)
  int ps_wanted = 0;             // shards on ps tasks: the shard count the partition was asked for
  // Anything failing before training starts must still stop what was
  // spawned (~actor_system waits for every live actor) and tell the nodes.
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
        const std::vector<caf::actor>& handles = placed.handles;
        const std::vector<std::string>& addresses = placed.addresses;
        server = ps::front_over(system, pc, ps::to_ps_actors(handles));
        push_routes = cluster->place_shards(addresses, wanted);
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
      try {
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
          plan.train_data = train;
          plan.test_data = r == 0 ? test : nullptr;
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
                .receive([&](ReplicaState& s) { initial = std::move(s); },
                         [&](caf::error& e) { error = system.render(e); });
            if (!error.empty()) throw std::runtime_error("reading the initial parameters: " + error);
            install_state(self, cluster, all_devices, initial, devices.size(), start_clocks, start_cursors,
                          config_.timeout, "sending the initial parameters to the nodes");
          }
        }
        if (resumed) {
          ReplicaState state;
          state.parameters = Tensor::from_vector({parameter_count_}, resumed->parameters);
          if (state_count_ > 0) state.model_state = Tensor::from_vector({state_count_}, resumed->model_state);
          for (const auto& b : resumed->optimizer.buffers)
            state.buffers.emplace_back(b.name,
                                       Tensor::from_vector({static_cast<std::int64_t>(b.values.size())}, b.values));
          for (const auto& [name, value] : resumed->optimizer.scalars) state.scalars.emplace_back(name, value);
          install_state(self, cluster, all_devices, state, 0, start_clocks, start_cursors, config_.timeout,
                        "resuming from " + resumed_path);
        }
      } catch (const FirstViewLost& e) {
        // Everything this try started for its world goes: the collectives,
        // this host's replicas, the shards (the next try places them anew).
        for (auto& c : collectives) c->abort(e.what());
        shutdown(e.what());
        collectives.clear();
        push_routes = nullptr;
        devices.clear();
        loaders.clear();
        all_devices.clear();
        server = ps::ParameterServer{};
        start_clocks.clear();
        start_cursors.clear();
        data_start = DataStart{};
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

  // A ps task asked to leave (its own SIGTERM or SIGINT, or troupe ctl
  // drain): a spare goes at once; one hosting shards at the next step
  // boundary, where the coordinator gathers their state and moves them to
  // the ps tasks left (nothing is lost). Returns what happens, "" when
  // `index` is no ps task.
  auto ps_task_leaves = [&](const coordinator_actor_t& coordinator, int index, const std::string& why) -> std::string {
    if (!cluster || !cluster->is_ps_task(index)) return "";
    const std::string label = "node " + std::to_string(index) + " (a ps task)";
    if (!cluster->hosts_shards(index)) {
      cluster->release_ps(self, index, "left the job (a spare): " + why);
      return label + " hosted no shard and left at once";
    }
    self->send(coordinator, member_atom::value, MemberEvent{MemberEvent::Kind::ps_leaving, index, why});
    return label + " leaves at the next step boundary: its shards move to the other ps tasks";
  };
  auto stop_control = [&]() { close_control("the job has finished"); };

  JobResult result;
  try {
    CoordinatorConfig cc;
    cc.replicas = world;
    cc.batches_per_epoch = batches_per_epoch_;
    cc.epochs = t.epochs;
    cc.max_steps = t.max_steps;
    cc.global_batch = t.batch * world;
    cc.mode = config_.mode;
    cc.switches = config_.switches;
    cc.devices = all_devices;
    if (cluster) cc.nodes = cluster->nodes();
    if (cluster) cc.links = cluster->links();
    if (cluster && config_.metrics) config_.metrics->set_nodes(0, cc.nodes);
    cc.metrics = config_.metrics;
    cc.timeline = config_.timeline;
    cc.parameter_server = server.front;
    cc.listener = caf::actor_cast<caf::actor>(self);
    cc.checkpoints = checkpoints_;
    cc.checkpoint_every = t.checkpoint_every;
    cc.checkpoint_each_epoch = t.checkpoint_each_epoch;
    cc.eval_every = t.eval_every;
    cc.model_name = spec_.name;
    cc.model_spec = spec_.text();
    cc.model_state_count = state_count_;
    cc.optimizer = t.optimizer;
    cc.schedule = schedule;
    cc.seed = t.seed;
    cc.start = start;
    cc.start_clocks = start_clocks;
    cc.start_data = data_start;
    cc.checkpoint_interval = std::chrono::milliseconds(static_cast<std::int64_t>(t.checkpoint_minutes * 60000.0));
    cc.classification = data_.train.task == data::Task::classification;
    cc.positions_per_example = std::max<std::int64_t>(1, data_.train.window);
    cc.timeout = config_.timeout;
    cc.callbacks = callbacks;
    cc.elastic = cluster != nullptr;
    if (t.precision == "fp16") cc.sync_only = "--precision fp16 trains in sync mode only (its loss scale)";
    cc.dataset_examples = data_.train.size();
    cc.batch = t.batch;
    cc.drop_remainder = t.drop_remainder;
    cc.fixed_global_batch = config_.elastic_batch == "global";
    cc.min_nodes = config_.min_nodes;
    if (cluster) cc.first_view = cluster->first_view();
    cc.wait_timeout = config_.wait_timeout;
    cc.ps_tasks = push_routes != nullptr && ps_wanted > 0;
    cc.shuffle = t.shuffle;
    coordinator_actor_t coordinator = spawn_coordinator(system, cc);
    self->monitor(coordinator);
    {
      // From now on a control request goes straight to the front; those
      // that came while the job started go now, in their order.
      control_front_t front = spawn_control_front(system, coordinator, caf::actor_cast<caf::actor>(self),
                                                  std::chrono::seconds(kControlAnswerSeconds));
      std::lock_guard<std::mutex> lock(control_mutex_);
      running_ = true;
      control_front_ = front;
      for (auto& r : control_requests_) caf::anon_send(front, r);
      control_requests_.clear();
    }
    self->send(coordinator, start_atom::value);

    bool done = false;
    // A view the coordinator asked for, formed after the receive below (the
    // hooks wait for the nodes with receives of their own).
    std::optional<ViewPlan> view_plan;
    caf::response_promise view_promise;
    // Elastic membership: the view the coordinator asked for, formed here
    // because the hooks talk to the nodes from this thread.
    auto form_view = [&](const ViewPlan& plan) {
      std::vector<std::shared_ptr<net::Collective>> fresh;
      // Shards on ps tasks placed anew (a ps task lost or leaving): fresh
      // shard actors on the ps tasks left, a new front over them, and new
      // routes for every replica; the coordinator then restores the state.
      caf::actor new_front;
      if (plan.replace_shards && push_routes) {
        ClusterHooks::Placement placed =
            cluster->replace_shards(self, *partition_, static_cast<int>(all_devices.size()), plan.ps_remove, decayed_);
        if (!placed.error.empty()) {
          FormedView failed;
          failed.view = plan.view;
          failed.error = placed.error;
          failed.waiting_for_ps = placed.waiting_for_ps;
          failed.lost = placed.lost;
          return failed;
        }
        pc.replicas = static_cast<int>(all_devices.size());
        ps::ParameterServer placed_server = ps::front_over(system, pc, ps::to_ps_actors(placed.handles));
        if (server.front) self->send_exit(server.front, caf::exit_reason::user_shutdown);
        server = placed_server;
        new_front = caf::actor_cast<caf::actor>(server.front);
        push_routes->registry->abort("view " + std::to_string(plan.view) + " placed the shards anew");
        push_routes = cluster->place_shards(placed.addresses, ps_wanted);
      }
      FormedView f = cluster->reform(self, plan, local, fresh);
      f.parameter_server = new_front;
      const int w = local + static_cast<int>(f.devices.size());
      if (f.error.empty()) {
        // This host's replicas enter the view.
        for (int r = 0; r < local && f.error.empty(); ++r) {
          ViewAssignment a;
          a.view = plan.view;
          a.rank = r;
          a.world = w;
          a.batch_size = f.batch;
          a.clock = plan.clock;
          a.cursor = plan.cursor;
          a.collective = fresh[static_cast<std::size_t>(r)];
          if (new_front) a.push_routes = push_routes;
          self->request(devices[static_cast<std::size_t>(r)], config_.timeout, reconfig_atom::value, a)
              .receive([](caf::ok_atom) {},
                       [&](caf::error& e) { f.error = "replica " + std::to_string(r) + ": " + system.render(e); });
        }
      }
      if (f.error.empty()) {
        for (auto& c : collectives) c->abort("view " + std::to_string(plan.view) + " replaces it");
        collectives = fresh;
        all_devices = devices;
        for (auto& d : to_devices(f.devices)) all_devices.push_back(d);
        // The newcomers' replicas, and survivors a step behind the view's
        // clock (sync: their all-reduce failed where another's completed),
        // take the state of a replica at that clock (parameters and
        // optimizer state; their clock and data position came with the
        // view). Ranks are found by node: they change between views.
        auto rank_of = [&](const ReplicaRef& ref) -> int {
          for (const auto& n : f.nodes)
            if (n.index == ref.node && ref.local < n.replicas) return n.first_rank + ref.local;
          return -1;
        };
        std::vector<int> targets;
        const auto joined = cluster->newcomers();
        for (const auto& n : f.nodes)
          if (std::find(joined.begin(), joined.end(), n.index) != joined.end())
            for (int r = n.first_rank; r < n.first_rank + n.replicas; ++r) targets.push_back(r);
        for (const auto& ref : plan.behind) {
          const int r = rank_of(ref);
          if (r < 0) {
            f.error = "replica " + std::to_string(ref.local) + " of node " + std::to_string(ref.node) +
                      " is behind the view's step but not in view " + std::to_string(plan.view);
            break;
          }
          targets.push_back(r);
        }
        const int source = plan.behind.empty() ? 0 : rank_of(plan.source);
        if (f.error.empty() && !targets.empty() && source < 0)
          f.error = "replica " + std::to_string(plan.source.local) + " of node " + std::to_string(plan.source.node) +
                    ", whose state the view hands on, is not in view " + std::to_string(plan.view);
        if (f.error.empty() && !targets.empty()) {
          ReplicaState state;
          self->request(all_devices[static_cast<std::size_t>(source)], config_.timeout, get_state_atom::value)
              .receive([&](ReplicaState& st) { state = std::move(st); },
                       [&](caf::error& e) {
                         f.error = "reading replica " + std::to_string(source) + "'s state: " + system.render(e);
                       });
          for (int r : targets) {
            if (!f.error.empty()) break;
            self->request(all_devices[static_cast<std::size_t>(r)], config_.timeout, set_state_atom::value, state)
                .receive([](caf::ok_atom) {},
                         [&](caf::error& e) {
                           f.error = "handing the state to replica " + std::to_string(r) + ": " + system.render(e);
                         });
          }
        }
        f.devices = to_actors(all_devices);
        if (config_.metrics) config_.metrics->set_nodes(f.view, f.nodes);
      } else {
        for (auto& c : fresh) c->abort(f.error);
      }
      return f;
    };
    while (!done) {
      self->receive(
          [&](JobResult& r) {
            result = std::move(r);
            done = true;
          },
          [&](caf::down_msg& down) {
            result.error = "the coordinator stopped unexpectedly: " + system.render(down.reason);
            done = true;
          },
          [&](node_lost_atom, std::int32_t index, const std::string& what) {
            if (cluster && cluster->is_ps_task(index)) {
              // Its shards' parameters and optimizer state are gone with it.
              // Every push in flight fails now (not at its timeout), and the
              // coordinator places the shards anew on the ps tasks left and
              // restores a consistent state (actors/coordinator/views.cpp). A spare's
              // loss changes nothing.
              if (!cluster->ps_gone(index)) {
                std::fprintf(stderr, "troupe node: %s (a spare ps task)\n", what.c_str());
                return;
              }
              if (push_routes) push_routes->registry->abort(what);
              cluster->abort_pushes(self, what);
              self->send(coordinator, member_atom::value,
                         MemberEvent{MemberEvent::Kind::ps_lost, index, what + ", a ps task hosting shards"});
              return;
            }
            // A node of the view is gone: no collective of the view can
            // complete. Every survivor's all-reduce is aborted now (not at
            // its timeout) and the coordinator forms a view without it.
            if (cluster && cluster->forget(index)) {
              for (auto& c : collectives) c->abort(what);
              cluster->abort_view(self, what);
            }
            self->send(coordinator, member_atom::value, MemberEvent{MemberEvent::Kind::lost, index, what});
          },
          [&](ready_atom, const ReadyNode& node) {
            if (!cluster) return;
            const int index = node.index;
            const std::string& name = node.name;
            if (node.role == NodeRole::ps_task) {
              if (push_routes) {
                // Shards on ps tasks: a spare, used when one is lost or leaves.
                cluster->add_spare_ps(self, index, name, node.data_address, node.handle);
                self->send(coordinator, member_atom::value, MemberEvent{MemberEvent::Kind::ps_joined, index, name});
                return;
              }
              // The shards run in this process (the job started without ps
              // tasks): a ps task has nothing to host.
              const std::string why =
                  "not used: the parameter-server shards run on the coordinator (the job started "
                  "without --ps-tasks)";
              std::fprintf(stderr, "troupe node: node %d (%s) is %s\n", index, name.c_str(), why.c_str());
              cluster->forget(index);
              self->send(node.handle, done_atom::value, why);
              return;
            }
            cluster->add_joiner(node);
            std::string list;
            for (const auto& d : node.devices) list += (list.empty() ? "" : ",") + d;
            self->send(coordinator, member_atom::value,
                       MemberEvent{MemberEvent::Kind::joined, index, name + " with " + list});
          },
          [&](drain_atom, std::int32_t index, const std::string& why) {
            if (!ps_task_leaves(coordinator, index, why).empty()) return;
            self->send(coordinator, member_atom::value, MemberEvent{MemberEvent::Kind::drain, index, why});
          },
          // troupe ctl drain NODE, from the control front: a ps task is
          // known here (its shards move); a node with replicas is the
          // coordinator's.
          [&](drain_atom, const std::string& which) {
            auto rp = self->make_response_promise();
            const int ps_task = ps_task_index(cluster, which);
            if (ps_task >= 0)
              rp.deliver(ControlReply{200, ps_task_leaves(coordinator, ps_task, "troupe ctl drain")});
            else
              rp.delegate(coordinator, drain_atom::value, which);
          },
          [&](form_view_atom, const ViewPlan& plan) {
            view_plan = plan;
            view_promise = self->make_response_promise();
          });
      if (done) break;
      if (view_plan && cluster) {
        FormedView f = form_view(*view_plan);
        view_plan.reset();
        view_promise.deliver(std::move(f));
        for (auto& e : cluster->take_events()) {
          // A ps task lost while the view formed: this host's pushes in
          // flight fail now too (the hooks told the other nodes).
          if (e.kind == MemberEvent::Kind::ps_lost && push_routes) push_routes->registry->abort(e.what);
          self->send(coordinator, member_atom::value, std::move(e));
        }
      }
    }
    stop_control();
    if (config_.collect_replica_parameters && result.error.empty()) {
      for (auto& d : all_devices)
        self->request(d, config_.timeout, get_state_atom::value)
            .receive([&](const ReplicaState& s) { replica_parameters_.push_back(s.parameters.to_vector()); },
                     [&](caf::error& e) { result.error = "collecting parameters: " + system.render(e); });
    }
    self->send_exit(coordinator, caf::exit_reason::user_shutdown);
  } catch (const std::exception& e) {
    stop_control();
    for (auto& c : collectives) c->abort("the job is shutting down");
    if (cluster) cluster->finish(self, e.what());
    shutdown();
    throw;
  }
  if (!result.error.empty())
    for (auto& c : collectives) c->abort("the job failed: " + result.error);
  if (cluster) cluster->finish(self, result.error);
  shutdown();
  result.resumed_from = resumed_path;
  if (!resumed_path.empty()) result.mode_history.insert(result.mode_history.begin(), "resumed from " + resumed_path);
  return result;
}

void Job::close_control(const std::string& why) {
  std::deque<ControlRequestPtr> pending;
  control_front_t front;
  {
    std::lock_guard<std::mutex> lock(control_mutex_);
    starting_ = running_ = false;
    pending.swap(control_requests_);
    std::swap(front, control_front_);
  }
  for (auto& r : pending) r->answer(ControlReply{409, why});
  // The front answers the requests it still holds as it exits.
  if (front) caf::anon_send_exit(front, caf::exit_reason::user_shutdown);
}

ControlReply Job::ask(ControlRequest::Kind kind, const std::string& argument, ControlReply fallback, Wait wait) {
  auto request = std::make_shared<ControlRequest>(kind, argument, wait);
  std::future<ControlReply> reply = request->reply();
  {
    std::lock_guard<std::mutex> lock(control_mutex_);
    if (!running_ && starting_ && kind == ControlRequest::Kind::status)
      return ControlReply{200, "{\"state\":\"starting\"}"};
    if (!running_ && !starting_) return fallback;
    // Under the lock, so that the front cannot exit in between
    // (close_control takes it first).
    if (running_)
      caf::anon_send(control_front_, request);
    else
      control_requests_.push_back(request);
  }
  // The front (or close_control) holds it now: should the front exit before
  // it reads the request, the request dies unanswered, and the broken
  // promise ends this wait at once.
  request.reset();
  // A switch or a checkpoint waits for the next step boundary, for at most
  // kControlAnswerSeconds (the front then answers 504 itself; this wait is
  // a last resort).
  if (reply.wait_for(std::chrono::seconds(kControlAnswerSeconds + 5)) != std::future_status::ready) return fallback;
  try {
    return reply.get();
  } catch (const std::future_error&) {  // dropped unanswered: the job ended meanwhile
    return fallback;
  }
}

std::string Job::status() {
  ControlReply r = ask(ControlRequest::Kind::status, "", ControlReply{503, "{\"state\":\"not running\"}"});
  return r.message;
}

ControlReply Job::request_mode(const std::string& mode, Wait wait) {
  return ask(ControlRequest::Kind::mode, mode,
             ControlReply{409, "the job is not running, or the switch is still pending"}, wait);
}

ControlReply Job::request_checkpoint(Wait wait) {
  return ask(ControlRequest::Kind::checkpoint, "",
             ControlReply{409, "the job is not running, or the checkpoint is still pending"}, wait);
}

ControlReply Job::request_drain(const std::string& node) {
  return ask(ControlRequest::Kind::drain, node, ControlReply{409, "the job is not running"});
}

ControlReply Job::request_stop(Wait wait) {
  return ask(ControlRequest::Kind::stop, "", ControlReply{409, "the job is not running, or the stop is still pending"},
             wait);
}

}  // namespace troupe::actors
