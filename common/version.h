// The build's identity, fixed when CMake configures the tree: the project version (CMakeLists.txt's
// project(VERSION)), the git commit of the source tree at configure time ("unknown" outside a git checkout;
// "-dirty" when it had uncommitted changes), the build type, and whether CUDA and NCCL were compiled in.
// For `tpserve --version` and the HTTP /version route.
#pragma once
#include <string>

namespace tp {

struct BuildInfo {
  std::string version;     // "0.3.0"
  std::string commit;      // "1a2b3c4d5e6f", "1a2b3c4d5e6f-dirty" or "unknown"
  std::string build_type;  // "Release", "Debug", ...
  bool cuda = false;
  bool nccl = false;
};

const BuildInfo& build_info();
// "tpserve 0.3.0 (commit 1a2b3c4d5e6f, Release build, CUDA: no, NCCL: no)"
std::string version_line();

}  // namespace tp
