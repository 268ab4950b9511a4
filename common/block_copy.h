// One copy-on-write instruction: copy KV block src into block dst (physical ids in [0, n_blocks)) on every
// rank before the step's forward. Made by the BlockManager, carried by the StepPlan, applied by the Worker.
#pragma once
#include <cstdint>

namespace tp {

struct BlockCopy {
  int32_t src = -1;
  int32_t dst = -1;
  bool operator==(const BlockCopy&) const = default;
};

}  // namespace tp
