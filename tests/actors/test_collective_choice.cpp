// Which collective backend reduces a host's replicas (actors/collective_choice.hpp),
// as a pure function of the devices: no GPU is needed to check that a
// machine with two GPUs would train through NCCL, nor that mixed devices are
// refused with a message that says why.
#include <gtest/gtest.h>

#include <stdexcept>
#include <string>

#include "actors/collective_choice.hpp"
#include "actors/job.hpp"
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
  for (const char* text : {"cuda:0,cuda:1", "cuda:1,cuda:0", "cuda:0,cuda:1,cuda:2,cuda:3,cuda:4,cuda:5,cuda:6,cuda:7"}) {
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

}  // namespace
}  // namespace troupe::actors
