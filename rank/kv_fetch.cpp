#include "rank/kv_fetch.h"

#include <chrono>
#include <string>

namespace tp {

KvFetchOutcome run_kv_fetch(KvTransferAgent* agent, const KvFetchOrder& order, int tp_rank) {
  KvFetchOutcome out;
  const std::string at = "rank " + std::to_string(tp_rank) + ": ";
  if (!agent) {
    out.error = at + "no KV transfer agent on this rank (UCX did not start)";
    return out;
  }
  if (tp_rank < 0 || size_t(tp_rank) >= order.holder_addresses.size()) {
    out.error = at + "the holder has " + std::to_string(order.holder_addresses.size()) +
                " ranks; this replica's TP degree differs";
    return out;
  }
  try {
    const KvFetchStats st = agent->fetch(order.holder_addresses[size_t(tp_rank)], order.holder_blocks,
                                         order.local_blocks, order.chain_hashes,
                                         std::chrono::milliseconds(order.timeout_ms));
    out.ok = true;
    out.bytes_per_rank = st.bytes;
    out.seconds = st.seconds;
  } catch (const std::exception& e) {
    out.error = at + e.what();
  }
  return out;
}

}  // namespace tp
