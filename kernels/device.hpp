// Device: where a tensor's storage lives and which backend computes on it.
//
// "cpu:N" names CPU devices and "cuda:N" GPUs. All CPU devices share host
// memory (the index matters to the actor layer, which gives each one its own
// threads, like TensorFlow's logical devices); CUDA devices each own their
// memory.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace troupe::kernels {

enum class DeviceKind : std::uint8_t { cpu, cuda };

struct Device {
  DeviceKind kind = DeviceKind::cpu;
  int index = 0;

  static Device cpu(int index = 0) { return {DeviceKind::cpu, index}; }
  static Device cuda(int index = 0) { return {DeviceKind::cuda, index}; }

  // Parses "cpu", "cpu:N", "cuda", "cuda:N". Throws std::invalid_argument
  // naming the text and the valid forms otherwise.
  static Device parse(std::string_view text);

  bool is_cpu() const { return kind == DeviceKind::cpu; }
  bool is_cuda() const { return kind == DeviceKind::cuda; }
  // Whether two devices can read each other's pointers directly.
  bool same_memory(const Device& other) const {
    return kind == other.kind && (kind == DeviceKind::cpu || index == other.index);
  }
  std::string str() const;

  friend bool operator==(const Device& a, const Device& b) { return a.kind == b.kind && a.index == b.index; }
  friend bool operator!=(const Device& a, const Device& b) { return !(a == b); }
};

const char* to_string(DeviceKind kind);

}  // namespace troupe::kernels
