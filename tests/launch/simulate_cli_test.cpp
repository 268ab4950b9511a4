// `tpserve simulate` as a user runs it: a card by name on a shipped hardware card and workload (--json fields,
// determinism of two runs, DP finishing every request), a model that does not fit refused with the planner's
// numbers, and bad input (unknown --gpu, a workload with a bad field, tp x dp beyond the nodes) refused in one
// line naming what is wrong.
#include <gtest/gtest.h>

#include "tests/util/run_tpserve.h"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

namespace {

using tp::test::Result;

std::string src() { return TPSERVE_SOURCE_DIR; }
Result run(const std::string& args) { return tp::test::run_tpserve("simulate " + args); }

std::string small_workload() {
  const auto p = std::filesystem::temp_directory_path() / "tp_simulate_cli_w.yaml";
  std::ofstream(p) << "seed: 3\nrequests: 200\narrival: {rate: 50}\n"
                      "prompt_len: {dist: uniform, min: 64, max: 1024}\noutput_len: {dist: uniform, min: 8, max: 256}\n";
  return p.string();
}

TEST(SimulateCli, JsonIsDeterministicAndFinishesEveryRequest) {
  const std::string args = "--model Llama-3.1-8B --gpu " + src() + "/configs/hardware/H100.yaml --tp 2 --dp 2 --workload " +
                           small_workload() + " --cards " + src() + "/configs/models --json";
  const Result a = run(args), b = run(args);
  ASSERT_EQ(a.code, 0) << a.out;
  EXPECT_EQ(a.out, b.out) << "two runs of one seed differ";
  const auto j = nlohmann::json::parse(a.out);
  EXPECT_EQ(j["finished"], 200);
  EXPECT_EQ(j["nodes"], 1);
  EXPECT_GT(j["output_tok_per_s"].get<double>(), 0);
  EXPECT_LE(j["ttft_s"]["p50"].get<double>(), j["ttft_s"]["p99"].get<double>());
  EXPECT_GT(j["time_s"]["comm"].get<double>(), 0) << "tp 2 all-reduces";
}

TEST(SimulateCli, RefusesBadInputNamingIt) {
  const std::string w = small_workload(), cards = " --cards " + src() + "/configs/models";
  Result r = run("--model Llama-3.1-8B --gpu B900 --workload " + w + cards);
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.out.find("B900"), std::string::npos) << r.out;
  r = run("--model Llama-3.1-405B --gpu " + src() + "/configs/hardware/H100.yaml --tp 4 --workload " + w + cards);
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.out.find("does not fit"), std::string::npos) << r.out;
  r = run("--model Llama-3.1-8B --gpu " + src() + "/configs/hardware/H100.yaml --tp 8 --dp 4 --nodes 2 --workload " + w + cards);
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.out.find("--dp"), std::string::npos) << r.out;
  const auto bad = std::filesystem::temp_directory_path() / "tp_simulate_cli_bad.yaml";
  std::ofstream(bad) << "requests: 5\narrival: {rate: 0}\nprompt_len: 10\noutput_len: 5\n";
  r = run("--model Llama-3.1-8B --gpu " + src() + "/configs/hardware/H100.yaml --workload " + bad.string() + cards);
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.out.find("arrival.rate"), std::string::npos) << r.out;
}

}  // namespace
