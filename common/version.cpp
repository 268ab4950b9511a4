#include "common/version.h"

// Set on this file only by common/CMakeLists.txt, so a new commit recompiles nothing else.
#ifndef TPSERVE_VERSION
#error "TPSERVE_VERSION must be defined by the build"
#endif

namespace tp {

const BuildInfo& build_info() {
  static const BuildInfo info{TPSERVE_VERSION, TPSERVE_GIT_COMMIT, TPSERVE_BUILD_TYPE, TPSERVE_WITH_CUDA != 0,
                              TPSERVE_WITH_NCCL != 0};
  return info;
}

std::string version_line() {
  const BuildInfo& b = build_info();
  return "tpserve " + b.version + " (commit " + b.commit + ", " + b.build_type + " build, CUDA: " +
         (b.cuda ? "yes" : "no") + ", NCCL: " + (b.nccl ? "yes" : "no") + ")";
}

}  // namespace tp
