// The public API (api/troupe/troupe.hpp) on real data: mode switches of a
// running fit() from another thread and from inside a callback, bad
// strategy arguments, and the custom loop's loss scaling (2 replicas with
// batch b train like 1 replica with batch 2b).
#include <gtest/gtest.h>

#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>

#include <atomic>
#include <chrono>
#include <cmath>
#include <thread>

#include <troupe/troupe.hpp>

namespace {

troupe::FitConfig small_mlp(std::int64_t steps) {
  troupe::FitConfig c;
  c.model = "mlp";
  c.data = "fashion-mnist";
  c.epochs = 1;
  c.max_steps = steps;
  c.batch = 32;
  return c;
}

TEST(Api, SwitchModeFromAnotherThreadWhileFitRuns) {
  troupe::MirroredStrategy strategy(troupe::parse_devices("cpu:0,cpu:1"));
  EXPECT_EQ(strategy.switch_mode("async").status, 409);  // nothing running
  std::atomic<bool> stepping{false};
  auto cb = std::make_shared<troupe::LambdaCallback>();
  cb->step_end = [&](const troupe::StepLogs& l) {
    if (l.step >= 20) stepping = true;
  };
  troupe::ControlReply reply;
  std::thread controller([&] {
    while (!stepping) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    reply = strategy.switch_mode("async");
  });
  troupe::History h = strategy.fit(small_mlp(400), {cb});
  controller.join();
  EXPECT_EQ(reply.status, 200) << reply.message;
  ASSERT_EQ(h.mode_history.size(), 2u);
  EXPECT_EQ(h.mode_history[0], "sync@0");
  EXPECT_EQ(h.mode_history[1].rfind("async@", 0), 0u) << h.mode_history[1];
  EXPECT_EQ(h.final_mode, "async");
  EXPECT_EQ(h.steps, 400);
  ASSERT_TRUE(h.model);
}

TEST(Api, SwitchModeFromACallbackIsQueuedNotDeadlocked) {
  troupe::ParameterServerStrategy strategy("ssp:1", troupe::parse_devices("cpu:0,cpu:1"));
  troupe::ControlReply reply;
  auto cb = std::make_shared<troupe::LambdaCallback>();
  cb->step_end = [&](const troupe::StepLogs& l) {
    if (l.step == 30) reply = strategy.switch_mode("sync");
  };
  // And the TensorBoard callback sees the switch (its events are decoded field
  // by field in tests/cli/test_tensorboard.cpp; here: the tags are there).
  const std::string dir = ::testing::TempDir() + "troupe_api_tensorboard";
  std::filesystem::remove_all(dir);
  auto tb = std::make_shared<troupe::TensorBoard>(dir, 50);
  const auto t0 = std::chrono::steady_clock::now();
  troupe::History h = strategy.fit(small_mlp(200), {cb, tb});
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(60));
  EXPECT_EQ(reply.status, 202) << reply.message;
  EXPECT_EQ(h.final_mode, "sync");
  std::ifstream in(tb->path(), std::ios::binary);
  const std::string events((std::istreambuf_iterator<char>(in)), {});
  auto count = [&](const std::string& what) {
    std::size_t n = 0;
    for (std::size_t at = events.find(what); at != std::string::npos; at = events.find(what, at + 1)) ++n;
    return n;
  };
  EXPECT_EQ(count("brain.Event:2"), 1u);
  EXPECT_EQ(count("job/config"), 1u);
  EXPECT_EQ(count("job/mode"), 2u);  // ssp:1 at the start, sync at the switch
  EXPECT_EQ(count("job/world_size"), 1u);
  EXPECT_EQ(count("train/loss"), 4u);  // steps 50, 100, 150, 200
}

// Strategy::stop() from a callback takes effect at the next step
// boundary: the coordinator looks at the flag right after the callback
// returns and halts every replica after the step it is running. The
// replicas run a little ahead of the coordinator's count (their reports are
// in flight), so a few steps beyond 10 may complete; without the halt they
// ran on through the 16 steps each was granted ahead (25 in sync, 41 in
// async here).
TEST(Api, StopFromACallbackEndsTheJobAtTheNextStepBoundary) {
  for (const char* mode : {"sync", "async"}) {
    SCOPED_TRACE(mode);
    std::unique_ptr<troupe::Strategy> strategy;
    if (std::string(mode) == "sync")
      strategy = std::make_unique<troupe::MirroredStrategy>(troupe::parse_devices("cpu:0,cpu:1"));
    else
      strategy = std::make_unique<troupe::ParameterServerStrategy>(mode, troupe::parse_devices("cpu:0,cpu:1"));
    troupe::ControlReply reply;
    std::int64_t last_step = 0;
    auto cb = std::make_shared<troupe::LambdaCallback>();
    cb->step_end = [&](const troupe::StepLogs& l) {
      last_step = l.step;
      if (l.step == 10) reply = strategy->stop();
    };
    troupe::History h = strategy->fit(small_mlp(1000), {cb});
    EXPECT_EQ(reply.status, 202) << reply.message;
    EXPECT_TRUE(h.stopped_early);
    EXPECT_GE(h.steps, 10);
    EXPECT_LE(h.steps, 15) << "steps ran on after the stop";
    EXPECT_EQ(last_step, h.steps);
  }
}

// A parameter server in shards (the mlp's two big layers split
// across 3) behind the same fit(); a shard count below 1 is refused before
// training.
TEST(Api, ParameterServerStrategyInShards) {
  troupe::ParameterServerStrategy strategy("async", troupe::parse_devices("cpu:0,cpu:1"));
  troupe::FitConfig c = small_mlp(300);
  c.ps_shards = 3;
  c.ps_split_above = 10000;
  troupe::History h = strategy.fit(c);
  EXPECT_EQ(h.steps, 300);
  EXPECT_EQ(h.pushes, 300);
  EXPECT_GT(h.final.test_accuracy, 0.7) << "the mlp learns in 300 async steps";
  ASSERT_TRUE(h.model);
  c.ps_shards = 0;
  EXPECT_THROW(strategy.fit(c), std::invalid_argument);
}

TEST(Api, BadStrategyArguments) {
  EXPECT_THROW(troupe::ParameterServerStrategy("sync"), std::invalid_argument);
  EXPECT_THROW(troupe::ParameterServerStrategy("ssp:-1"), std::invalid_argument);
  EXPECT_THROW(troupe::MirroredStrategy(troupe::parse_devices("cpu:0,cpu:0")), std::invalid_argument);
  troupe::MirroredStrategy strategy(troupe::parse_devices("cpu:0,cpu:1"));
  EXPECT_EQ(strategy.switch_mode("fast").status, 400);
  troupe::FitConfig c = small_mlp(10);
  c.model = "no-such-model";
  EXPECT_THROW(strategy.fit(c), std::invalid_argument);
  EXPECT_THROW(strategy.run([](troupe::ReplicaContext&) { return 0.0; }, 1e-3f), std::logic_error);
}

// sum_r (1/G) sum_{i in shard r} grad l_i is the mean gradient over the
// global batch: 2 replicas of batch 32 take the same SGD steps as 1 replica
// of batch 64 (up to float summation order).
TEST(Api, CustomLoopScalesByTheGlobalBatch) {
  troupe::Splits data = troupe::load_data("fashion-mnist");
  troupe::OptimizerConfig sgd;
  sgd.name = "sgd";
  auto train = [&](const char* devices) {
    troupe::MirroredStrategy s(troupe::parse_devices(devices));
    s.create_replicas(troupe::model_spec("mlp", data.train), sgd, 7);
    s.distribute(data.train, 64, 7);
    double loss = 0;
    for (int step = 0; step < 10; ++step)
      loss = troupe::MirroredStrategy::reduce(
          troupe::ReduceOp::SUM, s.run(
                                     [](troupe::ReplicaContext& ctx) {
                                       const double l = ctx.compute_average_loss(ctx.model.forward(ctx.features, true));
                                       ctx.model.backward(ctx.output_gradient());
                                       return l;
                                     },
                                     0.1f));
    return std::make_pair(s.replica(0).parameters().to_vector(), loss);
  };
  auto [two, loss_two] = train("cpu:0,cpu:1");
  auto [one, loss_one] = train("cpu:0");
  ASSERT_EQ(two.size(), one.size());
  double worst = 0;
  for (std::size_t i = 0; i < one.size(); ++i) worst = std::max(worst, double(std::abs(two[i] - one[i])));
  EXPECT_LT(worst, 1e-4);
  EXPECT_NEAR(loss_two, loss_one, 1e-4);
}

TEST(Api, SaveLoadEvaluateWithoutAStrategy) {
  troupe::Splits data = troupe::load_data("fashion-mnist");
  troupe::Model m(troupe::model_spec("mlp", data.train), troupe::Device::cpu());
  m.initialize(3);
  const std::string path = ::testing::TempDir() + "/troupe_api_model.troupe";
  troupe::save_model(m, path);
  auto back = troupe::load_model(path);
  EXPECT_EQ(back->parameters().to_vector(), m.parameters().to_vector());
  EXPECT_EQ(troupe::evaluate(*back, data.test).test_accuracy, troupe::evaluate(m, data.test).test_accuracy);
  EXPECT_THROW(troupe::load_model(path + ".missing"), std::runtime_error);
}

// A program without the backends object library used to hang forever in
// fit(); now it fails at once naming what is missing.
TEST(Api, FitWithoutBackendsFailsAtOnce) {
  const auto t0 = std::chrono::steady_clock::now();
  FILE* p = popen("timeout 60 " FIT_WITHOUT_BACKENDS " 2>&1", "r");
  ASSERT_NE(p, nullptr);
  std::string out;
  char buf[512];
  while (std::size_t n = std::fread(buf, 1, sizeof buf, p)) out.append(buf, n);
  const int status = pclose(p);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_TRUE(WIFEXITED(status)) << out;
  EXPECT_EQ(WEXITSTATUS(status), 3) << out;
  EXPECT_NE(out.find("troupe_backends"), std::string::npos) << out;
  EXPECT_LT(seconds, 30) << out;
}

// --insecure leaves the links of a cluster with a secret unsealed; without
// a secret it is refused when the strategy is made, before any socket.
TEST(ApiCluster, InsecureWithoutASecretIsRefusedAtOnce) {
  ::unsetenv("TROUPE_SECRET");
  troupe::ClusterOptions o;
  o.listen = "127.0.0.1:7000";  // never opened: the strategy only checks it
  o.insecure = true;
  try {
    troupe::MultiWorkerMirroredStrategy strategy(o);
    FAIL() << "--insecure without a secret was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("--insecure needs a cluster secret"), std::string::npos) << e.what();
  }
  ::setenv("TROUPE_SECRET", "an api test secret", 1);
  EXPECT_NO_THROW(troupe::MultiWorkerMirroredStrategy strategy(o));
  ::unsetenv("TROUPE_SECRET");
}

// A ps task of a cluster spec is not a MultiWorkerMirroredStrategy
// (it calls serve_parameter_server), refused before any socket is opened;
// is_ps_task tells them apart, and serve_parameter_server refuses a worker.
TEST(ApiCluster, APsTaskIsServedByServeParameterServerNotByTheStrategy) {
  troupe::ClusterOptions o;
  o.cluster_spec_json =
      R"({"cluster": {"worker": ["127.0.0.1:1"], "ps": ["127.0.0.1:2"]}, "task": {"type": "ps", "index": 0}})";
  try {
    troupe::MultiWorkerMirroredStrategy strategy(o);
    FAIL() << "a ps task was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("cluster spec: task ps 0 (127.0.0.1:2) is a parameter-server task: start "
                                         "it with `troupe node`"),
              std::string::npos)
        << e.what();
  }
  EXPECT_TRUE(troupe::is_ps_task(o));
  troupe::ClusterOptions worker = o;
  worker.cluster_spec_json =
      R"({"cluster": {"worker": ["127.0.0.1:1"], "ps": ["127.0.0.1:2"]}, "task": {"type": "worker", "index": 0}})";
  EXPECT_FALSE(troupe::is_ps_task(worker));
  try {
    troupe::serve_parameter_server(worker);
    FAIL() << "a worker task served a parameter server";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("not a ps task"), std::string::npos) << e.what();
  }
}

}  // namespace
