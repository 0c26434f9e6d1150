// net/cluster/job_file: the TOML-subset job file, its canonical text and
// fingerprint.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>

#include "kernels/config.hpp"
#include "actors/job_file.hpp"

namespace troupe::actors {
namespace {

std::string error_of(const std::string& text) {
  try {
    parse_job_text(text, "JOB.toml");
  } catch (const JobFileError& e) {
    return e.what();
  }
  return "";
}

#define EXPECT_JOB_ERROR(text, expected)                                          \
  do {                                                                            \
    const std::string message = error_of(text);                                   \
    EXPECT_NE(message.find(expected), std::string::npos) << "got: " << message;   \
  } while (0)

TEST(ClusterJobFile, EmptyFileGivesTheDefaults) {
  const actors::JobConfig c = parse_job_text("", "JOB.toml");
  const actors::JobConfig d;
  EXPECT_EQ(c.train.model, d.train.model);
  EXPECT_EQ(c.train.batch, d.train.batch);
  EXPECT_EQ(c.mode, d.mode);
  EXPECT_EQ(to_job_text(c), to_job_text(d));
}

TEST(ClusterJobFile, EveryKey) {
  const actors::JobConfig c = parse_job_text(R"(# a job
model = "mlp"            # zoo name
data = "data/my \"set\".csv"
epochs = 3
batch = 1_024
steps = 5000
lr = 1e-3
schedule = "cosine:10000/0.1"
warmup = 100
seed = 18446744073709551615
mode = "ssp:2"
switch = "500:async,1500:sync"
prefetch = 4
threads_per_device = 2
ps_shards = 3
ps_split_above = 65_536
checkpoint_dir = "C:\\ckpt"
checkpoint_every = 250
keep = 0
eval_batch = 500

[optimizer]
name = "sgd"
momentum = 0.9
nesterov = true
weight_decay = 5E-4
epsilon = 1
beta1 = 0.8
beta2 = 0.99
)",
                                             "JOB.toml");
  const auto& t = c.train;
  EXPECT_EQ(t.model, "mlp");
  EXPECT_EQ(t.data, "data/my \"set\".csv");
  EXPECT_EQ(t.epochs, 3);
  EXPECT_EQ(t.batch, 1024);
  EXPECT_EQ(t.max_steps, 5000);
  EXPECT_EQ(t.lr, 1e-3f);
  EXPECT_EQ(t.schedule, "cosine:10000/0.1");
  EXPECT_EQ(t.warmup_steps, 100);
  EXPECT_EQ(t.seed, 18446744073709551615ull);
  EXPECT_EQ(c.mode, actors::Mode::parse("ssp:2"));
  ASSERT_EQ(c.switches.size(), 2u);
  EXPECT_EQ(c.switches[1].step, 1500);
  EXPECT_EQ(c.switches[1].mode, actors::Mode::parse("sync"));
  EXPECT_EQ(c.prefetch, 4);
  EXPECT_EQ(c.threads_per_device, 2);
  EXPECT_EQ(c.ps_shards, 3);
  EXPECT_EQ(c.ps_split_above, 65536);
  EXPECT_EQ(t.checkpoint_dir, "C:\\ckpt");
  EXPECT_EQ(t.checkpoint_every, 250);
  EXPECT_EQ(t.keep_last, 0u);
  EXPECT_EQ(t.eval_batch, 500);
  EXPECT_EQ(t.optimizer.name, "sgd");
  EXPECT_EQ(t.optimizer.momentum, 0.9f);
  EXPECT_TRUE(t.optimizer.nesterov);
  EXPECT_EQ(t.optimizer.weight_decay, 5e-4f);
  EXPECT_EQ(t.optimizer.epsilon, 1.0f);
  EXPECT_EQ(t.optimizer.beta1, 0.8f);
  EXPECT_EQ(t.optimizer.beta2, 0.99f);
}

TEST(ClusterJobFile, TrainingTableAndCrLf) {
  const actors::JobConfig c =
      parse_job_text("[training]\r\nepochs = 2\r\n\r\n[optimizer]  # sgd\r\nname = \"nadam\"\r\n", "JOB.toml");
  EXPECT_EQ(c.train.epochs, 2);
  EXPECT_EQ(c.train.optimizer.name, "nadam");
}

TEST(ClusterJobFile, SyntaxErrorsNameFileAndLine) {
  EXPECT_JOB_ERROR("epochs = 1\nbatch 64\n", "JOB.toml:2: key 'batch': expected '=' after the key");
  EXPECT_JOB_ERROR("= 3\n", "JOB.toml:1: expected KEY = VALUE");
  EXPECT_JOB_ERROR("\n\nmodel =\n", "JOB.toml:3: key 'model': missing value");
  EXPECT_JOB_ERROR("model = \"cnn\n", "JOB.toml:1: key 'model': unterminated string");
  EXPECT_JOB_ERROR("model = \"a\\qb\"\n", "JOB.toml:1: key 'model': unsupported escape '\\q'");
  EXPECT_JOB_ERROR("model = cnn\n", "JOB.toml:1: key 'model': 'cnn' is not a value (strings need double quotes)");
  EXPECT_JOB_ERROR("model = 'cnn'\n", "JOB.toml:1: key 'model': ''' values");
  EXPECT_JOB_ERROR("model = [\"cnn\"]\n", "not supported in job files");
  EXPECT_JOB_ERROR("epochs = 3 4\n", "JOB.toml:1: unexpected '4' after the value");
  EXPECT_JOB_ERROR("optimizer.name = \"sgd\"\n", "JOB.toml:1: key 'optimizer': dotted keys are not supported");
  EXPECT_JOB_ERROR("[optimizer\n", "JOB.toml:1: unclosed table header");
  EXPECT_JOB_ERROR("[optimizer] x\n", "JOB.toml:1: unexpected 'x' after the table header");
  EXPECT_JOB_ERROR("epochs = 01\n", "JOB.toml:1: key 'epochs': '01' is not a value");
  EXPECT_JOB_ERROR("lr = 1.\n", "'1.' is not a value");
  EXPECT_JOB_ERROR("epochs = 1__0\n", "'1__0' is not a value");
}

TEST(ClusterJobFile, UnknownKeysAndTables) {
  EXPECT_JOB_ERROR("epochs = 1\n\nepoch = 2\n", "JOB.toml:3: unknown key 'epoch' (known: model, data, epochs");
  EXPECT_JOB_ERROR("[optimizer]\nlr = 0.1\n", "JOB.toml:2: unknown key 'lr' (it belongs in [training]");
  EXPECT_JOB_ERROR("name = \"sgd\"\n", "JOB.toml:1: unknown key 'name' (it belongs in [optimizer])");
  EXPECT_JOB_ERROR("[model]\n", "JOB.toml:1: unknown table [model] (known: [training], [optimizer])");
  // Flags written as on the command line, and flags that belong to a node.
  EXPECT_JOB_ERROR("weight-decay = 0.1\n", "JOB.toml:1: unknown key 'weight-decay' (did you mean 'weight_decay'?");
  EXPECT_JOB_ERROR("\ndevices = \"cpu:0\"\n",
                   "JOB.toml:2: key 'devices' is not part of a job: each node gives it on its own command line "
                   "(troupe node --devices)");
  EXPECT_JOB_ERROR("log-every = 5\n", "key 'log-every' is not part of a job");
}

// The README: "the job file takes what troupe train takes on its command
// line": every optimizer flag has a flat key, as --optimizer adam does.
TEST(ClusterJobFile, FlatOptimizerKeysAsOnTheCommandLine) {
  const actors::JobConfig flat = parse_job_text(R"(optimizer = "sgd"
momentum = 0.9
nesterov = true
weight_decay = 5e-4
epsilon = 1e-7
beta1 = 0.8
beta2 = 0.99
threads = 3
)",
                                                "JOB.toml");
  const actors::JobConfig table = parse_job_text(R"(threads_per_device = 3
[optimizer]
name = "sgd"
momentum = 0.9
nesterov = true
weight_decay = 5e-4
epsilon = 1e-7
beta1 = 0.8
beta2 = 0.99
)",
                                                 "JOB.toml");
  EXPECT_EQ(flat.train.optimizer.name, "sgd");
  EXPECT_EQ(flat.train.optimizer.momentum, 0.9f);
  EXPECT_TRUE(flat.train.optimizer.nesterov);
  EXPECT_EQ(flat.train.optimizer.weight_decay, 5e-4f);
  EXPECT_EQ(flat.train.optimizer.epsilon, 1e-7f);
  EXPECT_EQ(flat.train.optimizer.beta1, 0.8f);
  EXPECT_EQ(flat.train.optimizer.beta2, 0.99f);
  EXPECT_EQ(flat.threads_per_device, 3);
  EXPECT_EQ(to_job_text(flat), to_job_text(table));  // one job, one fingerprint
  EXPECT_EQ(parse_job_text("optimizer = \"adam\"\n", "JOB.toml").train.optimizer.name, "adam");
  // Flat optimizer keys under [training] too, and checked as in the table.
  EXPECT_EQ(parse_job_text("[training]\nmomentum = 0.5\n", "JOB.toml").train.optimizer.momentum, 0.5f);
  EXPECT_JOB_ERROR("optimizer = \"adagrad\"\n", "JOB.toml:1: key 'optimizer': unknown optimizer 'adagrad'");
  EXPECT_JOB_ERROR("momentum = 1.0\n", "JOB.toml:1: key 'momentum': 1.0 is out of range [0, 1)");
  EXPECT_JOB_ERROR("nesterov = 1\n", "JOB.toml:1: key 'nesterov': expected true or false");
}

TEST(ClusterJobFile, BothSpellingsOfOneSettingNameBothLines) {
  EXPECT_JOB_ERROR("momentum = 0.9\n\n[optimizer]\nmomentum = 0.8\n",
                   "JOB.toml:4: key 'optimizer.momentum': sets what key 'momentum' on line 1 already set; give one");
  EXPECT_JOB_ERROR("[optimizer]\nweight_decay = 0.1\n[training]\nweight_decay = 0.1\n",
                   "JOB.toml:4: key 'weight_decay': sets what key 'optimizer.weight_decay' on line 2 already set");
  EXPECT_JOB_ERROR("threads = 2\nthreads_per_device = 2\n",
                   "JOB.toml:2: key 'threads_per_device': sets what key 'threads' on line 1 already set");
  // A flat optimizer name and an [optimizer] table, in either order (TOML
  // refuses a key and a table of one name).
  EXPECT_JOB_ERROR("optimizer = \"adam\"\n[optimizer]\nname = \"sgd\"\n",
                   "JOB.toml:2: key 'optimizer' (line 1) and table [optimizer] (line 2) both name the optimizer");
  EXPECT_JOB_ERROR("[optimizer]\nmomentum = 0.9\n[training]\noptimizer = \"sgd\"\n",
                   "JOB.toml:4: key 'optimizer': key 'optimizer' (line 4) and table [optimizer] (line 1)");
}

TEST(ClusterJobFile, WrongTypes) {
  EXPECT_JOB_ERROR("epochs = \"3\"\n", "JOB.toml:1: key 'epochs': expected an integer, got a string \"3\"");
  EXPECT_JOB_ERROR("epochs = 2.5\n", "JOB.toml:1: key 'epochs': expected an integer, got a float 2.5");
  EXPECT_JOB_ERROR("model = 3\n", "key 'model': expected a string in double quotes, got an integer 3");
  EXPECT_JOB_ERROR("[optimizer]\nnesterov = 1\n", "JOB.toml:2: key 'optimizer.nesterov': expected true or false");
  EXPECT_JOB_ERROR("lr = true\n", "key 'lr': expected a number, got true or false true");
  EXPECT_JOB_ERROR("seed = 0.5\n", "key 'seed': expected a non-negative integer");
  // An integer is a number.
  EXPECT_EQ(parse_job_text("lr = 1\n", "JOB.toml").train.lr, 1.0f);
}

TEST(ClusterJobFile, DuplicatesNameTheFirstLine) {
  EXPECT_JOB_ERROR("lr = 0.1\nepochs = 2\nlr = 0.2\n", "JOB.toml:3: key 'lr': duplicate key (first set on line 1)");
  EXPECT_JOB_ERROR("epochs = 2\n[training]\nepochs = 3\n", "JOB.toml:3: key 'epochs': duplicate key");
  EXPECT_JOB_ERROR("[optimizer]\nname = \"sgd\"\n[optimizer]\n", "JOB.toml:3: duplicate table [optimizer] (first on line 1)");
}

TEST(ClusterJobFile, BadValues) {
  EXPECT_JOB_ERROR("mode = \"fast\"\n", "JOB.toml:1: key 'mode': unknown mode 'fast': expected sync, async or ssp:N");
  EXPECT_JOB_ERROR("switch = \"500:async,100:sync\"\n", "JOB.toml:1: key 'switch': --switch steps must increase");
  EXPECT_JOB_ERROR("\nswitch = \"x\"\n", "JOB.toml:2: key 'switch': --switch item 'x'");
  EXPECT_JOB_ERROR("schedule = \"linear\"\nlr = 0.1\n", "JOB.toml:1: key 'schedule':");
  EXPECT_JOB_ERROR("[optimizer]\nname = \"adagrad\"\n",
                   "JOB.toml:2: key 'optimizer.name': unknown optimizer 'adagrad' (known: sgd, adam, nadam)");
  EXPECT_JOB_ERROR("epochs = 0\n", "JOB.toml:1: key 'epochs': 0 is out of range (1..");
  EXPECT_JOB_ERROR("batch = -4\n", "key 'batch': -4 is out of range");
  EXPECT_JOB_ERROR("prefetch = 99999999999\n", "key 'prefetch': 99999999999 is out of range (1..2147483647)");
  EXPECT_JOB_ERROR("steps = 99999999999999999999999\n", "key 'steps': 99999999999999999999999 is out of range");
  EXPECT_JOB_ERROR("seed = -1\n", "key 'seed': -1 is out of range (a seed is an integer in 0..18446744073709551615)");
  EXPECT_JOB_ERROR("lr = 0\n", "key 'lr': 0 is out of range (0, inf)");
  EXPECT_JOB_ERROR("lr = 1e39\n", "key 'lr': 1e39 is out of range");
  EXPECT_JOB_ERROR("[optimizer]\nmomentum = 1.0\n", "JOB.toml:2: key 'optimizer.momentum': 1.0 is out of range [0, 1)");
  EXPECT_JOB_ERROR("model = \"\"\n", "key 'model': must not be empty");
  EXPECT_JOB_ERROR("\nps_shards = 0\n", "JOB.toml:2: key 'ps_shards': 0 is out of range (1..2147483647)");
  EXPECT_JOB_ERROR("ps_shards = \"2\"\n", "key 'ps_shards'");
  EXPECT_JOB_ERROR("ps_split_above = -1\n", "key 'ps_split_above': -1 is out of range (1..");
}

// Above 2^64 - 1 a seed used to be taken as 2^64 - 1 and changed results.
TEST(ClusterJobFile, SeedsOutsideUint64AreRefused) {
  EXPECT_JOB_ERROR("epochs = 1\nseed = 99999999999999999999\n",
                   "JOB.toml:2: key 'seed': 99999999999999999999 is out of range (a seed is an integer in "
                   "0..18446744073709551615)");
  EXPECT_JOB_ERROR("seed = 18446744073709551616\n", "key 'seed': 18446744073709551616 is out of range");
  EXPECT_JOB_ERROR("seed = -99999999999999999999\n", "key 'seed': -99999999999999999999 is out of range");
  EXPECT_JOB_ERROR("seed = 1e3\n", "JOB.toml:1: key 'seed': expected a non-negative integer, got a float 1e3");
  EXPECT_JOB_ERROR("seed = \"7\"\n", "key 'seed': expected a non-negative integer, got a string");
  EXPECT_EQ(parse_job_text("seed = 18446744073709551615\n", "JOB.toml").train.seed, 18446744073709551615ull);
  EXPECT_EQ(parse_job_text("seed = 0\n", "JOB.toml").train.seed, 0u);
  // A float key still reads an integer too long for 64 bits as a number.
  EXPECT_EQ(parse_job_text("lr = 100000000000000000000\n", "JOB.toml").train.lr, 1e20f);
}

TEST(ClusterJobFile, OnlyRegularFilesOfBoundedSize) {
  const std::string dir = ::testing::TempDir() + "troupe-job-dir";
  ::mkdir(dir.c_str(), 0700);
  for (const std::string& path : {std::string("/dev/zero"), std::string("/dev/urandom"), dir}) {
    try {
      load_job_file(path);
      ADD_FAILURE() << path << " was accepted";
    } catch (const JobFileError& e) {
      EXPECT_NE(std::string(e.what()).find("job file '" + path + "' is a "), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("expected a regular file of at most 1 MiB"), std::string::npos)
          << e.what();
    }
  }
  ::rmdir(dir.c_str());
  const std::string big = ::testing::TempDir() + "troupe-job-big.toml";
  std::ofstream(big) << std::string((1 << 20) + 1, '#');
  try {
    load_job_file(big);
    ADD_FAILURE() << "a 1 MiB + 1 byte job file was accepted";
  } catch (const JobFileError& e) {
    EXPECT_NE(std::string(e.what()).find("holds 1048577 bytes, more than the limit of 1 MiB"), std::string::npos)
        << e.what();
  }
  ::unlink(big.c_str());
}

TEST(ClusterJobFile, FileErrorsUseThePath) {
  const std::string path = ::testing::TempDir() + "troupe-job.toml";
  std::ofstream(path) << "epochs = 2\nmode = \"sideways\"\n";
  try {
    load_job_file(path);
    FAIL();
  } catch (const JobFileError& e) {
    EXPECT_NE(std::string(e.what()).find(path + ":2: key 'mode'"), std::string::npos) << e.what();
  }
  std::ofstream(path) << "epochs = 2\n";
  EXPECT_EQ(load_job_file(path).train.epochs, 2);
  ::unlink(path.c_str());
  EXPECT_THROW(load_job_file(path), JobFileError);
}

actors::JobConfig unusual_job() {
  actors::JobConfig c;
  auto& t = c.train;
  t.model = "specs/my \"model\"\\v2.toml";
  t.data = "wordnet";
  t.epochs = 7;
  t.batch = 33;
  t.max_steps = 12345;
  t.lr = 0.1f + 1e-7f;  // not a short decimal
  t.schedule = "piecewise:3=1e-4,7=1e-5";
  t.warmup_steps = 17;
  t.seed = 0xfedcba9876543210ull;
  t.optimizer.name = "sgd";
  t.optimizer.momentum = 0.95f;
  t.optimizer.nesterov = true;
  t.optimizer.weight_decay = 3e-5f;
  t.optimizer.epsilon = 1e-7f;
  t.optimizer.beta1 = 0.85f;
  t.optimizer.beta2 = 0.9995f;
  t.checkpoint_dir = "/tmp/ck\tpt";
  t.checkpoint_every = 100;
  t.keep_last = 9;
  t.eval_batch = 250;
  c.mode = actors::Mode::parse("ssp:3");
  c.switches = actors::parse_switch_schedule("10:async,20:sync,30:ssp:1");
  c.prefetch = 5;
  c.ps_shards = 4;
  c.ps_split_above = 1000;
  c.threads_per_device = 3;
  return c;
}

TEST(ClusterJobFile, RoundTrip) {
  for (const actors::JobConfig& c : {actors::JobConfig{}, unusual_job()}) {
    const std::string text = to_job_text(c);
    const actors::JobConfig back = parse_job_text(text, "round-trip");
    EXPECT_EQ(to_job_text(back), text);
    const auto& a = c.train;
    const auto& b = back.train;
    EXPECT_EQ(b.model, a.model);
    EXPECT_EQ(b.data, a.data);
    EXPECT_EQ(b.epochs, a.epochs);
    EXPECT_EQ(b.batch, a.batch);
    EXPECT_EQ(b.max_steps, a.max_steps);
    EXPECT_EQ(b.lr, a.lr);  // bit-exact
    EXPECT_EQ(b.schedule, a.schedule);
    EXPECT_EQ(b.warmup_steps, a.warmup_steps);
    EXPECT_EQ(b.seed, a.seed);
    EXPECT_EQ(b.optimizer.text(), a.optimizer.text());
    EXPECT_EQ(b.optimizer.nesterov, a.optimizer.nesterov);
    EXPECT_EQ(b.optimizer.momentum, a.optimizer.momentum);
    EXPECT_EQ(b.optimizer.weight_decay, a.optimizer.weight_decay);
    EXPECT_EQ(b.optimizer.epsilon, a.optimizer.epsilon);
    EXPECT_EQ(b.optimizer.beta1, a.optimizer.beta1);
    EXPECT_EQ(b.optimizer.beta2, a.optimizer.beta2);
    EXPECT_EQ(b.checkpoint_dir, a.checkpoint_dir);
    EXPECT_EQ(b.checkpoint_every, a.checkpoint_every);
    EXPECT_EQ(b.keep_last, a.keep_last);
    EXPECT_EQ(b.eval_batch, a.eval_batch);
    EXPECT_EQ(back.mode, c.mode);
    ASSERT_EQ(back.switches.size(), c.switches.size());
    for (std::size_t i = 0; i < c.switches.size(); ++i) {
      EXPECT_EQ(back.switches[i].step, c.switches[i].step);
      EXPECT_EQ(back.switches[i].mode, c.switches[i].mode);
    }
    EXPECT_EQ(back.prefetch, c.prefetch);
    EXPECT_EQ(back.threads_per_device, c.threads_per_device);
    EXPECT_EQ(back.ps_shards, c.ps_shards);
    EXPECT_EQ(back.ps_split_above, c.ps_split_above);
    EXPECT_EQ(job_identity(back).fingerprint, job_identity(c).fingerprint);
  }
  // Floats are written short when that is exact.
  actors::JobConfig c;
  c.train.lr = 1e-3f;
  EXPECT_NE(to_job_text(c).find("lr = 0.001\n"), std::string::npos) << to_job_text(c);
  EXPECT_NE(to_job_text(c).find("momentum = 0.0\n"), std::string::npos);
}

// fuzz/job_file found it (F4): a raw control character inside a string was
// accepted, but to_job_text refuses to write one, so the coordinator could
// not compute the job's fingerprint (std::invalid_argument). TOML refuses
// control characters other than tab in strings; so does the job file now.
TEST(ClusterJobFile, ControlCharactersInStringsAreRefused) {
  EXPECT_JOB_ERROR(std::string("model = \"a\x01z\"\n"),
                   "JOB.toml:1: key 'model': control character 0x01 in a string");
  EXPECT_JOB_ERROR(std::string("epochs = 2\ndata = \"x\x7fy\"\n"), "JOB.toml:2: key 'data': control character 0x7f");
  EXPECT_JOB_ERROR(std::string("checkpoint_dir = \"a\0b\"\n", 23), "key 'checkpoint_dir': control character 0x00");
  EXPECT_JOB_ERROR(std::string("[optimizer]\nname = \"sgd\r\"\n"), "key 'optimizer.name': control character 0x0d");
  // A raw tab is allowed (as in TOML) and written back escaped; the escapes
  // give every other character.
  const actors::JobConfig c = parse_job_text("data = \"a\tb\"\ncheckpoint_dir = \"x\\ny\"\n", "JOB.toml");
  EXPECT_EQ(c.train.data, "a\tb");
  EXPECT_EQ(c.train.checkpoint_dir, "x\ny");
  const std::string text = to_job_text(c);
  EXPECT_NE(text.find("data = \"a\\tb\"\n"), std::string::npos) << text;
  EXPECT_EQ(parse_job_text(text, "round-trip").train.checkpoint_dir, "x\ny");
}

// F5, with the round trip of fuzz/job_file: the range of a float key was
// checked on the number as written, but the value kept is a float. A number
// inside the range that rounds onto or past its edge (momentum just under
// 1, epsilon under the smallest float) was accepted and stored as a value
// the range refuses, so the job's canonical text did not parse.
TEST(ClusterJobFile, AFloatIsCheckedAsItIsStored) {
  EXPECT_JOB_ERROR("momentum = 0.99999999999\n",
                   "JOB.toml:1: key 'momentum': 0.99999999999 is 1 as a 32-bit float, out of range [0, 1)");
  EXPECT_JOB_ERROR("[optimizer]\nbeta2 = 0.9999999999\n", "key 'optimizer.beta2': 0.9999999999 is 1 as a 32-bit float");
  EXPECT_JOB_ERROR("epsilon = 1e-50\n", "key 'epsilon': 1e-50 is 0 as a 32-bit float, out of range (0, inf)");
  EXPECT_JOB_ERROR("lr = 1e39\n", "key 'lr': 1e39 is out of range (0, inf) (beyond a 32-bit float)");
  EXPECT_JOB_ERROR("weight_decay = 1e400\n", "key 'weight_decay': 1e400 is out of range [0, inf)");
  // Just inside the edges, and the float's own extremes, still read back.
  for (const char* text : {"momentum = 0.99999994\n", "epsilon = 1e-45\n", "lr = 3.4028234e38\n"}) {
    const actors::JobConfig c = parse_job_text(text, "JOB.toml");
    const actors::JobConfig back = parse_job_text(to_job_text(c), "round-trip");
    EXPECT_EQ(to_job_text(back), to_job_text(c)) << text;
  }
}

TEST(ClusterJobFile, FingerprintTracksJobAndVersion) {
  const actors::JobConfig a = unusual_job();
  const JobIdentity id = job_identity(a);
  EXPECT_EQ(id.troupe_version, TROUPE_VERSION);
  EXPECT_EQ(id.fingerprint.size(), 64u);
  EXPECT_EQ(job_identity(a).fingerprint, id.fingerprint);  // deterministic
  EXPECT_EQ(job_incompatibility(id, job_identity(a)), "");

  actors::JobConfig b = a;
  b.train.batch += 1;
  const JobIdentity other_job = job_identity(b);
  EXPECT_NE(other_job.fingerprint, id.fingerprint);
  const std::string job_reason = job_incompatibility(id, other_job);
  EXPECT_NE(job_reason.find("job fingerprints differ"), std::string::npos) << job_reason;

  actors::JobConfig lr = a;
  lr.train.lr = std::nextafter(a.train.lr, 1.0f);  // one ulp
  EXPECT_NE(job_identity(lr).fingerprint, id.fingerprint);

  const JobIdentity other_version = job_identity(a, "99.0.0");
  EXPECT_NE(other_version.fingerprint, id.fingerprint);
  const std::string version_reason = job_incompatibility(id, other_version);
  EXPECT_NE(version_reason.find("the peer runs troupe 99.0.0, this node troupe " TROUPE_VERSION), std::string::npos)
      << version_reason;
}

}  // namespace
}  // namespace troupe::actors
