// `tpserve generate` / `convert` as a user runs them: a real run prints text and tok/s; every kind of bad
// input gives one clear line on stderr and a non-zero exit, never a crash.
#include <gtest/gtest.h>

#include "tests/util/run_tpserve.h"

#include <cstdio>
#include <fstream>
#include <string>

namespace {

using tp::test::Result;

Result run(const std::string& args) { return tp::test::run_tpserve(args); }

std::string model() { return std::string(TPSERVE_SOURCE_DIR) + "/models/SmolLM2-135M-Instruct.Q4_1.gguf"; }

TEST(GenerateCli, GreedyRunPrintsTextAndRates) {
  const Result r = run("generate --model " + model() + " --prompt 'The capital of France is' --max-tokens 8 --threads 1");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("The capital of France is Paris"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("prefill: "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("decode: "), std::string::npos) << r.out;
}

TEST(GenerateCli, KvCacheDtypeOptionSetsThePool) {
  const Result r = run("generate --model " + model() +
                       " --prompt 'The capital of France is' --max-tokens 8 --threads 1 --kv-cache-dtype int8");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("The capital of France is Paris"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("KV pool int8 "), std::string::npos) << r.out;
}

TEST(GenerateCli, SameSeedSameText) {
  const std::string args = "generate --model " + model() +
                           " --prompt 'Once upon a time' --max-tokens 12 --temperature 0.9 --top-p 0.95 --seed 7 --threads 1";
  const Result a = run(args), b = run(args);
  ASSERT_EQ(a.code, 0) << a.out;
  const std::string text_a = a.out.substr(0, a.out.find("prefill:")), text_b = b.out.substr(0, b.out.find("prefill:"));
  EXPECT_EQ(text_a, text_b);
}

struct Bad {
  std::string args;
  int code;
  std::string expected;
};

TEST(GenerateCli, BadInputGivesOneClearLine) {
  const std::string tmp = testing::TempDir() + "/tpserve_bad";
  { std::ofstream(tmp + ".gguf") << "GGUF this is not a model"; }
  { std::ofstream(tmp + ".yaml") << "model: {dtype: f8}\n"; }
  const Bad cases[] = {
      {"", 2, "usage: tpserve"},
      {"frobnicate", 2, "unknown command 'frobnicate'"},
      {"generate --prompt hi --model /nonexistent/m.gguf", 1, "/nonexistent/m.gguf"},
      {"generate --model " + model(), 2, "--prompt is required"},
      {"generate --model " + model() + " --prompt hi --max-tokens ten", 2, "--max-tokens: expected an integer, got 'ten'"},
      {"generate --model " + model() + " --prompt hi --temperature -1", 2, "--temperature: -1 is out of range"},
      {"generate --model " + model() + " --prompt hi --frob 1", 2, "unknown option --frob"},
      {"generate --model " + model() + " --prompt hi --dtype q4_1", 2, "--dtype must be bf16 or f32"},
      {"generate --model " + model() + " --prompt hi --kv-cache-dtype fp9", 2,
       "generate: --kv-cache-dtype: 'fp9' is not one of: bf16, f32, fp8_e4m3, int8"},
      {"generate --model " + tmp + ".gguf --prompt hi", 1, tmp + ".gguf"},
      {"generate --config " + tmp + ".yaml --prompt hi", 1, "model.dtype: 'f8' is not one of: bf16, f32"},
      {"generate --model " + model() + " --prompt hi --max-tokens 100000", 1, "exceeds the max context of 8192 tokens"},
      {"convert --in " + model() + " --out /tmp/x --to gguf-q2", 2, "--to 'gguf-q2' is not one of"},
  };
  for (const Bad& b : cases) {
    const Result r = run(b.args);
    EXPECT_EQ(r.code, b.code) << b.args << "\n" << r.out;
    EXPECT_NE(r.out.find(b.expected), std::string::npos) << b.args << "\n" << r.out;
    EXPECT_EQ(r.out.find("internal error"), std::string::npos) << r.out;
  }
}

}  // namespace
