// A sharded parameter server (actors/ps/) in the single-host runtime, on
// real data: with one replica (one order of pushes) N shards give bit for
// bit the single server's parameters and optimizer state, for every
// optimizer; two replicas on two shards learn the mlp in one epoch and every
// shard applies every push; switch storms across 2 and 3 shards keep the
// accounting; and a checkpoint written by 2 shards resumes on 1 (and the
// other way) exactly where an uninterrupted run goes.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <thread>

#include "actors/ps/parameter_server.hpp"
#include "job/job.hpp"
#include "job/replica.hpp"
#include "models/checkpoint/checkpoint.hpp"

namespace troupe::actors {
namespace {

namespace fs = std::filesystem;
using kernels::Device;

// The mlp's layers are 200 960, 32 896 and 1 296 floats (padded): above
// this bound the first two are split across every shard and the last
// stays whole, so every shard owns pieces of several layers.
constexpr std::int64_t split_above = 10000;

std::string fresh_dir(const std::string& name) {
  fs::path p = fs::path(::testing::TempDir()) / ("troupe_ps_" + name);
  fs::remove_all(p);
  return p.string();
}

JobConfig mlp_job(std::vector<Device> devices, const std::string& mode, int shards) {
  JobConfig c;
  c.train.model = "mlp";
  c.train.data = "fashion-mnist";
  c.train.epochs = 1;
  c.train.batch = 32;
  c.train.seed = 7;
  c.devices = std::move(devices);
  c.mode = Mode::parse(mode);
  c.timeout = std::chrono::milliseconds(30000);
  c.ps_shards = shards;
  c.ps_split_above = split_above;
  c.collect_replica_parameters = true;
  return c;
}

// `resumed_at`: the global step a resumed job started from.
void expect_accounting(const JobResult& r, std::int64_t resumed_at = 0) {
  EXPECT_TRUE(r.error.empty()) << r.error;
  EXPECT_EQ(r.pushes, r.server.applied) << "a pushed gradient was lost or applied twice";
  EXPECT_EQ(r.steps, resumed_at + r.sync_steps + r.server.applied) << "global steps are not the updates applied";
  for (std::size_t s = 0; s < r.server.shard_applied.size(); ++s)
    EXPECT_EQ(r.server.shard_applied[s], r.server.applied) << "shard " << s << " missed or repeated a push";
}

checkpoint::State newest(const std::string& dir) {
  checkpoint::Directory d(dir, 0);
  auto path = d.latest();
  EXPECT_TRUE(path.has_value()) << "no checkpoint in " << dir;
  return path ? checkpoint::read(*path) : checkpoint::State{};
}

// Parameters, optimizer buffers and scalars, and the position, bit for bit.
void expect_same_state(const checkpoint::State& a, const checkpoint::State& b) {
  EXPECT_TRUE(a.parameters == b.parameters) << "parameters differ";
  ASSERT_EQ(a.optimizer.buffers.size(), b.optimizer.buffers.size());
  for (std::size_t i = 0; i < a.optimizer.buffers.size(); ++i) {
    EXPECT_EQ(a.optimizer.buffers[i].name, b.optimizer.buffers[i].name);
    EXPECT_TRUE(a.optimizer.buffers[i].values == b.optimizer.buffers[i].values)
        << "optimizer buffer " << a.optimizer.buffers[i].name << " differs";
  }
  EXPECT_EQ(a.optimizer.scalars, b.optimizer.scalars);
  EXPECT_EQ(a.position.global_step, b.position.global_step);
  EXPECT_EQ(a.position.replica_clocks, b.position.replica_clocks);
}

struct Outcome {
  JobResult result;
  std::vector<float> parameters;  // replica 0's at the end
  checkpoint::State last;         // the final checkpoint
};

Outcome run(JobConfig c, const std::string& dir) {
  c.train.checkpoint_dir = dir;
  Job job(c);
  Outcome out;
  out.result = job.run();
  if (!job.replica_parameters().empty()) out.parameters = job.replica_parameters()[0];
  out.last = newest(dir);
  return out;
}

// One replica pushes in one order, so the shards must reproduce the single
// server exactly: each applies the same elementwise optimizer to its part.
TEST(PsShards, OneReplicaOnNShardsEqualsTheSingleServerBitwise) {
  models::OptimizerConfig sgd;
  sgd.name = "sgd";
  sgd.momentum = 0.9f;
  sgd.nesterov = true;
  sgd.weight_decay = 1e-4f;
  models::OptimizerConfig adam;
  adam.name = "adam";
  adam.weight_decay = 1e-4f;
  models::OptimizerConfig nadam;
  nadam.name = "nadam";
  models::OptimizerConfig adamw;  // decoupled decay, on the split layers' kernels only
  adamw.name = "adamw";
  adamw.weight_decay = 0.1f;
  for (const auto& optimizer : {sgd, adam, nadam, adamw}) {
    SCOPED_TRACE(optimizer.text());
    JobConfig one = mlp_job({Device::cpu(0)}, "async", 1);
    one.train.optimizer = optimizer;
    one.train.lr = optimizer.name == "sgd" ? 0.02f : 1e-3f;
    // 20 steps: enough for momentum's and Adam's buffers and bias
    // corrections to differ at every step; under ThreadSanitizer each of
    // the twelve jobs costs seconds per ten steps (CI's tsan step).
    one.train.max_steps = 20;
    const Outcome single = run(one, fresh_dir("single_" + optimizer.name));
    expect_accounting(single.result);
    EXPECT_EQ(single.result.server.applied, 20);
    for (int shards : {2, 3}) {
      SCOPED_TRACE(std::to_string(shards) + " shards");
      JobConfig many = one;
      many.ps_shards = shards;
      const Outcome sharded = run(many, fresh_dir("sharded_" + optimizer.name + std::to_string(shards)));
      expect_accounting(sharded.result);
      ASSERT_EQ(sharded.result.server.shard_applied.size(), static_cast<std::size_t>(shards));
      EXPECT_TRUE(sharded.parameters == single.parameters) << "the replica's parameters differ";
      expect_same_state(sharded.last, single.last);
    }
  }
}

// Weight decay by rank on a sharded server: each shard gets its part of the
// model's decay mask (Partition::ranges_in), so N shards step exactly as
// one optimizer over the whole buffer, layers split across shards included.
TEST(PsShards, ShardsApplyTheirPartOfTheDecayMaskAsTheWholeOptimizerDoes) {
  const std::int64_t total = 208;
  // Three layers: kernel 80 + bias 20, kernel 32 + bias 8, one of rank 1 only.
  const std::vector<ps::Range> layers{{0, 100}, {112, 40}, {160, 30}};
  const models::FlatRanges decayed{{0, 80}, {112, 32}};
  const ps::Partition partition = ps::Partition::make(total, layers, 3, 32).without_empty_shards();
  ASSERT_EQ(partition.shards(), 3);
  models::OptimizerConfig sgd;
  sgd.name = "sgd";
  sgd.momentum = 0.9f;
  sgd.nesterov = true;
  sgd.weight_decay = 0.05f;
  models::OptimizerConfig adamw;
  adamw.name = "adamw";
  adamw.weight_decay = 0.1f;
  for (const auto& optimizer : {sgd, adamw}) {
    SCOPED_TRACE(optimizer.text());
    const float lr = 0.05f;
    Tensor whole_params = Tensor::zeros({total});
    auto whole = models::make_optimizer(optimizer, whole_params, decayed);
    models::OptimizerConfig all = optimizer;
    all.decay_all = true;
    Tensor all_params = Tensor::zeros({total});
    auto everything = models::make_optimizer(all, all_params, decayed);
    std::vector<std::unique_ptr<ps::ShardCore>> shards;
    for (int s = 0; s < partition.shards(); ++s) {
      ps::ShardConfig c;
      c.index = s;
      c.size = partition.size(s);
      c.optimizer = optimizer;
      c.decayed = partition.ranges_in(s, decayed);
      c.schedule = std::make_shared<const models::LrSchedule>("constant", lr, 0);
      shards.push_back(std::make_unique<ps::ShardCore>(c));
    }
    Tensor staging = Tensor::empty({total});
    for (int step = 1; step <= 6; ++step) {
      std::vector<float> g(static_cast<std::size_t>(total));
      for (std::size_t i = 0; i < g.size(); ++i) g[i] = std::sin(0.37f * float(i) + float(step));
      const Tensor grad = Tensor::from_vector({total}, g);
      whole->step(whole_params, grad, lr);
      everything->step(all_params, grad, lr);
      partition.pack_all(grad, staging);
      for (int s = 0; s < partition.shards(); ++s)
        shards[static_cast<std::size_t>(s)]->apply(GradientPush{0, 0, step, partition.part(s, staging).clone()});
    }
    bool mask_mattered = false;
    for (int s = 0; s < partition.shards(); ++s) {
      Tensor want = Tensor::empty({partition.size(s)}), decayed_all = Tensor::empty({partition.size(s)});
      partition.pack(s, whole_params, want);
      partition.pack(s, all_params, decayed_all);
      const std::vector<float> got = shards[static_cast<std::size_t>(s)]->state().parameters.to_vector();
      EXPECT_TRUE(got == want.to_vector()) << "shard " << s << " differs from the whole optimizer";
      mask_mattered = mask_mattered || got != decayed_all.to_vector();
    }
    EXPECT_TRUE(mask_mattered) << "decay=all gave the same parameters: the mask was not exercised";
  }
}

TEST(PsShards, TwoReplicasOnTwoShardsLearnTheMlpInOneEpoch) {
  JobConfig c = mlp_job({Device::cpu(0), Device::cpu(1)}, "async", 2);
  c.train.batch = 64;
  c.train.seed = 11;
  Job job(c);
  JobResult r = job.run();
  expect_accounting(r);
  ASSERT_EQ(r.server.shard_applied.size(), 2u);
  EXPECT_EQ(r.pushes, 2 * job.batches_per_epoch());
  // Plain builds give 84.4% to 85.2% (5 runs, 2026-11-26); async depends on
  // timing, and under ASan on the loaded 2-core CI machine the replicas'
  // speeds drift apart (more staleness): 82.7% there. The bound is that of
  // the single server's test (test_job.cpp, AsyncEpochAppliesEveryPushOnce-
  // AndLearns); a shard losing or mixing up updates lands far lower.
  EXPECT_GE(r.final.test_accuracy, 0.80) << "async mlp on 2 shards after one epoch";
  std::printf("async mlp, 2 replicas, 2 shards, one epoch: test accuracy %.4f\n", r.final.test_accuracy);
}

TEST(PsShards, SspOnThreeShardsKeepsItsBound) {
  JobConfig c = mlp_job({Device::cpu(0), Device::cpu(1), Device::cpu(2)}, "ssp:1", 3);
  c.train.max_steps = 300;
  Job job(c);
  JobResult r = job.run();
  expect_accounting(r);
  EXPECT_EQ(r.server.applied, 300);
  EXPECT_LE(r.server.max_lead, 1) << "a shard applied a push from a replica beyond the bound";
}

// As test_job.cpp's SwitchStormKeepsAccountingAndAccuracy, across shards:
// entering async scatters replica 0's state into the shards, entering sync
// gathers it back to every replica.
void switch_storm(int shards) {
  JobConfig storm = mlp_job({Device::cpu(0), Device::cpu(1)}, "sync", shards);
  storm.collect_replica_parameters = true;
  const char* cycle[] = {"async", "ssp:2", "sync", "ssp:0", "async", "sync"};
  for (int i = 0; i < 24; ++i) storm.switches.push_back({25 + 25 * i, Mode::parse(cycle[i % 6])});
  storm.train.max_steps = 650;
  Job job(storm);
  JobResult r = job.run();
  expect_accounting(r);
  ASSERT_EQ(r.server.shard_applied.size(), static_cast<std::size_t>(shards));
  EXPECT_GE(r.mode_history.size(), 20u);
  EXPECT_EQ(r.final_mode.str(), "sync");
  EXPECT_GT(r.sync_steps, 0);
  EXPECT_GT(r.server.applied, 0);
  ASSERT_EQ(job.replica_parameters().size(), 2u);
  EXPECT_TRUE(job.replica_parameters()[0] == job.replica_parameters()[1])
      << "replicas left the last async phase with different parameters";
  EXPECT_GT(r.final.test_accuracy, 0.80);
}

TEST(PsShards, SwitchStormAcrossTwoShards) { switch_storm(2); }
TEST(PsShards, SwitchStormAcrossThreeShards) { switch_storm(3); }

// One consistent checkpoint in the one format: written by `first` shards,
// resumed on `second`, the job ends bit for bit where an uninterrupted
// single-server job ends (one replica: one order of pushes).
void resume_across(int first, int second) {
  const std::string dir = fresh_dir("resume_" + std::to_string(first) + "_" + std::to_string(second));
  JobConfig a = mlp_job({Device::cpu(0)}, "async", first);
  a.train.max_steps = 40;
  const Outcome stopped = run(a, dir);
  expect_accounting(stopped.result);
  EXPECT_EQ(stopped.last.position.global_step, 40u);
  EXPECT_EQ(stopped.last.update_mode, "async");

  JobConfig b = mlp_job({Device::cpu(0)}, "async", second);
  b.train.max_steps = 90;
  b.train.resume = true;
  const Outcome resumed = run(b, dir);
  expect_accounting(resumed.result, 40);
  EXPECT_EQ(resumed.result.server.applied, 50) << "the resumed run applied more or fewer pushes than remained";

  JobConfig w = mlp_job({Device::cpu(0)}, "async", 1);
  w.train.max_steps = 90;
  const Outcome whole = run(w, fresh_dir("resume_whole_" + std::to_string(first) + "_" + std::to_string(second)));
  expect_accounting(whole.result);
  EXPECT_TRUE(resumed.parameters == whole.parameters) << "resumed parameters differ from an uninterrupted run";
  expect_same_state(resumed.last, whole.last);
}

TEST(PsShards, CheckpointOfTwoShardsResumesOnOne) { resume_across(2, 1); }
TEST(PsShards, CheckpointOfOneShardResumesOnThree) { resume_across(1, 3); }

// What another node's relay sends: whole gradients, to the front actor,
// which packs them and pushes every shard its part. Three shards answer
// bit for bit as one does: the fresh parameters of every push, the
// gathered state and every shard's count.
TEST(PsShards, TheFrontTakesWholePushesAsOneServerWould) {
  caf::actor_system_config cfg;
  configure_actor_system(cfg);
  caf::actor_system system{cfg};
  const std::int64_t total = 3136;
  const std::vector<ps::Range> layers{{0, 100}, {112, 3000}, {3120, 7}};
  auto values = [total](double phase) {
    std::vector<float> v(static_cast<std::size_t>(total));
    for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(std::sin(0.37 * double(i) + phase));
    return v;
  };
  struct Seen {
    std::vector<std::vector<float>> fresh;
    ReplicaState state;
    ServerCounters counters;
  };
  auto serve = [&](int shards) {
    Seen seen;
    caf::scoped_actor self{system};
    ps::ParameterServerConfig pc;
    pc.partition = std::make_shared<const ps::Partition>(ps::Partition::make(total, layers, shards, 500));
    EXPECT_EQ(pc.partition->shards(), shards);
    pc.optimizer.name = "adam";
    pc.schedule = std::make_shared<const models::LrSchedule>("constant", 0.01f, 0);
    pc.replicas = 2;
    pc.timeout = std::chrono::seconds(20);
    const ps::ParameterServer server = ps::spawn_parameter_server(system, pc);
    ReplicaState start;
    start.parameters = Tensor::from_vector({total}, values(0.5));
    start.buffers = {{"m", Tensor::zeros({total})}, {"v", Tensor::zeros({total})}};
    start.scalars = {{"steps", 0.0}};
    auto fail = [&](caf::error& e) { ADD_FAILURE() << system.render(e); };
    self->request(server.front, std::chrono::seconds(20), set_state_atom::value, start)
        .receive([](caf::ok_atom) {}, fail);
    for (int k = 0; k < 6; ++k) {
      GradientPush push{0, k % 2, k / 2 + 1, Tensor::from_vector({total}, values(1.0 + k))};
      self->request(server.front, std::chrono::seconds(20), push_atom::value, push)
          .receive([&](const Tensor& fresh) { seen.fresh.push_back(fresh.to_vector()); }, fail);
    }
    self->request(server.front, std::chrono::seconds(20), get_state_atom::value)
        .receive([&](ReplicaState& s) { seen.state = std::move(s); }, fail);
    self->request(server.front, std::chrono::seconds(20), counters_atom::value)
        .receive([&](ServerCounters& c) { seen.counters = std::move(c); }, fail);
    self->send_exit(server.front, caf::exit_reason::user_shutdown);
    return seen;
  };
  const Seen one = serve(1), three = serve(3);
  ASSERT_EQ(one.fresh.size(), 6u);
  ASSERT_EQ(three.fresh.size(), 6u);
  for (std::size_t k = 0; k < 6; ++k) EXPECT_TRUE(one.fresh[k] == three.fresh[k]) << "push " << k;
  EXPECT_NE(one.fresh[5], values(0.5)) << "nothing was applied";
  EXPECT_TRUE(one.state.parameters.to_vector() == three.state.parameters.to_vector());
  ASSERT_EQ(three.state.buffers.size(), 2u);
  for (std::size_t b = 0; b < 2; ++b)
    EXPECT_TRUE(one.state.buffers[b].second.to_vector() == three.state.buffers[b].second.to_vector())
        << one.state.buffers[b].first;
  EXPECT_EQ(one.state.scalars, three.state.scalars);
  EXPECT_EQ(three.state.clock, 6);
  EXPECT_EQ(three.state.replica_clocks, (std::vector<std::int64_t>{3, 3}));
  EXPECT_EQ(three.counters.applied, 6);
  EXPECT_EQ(three.counters.shard_applied, (std::vector<std::int64_t>{6, 6, 6}));
}

// A shard whose actor is gone (the job ended or failed) refuses the pushes
// that still reach its core on the data plane (shard_apply), with the
// reason, and applies none: what the core holds is no longer gathered.
TEST(PsShards, AShardWhoseActorEndedRefusesPushesOnTheDataPlane) {
  caf::actor_system_config cfg;
  configure_actor_system(cfg);
  caf::actor_system system{cfg};
  ps::ShardConfig c;
  c.index = 3;
  c.size = 8;
  c.optimizer.name = "adam";
  c.schedule = std::make_shared<const models::LrSchedule>("constant", 0.01f, 0);
  c.replicas = 1;
  const ps::LocalShard shard = ps::spawn_shard(system, c);
  const auto apply = ps::shard_apply({{3, shard.core}});
  GradientPush push{0, 0, 1, Tensor::full({8}, 0.5f)};
  EXPECT_EQ(apply(3, push).fresh.numel(), 8);  // applied while the actor lives
  {
    caf::scoped_actor self{system};
    self->monitor(shard.actor);
    self->send_exit(shard.actor, caf::exit_reason::user_shutdown);
    self->receive([](const caf::down_msg&) {},
                  caf::after(std::chrono::seconds(5)) >> [] { ADD_FAILURE() << "the shard did not exit"; });
  }
  // The core is closed in the actor's cleanup, which may end a moment after
  // the monitor's down message went out.
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (shard.core->closed().empty() && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  EXPECT_NE(shard.core->closed(), "") << "the core was not closed within 5 s of the actor's end";
  std::string what;
  try {
    apply(3, GradientPush{0, 0, 2, Tensor::full({8}, 0.5f)});
  } catch (const std::exception& e) {
    what = e.what();
  }
  EXPECT_NE(what.find("shard 3 is gone (its actor ended: "), std::string::npos) << what;
  EXPECT_NE(what.find("user_shutdown"), std::string::npos) << what;
  EXPECT_EQ(shard.core->counters().applied, 1);
  try {
    apply(5, push);
    ADD_FAILURE() << "a push for a shard not hosted was applied";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("shard 5 is not hosted here"), std::string::npos) << e.what();
  }
}

TEST(PsShards, BadShardCountsAreRefusedBeforeTraining) {
  JobConfig c = mlp_job({Device::cpu(0)}, "async", 0);
  try {
    Job job(c);
    FAIL() << "ps_shards = 0 accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("at least 1 shard"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace troupe::actors
