// The nccl backend's parts that need no GPU (net/collective/nccl.hpp): the
// id's text form, loading libnccl at run time, ncclGetUniqueId, and the
// arguments make_nccl_group refuses before it touches a GPU. Its operations
// are tested on a GPU by gpu_tests (tests/gpu/test_nccl.cpp).
#include <gtest/gtest.h>

#include <stdexcept>
#include <string>

#include "kernels/config.hpp"
#include "kernels/registry.hpp"
#include "net/collective/nccl.hpp"

namespace troupe::net {
namespace {

using kernels::Device;

TEST(NcclId, HexRoundTrip) {
  NcclId id;
  for (std::size_t i = 0; i < id.bytes.size(); ++i) id.bytes[i] = static_cast<std::uint8_t>(i * 37 + 11);
  const std::string text = id.hex();
  EXPECT_EQ(text.size(), 256u);
  EXPECT_EQ(text.substr(0, 4), "0b30");
  EXPECT_EQ(NcclId::from_hex(text), id);
  std::string upper = text;
  for (auto& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  EXPECT_EQ(NcclId::from_hex(upper), id);
}

TEST(NcclId, BadTextIsRefusedSayingWhere) {
  EXPECT_THROW(NcclId::from_hex("abc"), std::invalid_argument);
  std::string text(256, '0');
  text[77] = 'g';
  try {
    NcclId::from_hex(text);
    FAIL() << "expected a refusal";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("character 77"), std::string::npos) << e.what();
  }
}

TEST(Nccl, BuiltExactlyWithTheCudaBackend) {
  EXPECT_EQ(nccl_built(), TROUPE_HAVE_CUDA == 1);
  if (!nccl_built()) {
    EXPECT_NE(nccl_unavailable().find("not in this build"), std::string::npos) << nccl_unavailable();
    EXPECT_THROW(nccl_unique_id(), std::runtime_error);
    EXPECT_THROW(make_nccl_group({Device::cuda(0), Device::cuda(1)}), std::runtime_error);
  }
}

// A CUDA build found NCCL at configure time; its library loads here, with
// or without a GPU.
TEST(Nccl, TheLibraryLoadsAndMakesDistinctIds) {
  if (!nccl_built()) GTEST_SKIP() << "built without the nccl backend";
  ASSERT_EQ(nccl_unavailable(), "");
  EXPECT_GE(nccl_version(), 21400);
  const NcclId a = nccl_unique_id(), b = nccl_unique_id();
  EXPECT_FALSE(a == b);
  EXPECT_EQ(NcclId::from_hex(a.hex()), a);
}

TEST(Nccl, BadArgumentsAreRefusedBeforeAnyGpuIsTouched) {
  if (!nccl_built()) GTEST_SKIP() << "built without the nccl backend";
  NcclId id;  // never used: every call below fails on its arguments
  auto refusal = [&](int first, int world, std::vector<Device> devices) -> std::string {
    try {
      make_nccl_group(id, first, world, devices, CollectiveOptions{std::chrono::milliseconds(1000)});
    } catch (const std::invalid_argument& e) {
      return e.what();
    }
    ADD_FAILURE() << "expected std::invalid_argument";
    return "";
  };
  EXPECT_NE(refusal(0, 2, {Device::cuda(0), Device::cuda(0)}).find("cuda:0 is named twice"), std::string::npos);
  EXPECT_NE(refusal(0, 1, {Device::cpu(0)}).find("not a GPU"), std::string::npos);
  EXPECT_NE(refusal(1, 2, {Device::cuda(0), Device::cuda(1)}).find("do not fit a world of 2"), std::string::npos);
  EXPECT_NE(refusal(0, 1, {}).find("no devices"), std::string::npos);
}

TEST(Nccl, NoGpuIsARuntimeErrorNamingTheCount) {
  if (!nccl_built()) GTEST_SKIP() << "built without the nccl backend";
  if (kernels::cuda_device_count() > 0) GTEST_SKIP() << "this machine has a GPU";
  try {
    make_nccl_group({Device::cuda(0)});
    FAIL() << "expected a refusal";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("0 usable CUDA device(s)"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace troupe::net
