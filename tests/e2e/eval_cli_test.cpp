// `tpserve eval` on SmolLM2 as a user runs it (the real binary, and mpirun for tp 3), over the held-out text
// (launch/heldout-text: Python 3.11's Language Reference from python3.11-doc). Stated bounds:
//   - the Q4_1 model against itself as --ref: KL mean 0 (< 1e-12; the rows are bit-identical), top-1 1.0;
//   - the F32 GGUF against the Q4_1 as --ref: KL mean in (1e-5, 0.05) nats, top-1 > 0.9;
//   - perplexity of the F32 GGUF = exp(mean -logprob) computed here directly from the prompt-logprobs path
//     (SequenceRunner::feed_scored, the API's echo+logprobs) on the same windows: relative difference < 1e-5
//     (both f32; the sampler's logprobs are float);
//   - tp 3 = tp 1 (F32 model, the Q8_0 copy as reference, run dequantized to f32): perplexities within 1e-4 relative, KL mean
//     within 1e-4 absolute, top-1 agreement within 2 tokens out of the N scored (reduction order differs, near-ties);
//   - bad arguments: one clear line, exit 1 or 2, never an internal error; under tp 3 a refusal on the leader
//     releases the other ranks (no hang).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "coordinator/tokenizer.h"
#include "rank/llama_model.h"
#include "rank/model_file.h"
#include "rank/sequence_runner.h"
#include "tests/util/run_tpserve.h"

namespace {

using tp::test::Result;

std::string models() { return std::string(TPSERVE_SOURCE_DIR) + "/models/"; }
std::string q4() { return models() + "SmolLM2-135M-Instruct.Q4_1.gguf"; }
std::string f32() { return models() + "SmolLM2-135M-Instruct.F32.gguf"; }
const char* kFlags = " --threads 1 --dtype f32 --kv-cache-dtype f32 --json";

class EvalCli : public testing::Test {
 protected:
  static void SetUpTestSuite() {
    text_ = new std::string(testing::TempDir() + "/tpserve_eval_heldout.txt");
    const std::string cmd = std::string(TPSERVE_SOURCE_DIR) + "/launch/heldout-text > " + *text_;
    ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  }
  static const std::string& text() { return *text_; }
  static std::string* text_;
};
std::string* EvalCli::text_ = nullptr;

// The JSON object of a --json run (its only line starting with '{').
nlohmann::json json_of(const Result& r) {
  std::istringstream in(r.out);
  for (std::string line; std::getline(in, line);)
    if (!line.empty() && line[0] == '{') return nlohmann::json::parse(line);
  ADD_FAILURE() << "no JSON object in:\n" << r.out;
  return nlohmann::json::object();
}

TEST_F(EvalCli, ModelAgainstItselfHasZeroKlAndFullAgreement) {
  const Result r = tp::test::run_tpserve("eval --model " + q4() + " --ref " + q4() + " --text " + text() +
                                         " --context 64 --max-chunks 2" + kFlags);
  ASSERT_EQ(r.code, 0) << r.out;
  const auto j = json_of(r);
  EXPECT_EQ(j["windows"], 2);
  EXPECT_EQ(j["scored_tokens"], 126);
  EXPECT_LT(double(j["kl_mean"]), 1e-12);
  EXPECT_GE(double(j["kl_mean"]), 0.0);
  EXPECT_EQ(double(j["top1_agreement"]), 1.0);
  EXPECT_EQ(double(j["perplexity"]), double(j["ref_perplexity"]));
  EXPECT_GT(double(j["perplexity"]), 1.0);
  EXPECT_NE(r.out.find("eval: window 2/2"), std::string::npos) << r.out;  // progress, one line a window (no tty)
}

TEST_F(EvalCli, F32AgainstQ4_1HasSmallPositiveKl) {
  const Result r = tp::test::run_tpserve("eval --model " + f32() + " --ref " + q4() + " --text " + text() +
                                         " --context 128 --max-chunks 2" + kFlags);
  ASSERT_EQ(r.code, 0) << r.out;
  const auto j = json_of(r);
  EXPECT_GT(double(j["kl_mean"]), 1e-5);
  EXPECT_LT(double(j["kl_mean"]), 0.05);
  EXPECT_GE(double(j["kl_max"]), double(j["kl_mean"]));
  EXPECT_GT(double(j["top1_agreement"]), 0.9);
  std::printf("measured: F32 vs Q4_1 ref: KL mean %.6g, max %.6g, top-1 %.6g\n", double(j["kl_mean"]),
              double(j["kl_max"]), double(j["top1_agreement"]));
  EXPECT_LT(double(j["top1_agreement"]), 1.0 + 1e-12);
}

TEST_F(EvalCli, PerplexityEqualsADirectComputationFromPromptLogprobs) {
  const int64_t context = 128, windows = 2;
  const Result r = tp::test::run_tpserve("eval --model " + f32() + " --text " + text() + " --context 128 --max-chunks 2" +
                                         kFlags);
  ASSERT_EQ(r.code, 0) << r.out;
  const double ppl = json_of(r)["perplexity"];

  auto file = tp::open_model(f32());
  tp::LlamaModel model(*file, tp::DType::F32);
  tp::LocalRunner runner(model, context);
  const tp::Tokenizer tok(file->tokenizer());
  std::ifstream in(text());
  std::stringstream ss;
  ss << in.rdbuf();
  const std::vector<int32_t> ids = tok.encode(ss.str(), false, false);
  double sum = 0;
  int64_t n = 0;
  for (int64_t w = 0; w < windows; ++w) {
    const std::vector<int32_t> window(ids.begin() + w * context, ids.begin() + (w + 1) * context);
    runner.seq.reset();
    const auto lp = runner.seq.feed_scored(window, 0);
    for (size_t i = 1; i < lp.size(); ++i, ++n) sum -= lp[i].logprob;
  }
  ASSERT_EQ(n, windows * (context - 1));
  const double direct = std::exp(sum / double(n));
  EXPECT_NEAR(ppl / direct, 1.0, 1e-5) << "eval " << ppl << " direct " << direct;
  std::printf("measured: perplexity eval %.9g, direct from prompt logprobs %.9g (ratio - 1 = %.3g)\n", ppl, direct,
              ppl / direct - 1.0);
}

TEST_F(EvalCli, TensorParallel3EqualsTp1) {
  // The Q8_0 copy as the reference (dequantized, its weights differ from the F32 base's: KL > 0).
  const std::string args = "eval --model " + f32() + " --ref " + models() + "SmolLM2-135M-Instruct.Q8_0.gguf --text " + text() +
                           " --context 128 --max-chunks 2 --quantized dequantize" + kFlags;
  const Result one = tp::test::run_tpserve(args);
  ASSERT_EQ(one.code, 0) << one.out;
  const std::string cmd = "mpirun --oversubscribe -np 3 " + std::string(TPSERVE_BIN) + " " + args + " --tp 3 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  std::string out;
  char buf[4096];
  size_t got;
  while ((got = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, got);
  ASSERT_EQ(pclose(p), 0) << out;
  const auto a = json_of(one), b = json_of(Result{0, out});
  EXPECT_EQ(b["tp"], 3);
  EXPECT_EQ(a["scored_tokens"], b["scored_tokens"]);
  EXPECT_NEAR(double(b["perplexity"]) / double(a["perplexity"]), 1.0, 1e-4);
  EXPECT_NEAR(double(b["ref_perplexity"]) / double(a["ref_perplexity"]), 1.0, 1e-4);
  EXPECT_NEAR(double(b["kl_mean"]), double(a["kl_mean"]), 1e-4);
  EXPECT_GT(double(a["kl_mean"]), 1e-5);
  EXPECT_LE(std::abs(int64_t(b["top1_agree"]) - int64_t(a["top1_agree"])), 2);
  std::printf("measured: tp 1 / tp 3: ppl %.9g / %.9g, ref ppl %.9g / %.9g, KL %.9g / %.9g, top-1 %lld / %lld of %lld\n",
              double(a["perplexity"]), double(b["perplexity"]), double(a["ref_perplexity"]), double(b["ref_perplexity"]),
              double(a["kl_mean"]), double(b["kl_mean"]), (long long)a["top1_agree"], (long long)b["top1_agree"],
              (long long)a["scored_tokens"]);
}

// A refusal on the leader after the ranks have loaded (text shorter than a window) releases the followers: mpirun
// exits with the leader's line, within the 120 s guard (124 would mean a hang).
TEST_F(EvalCli, TensorParallelRefusalReleasesTheRanks) {
  const std::string tmp = testing::TempDir() + "/tpserve_eval_short_tp.txt";
  { std::ofstream(tmp) << "Too short."; }
  const std::string cmd = "timeout 120 mpirun --oversubscribe -np 3 " + std::string(TPSERVE_BIN) + " eval --tp 3 --model " +
                          q4() + " --ref " + q4() + " --text " + tmp + " --threads 1 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  std::string out;
  char buf[4096];
  size_t got;
  while ((got = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, got);
  const int status = pclose(p);
  ASSERT_TRUE(WIFEXITED(status)) << out;
  EXPECT_NE(WEXITSTATUS(status), 0) << out;
  EXPECT_NE(WEXITSTATUS(status), 124) << "mpirun hung:\n" << out;
  EXPECT_NE(out.find("fewer than one window of --context 512"), std::string::npos) << out;
}

TEST_F(EvalCli, BadArgumentsGiveOneClearLine) {
  const std::string tmp = testing::TempDir() + "/tpserve_eval_short.txt";
  { std::ofstream(tmp) << "Too short."; }
  struct Bad {
    std::string args;
    int code;
    std::string expected;
  };
  const Bad cases[] = {
      {"eval --model " + q4(), 2, "--text is required"},
      {"eval --model " + q4() + " --text /nonexistent/t.txt", 1, "--text /nonexistent/t.txt: cannot be read"},
      {"eval --model " + q4() + " --text " + text() + " --context 1", 2, "--context: 1 is out of range"},
      {"eval --model " + q4() + " --text " + text() + " --max-chunks -1", 2, "--max-chunks: -1 is out of range"},
      {"eval --model " + q4() + " --text " + text() + " --context 9000", 1, "--context 9000 exceeds the model's context"},
      {"eval --model " + q4() + " --text " + tmp, 1, "fewer than one window of --context 512"},
      {"eval --model " + q4() + " --text " + text() + " --ref /nonexistent/r.gguf", 1, "/nonexistent/r.gguf"},
      {"eval --model " + q4() + " --text " + text() + " --ref " + std::string(EVAL_SYNTH_MODEL), 1,
       "has a vocabulary of 1001 tokens and --model"},
  };
  for (const Bad& b : cases) {
    const Result r = tp::test::run_tpserve(b.args + " --threads 1");
    EXPECT_EQ(r.code, b.code) << b.args << "\n" << r.out;
    EXPECT_NE(r.out.find(b.expected), std::string::npos) << b.args << "\n" << r.out;
    EXPECT_EQ(r.out.find("internal error"), std::string::npos) << r.out;
  }
}

}  // namespace
