// Tensor, Device and registry behaviour: ownership, views, explicit copies,
// parsing, and the errors users see.
#include <gtest/gtest.h>

#include "kernels/ops.hpp"
#include "kernels/registry.hpp"
#include "kernels/tensor.hpp"
#include "tests/kernels/harness.hpp"

namespace troupe::kernels {
namespace {

TEST(Device, ParsesAllForms) {
  EXPECT_EQ(Device::parse("cpu"), Device::cpu(0));
  EXPECT_EQ(Device::parse("cpu:3"), Device::cpu(3));
  EXPECT_EQ(Device::parse("cuda"), Device::cuda(0));
  EXPECT_EQ(Device::parse("cuda:1"), Device::cuda(1));
  EXPECT_EQ(Device::cuda(2).str(), "cuda:2");
}

TEST(Device, RejectsBadFormsNamingTheText) {
  for (const char* bad : {"gpu:0", "cpu:", "cpu:-1", "cpu:1x", "cuda:a", "", ":0", "CPU"}) {
    try {
      Device::parse(bad);
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(std::string("'") + bad + "'"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("cpu:N"), std::string::npos) << e.what();
    }
  }
}

TEST(Shape, NumelAndText) {
  EXPECT_EQ((Shape{64, 1, 28, 28}).numel(), 64 * 28 * 28);
  EXPECT_EQ((Shape{64, 1, 28, 28}).str(), "[64, 1, 28, 28]");
  EXPECT_EQ((Shape{0, 5}).numel(), 0);
  EXPECT_THROW((Shape{3, -1}), std::invalid_argument);
}

// Every element count must fit, and its bytes too: a shape of more than
// 2^56 elements is refused where it is made, so numel() never overflows
// (a model spec once multiplied 784 by 2^63 - 1 here).
TEST(Shape, MoreThanTwoToThe56ElementsIsRefusedNotOverflowed) {
  EXPECT_EQ((Shape{Shape::kMaxElements}).numel(), Shape::kMaxElements);
  EXPECT_EQ((Shape{std::int64_t{1} << 28, std::int64_t{1} << 28}).numel(), std::int64_t{1} << 56);
  EXPECT_THROW((Shape{Shape::kMaxElements + 1}), std::invalid_argument);
  EXPECT_THROW((Shape{std::int64_t{1} << 30, std::int64_t{1} << 30}), std::invalid_argument);
  try {
    Shape s{784, INT64_MAX};
    ADD_FAILURE() << "accepted " << s.str();
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("Shape [784, 9223372036854775807] has more than 2^56 elements"),
              std::string::npos)
        << e.what();
  }
  // An empty dimension makes the whole empty, however large the others.
  EXPECT_EQ((Shape{INT64_MAX, INT64_MAX, 0}).numel(), 0);
}

// Host memory that cannot be had is a std::bad_alloc that says how much
// was asked for (2^57 bytes: more than any address space). Skipped under
// the sanitizers, whose allocators abort on such a request.
TEST(Tensor, HostMemoryThatCannotBeHadSaysHowMuch) {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  GTEST_SKIP() << "the sanitizer's allocator aborts on a request of 2^57 bytes";
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
  GTEST_SKIP() << "the sanitizer's allocator aborts on a request of 2^57 bytes";
#endif
#endif
  try {
    Tensor t = Tensor::empty({std::int64_t{1} << 55});
    ADD_FAILURE() << "allocated " << t.bytes() << " bytes";
  } catch (const std::bad_alloc& e) {
    EXPECT_NE(std::string(e.what()).find(
                  "out of host memory: could not allocate 134217728.00 GiB (144115188075855872 bytes)"),
              std::string::npos)
        << e.what();
  }
}

TEST(Tensor, ZerosFullAndFromVector) {
  Tensor z = Tensor::zeros({3, 4});
  for (float v : z.to_vector()) EXPECT_EQ(v, 0.0f);
  Tensor f = Tensor::full({5}, 2.5f);
  for (float v : f.to_vector()) EXPECT_EQ(v, 2.5f);
  Tensor t = Tensor::from_vector({2, 2}, std::vector<float>{1, 2, 3, 4});
  EXPECT_EQ(t.to_vector(), (std::vector<float>{1, 2, 3, 4}));
  EXPECT_THROW(Tensor::from_vector({3}, std::vector<float>{1, 2}), std::invalid_argument);
  Tensor ids = Tensor::from_vector({3}, std::vector<std::int32_t>{7, 8, 9});
  EXPECT_EQ(ids.dtype(), DType::i32);
  EXPECT_EQ(ids.to_int_vector(), (std::vector<std::int32_t>{7, 8, 9}));
  EXPECT_THROW(ids.f32(), std::invalid_argument);
}

TEST(Tensor, StorageIsAligned) {
  for (int n : {1, 7, 33, 1000}) {
    Tensor t = Tensor::empty({n});
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(t.raw()) % 64, 0u) << n;
  }
}

TEST(Tensor, SlicesAreViewsThatKeepStorageAlive) {
  // The flat-buffer pattern: one owning buffer, layers see slices of it.
  Tensor flat = Tensor::from_vector({6}, std::vector<float>{0, 1, 2, 3, 4, 5});
  Tensor weight = flat.slice(2, {2, 2});
  weight.f32()[0] = 42.0f;
  EXPECT_EQ(flat.to_vector()[2], 42.0f);
  EXPECT_THROW(flat.slice(4, {3}), std::out_of_range);
  EXPECT_THROW(flat.slice(-1, {1}), std::out_of_range);
  flat = Tensor();  // drop the owner's handle; the slice still owns a share
  EXPECT_EQ(weight.to_vector(), (std::vector<float>{42, 3, 4, 5}));
}

TEST(Tensor, ViewsOfForeignMemoryDoNotOwn) {
  std::vector<float> host{1, 2, 3};
  Tensor v = Tensor::view(host.data(), {3}, DType::f32, Device::cpu());
  EXPECT_FALSE(v.owns_storage());
  v.f32()[1] = 9;
  EXPECT_EQ(host[1], 9.0f);
}

TEST(Tensor, ReshapeAndCopies) {
  Tensor t = testing::random_tensor({4, 6}, 1);
  Tensor r = t.reshape({2, 12});
  EXPECT_EQ(r.raw(), t.raw());
  EXPECT_THROW(t.reshape({5, 5}), std::invalid_argument);
  Tensor c = t.clone();
  EXPECT_NE(c.raw(), t.raw());
  EXPECT_EQ(c.to_vector(), t.to_vector());
  Tensor wrong = Tensor::empty({3, 8});
  EXPECT_THROW(wrong.copy_from(t), std::invalid_argument);
}

TEST(Tensor, DescribeNamesDtypeShapeAndDevice) {
  EXPECT_EQ(Tensor::empty({64, 10}).describe(), "f32[64, 10] on cpu:0");
}

TEST(Registry, KnowsRefAndRejectsUnknownNames) {
  auto& r = Registry::instance();
  EXPECT_NE(r.find("ref"), nullptr);
  try {
    r.get("tpu");
    ADD_FAILURE();
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("ref"), std::string::npos) << e.what();
  }
  {
    BackendOverride use(DeviceKind::cpu, "ref");
    EXPECT_EQ(r.for_device(Device::cpu()).name(), "ref");
  }
}

TEST(Registry, CudaTensorsFailClearlyWithoutTheBackend) {
  if (Registry::instance().find("cuda")) GTEST_SKIP() << "this binary has the cuda backend";
  try {
    Tensor::empty({4}, DType::f32, Device::cuda(0));
    ADD_FAILURE();
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("without CUDA"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace troupe::kernels
