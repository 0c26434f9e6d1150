// net/cluster/cluster_spec: TF_CONFIG-shaped cluster specs, good and bad.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>

#include "net/cluster/cluster_spec.hpp"

namespace troupe::net {
namespace {

// The error message of parse_cluster_spec(json), or "" when it parses.
std::string error_of(const std::string& json) {
  try {
    parse_cluster_spec(json, "cluster spec c.json");
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

#define EXPECT_ERROR(json, fragment)                                                                    \
  do {                                                                                                  \
    const std::string message = error_of(json);                                                         \
    EXPECT_NE(message.find("cluster spec c.json: "), std::string::npos) << "no source in: " << message; \
    EXPECT_NE(message.find(fragment), std::string::npos) << message;                                    \
  } while (0)

TEST(ClusterSpec, WorkersOnly) {
  const ClusterSpec s = parse_cluster_spec(
      R"({"cluster": {"worker": ["host-a:7000", "10.0.0.2:7001", "[::1]:7002"]}, "task": {"type": "worker", "index": 1}})",
      "TROUPE_CLUSTER");
  ASSERT_EQ(s.workers.size(), 3u);
  EXPECT_EQ(s.workers[0].host, "host-a");
  EXPECT_EQ(s.workers[0].port, 7000);
  EXPECT_EQ(s.workers[2].host, "::1");
  EXPECT_EQ(s.workers[2].str(), "[::1]:7002");
  EXPECT_EQ(s.coordinator().str(), "host-a:7000");
  EXPECT_EQ(s.self().str(), "10.0.0.2:7001");
  EXPECT_EQ(s.rank(), 1);
  EXPECT_FALSE(s.is_coordinator());
  EXPECT_EQ(s.nodes().size(), 3u);
  EXPECT_EQ(s.source, "TROUPE_CLUSTER");
}

TEST(ClusterSpec, IndexZeroIsTheCoordinator) {
  const ClusterSpec s =
      parse_cluster_spec(R"({"cluster": {"worker": ["a:1", "b:2"]}, "task": {"type": "worker", "index": 0}})", "x");
  EXPECT_TRUE(s.is_coordinator());
  EXPECT_EQ(s.rank(), 0);
}

TEST(ClusterSpec, ChiefAndPs) {
  const std::string json = R"({
    "cluster": {"chief": ["c:7000"], "worker": ["a:7000", "b:7000"], "ps": ["p:7001"]},
    "task": {"type": "chief", "index": 0}})";
  const ClusterSpec chief = parse_cluster_spec(json, "x");
  EXPECT_TRUE(chief.is_coordinator());
  EXPECT_EQ(chief.coordinator().str(), "c:7000");
  ASSERT_EQ(chief.nodes().size(), 3u);
  EXPECT_EQ(chief.nodes()[1].str(), "a:7000");
  ASSERT_EQ(chief.ps.size(), 1u);

  const std::string task = R"("type": "chief", "index": 0)";
  std::string as_worker = json;
  as_worker.replace(as_worker.find(task), task.size(), R"("type": "worker", "index": 0)");
  const ClusterSpec worker = parse_cluster_spec(as_worker, "x");
  EXPECT_FALSE(worker.is_coordinator());
  EXPECT_EQ(worker.rank(), 1);  // after the chief
  EXPECT_EQ(worker.coordinator().str(), "c:7000");

  std::string as_ps = json;
  as_ps.replace(as_ps.find(task), task.size(), R"("type": "ps", "index": 0)");
  const ClusterSpec ps = parse_cluster_spec(as_ps, "x");
  EXPECT_EQ(ps.rank(), -1);
  EXPECT_FALSE(ps.is_coordinator());
  EXPECT_EQ(ps.self().str(), "p:7001");
}

TEST(ClusterSpec, MalformedJsonNamesTheLine) {
  EXPECT_ERROR("{\"cluster\": {\"worker\": [\"a:1\"]},\n \"task\": {\"type\": \"worker\",, }}",
               "malformed JSON at line 2");
  EXPECT_ERROR("", "malformed JSON at line 1");
}

// fuzz/cluster_spec found it: a number too large for a double made
// nlohmann-json throw out_of_range (406), not a parse error, and it left
// parse_cluster_spec as that instead of std::invalid_argument.
TEST(ClusterSpec, ANumberTooLargeForADoubleIsMalformed) {
  EXPECT_ERROR(R"({"cluster": {"worker": ["a:1"]}, "task": {"type": "worker", "index": 6e400}})",
               "malformed JSON: number overflow parsing '6e400'");
  EXPECT_ERROR(R"({"x": -1e999, "cluster": {"worker": ["a:1"]}, "task": {"type": "worker", "index": 0}})",
               "number overflow");
}

// The JSON reader recurses per level: 100,000 levels used to overflow the
// stack (SIGSEGV). Nesting is bounded before the reader sees the text.
TEST(ClusterSpec, DeepNestingIsRefusedNotACrash) {
  const std::string arrays = std::string(100000, '[') + std::string(100000, ']');
  EXPECT_ERROR(arrays, "malformed JSON at line 1: nested more than 32 levels deep");
  std::string objects;
  for (int i = 0; i < 100000; ++i) objects += "{\"a\":";
  objects += "1" + std::string(100000, '}');
  EXPECT_ERROR("\n" + objects, "malformed JSON at line 2: nested more than 32 levels deep");
  // Brackets inside strings are text, not nesting: this fails as an address.
  EXPECT_ERROR(
      R"({"cluster": {"worker": [")" + std::string(100, '[') + R"(:1"]}, "task": {"type": "worker", "index": 0}})",
      "cluster.worker[0]");
  // 32 levels are read (and then refused for what they hold, not their depth).
  const std::string deep32 = R"({"cluster": {"worker": ["a:1"]}, "task": {"type": "worker", "index": 0}, "x": )" +
                             std::string(31, '[') + std::string(31, ']') + "}";
  const std::string message = error_of(deep32);
  EXPECT_EQ(message.find("nested"), std::string::npos) << message;
}

TEST(ClusterSpec, MissingParts) {
  EXPECT_ERROR(R"({"task": {"type": "worker", "index": 0}})", "missing \"cluster\" object");
  EXPECT_ERROR(R"({"cluster": {"worker": ["a:1"]}})", "missing \"task\" object");
  EXPECT_ERROR(R"({"cluster": {"worker": ["a:1"]}, "task": {"index": 0}})", "missing task.type");
  EXPECT_ERROR(R"({"cluster": {"worker": ["a:1"]}, "task": {"type": "worker"}})", "missing task.index");
  EXPECT_ERROR(R"({"cluster": {}, "task": {"type": "worker", "index": 0}})", "missing \"cluster\" object");
  EXPECT_ERROR(R"({"cluster": {"worker": []}, "task": {"type": "worker", "index": 0}})", "cluster has no nodes");
  EXPECT_ERROR(R"({"cluster": {"ps": ["a:1"]}, "task": {"type": "ps", "index": 0}})", "cluster has no nodes");
}

TEST(ClusterSpec, BadAddressesNameTheEntry) {
  EXPECT_ERROR(R"({"cluster": {"worker": ["a:1", "hostb"]}, "task": {"type": "worker", "index": 0}})",
               "cluster.worker[1] 'hostb': missing port");
  EXPECT_ERROR(R"({"cluster": {"worker": ["a:1", "b:"]}, "task": {"type": "worker", "index": 0}})",
               "cluster.worker[1] 'b:': missing port");
  EXPECT_ERROR(R"({"cluster": {"worker": ["a:http"]}, "task": {"type": "worker", "index": 0}})",
               "cluster.worker[0] 'a:http': port 'http' is not a number");
  EXPECT_ERROR(R"({"cluster": {"worker": ["a:70000"]}, "task": {"type": "worker", "index": 0}})",
               "cluster.worker[0] 'a:70000': port 70000 is not in 1..65535");
  EXPECT_ERROR(R"({"cluster": {"worker": ["a:0"]}, "task": {"type": "worker", "index": 0}})",
               "port 0 is not in 1..65535");
  EXPECT_ERROR(R"({"cluster": {"worker": [":7000"]}, "task": {"type": "worker", "index": 0}})", "missing host");
  EXPECT_ERROR(R"({"cluster": {"worker": ["::1:7000"]}, "task": {"type": "worker", "index": 0}})",
               "an IPv6 host needs brackets");
  EXPECT_ERROR(R"({"cluster": {"worker": ["a:1"], "ps": ["p"]}, "task": {"type": "worker", "index": 0}})",
               "cluster.ps[0] 'p': missing port");
  EXPECT_ERROR(R"({"cluster": {"worker": "a:1"}, "task": {"type": "worker", "index": 0}})",
               "cluster.worker must be a list");
  EXPECT_ERROR(R"({"cluster": {"worker": [["a:1"]]}, "task": {"type": "worker", "index": 0}})",
               "cluster.worker[0] must be a \"HOST:PORT\" string");
}

TEST(ClusterSpec, IndexOutOfRangeSaysTheRange) {
  EXPECT_ERROR(R"({"cluster": {"worker": ["a:1", "b:2"]}, "task": {"type": "worker", "index": 2}})",
               "task.index 2 is out of range for cluster.worker (0..1)");
  EXPECT_ERROR(R"({"cluster": {"worker": ["a:1", "b:2"]}, "task": {"type": "worker", "index": -1}})",
               "task.index -1 is out of range for cluster.worker (0..1)");
  EXPECT_ERROR(R"({"cluster": {"worker": ["a:1"]}, "task": {"type": "worker", "index": "one"}})",
               "task.index 'one' is not an integer");
  EXPECT_ERROR(R"({"cluster": {"worker": ["a:1"]}, "task": {"type": "ps", "index": 0}})",
               "task.type is 'ps' but cluster.ps is missing or empty");
}

TEST(ClusterSpec, DuplicateAddressesNameBothEntries) {
  EXPECT_ERROR(R"({"cluster": {"worker": ["a:1", "b:2", "a:1"]}, "task": {"type": "worker", "index": 0}})",
               "duplicate address a:1 in cluster.worker[0] and cluster.worker[2]");
  EXPECT_ERROR(R"({"cluster": {"chief": ["A:1"], "worker": ["a:1"]}, "task": {"type": "worker", "index": 0}})",
               "in cluster.chief[0] and cluster.worker[0]");
  // Same host, other port: fine.
  EXPECT_EQ(error_of(R"({"cluster": {"worker": ["a:1", "a:2"]}, "task": {"type": "worker", "index": 0}})"), "");
}

TEST(ClusterSpec, UnknownNames) {
  EXPECT_ERROR(R"({"cluster": {"worker": ["a:1"]}, "task": {"type": "evaluator", "index": 0}})",
               "unknown task.type 'evaluator' (known: chief, worker, ps)");
  EXPECT_ERROR(R"({"cluster": {"worker": ["a:1"], "workers": ["b:1"]}, "task": {"type": "worker", "index": 0}})",
               "unknown list cluster.workers (known: chief, worker, ps)");
  EXPECT_ERROR(R"({"cluster": {"worker": ["a:1"]}, "task": {"type": "worker", "index": 0, "rank": 1}})",
               "unknown field task.rank");
  EXPECT_ERROR(R"({"cluster": {"worker": ["a:1"], "worker": ["b:1"]}, "task": {"type": "worker", "index": 0}})",
               "\"worker\" appears twice in \"cluster\"");
  EXPECT_ERROR(R"({"cluster": {"worker": ["a:1"]}, "task": {"type": "worker", "index": 0, "index": 1}})",
               "\"index\" appears twice in \"task\"");
  EXPECT_ERROR(R"({"cluster": {"chief": ["a:1", "b:1"]}, "task": {"type": "chief", "index": 0}})",
               "cluster.chief has 2 entries");
}

TEST(ClusterSpec, FromFileOrEnvironment) {
  ::unsetenv("TROUPE_CLUSTER");
  EXPECT_FALSE(load_cluster_spec("").has_value());
  ::setenv("TROUPE_CLUSTER", R"({"cluster": {"worker": ["a:1"]}, "task": {"type": "worker", "index": 0}})", 1);
  auto env = load_cluster_spec("");
  ASSERT_TRUE(env.has_value());
  EXPECT_EQ(env->source, "TROUPE_CLUSTER");
  ::setenv("TROUPE_CLUSTER", R"({"cluster": {"worker": ["a"]}, "task": {"type": "worker", "index": 0}})", 1);
  try {
    load_cluster_spec("");
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("TROUPE_CLUSTER: cluster.worker[0] 'a': missing port"), std::string::npos)
        << e.what();
  }

  const std::string path = ::testing::TempDir() + "troupe-cluster-spec.json";
  std::ofstream(path) << R"({"cluster": {"worker": ["a:1", "b:1"]}, "task": {"type": "worker", "index": 1}})";
  auto file = load_cluster_spec(path);  // the file wins over the environment
  ASSERT_TRUE(file.has_value());
  EXPECT_EQ(file->source, "cluster spec " + path);
  EXPECT_EQ(file->rank(), 1);
  ::unlink(path.c_str());
  EXPECT_THROW(load_cluster_spec(path), std::invalid_argument);  // a configuration error: exit 2
  ::unsetenv("TROUPE_CLUSTER");
}

}  // namespace
TEST(ClusterSpec, IndexAsNumberOrStringAndWrongTypesNamed) {
  EXPECT_EQ(error_of(R"({"cluster": {"worker": ["a:1", "b:1"]}, "task": {"type": "worker", "index": "1"}})"), "");
  EXPECT_ERROR(R"({"cluster": {"worker": ["a:1"]}, "task": {"type": "worker", "index": 0.5}})",
               "task.index '0.5' is not an integer");
  EXPECT_ERROR(R"({"cluster": {"worker": [7000]}, "task": {"type": "worker", "index": 0}})",
               "cluster.worker[0] must be a \"HOST:PORT\" string");
  EXPECT_ERROR(R"({"cluster": {"worker": ["a:1"]}, "task": {"type": 1, "index": 0}})", "task.type must be a string");
  EXPECT_ERROR(R"(["a:1"])", "must be a JSON object, got array");
}

// ---- TF1's flags: --ps_hosts --worker_hosts --job_name --task_index -----------

namespace {

ClusterFlags tf1(const std::string& workers, const std::string& ps, const std::string& job, int index = 0) {
  ClusterFlags f;
  f.worker_hosts = workers;
  f.ps_hosts = ps;
  f.job_name = job;
  f.task_index = index;
  f.task_index_given = true;
  return f;
}

std::string flags_error_of(const ClusterFlags& flags) {
  try {
    cluster_spec_from_flags(flags);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

TEST(ClusterFlags, TheSeedsFlagsGiveTheSpecTfConfigWould) {
  const ClusterSpec w1 = cluster_spec_from_flags(tf1("a:7000,b:7000", "p:7001,q:7001", "worker", 1));
  EXPECT_EQ(w1.source, "--worker_hosts/--ps_hosts");
  EXPECT_TRUE(w1.chief.empty());  // worker 0 is TF1's chief
  ASSERT_EQ(w1.workers.size(), 2u);
  ASSERT_EQ(w1.ps.size(), 2u);
  EXPECT_EQ(w1.ps[1].str(), "q:7001");
  EXPECT_EQ(w1.rank(), 1);
  EXPECT_EQ(w1.coordinator().str(), "a:7000");
  EXPECT_EQ(w1.self().str(), "b:7000");

  ClusterFlags first = tf1("a:7000", "", "worker");
  first.task_index_given = false;  // --task_index defaults to 0, as in TF1
  const ClusterSpec w0 = cluster_spec_from_flags(first);
  EXPECT_TRUE(w0.is_coordinator());
  EXPECT_TRUE(w0.ps.empty());

  const ClusterSpec p = cluster_spec_from_flags(tf1("a:7000", "p:7001,q:7001", "ps", 1));
  EXPECT_EQ(p.task_type, "ps");
  EXPECT_EQ(p.rank(), -1);
  EXPECT_EQ(p.self().str(), "q:7001");
}

TEST(ClusterFlags, BadFlagsAreRefusedNamingTheFlagOrEntry) {
  auto expect = [](const ClusterFlags& f, const std::string& fragment) {
    const std::string message = flags_error_of(f);
    EXPECT_NE(message.find(fragment), std::string::npos) << "no \"" << fragment << "\" in: " << message;
  };
  expect(tf1("", "p:1", "ps"), "--worker_hosts is missing");
  expect(tf1("a:1", "", ""), "--job_name is missing: ps or worker");
  expect(tf1("a:1", "", "chief"), "--job_name 'chief' is not ps or worker");
  expect(tf1("a:1,,b:1", "", "worker"), "--worker_hosts 'a:1,,b:1': entry 1 is empty");
  expect(tf1("a:1,", "", "worker"), "--worker_hosts 'a:1,': entry 1 is empty");
  expect(tf1("a:1", ",p:2", "worker"), "--ps_hosts ',p:2': entry 0 is empty");
  // What the spec parser refuses, with the flags as the source.
  expect(tf1("a:1,b", "", "worker"), "--worker_hosts/--ps_hosts: cluster.worker[1] 'b': missing port");
  expect(tf1("a:1,b:2", "", "worker", 2), "task.index 2 is out of range for cluster.worker (0..1)");
  expect(tf1("a:1", "", "worker", -1), "task.index -1 is out of range");
  expect(tf1("a:1", "", "ps"), "task.type is 'ps' but cluster.ps is missing or empty");
  expect(tf1("a:1,b:2", "B:2", "worker"), "duplicate address B:2 in cluster.worker[1] and cluster.ps[0]");
  // given(): nothing set is no flags at all.
  EXPECT_FALSE(ClusterFlags{}.given());
  ClusterFlags only_index;
  only_index.task_index_given = true;
  EXPECT_TRUE(only_index.given());
}

}  // namespace

}  // namespace troupe::net
