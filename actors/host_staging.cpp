#include "actors/host_staging.hpp"

#include <cstring>
#include <stdexcept>
#include <string>

#include "kernels/registry.hpp"

namespace troupe::actors {

using kernels::Tensor;

HostStaging::~HostStaging() {
  if (!pinned_out_) return;
  auto& backend = kernels::Registry::instance().for_device(device_);
  // A pull may still be reading pinned_in_.
  try {
    backend.synchronize(device_.index);
  } catch (...) {}
  backend.deallocate_pinned(pinned_out_);
  backend.deallocate_pinned(pinned_in_);
}

void HostStaging::allocate() {
  auto& backend = kernels::Registry::instance().for_device(device_);
  const std::size_t bytes = static_cast<std::size_t>(numel_) * sizeof(float);
  pinned_out_ = static_cast<float*>(backend.allocate_pinned(bytes));
  try {
    pinned_in_ = static_cast<float*>(backend.allocate_pinned(bytes));
  } catch (...) {
    backend.deallocate_pinned(pinned_out_);
    pinned_out_ = nullptr;
    throw;
  }
}

Tensor HostStaging::push(const Tensor& gradient) {
  if (!device_.is_cuda()) return gradient.to(kernels::Device::cpu());
  if (gradient.numel() != numel_ || gradient.device() != device_)
    throw std::invalid_argument("HostStaging::push: expected " + std::to_string(numel_) + " floats on " +
                                device_.str() + ", got " + gradient.describe());
  if (!pinned_out_) allocate();
  auto& backend = kernels::Registry::instance().for_device(device_);
  backend.copy_to_host_async(pinned_out_, gradient.raw(), gradient.bytes(), device_.index);
  backend.synchronize(device_.index);  // the copy is the last work queued on the stream
  Tensor host = Tensor::empty(gradient.shape(), kernels::DType::f32, kernels::Device::cpu());
  std::memcpy(host.raw(), pinned_out_, gradient.bytes());
  return host;
}

void HostStaging::pull(const Tensor& fresh, const Tensor& parameters) {
  if (!device_.is_cuda()) {
    parameters.copy_from(fresh);
    return;
  }
  if (fresh.numel() != numel_ || parameters.numel() != numel_ || !fresh.device().is_cpu() ||
      parameters.device() != device_)
    throw std::invalid_argument("HostStaging::pull: expected " + std::to_string(numel_) + " floats from the host to " +
                                device_.str() + ", got " + fresh.describe() + " into " + parameters.describe());
  if (!pinned_in_) allocate();
  auto& backend = kernels::Registry::instance().for_device(device_);
  std::memcpy(pinned_in_, fresh.raw(), fresh.bytes());
  backend.copy_from_host_async(parameters.raw(), pinned_in_, parameters.bytes(), device_.index);
}

}  // namespace troupe::actors
