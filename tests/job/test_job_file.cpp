// job/job_file: the job file (TOML, read with toml++), its canonical text
// and fingerprint.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>

#include "job/job_file.hpp"
#include "kernels/config.hpp"

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

#define EXPECT_JOB_ERROR(text, expected)                                        \
  do {                                                                          \
    const std::string message = error_of(text);                                 \
    EXPECT_NE(message.find(expected), std::string::npos) << "got: " << message; \
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
seed = "18446744073709551615"
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

// TOML syntax errors are toml++'s, as FILE:LINE:COLUMN: what it says.
TEST(ClusterJobFile, SyntaxErrorsNameFileLineAndColumn) {
  EXPECT_JOB_ERROR("epochs = 1\nbatch 64\n", "JOB.toml:2:7: Error while parsing key-value pair: expected '=', saw '6'");
  EXPECT_JOB_ERROR("= 3\n",
                   "JOB.toml:1:1: Error while parsing root table: expected keys, tables, whitespace or comments");
  EXPECT_JOB_ERROR("\n\nmodel =\n", "JOB.toml:3:8: Error while parsing key-value pair: expected value");
  EXPECT_JOB_ERROR("model = \"a\\qb\"\n", "JOB.toml:1:12: Error while parsing string: unknown escape sequence '\\q'");
  EXPECT_JOB_ERROR("model = cnn\n",
                   "JOB.toml:1:9: Error while parsing value: could not determine value type (strings "
                   "need quotes: \"cnn\" or 'cnn')");
  EXPECT_JOB_ERROR("epochs = 3 4\n",
                   "JOB.toml:1:12: Error while parsing key-value pair: expected a comment or whitespace, saw '4'");
  EXPECT_JOB_ERROR("[optimizer\n", "JOB.toml:1:11: Error while parsing table header: expected ']'");
  EXPECT_JOB_ERROR("[optimizer] x\n",
                   "JOB.toml:1:13: Error while parsing table header: expected a comment or whitespace");
  EXPECT_JOB_ERROR("epochs = 01\n",
                   "JOB.toml:1:12: Error while parsing decimal integer: leading zeroes are prohibited");
  EXPECT_JOB_ERROR("\nlr = 1.\n", "JOB.toml:2:8: Error while parsing floating-point: expected decimal digit");
  EXPECT_JOB_ERROR("epochs = 1__0\n",
                   "JOB.toml:1:12: Error while parsing decimal integer: underscores may only follow digits");
  EXPECT_JOB_ERROR("model = \"cnn\n", "JOB.toml:1:13: Error while parsing string:");
  EXPECT_JOB_ERROR("\xff = 1\n", "JOB.toml:1:1: Encountered invalid utf-8 sequence");
  // TOML's inline tables are closed: a dotted key cannot add to one.
  EXPECT_JOB_ERROR("optimizer = { name = \"adam\" }\noptimizer.beta1 = 0.5\n",
                   "JOB.toml:2:1: Error while parsing key-value pair: cannot redefine existing table");
}

// What the hand-written subset refused (single-quoted, multi-line and
// escaped strings, inline tables, dotted keys, hexadecimal integers) is
// TOML, and read as such: each spelling gives the job of the plain one.
TEST(ClusterJobFile, TomlSyntaxBeyondTheOldSubset) {
  const actors::JobConfig plain = parse_job_text(R"(model = "mlp"
checkpoint_dir = "C:\\ckpt"
epochs = 16
[optimizer]
name = "adam"
beta1 = 0.8
)",
                                                 "JOB.toml");
  const char* const spellings[] = {
      // literal strings; an inline table for [optimizer]; a hexadecimal integer
      R"(model = 'mlp'
checkpoint_dir = 'C:\ckpt'
epochs = 0x10
optimizer = { name = "adam", beta1 = 0.8 }
)",
      // dotted keys for both tables; a multi-line string; a \u escape
      R"(training.model = """
mlp"""
training.checkpoint_dir = "C:\u005cckpt"
optimizer.name = "adam"
optimizer.beta1 = 8e-1
training.epochs = 1_6
)",
      // [training] as an inline table; a multi-line literal string
      R"(training = { model = '''mlp''', epochs = 16 }
checkpoint_dir = '''C:\ckpt'''
[optimizer]
name = "adam"
beta1 = 0.8
)",
  };
  for (const char* text : spellings) {
    const actors::JobConfig c = parse_job_text(text, "JOB.toml");
    EXPECT_EQ(c.train.model, "mlp") << text;
    EXPECT_EQ(c.train.checkpoint_dir, "C:\\ckpt") << text;
    EXPECT_EQ(c.train.epochs, 16) << text;
    EXPECT_EQ(c.train.optimizer.name, "adam") << text;
    EXPECT_EQ(c.train.optimizer.beta1, 0.8f) << text;
    EXPECT_EQ(to_job_text(c), to_job_text(plain)) << text;  // one job, one fingerprint
  }
  // The job file's own checks see through the spelling: an inline
  // [optimizer] beside a flat key of one setting, a value out of range, and
  // the line of each.
  EXPECT_JOB_ERROR("momentum = 0.9\noptimizer = { name = \"sgd\", momentum = 0.8 }\n",
                   "JOB.toml:2: key 'optimizer.momentum': sets what key 'momentum' on line 1 already set");
  EXPECT_JOB_ERROR("epochs = 2\n\noptimizer.beta2 = 1.5\n",
                   "JOB.toml:3: key 'optimizer.beta2': 1.5 is out of range [0, 1)");
  EXPECT_JOB_ERROR("training.threads = 2\nthreads_per_device = 3\n",
                   "JOB.toml:2: key 'threads_per_device': sets what key 'threads' on line 1 already set");
  // Control characters given as escapes are kept, and written back as
  // escapes (TOML refuses them raw).
  const actors::JobConfig escaped = parse_job_text("data = \"a\\u0001b\\rc\"\n", "JOB.toml");
  EXPECT_EQ(escaped.train.data,
            "a\x01"
            "b\rc");
  EXPECT_NE(to_job_text(escaped).find("data = \"a\\u0001b\\u000Dc\"\n"), std::string::npos) << to_job_text(escaped);
  EXPECT_EQ(parse_job_text(to_job_text(escaped), "round-trip").train.data, escaped.train.data);
}

TEST(ClusterJobFile, UnknownKeysAndTables) {
  EXPECT_JOB_ERROR("epochs = 1\n\nepoch = 2\n", "JOB.toml:3: unknown key 'epoch' (known: model, data, epochs");
  EXPECT_JOB_ERROR("[optimizer]\nlr = 0.1\n", "JOB.toml:2: unknown key 'lr' (it belongs in [training]");
  EXPECT_JOB_ERROR("name = \"sgd\"\n", "JOB.toml:1: unknown key 'name' (it belongs in [optimizer])");
  EXPECT_JOB_ERROR("[model]\n", "JOB.toml:1: unknown table [model] (known: [training], [optimizer])");
  EXPECT_JOB_ERROR("epochs = 1\n[training.extra]\n", "JOB.toml:2: unknown table [training.extra] (known:");
  EXPECT_JOB_ERROR("x.y = 1\n", "JOB.toml:1: unknown table [x] (known: [training], [optimizer])");
  // Flags written as on the command line, and flags that belong to a node.
  EXPECT_JOB_ERROR("weight-decay = 0.1\n", "JOB.toml:1: unknown key 'weight-decay' (did you mean 'weight_decay'?");
  EXPECT_JOB_ERROR("\ndevices = \"cpu:0\"\n",
                   "JOB.toml:2: key 'devices' is not part of a job: each node gives it on its own command line "
                   "(troupe node --devices)");
  EXPECT_JOB_ERROR("log-every = 5\n", "key 'log-every' is not part of a job");
}

// docs/CLUSTER.md ("The job file"): "the job file takes what troupe train takes on its command
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
  EXPECT_JOB_ERROR("model = 3\n", "key 'model': expected a string, got an integer 3");
  EXPECT_JOB_ERROR("model = [\"cnn\"]\n", "JOB.toml:1: key 'model': expected a string, got an array");
  EXPECT_JOB_ERROR("\nmodel = { name = \"cnn\" }\n", "JOB.toml:2: key 'model': expected a string, got a table");
  EXPECT_JOB_ERROR("[[optimizer]]\nname = \"sgd\"\n", "JOB.toml:1: key 'optimizer': expected a string, got an array");
  EXPECT_JOB_ERROR("epochs = 2025-01-01\n", "key 'epochs': expected an integer, got a date 2025-01-01");
  EXPECT_JOB_ERROR("lr = nan\n", "JOB.toml:1: key 'lr': nan is not a number");
  EXPECT_JOB_ERROR("[optimizer]\nnesterov = 1\n", "JOB.toml:2: key 'optimizer.nesterov': expected true or false");
  EXPECT_JOB_ERROR("lr = true\n", "key 'lr': expected a number, got true or false true");
  EXPECT_JOB_ERROR("seed = 0.5\n", "key 'seed': expected a non-negative integer");
  // An integer is a number.
  EXPECT_EQ(parse_job_text("lr = 1\n", "JOB.toml").train.lr, 1.0f);
}

TEST(ClusterJobFile, DuplicatesNameTheFirstLine) {
  EXPECT_JOB_ERROR("lr = 0.1\nepochs = 2\nlr = 0.2\n", "JOB.toml:3: key 'lr': duplicate key (first set on line 1)");
  EXPECT_JOB_ERROR("epochs = 2\n[training]\nepochs = 3\n", "JOB.toml:3: key 'epochs': duplicate key");
  EXPECT_JOB_ERROR("[optimizer]\nname = \"sgd\"\n[optimizer]\n",
                   "JOB.toml:3: duplicate table [optimizer] (first on line 1)");
  // TOML refuses these itself; toml++ names the second line only, and the
  // first is looked up in the lines before it.
  EXPECT_JOB_ERROR("[training]\nlr = 1\n[optimizer]\n[ training ]\n",
                   "JOB.toml:4: duplicate table [training] (first on line 1)");
  EXPECT_JOB_ERROR("[optimizer]\nname = \"sgd\"\n\nname = \"adam\"\n",
                   "JOB.toml:4: key 'optimizer.name': duplicate key (first set on line 2)");
  EXPECT_JOB_ERROR("optimizer.name = \"sgd\"\noptimizer . name = \"adam\"\n",
                   "JOB.toml:2: key 'optimizer.name': duplicate key (first set on line 1)");
  EXPECT_JOB_ERROR("optimizer = { name = \"sgd\" }\noptimizer = \"adam\"\n",
                   "JOB.toml:2: key 'optimizer': key 'optimizer' (line 2) and table [optimizer] (line 1) both name");
  EXPECT_JOB_ERROR("lr = 0.1\nsub.lr = 0.2\nlr = 0.3\n", "JOB.toml:3: key 'lr': duplicate key (first set on line 1)");
}

TEST(ClusterJobFile, BadValues) {
  EXPECT_JOB_ERROR("mode = \"fast\"\n", "JOB.toml:1: key 'mode': unknown mode 'fast': expected sync, async or ssp:N");
  EXPECT_JOB_ERROR("switch = \"500:async,100:sync\"\n", "JOB.toml:1: key 'switch': --switch steps must increase");
  EXPECT_JOB_ERROR("\nswitch = \"x\"\n", "JOB.toml:2: key 'switch': --switch item 'x'");
  EXPECT_JOB_ERROR("schedule = \"linear\"\nlr = 0.1\n", "JOB.toml:1: key 'schedule':");
  EXPECT_JOB_ERROR("[optimizer]\nname = \"adagrad\"\n",
                   "JOB.toml:2: key 'optimizer.name': unknown optimizer 'adagrad' (known: sgd, adam, adamw, nadam)");
  EXPECT_JOB_ERROR("epochs = 0\n", "JOB.toml:1: key 'epochs': 0 is out of range (1..");
  EXPECT_JOB_ERROR("batch = -4\n", "key 'batch': -4 is out of range");
  EXPECT_JOB_ERROR("prefetch = 99999999999\n", "key 'prefetch': 99999999999 is out of range (1..2147483647)");
  // TOML integers are 64-bit: a longer literal is toml++'s syntax error.
  EXPECT_JOB_ERROR("steps = 99999999999999999999999\n",
                   "JOB.toml:1:32: Error while parsing decimal integer: '99999999999999999999999' is not representable "
                   "in 64 bits");
  EXPECT_JOB_ERROR("seed = -1\n", "key 'seed': -1 is out of range (a seed is an integer in 0..18446744073709551615)");
  EXPECT_JOB_ERROR("lr = 0\n", "key 'lr': 0 is out of range (0, inf)");
  EXPECT_JOB_ERROR("lr = 1e39\n", "key 'lr': 1e39 is out of range");
  EXPECT_JOB_ERROR("[optimizer]\nmomentum = 1.0\n", "JOB.toml:2: key 'optimizer.momentum': 1.0 is out of range [0, 1)");
  EXPECT_JOB_ERROR("model = \"\"\n", "key 'model': must not be empty");
  EXPECT_JOB_ERROR("\nps_shards = 0\n", "JOB.toml:2: key 'ps_shards': 0 is out of range (1..2147483647)");
  EXPECT_JOB_ERROR("ps_shards = \"2\"\n", "key 'ps_shards'");
  EXPECT_JOB_ERROR("ps_split_above = -1\n", "key 'ps_split_above': -1 is out of range (1..");
  EXPECT_JOB_ERROR("\naugment = \"rotate\"\n",
                   "JOB.toml:2: key 'augment': --augment 'rotate': unknown augmentation 'rotate'; valid forms: none, "
                   "flip, crop:P");
}

// An augmentation is kept in its one spelling, so one job has one text.
TEST(ClusterJobFile, AugmentRoundTripsInItsCanonicalForm) {
  const actors::JobConfig c = parse_job_text("augment = \"flip,crop:2\"\n", "JOB.toml");
  EXPECT_EQ(c.train.augment, "crop:2,flip");
  EXPECT_NE(to_job_text(c).find("\naugment = \"crop:2,flip\"\n"), std::string::npos) << to_job_text(c);
  EXPECT_EQ(parse_job_text(to_job_text(c), "round-trip").train.augment, "crop:2,flip");
  EXPECT_EQ(parse_job_text("augment = \"none\"\n", "JOB.toml").train.augment, "");
}

// How the data is read travels in the job text, so that every node of a
// cluster reads a table or an image folder as the coordinator does.
TEST(ClusterJobFile, DataKeysRoundTripAndAJobWithoutThemKeepsItsText) {
  const actors::JobConfig c = parse_job_text(
      "task = \"regress\"\nlabel_column = \"price\"\ntest_fraction = 0.25\nimage_size = \"32x24\"\ncolor = \"rgb\"\n"
      "standardize = true\ndrop_remainder = false\n",
      "JOB.toml");
  const auto& d = c.train.data_options;
  EXPECT_EQ(d.csv.task, data::Task::regression);
  EXPECT_EQ(d.csv.label_column, "price");
  EXPECT_EQ(d.csv.test_fraction, 0.25);
  EXPECT_EQ(d.images.test_fraction, 0.25);
  EXPECT_EQ(d.images.height, 32);
  EXPECT_EQ(d.images.width, 24);
  EXPECT_EQ(d.images.color, data::ImageColor::rgb);
  EXPECT_TRUE(c.train.standardize);
  EXPECT_FALSE(c.train.drop_remainder);
  const std::string text = to_job_text(c);
  EXPECT_EQ(to_job_text(parse_job_text(text, "round-trip")), text);
  EXPECT_NE(text.find("\ntask = \"regress\"\n"), std::string::npos) << text;
  EXPECT_NE(text.find("\nimage_size = \"32x24\"\n"), std::string::npos) << text;
  const actors::JobConfig tests = parse_job_text("test_data = \"held_out.csv\"\ncolor = \"grey\"\n", "JOB.toml");
  EXPECT_EQ(tests.train.data_options.test_data, "held_out.csv");
  EXPECT_EQ(parse_job_text(to_job_text(tests), "round-trip").train.data_options.test_data, "held_out.csv");
  EXPECT_EQ(to_job_text(actors::JobConfig{}).find("task"), std::string::npos);
  EXPECT_JOB_ERROR("task = \"cluster\"\n", "\"classify\" or \"regress\"");
  EXPECT_JOB_ERROR("image_size = \"32\"\n", "HxW");
  EXPECT_JOB_ERROR("color = \"cmyk\"\n", "\"auto\", \"grey\" or \"rgb\"");
  EXPECT_JOB_ERROR("test_fraction = 1.5\n", "test_fraction");
}

// Above 2^64 - 1 a seed used to be taken as 2^64 - 1 and changed results.
TEST(ClusterJobFile, SeedsOutsideUint64AreRefused) {
  EXPECT_JOB_ERROR("epochs = 1\nseed = 99999999999999999999\n",
                   "JOB.toml:2:28: key 'seed': 99999999999999999999 is out of range (a seed is an integer in "
                   "0..18446744073709551615)");
  EXPECT_JOB_ERROR("seed = \"18446744073709551616\"\n",
                   "JOB.toml:1: key 'seed': \"18446744073709551616\" is out of range (a seed is an integer in "
                   "0..18446744073709551615)");
  EXPECT_JOB_ERROR("seed = -99999999999999999999\n", "key 'seed': -99999999999999999999 is out of range");
  EXPECT_JOB_ERROR("seed = -1\n", "JOB.toml:1: key 'seed': -1 is out of range (a seed is an integer in 0..");
  EXPECT_JOB_ERROR("seed = 1e3\n",
                   "JOB.toml:1: key 'seed': expected a non-negative integer, or a string of decimal "
                   "digits, got a float 1e3");
  for (const char* not_digits : {"", "+7", "-7", "7_000", " 7", "0x10", "1e3"})
    EXPECT_JOB_ERROR("seed = \"" + std::string(not_digits) + "\"\n",
                     "JOB.toml:1: key 'seed': \"" + std::string(not_digits) +
                         "\" is not a seed (a seed is an integer in 0..18446744073709551615; as a string, it is "
                         "decimal digits alone");
  EXPECT_EQ(parse_job_text("seed = 9223372036854775807\n", "JOB.toml").train.seed, 9223372036854775807ull);
  EXPECT_EQ(parse_job_text("seed = 0\n", "JOB.toml").train.seed, 0u);
  // TOML integers are 64-bit, so a float key no longer reads a longer
  // integer literal; written as a float, it is read.
  EXPECT_JOB_ERROR("lr = 100000000000000000000\n", "JOB.toml:1:27: Error while parsing decimal integer");
  EXPECT_EQ(parse_job_text("lr = 1e20\n", "JOB.toml").train.lr, 1e20f);
}

// TOML integers stop at 2^63 - 1, seeds (as --seed) at 2^64 - 1: a seed is
// also a string of decimal digits, and the canonical text writes one above
// 2^63 - 1 so.
TEST(ClusterJobFile, SeedsAbove2To63AreStrings) {
  for (const std::uint64_t seed : {9223372036854775808ull, 0xfedcba9876543210ull, 18446744073709551615ull}) {
    const std::string digits = std::to_string(seed);
    const actors::JobConfig c = parse_job_text("seed = \"" + digits + "\"\n", "JOB.toml");
    EXPECT_EQ(c.train.seed, seed);
    const std::string text = to_job_text(c);
    EXPECT_NE(text.find("\nseed = \"" + digits + "\"\n"), std::string::npos) << text;
    EXPECT_EQ(parse_job_text(text, "round-trip").train.seed, seed);
    EXPECT_EQ(to_job_text(parse_job_text(text, "round-trip")), text);
  }
  // Below, the string reads as the integer and is written as one.
  const actors::JobConfig small = parse_job_text("seed = \"9223372036854775807\"\n", "JOB.toml");
  EXPECT_EQ(small.train.seed, 9223372036854775807ull);
  EXPECT_NE(to_job_text(small).find("\nseed = 9223372036854775807\n"), std::string::npos) << to_job_text(small);
  EXPECT_EQ(to_job_text(small), to_job_text(parse_job_text("seed = 9223372036854775807\n", "JOB.toml")));
  EXPECT_EQ(parse_job_text("seed = \"007\"\n", "JOB.toml").train.seed, 7u);
  // An integer literal above 2^63 - 1 (which --seed takes) is a TOML error;
  // the message names the line and gives the string to write.
  EXPECT_JOB_ERROR("epochs = 1\nseed = 18446744073709551615  # from --seed\n",
                   "JOB.toml:2:28: key 'seed': 18446744073709551615 is beyond TOML's integers (at most "
                   "9223372036854775807); write a seed above that as a string of decimal digits: "
                   "seed = \"18446744073709551615\"");
  EXPECT_JOB_ERROR("[training]\n  seed = 9_223_372_036_854_775_808\n",
                   ": key 'seed': 9_223_372_036_854_775_808 is beyond TOML's integers (at most 9223372036854775807); "
                   "write a seed above that as a string of decimal digits: seed = \"9223372036854775808\"");
}

// The canonical text of a job whose seed is below 2^63 is what it was when
// the job file was read by hand, so the fingerprints of such jobs did not
// change with toml++ (these were computed with the hand parser, at troupe
// 0.1.0).
TEST(ClusterJobFile, FingerprintsOfOrdinaryJobsAreUnchanged) {
  EXPECT_EQ(job_identity(actors::JobConfig{}, "0.1.0").fingerprint,
            "4b6d1cfb377abadcba5ebaa88f59c3e0ffb00de8f6f2c19bcc80ba7a523c3ea6");
  const actors::JobConfig c = parse_job_text(
      "model = \"mlp\"\nseed = 5\nbatch = 32\nlr = 0.02\noptimizer = \"sgd\"\nmomentum = 0.9\nswitch = \"500:async\"\n",
      "JOB.toml");
  EXPECT_EQ(job_identity(c, "0.1.0").fingerprint, "42e82517b398a41b5edf6a275b7654dfb7146923fdb2f76265478ddb707f055b");
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
      EXPECT_NE(std::string(e.what()).find("expected a regular file of at most 1 MiB"), std::string::npos) << e.what();
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
  t.initial_loss_scale = 1024;
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
    EXPECT_EQ(b.initial_loss_scale, a.initial_loss_scale);
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
  // fp16's first loss scale is part of the job (every node starts from it),
  // written only when it is not the default.
  EXPECT_EQ(to_job_text(c).find("initial_loss_scale"), std::string::npos);
  c.train.initial_loss_scale = 1024;
  EXPECT_NE(to_job_text(c).find("initial_loss_scale = 1024.0\n"), std::string::npos) << to_job_text(c);
  EXPECT_THROW(parse_job_text("initial_loss_scale = 0\n", "j.toml"), std::invalid_argument);
}

// fuzz/job_file found it (F4): a raw control character inside a string was
// accepted, but to_job_text refused to write one, so the coordinator could
// not compute the job's fingerprint (std::invalid_argument). TOML refuses
// control characters other than tab in strings (toml++ says so, with the
// line and column); given as escapes, they are written back as escapes
// (ClusterJobFile.TomlSyntaxBeyondTheOldSubset).
TEST(ClusterJobFile, ControlCharactersInStringsAreRefused) {
  const std::string prohibited = "Error while parsing string: unescaped control characters other than TAB";
  EXPECT_JOB_ERROR(std::string("model = \"a\x01z\"\n"), "JOB.toml:1:11: " + prohibited);
  EXPECT_JOB_ERROR(std::string("epochs = 2\ndata = \"x\x7fy\"\n"), "JOB.toml:2:10: " + prohibited);
  EXPECT_JOB_ERROR(std::string("checkpoint_dir = \"a\0b\"\n", 23), "JOB.toml:1:");
  EXPECT_JOB_ERROR(std::string("[optimizer]\nname = \"sgd\r\"\n"), "JOB.toml:2:");
  // A raw tab is allowed (as in TOML) and written back escaped; the escapes
  // give every other character.
  const actors::JobConfig c = parse_job_text("data = \"a\tb\"\ncheckpoint_dir = \"x\\ny\"\n", "JOB.toml");
  EXPECT_EQ(c.train.data, "a\tb");
  EXPECT_EQ(c.train.checkpoint_dir, "x\ny");
  const std::string text = to_job_text(c);
  EXPECT_NE(text.find("data = \"a\\tb\"\n"), std::string::npos) << text;
  EXPECT_EQ(parse_job_text(text, "round-trip").train.checkpoint_dir, "x\ny");
}

// fuzz/job_file with toml++ compiled in from its header (docs/FUZZING.md,
// "Not troupe bugs"): toml++ 3.3 reaches TOML_UNREACHABLE (undefined
// behaviour) when it asks whether some non-ASCII characters are whitespace
// (upstream issues 190 and 295). Debian's compiled library, which troupe
// links, gives a parse error; this keeps it so on that library.
TEST(ClusterJobFile, NonAsciiWhereTomlExpectsWhitespaceIsASyntaxError) {
  EXPECT_JOB_ERROR(
      "epochs = 2\nseed = 9_223_37\xce\x9f"
      "036\n",
      "JOB.toml:2:16: Error while parsing decimal integer: expected digit");
  EXPECT_JOB_ERROR("lr = 1\xc2\xa7\n", "JOB.toml:1:7: Error while parsing decimal integer: expected digit");
  EXPECT_JOB_ERROR("epochs = 2 \xc2\xa1\n",
                   "JOB.toml:1:12: Error while parsing key-value pair: expected a comment or "
                   "whitespace");
  EXPECT_JOB_ERROR("\xcc\xaa", "JOB.toml:1:1: Error while parsing root table");
  // Upstream's example: after a line-ending backslash in a multi-line string.
  EXPECT_EQ(parse_job_text("model = \"\"\"\\\n\xc2\xa7\"\"\"\n", "JOB.toml").train.model, "\xc2\xa7");
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
  EXPECT_JOB_ERROR("weight_decay = inf\n", "key 'weight_decay': inf is out of range [0, inf)");
  EXPECT_JOB_ERROR("weight_decay = 1e400\n", "JOB.toml:1:21: Error while parsing floating-point: '1e400'");
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
