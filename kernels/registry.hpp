// The backend registry: which Backend computes for which device.
//
// Backends register themselves by name. The ops (ops.hpp) ask for the
// backend of their tensors' device: "cuda" for cuda:N, and for cpu:N the
// "cpu" backend when it is linked, else "ref". A thread can override the
// choice for a device kind (BackendOverride; the tests use it to run one test
// body on every backend), and the environment variable TROUPE_CPU_BACKEND
// (ref|cpu) sets the default for CPU devices.
//
// Which backends exist is decided at link time: `ref` is part of the kernels
// core library; an executable that links the `troupe_backends` object library
// (CMake does this for every troupe executable) also gets `cpu` and, when
// CUDA was found at configure time, `cuda`.
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "kernels/backend.hpp"

namespace troupe::kernels {

class Registry {
 public:
  static Registry& instance();

  // Adds a backend; a second backend of the same name replaces nothing and
  // throws std::logic_error.
  void add(std::unique_ptr<Backend> backend);

  // The backend called `name`, or nullptr.
  Backend* find(std::string_view name) const;
  // The backend called `name`; throws std::invalid_argument listing the
  // registered names when there is none.
  Backend& get(std::string_view name) const;
  // The backend that computes for `device` on this thread.
  Backend& for_device(const Device& device) const;

  std::vector<std::string> names() const;  // sorted

 private:
  Registry();
  mutable std::mutex mutex_;
  std::vector<std::unique_ptr<Backend>> backends_;
};

// While alive, this thread computes on `backend_name` for devices of `kind`.
class BackendOverride {
 public:
  BackendOverride(DeviceKind kind, std::string_view backend_name);
  ~BackendOverride();
  BackendOverride(const BackendOverride&) = delete;
  BackendOverride& operator=(const BackendOverride&) = delete;

 private:
  DeviceKind kind_;
  Backend* previous_;
};

// Registration entry points, called by kernels/backends.cpp.
void register_cpu_backend(Registry& registry);
void register_cuda_backend(Registry& registry);

// Number of usable CUDA devices: 0 when troupe was built without CUDA or the
// machine has no GPU or driver.
int cuda_device_count();

}  // namespace troupe::kernels
