#include "kernels/cpu/cpu_backend.hpp"
#include "kernels/registry.hpp"

namespace troupe::kernels {

void register_cpu_backend(Registry& registry) { registry.add(std::make_unique<CpuBackend>()); }

}  // namespace troupe::kernels
