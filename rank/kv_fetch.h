// The rank side of a KV fetch (parallel/kv_fetch_order.h): this rank pulls its partition of the ordered blocks
// from the holder's rank of the same TP index over its KvTransferAgent (kvstore/kv_transfer.h). Never throws for
// a failed transfer: the outcome says what failed, so every rank still joins the group's all-reduce.
#pragma once
#include "kvstore/kv_transfer.h"
#include "parallel/kv_fetch_order.h"

namespace tp {

// agent null: the outcome is a failure ("no KV transfer agent on this rank").
KvFetchOutcome run_kv_fetch(KvTransferAgent* agent, const KvFetchOrder& order, int tp_rank);

}  // namespace tp
