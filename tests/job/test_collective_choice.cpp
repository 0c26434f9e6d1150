// Which collective backend reduces a host's replicas (job/collective_choice.hpp),
// as a pure function of the devices: no GPU is needed to check that a
// machine with two GPUs would train through NCCL, nor that mixed devices are
// refused with a message that says why.
#include <gtest/gtest.h>

#include <caf/all.hpp>

#include <stdexcept>
#include <string>

#include "actors/messages.hpp"
#include "job/collective_choice.hpp"
#include "job/job.hpp"
#include "kernels/config.hpp"
#include "net/collective/nccl.hpp"

namespace troupe::actors {
namespace {

using kernels::Device;

std::vector<Device> devices(const std::string& text) { return parse_devices(text); }

std::string refusal(const std::vector<Device>& d, bool nccl_built) {
  try {
    choose_collective(d, nccl_built);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected a refusal";
  return "";
}

TEST(CollectiveChoice, CpuReplicasUseLocal) {
  for (const char* text : {"cpu:0", "cpu:0,cpu:1", "cpu:0,cpu:1,cpu:2,cpu:3"}) {
    const CollectiveChoice c = choose_collective(devices(text), true);
    EXPECT_EQ(c.kind, CollectiveKind::local) << text;
    EXPECT_NE(c.why.find("local"), std::string::npos) << c.why;
  }
}

TEST(CollectiveChoice, OneGpuUsesLocalWithOrWithoutNccl) {
  for (bool built : {true, false}) {
    EXPECT_EQ(choose_collective(devices("cuda:0"), built).kind, CollectiveKind::local);
    EXPECT_EQ(choose_collective(devices("cuda:3"), built).kind, CollectiveKind::local);
  }
}

TEST(CollectiveChoice, LogicalReplicasOnOneGpuUseLocal) {
  const CollectiveChoice c = choose_collective(devices("cuda:0,cuda:0"), true);
  EXPECT_EQ(c.kind, CollectiveKind::local);
  EXPECT_NE(c.why.find("logical"), std::string::npos) << c.why;
  EXPECT_EQ(choose_collective(devices("cuda:1,cuda:1,cuda:1"), false).kind, CollectiveKind::local);
}

TEST(CollectiveChoice, DistinctGpusUseNccl) {
  for (const char* text :
       {"cuda:0,cuda:1", "cuda:1,cuda:0", "cuda:0,cuda:1,cuda:2,cuda:3,cuda:4,cuda:5,cuda:6,cuda:7"}) {
    const CollectiveChoice c = choose_collective(devices(text), true);
    EXPECT_EQ(c.kind, CollectiveKind::nccl) << text;
    EXPECT_NE(c.why.find("nccl"), std::string::npos) << c.why;
  }
}

// What `scripts/run.sh` (troupe train with no --devices) does on a machine
// with two GPUs: default_devices() names both, and they reduce through NCCL
// in a build that has it (this one does when it has the CUDA backend).
TEST(CollectiveChoice, TheDefaultDevicesOfATwoGpuMachineReduceThroughNccl) {
  const std::vector<Device> d = default_devices_for(2, 16);
  ASSERT_EQ(d.size(), 2u);
  EXPECT_EQ(d[0], Device::cuda(0));
  EXPECT_EQ(d[1], Device::cuda(1));
  EXPECT_EQ(choose_collective(d, true).kind, CollectiveKind::nccl);
  EXPECT_EQ(net::nccl_built(), TROUPE_HAVE_CUDA == 1);
  if (net::nccl_built()) {
    EXPECT_EQ(choose_collective(d, net::nccl_built()).kind, CollectiveKind::nccl);
  }
  // And on this machine, whatever it has:
  EXPECT_NO_THROW(choose_collective(default_devices(), net::nccl_built()));
}

TEST(CollectiveChoice, DefaultDevicesWithoutGpus) {
  EXPECT_EQ(default_devices_for(0, 16), (std::vector<Device>{Device::cpu(0), Device::cpu(1)}));
  EXPECT_EQ(default_devices_for(0, 1), (std::vector<Device>{Device::cpu(0)}));
  EXPECT_EQ(default_devices_for(1, 1), (std::vector<Device>{Device::cuda(0)}));
}

TEST(CollectiveChoice, MixedCpuAndGpuIsRefusedSayingWhy) {
  const std::string why = refusal(devices("cpu:0,cuda:0"), true);
  EXPECT_NE(why.find("cpu:0,cuda:0"), std::string::npos) << why;
  EXPECT_NE(why.find("mixes CPU and CUDA"), std::string::npos) << why;
  EXPECT_NE(why.find("one kind per job"), std::string::npos) << why;
  EXPECT_NE(refusal(devices("cuda:0,cuda:1,cpu:0"), true).find("mixes"), std::string::npos);
}

TEST(CollectiveChoice, LogicalReplicasOnSeveralGpusAreRefused) {
  const std::string why = refusal(devices("cuda:0,cuda:0,cuda:1"), true);
  EXPECT_NE(why.find("name each GPU once"), std::string::npos) << why;
}

TEST(CollectiveChoice, SeveralGpusWithoutNcclAreRefused) {
  const std::string why = refusal(devices("cuda:0,cuda:1"), false);
  EXPECT_NE(why.find("without the nccl backend"), std::string::npos) << why;
}

TEST(CollectiveChoice, NoDevicesIsRefused) { EXPECT_THROW(choose_collective({}, true), std::invalid_argument); }

TEST(ParseDevices, AGpuMayBeRepeatedForLogicalReplicas) {
  EXPECT_EQ(devices("cuda:0,cuda:0"), (std::vector<Device>{Device::cuda(0), Device::cuda(0)}));
  EXPECT_EQ(devices("cuda,cuda:0,cuda:0").size(), 3u);
}

TEST(ParseDevices, ACpuDeviceMayNotBeRepeated) {
  try {
    devices("cpu:0,cpu:0");
    FAIL() << "expected a refusal";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("cpu:0 twice"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("cuda:0,cuda:0"), std::string::npos) << e.what();
  }
}

// The Job refuses mixed devices before it looks at the machine or the data.
TEST(JobDevices, MixedDevicesAreRefusedBeforeAnythingElse) {
  JobConfig c;
  c.train.model = "mlp";
  c.train.data = "no-such-dataset";
  c.devices = devices("cpu:0,cuda:0");
  try {
    Job job(c);
    FAIL() << "expected a refusal";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("mixes CPU and CUDA"), std::string::npos) << e.what();
  }
}

// ---- across nodes: one NCCL group for the view, or the hierarchical group ----

NodeFacts node(const std::string& name, const std::string& host, const std::string& devices_text,
               const std::string& nccl_unavailable = "") {
  return NodeFacts{name, host, devices(devices_text), nccl_unavailable};
}

TEST(CollectiveAcrossNodes, GpuNodesWhereNcclLoadsShareOneNcclGroup) {
  // One GPU per host (the usual cluster), and several per host.
  for (const auto& nodes :
       {std::vector<NodeFacts>{node("a", "10.0.0.1", "cuda:0"), node("b", "10.0.0.2", "cuda:0")},
        std::vector<NodeFacts>{node("a", "10.0.0.1", "cuda:0,cuda:1"), node("b", "10.0.0.2", "cuda:0,cuda:1,cuda:2"),
                               node("c", "10.0.0.3", "cuda:3")}}) {
    const AcrossChoice c = choose_across_nodes(nodes, false);
    EXPECT_EQ(c.kind, AcrossKind::nccl) << c.why;
    EXPECT_NE(c.why.find("nccl"), std::string::npos) << c.why;
  }
  EXPECT_NE(choose_across_nodes({node("a", "h1", "cuda:0,cuda:1"), node("b", "h2", "cuda:0,cuda:1,cuda:2")}, false)
                .why.find("5 replicas"),
            std::string::npos);
  // Two nodes of one host on distinct GPUs (the GPU test in tests/gpu does this).
  EXPECT_EQ(choose_across_nodes({node("a", "127.0.0.1", "cuda:0"), node("b", "127.0.0.1", "cuda:1")}, false).kind,
            AcrossKind::nccl);
}

// Every reason to stay hierarchical, named in the log line with the node.
TEST(CollectiveAcrossNodes, AnythingElseStaysHierarchicalAndSaysWhy) {
  struct Case {
    std::vector<NodeFacts> nodes;
    std::string why;
  };
  const std::vector<Case> cases = {
      {{node("the coordinator", "h1", "cpu:0,cpu:1"), node("node 1", "h2", "cpu:0,cpu:1")},
       "the coordinator has CPU replicas (cpu:0,cpu:1)"},
      {{node("the coordinator", "h1", "cuda:0"), node("node 1", "h2", "cpu:0")}, "node 1 has CPU replicas"},
      {{node("the coordinator", "h1", "cuda:0"), node("node 1", "h2", "cuda:0,cuda:0")},
       "node 1 runs logical replicas (cuda:0,cuda:0)"},
      {{node("the coordinator", "h1", "cuda:0"), node("node 1", "h2", "cuda:0", "libnccl.so.2: not found")},
       "NCCL is unavailable on node 1: libnccl.so.2: not found"},
      {{node("the coordinator", "h1", "cuda:0,cuda:1"), node("node 1", "h1", "cuda:1")},
       "node 1 shares cuda:1 with another node on h1"},
      {{node("the coordinator", "h1", "cuda:0,cuda:1")}, "one node"},
  };
  for (const auto& c : cases) {
    const AcrossChoice choice = choose_across_nodes(c.nodes, false);
    EXPECT_EQ(choice.kind, AcrossKind::hierarchical) << c.why;
    EXPECT_NE(choice.why.find("hierarchical"), std::string::npos) << choice.why;
    EXPECT_NE(choice.why.find(c.why), std::string::npos) << choice.why;
  }
}

// With a cluster secret every link between nodes is sealed; NCCL's transport
// is not, so gradients keep to the sealed tcp ring between nodes.
TEST(CollectiveAcrossNodes, SealedLinksKeepGradientsOffNcclBetweenNodes) {
  const std::vector<NodeFacts> nodes{node("a", "10.0.0.1", "cuda:0,cuda:1"), node("b", "10.0.0.2", "cuda:0")};
  ASSERT_EQ(choose_across_nodes(nodes, false).kind, AcrossKind::nccl);
  const AcrossChoice sealed = choose_across_nodes(nodes, true);
  EXPECT_EQ(sealed.kind, AcrossKind::hierarchical);
  EXPECT_NE(sealed.why.find("sealed"), std::string::npos) << sealed.why;
  EXPECT_NE(sealed.why.find("NCCL's transport is not"), std::string::npos) << sealed.why;
}

// A node with a CPU replica does not load NCCL, and says so.
TEST(CollectiveAcrossNodes, CpuNodesReportNcclAsNotLoaded) {
  EXPECT_EQ(nccl_unavailable_for(devices("cpu:0,cpu:1")), "not loaded on a node with CPU replicas");
  EXPECT_EQ(nccl_unavailable_for(devices("cuda:0")), net::nccl_unavailable());
}

// FormView crosses nodes through CAF's binary serialiser, as a worker
// receives it: the NCCL id arrives byte for byte, an empty one (a
// hierarchical view) stays empty, and a damaged one is refused on receipt.
FormView through_the_wire(const FormView& sent) {
  std::vector<char> buffer;
  caf::binary_serializer sink{nullptr, buffer};
  FormView copy = sent;
  if (auto e = sink(copy)) ADD_FAILURE() << "serialising a FormView failed";
  FormView received;
  caf::binary_deserializer source{nullptr, buffer};
  if (auto e = source(received)) ADD_FAILURE() << "deserialising a FormView failed";
  return received;
}

TEST(CollectiveAcrossNodes, TheNcclIdRoundTripsThroughTheViewMessage) {
  FormView f;
  f.view = 3;
  f.node_rank = 1;
  f.first_rank = 2;
  f.world = 4;
  f.addresses = {"10.0.0.1:7000", "10.0.0.2:7000"};
  f.batch_size = 32;
  net::NcclId id;
  for (std::size_t i = 0; i < id.bytes.size(); ++i) id.bytes[i] = static_cast<std::uint8_t>(255 - i);  // every nibble
  f.nccl_id = id.hex();
  const FormView g = through_the_wire(f);
  EXPECT_EQ(g.nccl_id, f.nccl_id);
  EXPECT_EQ(net::NcclId::from_hex(g.nccl_id), id);
  EXPECT_EQ(g.first_rank, 2);
  EXPECT_EQ(g.world, 4);
  // The id an NCCL build makes here (no GPU needed: ncclGetUniqueId only
  // opens the bootstrap listener).
  if (net::nccl_unavailable().empty()) {
    const net::NcclId fresh = net::nccl_unique_id();
    f.nccl_id = fresh.hex();
    EXPECT_EQ(net::NcclId::from_hex(through_the_wire(f).nccl_id), fresh);
    EXPECT_FALSE(fresh == net::nccl_unique_id()) << "every view gets a fresh id";
  }
  f.nccl_id.clear();
  EXPECT_EQ(through_the_wire(f).nccl_id, "");
}

TEST(CollectiveAcrossNodes, ADamagedNcclIdIsRefusedOnReceipt) {
  FormView f;
  f.addresses = {"10.0.0.1:7000"};
  for (const std::string& bad : {std::string(255, 'a'), std::string(255, 'a') + "g"}) {
    f.nccl_id = bad;
    std::vector<char> buffer;
    caf::binary_serializer sink{nullptr, buffer};
    ASSERT_FALSE(sink(f));
    FormView received;
    caf::binary_deserializer source{nullptr, buffer};
    EXPECT_THROW((void)source(received), std::invalid_argument) << bad.size();
  }
}

}  // namespace
}  // namespace troupe::actors
