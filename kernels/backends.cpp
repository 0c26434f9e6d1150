// Links the optional backends into an executable. This file is compiled into
// OBJECT libraries (kernels/CMakeLists.txt) so that the linker always keeps
// it, and its static initialiser registers the backends that the library
// was built with: troupe_backends has cpu and, when CUDA was found at
// configure time, cuda; troupe_backends_cuda_only (the GPU test binary) has
// cuda alone. This is the one place that chooses backends at build time;
// nothing else tests whether CUDA was built.
#include "kernels/registry.hpp"

namespace {

struct RegisterLinkedBackends {
  RegisterLinkedBackends() {
    auto& registry = troupe::kernels::Registry::instance();
#if TROUPE_LINK_CPU_BACKEND
    troupe::kernels::register_cpu_backend(registry);
#endif
#if TROUPE_LINK_CUDA_BACKEND
    troupe::kernels::register_cuda_backend(registry);
#endif
    (void)registry;
  }
};

const RegisterLinkedBackends register_linked_backends;

}  // namespace
