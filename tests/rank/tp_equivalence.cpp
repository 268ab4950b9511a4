// Tensor parallelism equals tp = 1. Run under `mpirun -np N`: every rank loads its shard of MODEL and joins
// one TP group of N; rank 0 also loads the whole model (tp = 1) as the reference. For every prompt, greedy
// decoding runs GEN tokens on both; at every step the logits must agree within TOL (max-abs-diff) and the
// tokens must be equal — a divergence passes only where the reference's top-2 gap is below TOL (a genuine
// near-tie), and that prompt stops there. Each rank's resident weight bytes must be within 15% of
// total/tp + the replicated parts (norms; K/V rows when tp > kv_heads).
// Prompt logprobs (SeqPlan::prompt_targets, top 5): the TP group's prefill rows equal tp 1's within TOL, and
// both equal the decode path (the same prompt fed one token at a time, each next token scored from the
// sampling row): the logprob of every prompt token and the top-5 values.
// GGUF block-quantized weights run kept as their blocks (QUANTIZED=keep, the default) or dequantized to DTYPE.
// Kept, the activations are quantized to int8 per block (kernels/cpu/gemm_gguf.h): the row-parallel partial
// sums, added in another order than tp 1's single dot product, move a value across a rounding boundary now
// and then and the difference grows through the layers to the size of the activation rounding itself
// (≈ 1 logit max-abs-diff, the same as kept vs dequantized at tp 1), so those runs take a TOL of that size.
// The exactness of the slices themselves is tested below that level: tests/rank/weight_loader_test.cpp (a kept
// slice is exactly the columns' blocks) and tests/kernels/test_gemm_gguf.cpp (slices sum to the whole).
//   tp_equivalence MODEL DTYPE TOL [GEN=32] [QUANTIZED=keep|dequantize]
// Prints one line per prompt and "N passed, M failed"; exits non-zero on any failure.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <vector>

#include "kernels/cpu/linear.h"
#include "parallel/mpi_communicator.h"
#include "rank/llama_model.h"
#include "rank/model_file.h"
#include "rank/sampler.h"
#include "rank/sequence_runner.h"

namespace {

using namespace tp;

std::vector<std::vector<int32_t>> prompts(int64_t vocab) {
  std::vector<std::vector<int32_t>> p;
  uint64_t s = 12345;
  for (int n : {1, 7, 16, 17, 45}) {  // lengths around block boundaries
    std::vector<int32_t> ids;
    for (int i = 0; i < n; ++i) {
      s = s * 6364136223846793005ull + 1442695040888963407ull;
      ids.push_back(int32_t((s >> 33) % uint64_t(vocab)));
    }
    p.push_back(ids);
  }
  return p;
}

int run(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: tp_equivalence MODEL DTYPE TOL [GEN]\n");
    return 2;
  }
  const std::string path = argv[1];
  const DType dtype = parse_dtype(argv[2]);
  const float tol = std::strtof(argv[3], nullptr);
  const int gen = argc > 4 ? std::atoi(argv[4]) : 32;
  const WeightLoadOptions load{dtype, argc > 5 ? parse_quantized_mode(argv[5], "QUANTIZED") : true};

  MpiSession mpi(&argc, &argv);
  MpiCommunicator world = MpiCommunicator::world();
  cpu::set_num_threads(1);
  auto file = open_model(path);
  LlamaModel model(*file, load, &world);
  const int64_t vocab = model.config().vocab, tp = world.size();
  KvPool pool(model.kv_shape(64, 16));
  Worker worker(model, pool, &world);

  // Resident bytes: every rank's, checked on rank 0 against the tp = 1 model.
  const int64_t mine = model.resident_weight_bytes();
  std::vector<int64_t> all(static_cast<size_t>(tp));
  world.all_gather(&mine, sizeof mine, all.data());
  if (!worker.is_leader()) {
    worker.serve();
    return 0;
  }
  int passed = 0, failed = 0;
  LlamaModel ref_model(*file, load, nullptr);
  {
    const ModelConfig& c = model.config();
    const int64_t total = ref_model.resident_weight_bytes();
    const int64_t norms = (2 * c.n_layers + 1) * c.hidden * int64_t(sizeof(float));
    const TpLayout& l = model.layout();
    const int64_t wbytes = dtype == DType::BF16 ? 2 : 4;  // K/V rows (dense only: no quantized synth models)
    const int64_t kv_extra =
        l.kv_replicated ? 2 * c.n_layers * c.hidden * c.head_dim * (1 - double(c.n_kv_heads) / double(tp)) * wbytes : 0;
    const double expected = double(total - norms) / double(tp) + double(norms + kv_extra);
    // Above it by up to 15%, or TP_EQ_RESIDENT_OVER (an act-order model: its row-parallel slices held sorted by
    // group, each group's columns padded, up to 1.5x a slice's columns: common/act_order.h)
    const char* over_env = std::getenv("TP_EQ_RESIDENT_OVER");
    const double over = over_env ? std::strtod(over_env, nullptr) : 0.15;
    for (int r = 0; r < tp; ++r) {
      const double got = double(all[size_t(r)]);
      const bool ok = got >= 0.85 * expected && got <= (1 + over) * expected;
      std::printf("[tp=%lld] rank %d resident weights %.2f MiB, expected ≈ %.2f MiB (total %.2f MiB / tp + replicated) %s\n",
                  (long long)tp, r, double(all[size_t(r)]) / (1 << 20), expected / (1 << 20), double(total) / (1 << 20),
                  ok ? "ok" : "FAIL");
      ok ? ++passed : ++failed;
    }
  }

  for (const auto& prompt : prompts(vocab)) {
    SequenceRunner seq(worker, int64_t(prompt.size()) + gen + 1);
    LocalRunner ref(ref_model, int64_t(prompt.size()) + gen + 1);
    const std::vector<float>* a = &seq.feed(prompt);
    const std::vector<float>* b = &ref.seq.feed(prompt);
    float worst = 0;
    int equal = 0;
    bool ok = true;
    std::string why;
    for (int i = 0; i < gen; ++i) {
      for (int64_t v = 0; v < vocab; ++v) worst = std::max(worst, std::fabs((*a)[size_t(v)] - (*b)[size_t(v)]));
      const int32_t ta = argmax(a->data(), vocab), tb = argmax(b->data(), vocab);
      if (ta != tb) {
        std::vector<float> sorted(b->begin(), b->end());
        std::partial_sort(sorted.begin(), sorted.begin() + 2, sorted.end(), std::greater<float>());
        const float gap = sorted[0] - sorted[1];
        if (gap >= tol) {
          ok = false;
          why = "token " + std::to_string(i) + " differs (" + std::to_string(ta) + " vs " + std::to_string(tb) +
                "), reference top-2 gap " + std::to_string(gap);
        } else {
          why = "near-tie at token " + std::to_string(i) + " (gap " + std::to_string(gap) + ")";
        }
        break;
      }
      ++equal;
      if (i + 1 < gen) {
        a = &seq.feed({ta});
        b = &ref.seq.feed({tb});
      }
    }
    if (worst > tol) {
      ok = false;
      why += " logits max-abs-diff " + std::to_string(worst) + " > " + std::to_string(tol);
    }
    std::printf("[tp=%lld] prompt of %zu tokens: %d/%d greedy tokens equal, logits max-abs-diff %.2e (tol %.1e) %s %s\n",
                (long long)tp, prompt.size(), equal, gen, worst, tol, ok ? "ok" : "FAIL", why.c_str());
    ok ? ++passed : ++failed;
  }
  constexpr int32_t kTop = 5;
  for (const auto& prompt : prompts(vocab)) {
    if (prompt.size() < 2) continue;
    SequenceRunner tp_seq(worker, int64_t(prompt.size()), 16);  // chunks of 16: targets cross chunk boundaries
    LocalRunner ref(ref_model, int64_t(prompt.size()));
    const std::vector<TokenLogprobs> a = tp_seq.feed_scored(prompt, kTop);
    const std::vector<TokenLogprobs> b = ref.seq.feed_scored(prompt, kTop);
    LocalRunner dec(ref_model, int64_t(prompt.size()));
    Sampler sampler;
    float worst_tp = 0, worst_decode = 0;
    for (size_t i = 1; i < prompt.size(); ++i) {
      const std::vector<float>& logits = dec.seq.feed({prompt[i - 1]});
      const TokenLogprobs c = sampler.logprobs(logits.data(), vocab, prompt[i], kTop);
      worst_tp = std::max(worst_tp, std::fabs(a[i].logprob - b[i].logprob));
      worst_decode = std::max(worst_decode, std::fabs(b[i].logprob - c.logprob));
      for (int32_t j = 0; j < kTop; ++j) {
        worst_tp = std::max(worst_tp, std::fabs(a[i].top_logprobs.at(size_t(j)) - b[i].top_logprobs.at(size_t(j))));
        worst_decode = std::max(worst_decode, std::fabs(b[i].top_logprobs.at(size_t(j)) - c.top_logprobs.at(size_t(j))));
      }
    }
    const bool ok = worst_tp <= tol && worst_decode <= tol;
    std::printf("[tp=%lld] prompt logprobs of %zu tokens: tp vs tp 1 max-abs-diff %.2e, prefill vs decode %.2e "
                "(tol %.1e) %s\n",
                (long long)tp, prompt.size(), worst_tp, worst_decode, tol, ok ? "ok" : "FAIL");
    ok ? ++passed : ++failed;
  }
  worker.shutdown();
  std::printf("%d passed, %d failed\n", passed, failed);
  return failed == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tp_equivalence: %s\n", e.what());
    return 1;
  }
}
