#include "kernels/device.hpp"

#include <charconv>
#include <stdexcept>

namespace troupe::kernels {

const char* to_string(DeviceKind kind) { return kind == DeviceKind::cpu ? "cpu" : "cuda"; }

std::string Device::str() const { return std::string(to_string(kind)) + ":" + std::to_string(index); }

Device Device::parse(std::string_view text) {
  auto fail = [&]() -> Device {
    throw std::invalid_argument("unknown device '" + std::string(text) +
                                "': expected cpu, cpu:N, cuda or cuda:N (N >= 0)");
  };
  std::string_view name = text;
  int index = 0;
  if (auto colon = text.find(':'); colon != std::string_view::npos) {
    name = text.substr(0, colon);
    std::string_view digits = text.substr(colon + 1);
    if (digits.empty()) return fail();
    auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), index);
    if (ec != std::errc() || end != digits.data() + digits.size() || index < 0) return fail();
  }
  if (name == "cpu") return cpu(index);
  if (name == "cuda") return cuda(index);
  return fail();
}

}  // namespace troupe::kernels
