#include "models/data/augment.hpp"

#include <algorithm>
#include <sstream>
#include <stdexcept>

#include "kernels/math/random.hpp"

namespace troupe::data {

namespace {

const char* forms = "none, flip, crop:P (P pixels of zero padding, 1 to 64), crop:P,flip";

// The stream of one epoch's draws: the seed and the epoch mixed apart from
// the other streams of that seed (dropout's, the epoch permutation's).
std::uint64_t epoch_stream(std::uint64_t seed, std::int64_t epoch) {
  constexpr std::uint64_t augment_tag = 0x61756d656e74ULL;  // "aument"
  return kernels::math::mix64(kernels::math::mix64(seed ^ augment_tag) + static_cast<std::uint64_t>(epoch));
}

}  // namespace

Augmentation Augmentation::parse(const std::string& text) {
  Augmentation a;
  if (text.empty() || text == "none") return a;
  auto fail = [&](const std::string& why) {
    throw std::invalid_argument("--augment '" + text + "': " + why + "; valid forms: " + forms);
  };
  std::stringstream in(text);
  bool crop_seen = false;
  for (std::string item; std::getline(in, item, ',');) {
    if (item == "flip") {
      if (a.flip) fail("flip given twice");
      a.flip = true;
    } else if (item.rfind("crop:", 0) == 0) {
      if (crop_seen) fail("crop given twice");
      crop_seen = true;
      const std::string p = item.substr(5);
      if (p.empty() || p.size() > 2 || p.find_first_not_of("0123456789") != std::string::npos)
        fail("'" + p + "' is not a padding in pixels");
      a.crop_padding = std::stoi(p);
      if (a.crop_padding < 1 || a.crop_padding > 64) fail("the padding must be 1 to 64 pixels");
    } else {
      fail("unknown augmentation '" + item + "'");
    }
  }
  if (a.empty()) fail("nothing to do");
  return a;
}

std::string Augmentation::str() const {
  if (empty()) return "none";
  std::string out;
  if (crop_padding > 0) out = "crop:" + std::to_string(crop_padding);
  if (flip) out += std::string(out.empty() ? "" : ",") + "flip";
  return out;
}

Augmentation::Draw Augmentation::draw(std::uint64_t seed, std::int64_t epoch, std::int64_t example) const {
  const std::uint64_t bits = kernels::math::random_bits(epoch_stream(seed, epoch), static_cast<std::uint64_t>(example));
  Draw d;
  const std::uint64_t span = 2 * static_cast<std::uint64_t>(crop_padding) + 1;
  // Two 24-bit fields for the offsets (the modulo's bias is below 1e-6)
  // and the top bit for the flip.
  d.x = crop_padding > 0 ? static_cast<int>((bits & 0xffffff) % span) : 0;
  d.y = crop_padding > 0 ? static_cast<int>(((bits >> 24) & 0xffffff) % span) : 0;
  d.flip = flip && (bits >> 63) != 0;
  return d;
}

void Augmentation::check_images(const kernels::Shape& s, kernels::DType dtype) const {
  if (empty()) return;
  if (s.rank() != 3 || dtype != kernels::DType::f32)
    throw std::invalid_argument("--augment " + str() +
                                " needs images (channels, height, width of floats); the data's " + "examples are " +
                                s.str());
  if (crop_padding > s[1] || crop_padding > s[2])
    throw std::invalid_argument("--augment " + str() + ": the padding is larger than the images (" + s.str() + ")");
}

void Augmentation::apply(const kernels::Tensor& batch, std::int64_t rows, const std::vector<std::int64_t>& indices,
                         std::uint64_t seed, std::int64_t epoch) const {
  if (empty() || rows == 0) return;
  const kernels::Shape& s = batch.shape();
  if (s.rank() != 4 || batch.dtype() != kernels::DType::f32 || !batch.device().is_cpu())
    throw std::invalid_argument("augmenting a batch of shape " + s.str() + ": expected host images [B, C, H, W]");
  if (rows > s[0] || static_cast<std::size_t>(rows) > indices.size())
    throw std::invalid_argument("augmenting " + std::to_string(rows) + " rows of a batch of " + s.str() + " with " +
                                std::to_string(indices.size()) + " example indices");
  const std::int64_t c = s[1], h = s[2], w = s[3], plane = h * w;
  float* data = batch.f32();
  std::vector<float> image(static_cast<std::size_t>(c * plane));
  for (std::int64_t r = 0; r < rows; ++r) {
    const Draw d = draw(seed, epoch, indices[static_cast<std::size_t>(r)]);
    float* row = data + r * c * plane;
    std::copy(row, row + c * plane, image.begin());
    // Output pixel (y, x) is padded pixel (y + d.y, x + d.x), i.e. input
    // (y + d.y - P, x + d.x - P), or 0 outside the image; the flip reads
    // column w - 1 - x of the crop.
    const std::int64_t dy = d.y - crop_padding, dx = d.x - crop_padding;
    for (std::int64_t ch = 0; ch < c; ++ch)
      for (std::int64_t y = 0; y < h; ++y) {
        const std::int64_t sy = y + dy;
        float* out = row + ch * plane + y * w;
        if (sy < 0 || sy >= h) {
          std::fill(out, out + w, 0.0f);
          continue;
        }
        // The crop's columns cx in [lo, hi) read input column cx + dx; the
        // rest are padding. Unflipped, output x is cx; flipped, w - 1 - cx.
        const float* in = image.data() + ch * plane + sy * w;
        const std::int64_t lo = std::max<std::int64_t>(0, -dx), hi = std::min<std::int64_t>(w, w - dx);
        std::fill(out, out + w, 0.0f);
        if (!d.flip)
          std::copy(in + lo + dx, in + hi + dx, out + lo);
        else
          for (std::int64_t cx = lo; cx < hi; ++cx) out[w - 1 - cx] = in[cx + dx];
      }
  }
}

}  // namespace troupe::data
