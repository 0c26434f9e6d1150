// `troupe --version` and `troupe version`: the version (CMake's project
// version) and how this binary was built, so a bug report or a cluster whose
// nodes refuse each other's version can say exactly what runs.
#include <caf/config.hpp>

#include <string>

#include "cli/build_info.hpp"
#include "cli/commands.hpp"
#include "kernels/config.hpp"
#include "net/collective/nccl.hpp"

namespace troupe::cli {

std::string version_text() {
  std::string out = std::string("troupe ") + TROUPE_VERSION + "\n";
  out += std::string("build: ") + TROUPE_BUILD_TYPE + ", " + TROUPE_BUILD_COMPILER + ", C++" +
         std::to_string(__cplusplus / 100 % 100) + (TROUPE_BUILD_NATIVE ? ", -march=native" : "");
  if (*TROUPE_BUILD_SANITIZE) out += std::string(", -fsanitize=") + TROUPE_BUILD_SANITIZE;
  out += "\n";
  out += std::string("CUDA: ") + TROUPE_BUILD_CUDA + "\n";
  out += std::string("NCCL: ") + TROUPE_BUILD_NCCL;
  if (net::nccl_built()) {  // libnccl is loaded at run time (net/collective/nccl.hpp)
    const std::string why = net::nccl_unavailable();
    if (why.empty()) {
      const int v = net::nccl_version();
      out += "; here NCCL " + std::to_string(v / 10000) + "." + std::to_string(v / 100 % 100) + "." +
             std::to_string(v % 100) + " loads";
    } else {
      out += "; not loadable here (TROUPE_NCCL_LIBRARY names it)";
    }
  }
  out += "\n";
  out += "CAF: " + std::to_string(CAF_MAJOR_VERSION) + "." + std::to_string(CAF_MINOR_VERSION) + "." +
         std::to_string(CAF_PATCH_VERSION);
  return out;  // no final newline: CLI11 adds one after --version's text
}

}  // namespace troupe::cli
