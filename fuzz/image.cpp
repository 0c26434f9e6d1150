// The image decoder of the image folders (models/data/images.hpp): PNG
// through libpng's simplified API, JPEG through libjpeg with its error_exit
// longjmp, chosen by the magic. The input is one file's bytes.
//
// Properties: decode_image returns or throws DataError (nothing else, no
// crash, no allocation a header asks for beyond the documented bound);
// what it returns has positive dimensions, 1 or 3 channels and exactly
// height * width * channels samples; a small image resizes to 5x7 with
// every value in [0, 255].
#include "fuzz/fuzz_support.hpp"
#include "models/data/error.hpp"
#include "models/data/images.hpp"

using namespace troupe::data;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  try {
    const DecodedImage image = decode_image(bytes, "input");
    TROUPE_FUZZ_CHECK(image.height > 0 && image.width > 0, "dimensions");
    TROUPE_FUZZ_CHECK(image.channels == 1 || image.channels == 3, "channels");
    TROUPE_FUZZ_CHECK(image.pixels.size() == static_cast<std::size_t>(image.height) *
                                                 static_cast<std::size_t>(image.width) *
                                                 static_cast<std::size_t>(image.channels),
                      "sample count");
    if (static_cast<std::int64_t>(image.height) * image.width <= 1 << 16) {
      const std::vector<float> resized = resize_bilinear(image, 5, 7);
      TROUPE_FUZZ_CHECK(resized.size() == static_cast<std::size_t>(5 * 7 * image.channels), "resized size");
      for (const float v : resized) TROUPE_FUZZ_CHECK(v >= 0.0f && v <= 255.0f, "a resized value outside [0, 255]");
    }
  } catch (const DataError&) {}
  return 0;
}
