// `tpserve eval`: how well a model predicts a text, and how far its next-token distributions are from a
// reference model's. Runs the models in-process (the TP group's workers, like `generate`; under mpirun with
// --tp N every rank holds its shard of both models) with no scheduler: one sequence at a time.
//
// The text is tokenized whole (no BOS, special tokens not parsed) and cut into W non-overlapping windows of
// C = --context tokens (a last partial window is dropped; --max-chunks caps W). Each window is a fresh sequence;
// its tokens t_1 .. t_{C-1} are scored, each given the tokens of the window before it, so N = W·(C-1) and
//   perplexity = exp( -(1/N) · sum over windows, i in [1, C) of log softmax(z_{i-1})[t_i] )
// where z_{i-1} are the model's logits at position i-1 (full vocabulary, in double). With --ref:
//   KL mean = (1/N) · sum KL(p_ref || q_model) over the same positions, in nats;
//   top-1 agreement = fraction of those positions where argmax z_model == argmax z_ref.
// (rank/eval_metrics.h states them per position.) The two models must share the tokenizer's vocabulary.
//
// Ranks: the TP leader drives both workers; before each of their steps it broadcasts which one runs (1: --model,
// 2: --ref) and the followers run that worker's step (Worker::serve_one). The final command is --model's
// shutdown. Progress goes to stderr: one line updated on a terminal, else one line per window.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/config.h"
#include "common/dtype.h"
#include "common/error.h"
#include "common/kv_dtype.h"
#include "coordinator/tokenizer.h"
#include "launch/cli_args.h"
#include "launch/commands.h"
#include "launch/model_group.h"
#include "launch/model_options.h"
#include "rank/eval_metrics.h"
#include "rank/sequence_runner.h"
#include "rank/weight_loader.h"

namespace tp {
namespace {

constexpr int64_t kStepTokens = 512;  // tokens per forward step within a window

const char* kNotes =
    "Windows: the text is tokenized whole (no BOS, no special tokens) and cut into non-overlapping windows of\n"
    "--context tokens; each window is a fresh sequence whose tokens after the first are scored given the ones\n"
    "before them in the window. Over the N scored tokens t_i (z_{i-1}: the logits before t_i):\n"
    "  perplexity      = exp(-(1/N) sum log softmax(z_{i-1})[t_i])\n"
    "  KL mean         = (1/N) sum KL(p_ref || p_model) of the next-token distributions, in nats\n"
    "  top-1 agreement = fraction of positions where argmax z_model == argmax z_ref\n"
    "--dtype, --quantized and --kv-cache-dtype apply to both models. The held-out text of the quality table is\n"
    "Python 3.11's Language Reference from Debian's python3.11-doc (launch/heldout-text writes it; launch/setup\n"
    "installs the package). Under tensor parallelism run it as `mpirun -np N tpserve eval --tp N ...`.";

// Which worker the followers run next (broadcast by the leader before each step).
enum : int32_t { kCmdModel = 1, kCmdRef = 2 };

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError("--text " + path + ": cannot be read");
  std::ostringstream s;
  s << in.rdbuf();
  if (!in.good() && !in.eof()) throw InputError("--text " + path + ": read failed");
  return s.str();
}

// One line on stderr: a bar redrawn in place on a terminal, else one line per window.
class Progress {
 public:
  explicit Progress(int64_t total) : total_(total), tty_(isatty(STDERR_FILENO) != 0), t0_(Clock::now()) {}
  ~Progress() {
    if (tty_ && drawn_) std::fputc('\n', stderr);
  }
  void update(int64_t done, const EvalSummary& s) {
    const double secs = std::chrono::duration<double>(Clock::now() - t0_).count();
    char stats[160];
    int n = std::snprintf(stats, sizeof stats, "ppl %.4f", s.perplexity);
    if (s.has_ref)
      std::snprintf(stats + n, sizeof stats - size_t(n), "  KL %.6f  top-1 %.4f", s.kl_mean, s.top1_agreement);
    if (tty_) {
      const int width = 24, fill = int(width * done / total_);
      std::fprintf(stderr, "\reval [%s%s] %lld/%lld windows  %s  %.1f s", std::string(size_t(fill), '#').c_str(),
                   std::string(size_t(width - fill), '.').c_str(), (long long)done, (long long)total_, stats, secs);
    } else {
      std::fprintf(stderr, "eval: window %lld/%lld  %s  %.1f s\n", (long long)done, (long long)total_, stats, secs);
    }
    std::fflush(stderr);
    drawn_ = true;
  }

 private:
  using Clock = std::chrono::steady_clock;
  int64_t total_;
  bool tty_, drawn_ = false;
  Clock::time_point t0_;
};

// The reference model on the same ranks as --model: its own file, shard, KV pool (one window) and worker.
struct RefModel {
  std::unique_ptr<ModelFile> file;
  std::unique_ptr<LlamaModel> model;
  std::unique_ptr<KvPool> pool;
  std::unique_ptr<Worker> worker;
};

// Refuses a reference whose vocabulary differs from the model's: KL and agreement compare distributions
// over the same token ids.
void check_same_vocab(const ModelFile& model, const ModelFile& ref, const std::string& model_path,
                      const std::string& ref_path) {
  const int64_t vm = model.config().vocab, vr = ref.config().vocab;
  if (vm != vr)
    throw InputError("--ref " + ref_path + " has a vocabulary of " + std::to_string(vr) + " tokens and --model " +
                     model_path + " one of " + std::to_string(vm) +
                     ": KL and top-1 agreement need two models over the same vocabulary");
  const auto& tm = model.tokenizer().tokens;
  const auto& tr = ref.tokenizer().tokens;
  if (tm != tr) {
    size_t i = 0;
    while (i < tm.size() && i < tr.size() && tm[i] == tr[i]) ++i;
    throw InputError("--ref " + ref_path + " and --model " + model_path +
                     " have different vocabularies (first difference at token id " + std::to_string(i) +
                     "): KL and top-1 agreement need two models over the same vocabulary");
  }
}

}  // namespace

const CommandSpec& eval_spec() {
  static const CommandSpec spec{
      "eval",
      "perplexity of a model over a text; with --ref, KL divergence from a reference model and top-1 agreement",
      with(model_options(), {
          OptionSpec::required_value("text", "FILE", "the text to score (UTF-8)"),
          OptionSpec::value("ref", "MODEL", "", "a reference model with the same vocabulary: also KL(ref || model) and top-1 agreement"),
          OptionSpec::value("context", "N", "512", "tokens per window (>= 2, at most the model's context)"),
          OptionSpec::value("max-chunks", "N", "0", "score at most N windows; 0: every whole window of the text"),
          OptionSpec::flag("json", "print one JSON object instead of the text report"),
      }),
      kNotes};
  return spec;
}

int run_eval(const CliArgs& a) {
  int threads = 0;
  const Config cfg = config_with_model_options(a, "eval", &threads);
  const std::string text_path = a.required("text");
  const std::string ref_path = a.str("ref").value_or("");
  const int64_t context = a.integer("context", 2, 1 << 20);
  const int64_t max_chunks = a.integer("max-chunks", 0, int64_t(1) << 40);
  const bool json = a.flag("json");
  const std::string text = read_text(text_path);  // every rank: a bad path fails before any model loads

  ModelGroup group(nullptr, nullptr, cfg, threads);
  std::fprintf(stderr, "%s\n", group.report().c_str());
  const int64_t vocab = group.model->config().vocab;
  if (context > group.model->config().max_context)
    throw InputError("--context " + std::to_string(context) + " exceeds the model's context of " +
                     std::to_string(group.model->config().max_context) + " tokens");

  RefModel ref;
  if (!ref_path.empty()) {
    ref.file = open_model(ref_path);
    check_same_vocab(*group.file, *ref.file, cfg.model.path, ref_path);
    if (context > ref.file->config().max_context)
      throw InputError("--context " + std::to_string(context) + " exceeds --ref's context of " +
                       std::to_string(ref.file->config().max_context) + " tokens");
    const WeightLoadOptions load{parse_runtime_dtype(cfg.model.dtype, "model.dtype"),
                                 parse_quantized_mode(cfg.model.quantized, "model.quantized")};
    Communicator* comm = group.device_comm ? group.device_comm.get() : static_cast<Communicator*>(group.tp_comm.get());
    ref.model = std::make_unique<LlamaModel>(*ref.file, load, comm, LoadProgress{}, group.backend.get());
    const int64_t bs = cfg.cache.block_size;
    ref.pool = std::make_unique<KvPool>(
        ref.model->kv_shape((context + bs - 1) / bs, bs, parse_kv_dtype(cfg.cache.dtype, "cache.dtype")));
    ref.worker = std::make_unique<Worker>(*ref.model, *ref.pool, group.tp_comm.get());
  }

  const bool group_of_many = group.tp_comm && group.tp_comm->size() > 1;
  if (!group.is_leader()) {
    for (;;) {
      int32_t cmd = 0;
      group.tp_comm->broadcast(&cmd, sizeof cmd, 0);
      Worker& w = cmd == kCmdRef && ref.worker ? *ref.worker : *group.worker;
      if (!w.serve_one()) return 0;
    }
  }
  // Leader. Whatever happens below, the followers are released by --model's shutdown.
  const auto say = [&](int32_t cmd) {
    if (group_of_many) group.tp_comm->broadcast(&cmd, sizeof cmd, 0);
  };
  struct Release {
    std::function<void()> f;
    ~Release() { f(); }
  } release{[&] {
    try {
      say(kCmdModel);
      group.worker->shutdown();
    } catch (const std::exception&) {
      // the group is broken already; the error that got us here is the one to report
    }
  }};

  const Tokenizer tok(group.file->tokenizer());
  const std::vector<int32_t> ids = tok.encode(text, false, false);
  int64_t n_windows = int64_t(ids.size()) / context;
  if (n_windows < 1)
    throw InputError("--text " + text_path + " has " + std::to_string(ids.size()) +
                     " tokens, fewer than one window of --context " + std::to_string(context));
  if (max_chunks > 0) n_windows = std::min(n_windows, max_chunks);

  SequenceRunner model_seq(*group.worker, context, kStepTokens);
  std::unique_ptr<SequenceRunner> ref_seq;
  if (ref.worker) ref_seq = std::make_unique<SequenceRunner>(*ref.worker, context, kStepTokens);
  EvalAccumulator acc(vocab);
  const auto t0 = std::chrono::steady_clock::now();
  {
    Progress progress(n_windows);
    std::vector<int32_t> window;
    for (int64_t w = 0; w < n_windows; ++w) {
      window.assign(ids.begin() + long(w * context), ids.begin() + long((w + 1) * context));
      model_seq.reset();
      if (ref_seq) ref_seq->reset();
      for (size_t b = 0; b < window.size(); b += size_t(kStepTokens)) {
        const size_t e = std::min(window.size(), b + size_t(kStepTokens));
        const std::vector<float>* ref_rows = nullptr;
        if (ref_seq) {
          say(kCmdRef);
          ref_rows = &ref_seq->feed_rows(window, b, e);
        }
        say(kCmdModel);
        const std::vector<float>& rows = model_seq.feed_rows(window, b, e);
        const int64_t n_rows = int64_t(rows.size()) / vocab;
        for (int64_t j = 0; j < n_rows; ++j) {
          const int32_t target = window[b + size_t(j) + 1];
          if (ref_rows)
            acc.add(rows.data() + j * vocab, ref_rows->data() + j * vocab, target);
          else
            acc.add(rows.data() + j * vocab, target);
        }
      }
      progress.update(w + 1, acc.summary());
    }
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const EvalSummary s = acc.summary();
  const int tp = group.tp_comm ? group.tp_comm->size() : 1;

  if (json) {
    nlohmann::ordered_json j;
    j["model"] = cfg.model.path;
    j["ref"] = ref_path.empty() ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(ref_path);
    j["text"] = text_path;
    j["text_tokens"] = ids.size();
    j["context"] = context;
    j["windows"] = n_windows;
    j["scored_tokens"] = s.n_scored;
    j["mean_nll"] = s.mean_nll;
    j["perplexity"] = s.perplexity;
    if (s.has_ref) {
      j["ref_mean_nll"] = s.ref_mean_nll;
      j["ref_perplexity"] = s.ref_perplexity;
      j["kl_mean"] = s.kl_mean;
      j["kl_max"] = s.kl_max;
      j["top1_agree"] = s.n_top1_agree;
      j["top1_agreement"] = s.top1_agreement;
    }
    j["tp"] = tp;
    j["dtype"] = cfg.model.dtype;
    j["kv_cache_dtype"] = cfg.cache.dtype;
    j["seconds"] = secs;
    std::printf("%s\n", j.dump().c_str());
  } else {
    std::printf("model: %s\ntext: %s (%zu tokens; %lld windows of %lld; %lld tokens scored)\n", cfg.model.path.c_str(),
                text_path.c_str(), ids.size(), (long long)n_windows, (long long)context, (long long)s.n_scored);
    std::printf("perplexity: %.6f (mean NLL %.6f nats)\n", s.perplexity, s.mean_nll);
    if (s.has_ref) {
      std::printf("ref: %s\nref perplexity: %.6f\n", ref_path.c_str(), s.ref_perplexity);
      std::printf("KL(ref || model): mean %.9f nats/token, max %.6f\n", s.kl_mean, s.kl_max);
      std::printf("top-1 agreement: %.6f (%lld of %lld)\n", s.top1_agreement, (long long)s.n_top1_agree,
                  (long long)s.n_scored);
    }
    std::printf("time: %.2f s (tp %d)\n", secs, tp);
  }
  return 0;
}

}  // namespace tp
