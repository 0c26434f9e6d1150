// The IDX readers (models/data/idx.hpp), raw or gzipped: the input is an
// images or a labels file's bytes, read as both.
//
// Properties: each returns or throws DataError (nothing else, no crash, no
// allocation by a count in the header beyond what the file holds); what it
// returns has the header's shape, pixels in [0, 1] and labels in
// [0, num_classes).
#include "models/data/idx.hpp"
#include "fuzz/fuzz_support.hpp"
#include "models/data/error.hpp"

using namespace troupe::data;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static troupe::fuzz::MemFile file;
  const std::string& path = file.write(data, size);
  try {
    const troupe::kernels::Tensor images = read_idx_images(path);
    TROUPE_FUZZ_CHECK(images.shape().rank() == 4 && images.size(1) == 1, "images shape");
    const float* p = images.f32();
    for (std::int64_t i = 0; i < images.numel(); ++i)
      TROUPE_FUZZ_CHECK(p[i] >= 0.0f && p[i] <= 1.0f, "a pixel outside [0, 1]");
  } catch (const DataError&) {}
  for (const int classes : {10, 256}) {
    try {
      const troupe::kernels::Tensor labels = read_idx_labels(path, classes);
      TROUPE_FUZZ_CHECK(labels.shape().rank() == 1, "labels shape");
      const std::int32_t* l = labels.i32();
      for (std::int64_t i = 0; i < labels.numel(); ++i)
        TROUPE_FUZZ_CHECK(l[i] >= 0 && l[i] < classes, "a label outside [0, classes)");
    } catch (const DataError&) {}
  }
  return 0;
}
