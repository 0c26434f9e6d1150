#include "kernels/registry.hpp"

#include <algorithm>
#include <cstdlib>
#include <stdexcept>

#include "kernels/ref/ref_backend.hpp"

namespace troupe::kernels {

namespace {
// Per-thread overrides, indexed by DeviceKind.
thread_local Backend* override_for_kind[2] = {nullptr, nullptr};

std::string joined(const std::vector<std::string>& names) {
  std::string out;
  for (const auto& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}
}  // namespace

Registry::Registry() { backends_.push_back(std::make_unique<RefBackend>()); }

Registry& Registry::instance() {
  static Registry registry;
  return registry;
}

void Registry::add(std::unique_ptr<Backend> backend) {
  std::lock_guard<std::mutex> lock(mutex_);
  for (const auto& b : backends_)
    if (b->name() == backend->name())
      throw std::logic_error("kernels: backend '" + backend->name() + "' registered twice");
  backends_.push_back(std::move(backend));
}

Backend* Registry::find(std::string_view name) const {
  std::lock_guard<std::mutex> lock(mutex_);
  for (const auto& b : backends_)
    if (b->name() == name) return b.get();
  return nullptr;
}

Backend& Registry::get(std::string_view name) const {
  if (Backend* b = find(name)) return *b;
  throw std::invalid_argument("kernels: unknown backend '" + std::string(name) + "'; registered: " + joined(names()));
}

Backend& Registry::for_device(const Device& device) const {
  if (Backend* b = override_for_kind[static_cast<int>(device.kind)]) return *b;
  if (device.is_cuda()) {
    if (Backend* b = find("cuda")) return *b;
    throw std::runtime_error("kernels: " + device.str() +
                             " requested, but troupe was built without CUDA "
                             "(configure with -DTROUPE_CUDA=ON on a machine with the CUDA toolkit)");
  }
  static Backend* cpu_default = [this]() -> Backend* {
    const char* env = std::getenv("TROUPE_CPU_BACKEND");
    if (env && *env) {
      Backend& chosen = get(env);
      if (chosen.device_kind() != DeviceKind::cpu)
        throw std::invalid_argument(std::string("TROUPE_CPU_BACKEND=") + env +
                                    " is not a CPU backend (use ref or cpu)");
      return &chosen;
    }
    if (Backend* b = find("cpu")) return b;
    return &get("ref");
  }();
  return *cpu_default;
}

std::vector<std::string> Registry::names() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<std::string> out;
  for (const auto& b : backends_) out.push_back(b->name());
  std::sort(out.begin(), out.end());
  return out;
}

BackendOverride::BackendOverride(DeviceKind kind, std::string_view backend_name)
    : kind_(kind), previous_(override_for_kind[static_cast<int>(kind)]) {
  Backend& b = Registry::instance().get(backend_name);
  if (b.device_kind() != kind)
    throw std::invalid_argument("kernels: backend '" + b.name() + "' does not compute for " + to_string(kind) +
                                " devices");
  override_for_kind[static_cast<int>(kind)] = &b;
}

BackendOverride::~BackendOverride() { override_for_kind[static_cast<int>(kind_)] = previous_; }

int cuda_device_count() {
  Backend* cuda = Registry::instance().find("cuda");
  return cuda ? cuda->device_count() : 0;
}

}  // namespace troupe::kernels
