#include "rank/cuda_graph_buckets.h"

namespace tp {

int64_t cuda_graph_bucket(int64_t n_seqs) {
  if (n_seqs <= 0) return 0;
  for (const int64_t b : kCudaGraphBuckets)
    if (n_seqs <= b) return b;
  return 0;
}

int64_t cuda_graph_bucket(const std::vector<SeqPlan>& seqs) {
  for (const SeqPlan& s : seqs)
    if (s.tokens.size() != 1 || !s.prompt_targets.empty() || !s.want_logits) return 0;
  return cuda_graph_bucket(int64_t(seqs.size()));
}

}  // namespace tp
